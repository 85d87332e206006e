"""Host time over the decode alone: GPU work and the GPU waiting on the host per output token,
from the telemetry samples that fall wholly inside decode, not over the trial's whole wall
window (:mod:`crossbench.analysis.host_time`, which also counts prefill and the gaps between
requests).

The decode-only window of a trial is the time in which some request is between its first and
its last chunk and no request is between its send and its first chunk (prefill, queueing),
on the records' monotonic clock mapped onto the trace's wall clock by the trial's ``clock``
anchor (``telemetry.sampler.clock_anchor``; runs recorded before it have none and get no
decode figures). NVML's ``utilization.gpu`` is a busy share over its own averaging period,
estimated from the trace (:func:`nvml_period_s`); a sample counts only where that period and
the sampler's interval before it lie inside one decode-only interval. Method, its limits
and the request length it needs: docs/analysis.md, "Host time over the decode alone".
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from crossbench.analysis.stats import spread
from crossbench.telemetry.derive import read_trace

NVML_MIN_PERIOD_S = 1.0 / 6.0
"""The shortest averaging period NVML documents for ``utilization.gpu`` (1/6 s to 1 s by
product): the floor of the estimate."""

NVML_MAX_PERIOD_S = 1.0
"""The longest averaging period NVML documents: the cap of the estimate (a GPU busy at one
level for a whole trace gives one long run of equal readings)."""

MIN_SAMPLES = 8
"""Fewest whole-decode samples a trial needs for a decode busy share."""

Interval = tuple[int, int]


def nvml_period_s(utils: list[float], interval_s: float) -> float:
    """NVML's averaging period from a trace sampled every ``interval_s``: the median length
    of the runs of equal consecutive readings times the interval (the driver updates the
    figure once a period; the sampler reads it several times), within NVML's documented
    :data:`NVML_MIN_PERIOD_S` to :data:`NVML_MAX_PERIOD_S`."""
    runs = [len(list(group)) for _, group in itertools.groupby(utils)]
    median = statistics.median(runs) if runs else 1
    return min(max(median * interval_s, NVML_MIN_PERIOD_S), NVML_MAX_PERIOD_S)


def _union(spans: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(spans: list[Interval], cuts: list[Interval]) -> list[Interval]:
    """``spans`` without ``cuts`` (both sorted and disjoint)."""
    out: list[Interval] = []
    for a, b in spans:
        for c, d in cuts:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def decode_only(records: Iterable[Mapping[str, Any]], offset_ns: int
                ) -> tuple[list[Interval], int | None]:
    """The decode-only intervals of one trial's measured, completed requests on the trace's
    clock (record time + ``offset_ns``), and the tokens that arrived in them (chunks after a
    request's first; None where a chunk has no token count)."""
    decode, prefill, chunks = [], [], []
    for r in records:
        if r.get("warmup") or r.get("status") != "ok" or not r.get("t_first_chunk_ns"):
            continue
        times = r.get("chunks") or []
        first, sent = int(r["t_first_chunk_ns"]), int(r["t_sent_ns"])
        prefill.append((sent + offset_ns, first + offset_ns))
        if times:
            decode.append((first + offset_ns, int(times[-1][0]) + offset_ns))
            chunks += [(int(t) + offset_ns, n) for t, n in times[1:]]
    spans = _minus(_union(decode), _union(prefill))
    tokens = 0
    for t, n in chunks:
        if _inside(spans, t, t):
            if not isinstance(n, int):
                return spans, None
            tokens += n
    return spans, tokens


def _inside(spans: list[Interval], start: int, end: int) -> bool:
    """Whether ``(start, end]`` lies inside one of the sorted, disjoint ``spans``."""
    i = bisect.bisect_left(spans, (start, end)) - 1
    return any(0 <= j < len(spans) and spans[j][0] <= start and end <= spans[j][1]
               and (start < end or spans[j][0] < start) for j in (i, i + 1))


def trial_decode(records: Sequence[Mapping[str, Any]], entry: Mapping[str, Any], trace: Path,
                 telemetry_hz: float) -> dict[str, Any]:
    """One trial's decode-only figures, or ``{"available": False, "reason": ...}``."""
    clock = entry.get("clock") or {}
    if "wall_ns" not in clock or "monotonic_ns" not in clock:
        return _none("the trial has no clock anchor (recorded before the runner kept one): "
                     "its records cannot be placed on the telemetry trace")
    spans, tokens = decode_only(records, int(clock["wall_ns"]) - int(clock["monotonic_ns"]))
    if not spans:
        return _none("no completed request decoded outside another's prefill")
    if tokens is None:
        return _none("the records' chunks carry no token counts")
    samples = read_trace(trace) if trace.exists() else []
    interval_ns = int(1e9 / telemetry_hz)
    by_gpu: dict[int, list[tuple[int, float]]] = {}
    for s in samples:
        if s.util_gpu_pct is not None:
            by_gpu.setdefault(s.gpu, []).append((s.t_ns, s.util_gpu_pct))
    if not by_gpu:
        return _none(f"no utilization samples in {trace.name}")
    lo, hi = spans[0][0], spans[-1][1]
    periods, shares, counts = [], [], []
    for rows in by_gpu.values():
        rows.sort()
        period = nvml_period_s([u for t, u in rows if lo <= t <= hi], interval_ns / 1e9)
        reach = interval_ns + int(period * 1e9)
        inside = [u for t, u in rows if _inside(spans, t - reach, t)]
        periods.append(period)
        counts.append(len(inside))
        if len(inside) >= MIN_SAMPLES:
            shares.append(min(max(sum(inside) / len(inside) / 100.0, 0.0), 1.0))
    wall_s = sum(b - a for a, b in spans) / 1e9
    longest = max(b - a for a, b in spans) / 1e9
    if len(shares) < len(by_gpu):
        return _none(f"{min(counts)} sample(s) lie wholly inside decode (at least {MIN_SAMPLES} "
                     f"needed): NVML averages over {max(periods):.2f} s and the sampler reads "
                     f"every {interval_ns / 1e9:.2f} s, and the longest decode-only stretch is "
                     f"{longest:.2f} s; longer requests (max_tokens) give the window room")
    share = sum(shares) / len(shares)
    if not tokens:
        return _none("no tokens arrived inside the decode-only window")
    return {"available": True, "wall_s": wall_s, "tokens": tokens, "samples": min(counts),
            "nvml_period_s": max(periods), "gpu_busy_share": share,
            "busy_ms_per_token": 1e3 * share * wall_s / tokens,
            "host_ms_per_token": 1e3 * (1.0 - share) * wall_s / tokens}


def _none(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def cell_decode_time(root: Path, manifest: Mapping[str, Any],
                     records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A cell's decode-only host time: the mean busy share and the per-token figures' mean,
    min, max and CV over the trials that have them, each trial's figures (or why it has none)
    in ``per_trial``; ``available`` False with the first trial's reason where none has."""
    hz = (manifest.get("config") or {}).get("telemetry_hz")
    per_trial: dict[str, dict[str, Any]] = {}
    for entry in manifest.get("trials") or []:
        tel = entry.get("telemetry") or {}
        if entry.get("status") != "ok" or not tel.get("available") or not hz:
            continue
        trial = int(entry.get("trial", 0))
        mine = [r for r in records if int(r.get("trial", 0)) == trial]
        trace = root / "telemetry" / str(tel.get("trace") or f"t{trial}.csv")
        per_trial[str(trial)] = trial_decode(mine, entry, trace, float(hz))
    good = [t for t in per_trial.values() if t["available"]]
    if not good:
        reason = next(iter(per_trial.values()), {}).get("reason", "no GPU telemetry")
        return {"available": False, "reason": reason, "per_trial": per_trial}

    return {"available": True, "trials": len(good),
            "gpu_busy_share": sum(t["gpu_busy_share"] for t in good) / len(good),
            "busy_ms_per_token": spread([t["busy_ms_per_token"] for t in good]),
            "host_ms_per_token": spread([t["host_ms_per_token"] for t in good]),
            "per_trial": per_trial,
            "source": "NVML utilization.gpu samples whose averaging period lies inside the "
                      "decode-only window, x that window's wall time / the tokens that "
                      "arrived in it"}
