"""A GPU telemetry trace: NVML sampled in a thread, one CSV row per GPU per sample.

Usage (the runner starts it before the server, so the trace shows the idle GPU first)::

    with GpuSampler(run_dir / "telemetry" / "t0.csv", rate_hz=10) as sampler:
        server.start()
        sampler.set_pids([server.pid])   # the server's tree (children via /proc) is followed
        ...

The columns (:data:`COLUMNS`, blank where a GPU does not report a value; ``timestamp_ns`` is
``time.time_ns``, comparable with phase marks) are described in docs/confounds.md, "GPU
telemetry", and so is the trace without a GPU (the header, and :func:`note_path` saying why).
Errors while sampling never reach the caller: sampling stops and the note file says why.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from crossbench.telemetry.gpu import (
    Nvml,
    NvmlProvider,
    NvmlUnavailable,
    process_tree,
    throttle_names,
)

COLUMNS: tuple[str, ...] = (
    "timestamp_ns", "gpu", "process_used_bytes", "device_used_bytes", "device_total_bytes",
    "util_gpu_pct", "util_mem_pct", "sm_clock_mhz", "mem_clock_mhz", "power_w",
    "temperature_c", "throttle_mask", "throttle_reasons",
)
DEFAULT_RATE_HZ = 10.0


def note_path(csv_path: Path) -> Path:
    """The note file beside a trace (``t0.csv`` -> ``t0.note.txt``)."""
    return csv_path.with_suffix(".note.txt")


@dataclass(frozen=True)
class SamplerResult:
    """What a finished sampler recorded."""

    path: Path
    available: bool  # False: no GPU (or NVML failed before the first sample)
    samples: int  # sampling rounds written (each has one row per GPU)
    reason: str | None = None  # why there is no trace, or why it stopped early


class GpuSampler:
    """Samples every GPU an engine can see (``CUDA_VISIBLE_DEVICES``), or ``gpus``, at
    ``rate_hz`` into a CSV, in a daemon thread.

    ``nvml`` provides a pynvml-shaped object (default: ``pynvml``); ``clock`` gives the
    timestamps (default ``time.time_ns``). :meth:`sample_once` takes one round directly, which
    is how tests drive it without a thread.
    """

    def __init__(self, path: Path, pids: Iterable[int] = (), rate_hz: float = DEFAULT_RATE_HZ,
                 gpus: Iterable[int] | None = None, nvml: NvmlProvider | None = None,
                 clock: Callable[[], int] = time.time_ns, proc: Path = Path("/proc")) -> None:
        if rate_hz <= 0:
            raise ValueError("rate_hz must be positive")
        self.path = path
        self.rate_hz = rate_hz
        self._want_gpus = None if gpus is None else list(gpus)
        self._provider = nvml
        self._clock = clock
        self._proc = proc
        self._pids: tuple[int, ...] = tuple(pids)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None
        self._fh: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None
        self._indices: list[int] = []
        self._samples = 0
        self._reason: str | None = None
        self._available = False
        self._opened = False

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> bool:
        """Write the header and initialise NVML; False (with the note file) without a GPU."""
        if self._opened:
            return self._available
        self._opened = True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=list(COLUMNS), lineterminator="\n")
        self._writer.writeheader()
        self._fh.flush()
        try:
            self._nvml = Nvml.open(self._provider)
            count = self._nvml.count()
            visible = self._nvml.indices()
        except NvmlUnavailable as e:
            self._note(f"no GPU: {e.reason}")
            return False
        except Exception as e:  # an NVML that initialises but cannot count devices
            self._note(f"no GPU: NVML failed ({e})")
            return False
        self._indices = [i for i in (self._want_gpus or visible) if 0 <= i < count]
        if not self._indices:
            want = self._want_gpus or os.environ.get("CUDA_VISIBLE_DEVICES")
            self._note(f"no GPU: NVML sees {count} GPU(s), none of {want!r}")
            return False
        self._available = True
        return True

    def start(self) -> None:
        """Open, take a first sample at once, then sample in a thread until :meth:`stop`."""
        if not self.open() or self._thread is not None:
            return
        self.sample_once()
        self._thread = threading.Thread(target=self._loop, name="crossbench-gpu-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> SamplerResult:
        """Take a last sample, stop the thread, close NVML and the file (safe to call twice)."""
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join()
            self._thread = None
            self.sample_once()
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        return self.result()

    def result(self) -> SamplerResult:
        """What has been recorded so far."""
        return SamplerResult(self.path, self._available, self._samples, self._reason)

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- sampling ----------------------------------------------------------------------------

    def set_pids(self, pids: Iterable[int]) -> None:
        """Follow these processes and their children (e.g. once the server has started)."""
        with self._lock:
            self._pids = tuple(pids)

    def sample_once(self) -> bool:
        """Write one row per GPU now; False when there is nothing to sample (no GPU, stopped)."""
        with self._lock:
            nv, writer, fh = self._nvml, self._writer, self._fh
            if nv is None or writer is None or fh is None:
                return False
            try:
                t = self._clock()
                tree = process_tree(self._pids, self._proc) if self._pids else None
                for i in self._indices:
                    writer.writerow(_row(t, i, nv, tree))
                fh.flush()
            except Exception as e:
                self._note(f"sampling stopped after {self._samples} samples: {e}")
                nv.close()
                self._nvml = None
                return False
            self._samples += 1
            return True

    def _loop(self) -> None:
        period = 1.0 / self.rate_hz
        next_t = time.monotonic() + period
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            if not self.sample_once():
                return
            next_t += period
            if next_t < time.monotonic():  # fell behind (slow NVML): do not burst
                next_t = time.monotonic() + period

    def _note(self, text: str) -> None:
        self._reason = text
        note_path(self.path).write_text(text + "\n")


def clock_anchor() -> dict[str, int]:
    """One reading of both clocks: ``wall_ns`` (``time.time_ns``, the trace's clock) and
    ``monotonic_ns`` (``time.monotonic_ns``, the request records' clock), the monotonic one
    the midpoint of two reads around the wall read. ``wall_ns - monotonic_ns`` maps a
    record's time onto the trace (``analysis.decode_window``)."""
    m0 = time.monotonic_ns()
    wall = time.time_ns()
    m1 = time.monotonic_ns()
    return {"wall_ns": wall, "monotonic_ns": (m0 + m1) // 2}


def _row(t: int, index: int, nv: Nvml, tree: set[int] | None) -> dict[str, object]:
    s = nv.sample(index, with_processes=tree is not None)
    held: int | None = None
    if tree is not None:
        mine = [p.used_bytes for p in s.processes if p.pid in tree]
        held = None if any(u is None for u in mine) else sum(u for u in mine if u is not None)
    mask = s.throttle_mask
    return {
        "timestamp_ns": t, "gpu": index, "process_used_bytes": _cell(held),
        "device_used_bytes": _cell(s.memory_used_bytes),
        "device_total_bytes": _cell(s.memory_total_bytes),
        "util_gpu_pct": _cell(s.util_gpu_pct), "util_mem_pct": _cell(s.util_mem_pct),
        "sm_clock_mhz": _cell(s.sm_clock_mhz), "mem_clock_mhz": _cell(s.mem_clock_mhz),
        "power_w": _cell(s.power_w), "temperature_c": _cell(s.temperature_c),
        "throttle_mask": _cell(mask),
        "throttle_reasons": "" if mask is None else "|".join(throttle_names(mask)),
    }


def _cell(v: float | int | None) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)
