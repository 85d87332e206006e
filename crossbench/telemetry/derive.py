"""Figures derived from a telemetry trace (the sampler's CSV) and a trial's phase marks.

Per GPU and trial (:class:`GpuFigures`; docs/confounds.md, "GPU telemetry"): idle,
post-load, peak and after-stop memory, ``release_s`` (how long after the stop the device came
back within ``tolerance_bytes`` of idle; None: never in the trace), ``throttled_s`` (the
intervals between start and stop that begin with a slowdown reason set,
:data:`~crossbench.telemetry.gpu.SLOWDOWN_MASK`), mean clocks, power and utilization over the
measured window, the hottest sample. The draft's VRAM cost is ``peak(spec) - peak(baseline)``
(:func:`draft_vram_cost`), summed over GPUs.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from crossbench.telemetry.gpu import SLOWDOWN_MASK, throttle_names
from crossbench.telemetry.sampler import note_path

#: device memory within this much of idle counts as released (CUDA contexts of other
#: tools, driver bookkeeping)
DEFAULT_RELEASE_TOLERANCE = 256 * 1024 * 1024
_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Sample:
    """One CSV row, typed (None where the GPU did not report)."""

    t_ns: int
    gpu: int
    process_used_bytes: int | None
    device_used_bytes: int | None
    device_total_bytes: int | None
    util_gpu_pct: float | None
    util_mem_pct: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    throttle_mask: int | None


@dataclass(frozen=True)
class TrialPhases:
    """Wall-clock marks (``time.time_ns``) of one trial, as the runner saw them."""

    start_ns: int  # server start requested: samples before it show the idle GPU
    ready_ns: int  # server answered: weights and caches are allocated
    measured_start_ns: int  # first measured request sent
    measured_end_ns: int  # last measured request finished
    stop_ns: int  # server stopped (process tree gone)


@dataclass(frozen=True)
class GpuFigures:
    """One GPU's figures for one trial (see the module docstring)."""

    gpu: int
    samples: int
    idle_bytes: int | None
    post_load_bytes: int | None
    peak_bytes: int | None
    peak_process_bytes: int | None
    after_stop_bytes: int | None
    release_s: float | None
    throttled_s: float
    throttle_reasons: list[str]
    mean_sm_clock_mhz: float | None
    mean_mem_clock_mhz: float | None
    mean_power_w: float | None
    mean_util_gpu_pct: float | None
    max_temperature_c: float | None


@dataclass(frozen=True)
class TrialTelemetry:
    """Figures of every traced GPU for one trial, or why there are none."""

    available: bool
    reason: str | None = None
    gpus: list[GpuFigures] = field(default_factory=list)

    def total(self, name: str) -> int | None:
        """A byte figure summed over GPUs (None when any GPU lacks it, or there is none)."""
        values = [getattr(g, name) for g in self.gpus]
        if not values or any(v is None for v in values):
            return None
        return int(sum(values))

    @property
    def peak_bytes(self) -> int | None:
        """Peak device memory summed over GPUs."""
        return self.total("peak_bytes")

    @property
    def released(self) -> bool | None:
        """Whether every GPU went back to idle after the stop (None without a trace)."""
        if not self.gpus:
            return None
        return all(g.release_s is not None for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view, with the totals."""
        out = asdict(self)
        out["totals"] = {k: self.total(k) for k in ("idle_bytes", "post_load_bytes",
                                                     "peak_bytes", "after_stop_bytes")}
        out["released"] = self.released
        return out


def read_trace(path: Path) -> list[Sample]:
    """Every row of a sampler CSV (an empty list for a header-only trace)."""
    with path.open(newline="") as fh:
        return [Sample(
            t_ns=int(r["timestamp_ns"]), gpu=int(r["gpu"]),
            process_used_bytes=_int(r["process_used_bytes"]),
            device_used_bytes=_int(r["device_used_bytes"]),
            device_total_bytes=_int(r["device_total_bytes"]),
            util_gpu_pct=_float(r["util_gpu_pct"]), util_mem_pct=_float(r["util_mem_pct"]),
            sm_clock_mhz=_float(r["sm_clock_mhz"]), mem_clock_mhz=_float(r["mem_clock_mhz"]),
            power_w=_float(r["power_w"]), temperature_c=_float(r["temperature_c"]),
            throttle_mask=_int(r["throttle_mask"]),
        ) for r in csv.DictReader(fh)]


def derive_trial(path: Path, phases: TrialPhases,
                 tolerance_bytes: int = DEFAULT_RELEASE_TOLERANCE) -> TrialTelemetry:
    """Idle, post-load, peak and release figures per GPU from a trace and a trial's marks."""
    samples = read_trace(path) if path.exists() else []
    if not samples:
        note = note_path(path)
        reason = note.read_text().strip() if note.exists() else f"no samples in {path}"
        return TrialTelemetry(False, reason)
    by_gpu: dict[int, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.t_ns):
        by_gpu.setdefault(s.gpu, []).append(s)
    return TrialTelemetry(True, None, [_gpu(g, rows, phases, tolerance_bytes)
                                       for g, rows in sorted(by_gpu.items())])


def draft_vram_cost(spec: TrialTelemetry, baseline: TrialTelemetry) -> int | None:
    """Extra device memory of the speculative arm: peak(spec) - peak(baseline), in bytes."""
    a, b = spec.peak_bytes, baseline.peak_bytes
    return None if a is None or b is None else a - b


def _gpu(gpu: int, rows: list[Sample], ph: TrialPhases, tol: int) -> GpuFigures:
    before = [s for s in rows if s.t_ns < ph.start_ns and s.device_used_bytes is not None]
    idle = before[-1].device_used_bytes if before else None
    loaded = [s for s in rows if ph.ready_ns <= s.t_ns <= ph.measured_start_ns
              and s.device_used_bytes is not None]
    if not loaded:  # no sample between ready and the first request: take the next one
        loaded = [s for s in rows if s.t_ns >= ph.ready_ns and s.device_used_bytes is not None]
    live = [s for s in rows if ph.start_ns <= s.t_ns <= ph.stop_ns]
    measured = [s for s in rows if ph.measured_start_ns <= s.t_ns <= ph.measured_end_ns]
    after = [s for s in rows if s.t_ns >= ph.stop_ns and s.device_used_bytes is not None]
    release_s = None
    if idle is not None:
        back = [s for s in after if s.device_used_bytes is not None
                and s.device_used_bytes <= idle + tol]
        release_s = (back[0].t_ns - ph.stop_ns) / 1e9 if back else None
    throttled_ns = sum(nxt.t_ns - cur.t_ns for cur, nxt in itertools.pairwise(live)
                       if (cur.throttle_mask or 0) & SLOWDOWN_MASK)
    seen = 0
    for s in live:
        seen |= s.throttle_mask or 0
    return GpuFigures(
        gpu=gpu, samples=len(rows), idle_bytes=idle,
        post_load_bytes=loaded[0].device_used_bytes if loaded else None,
        peak_bytes=_max([s.device_used_bytes for s in live]),
        peak_process_bytes=_max([s.process_used_bytes for s in live]),
        after_stop_bytes=after[-1].device_used_bytes if after else None,
        release_s=release_s, throttled_s=throttled_ns / 1e9,
        throttle_reasons=throttle_names(seen & SLOWDOWN_MASK),
        mean_sm_clock_mhz=_mean([s.sm_clock_mhz for s in measured]),
        mean_mem_clock_mhz=_mean([s.mem_clock_mhz for s in measured]),
        mean_power_w=_mean([s.power_w for s in measured]),
        mean_util_gpu_pct=_mean([s.util_gpu_pct for s in measured]),
        max_temperature_c=_max([s.temperature_c for s in live]),
    )


def _int(text: str) -> int | None:
    return int(text) if text else None


def _float(text: str) -> float | None:
    return float(text) if text else None


def _max(values: list[_N | None]) -> _N | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
