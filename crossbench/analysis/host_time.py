"""Where a trial's measured time went: GPU work, or the GPU waiting on the host.

NVML's ``utilization.gpu`` is the share of time in which at least one kernel ran. Its mean
over a trial's measured window (``telemetry.derive``: ``mean_util_gpu_pct``) times the
window's wall time is the time the GPU was busy; the rest it waited for the host (the
engine's Python, scheduling and sampling, kernel launches, the client, other load on the
CPU). Per output token of the trial (all its measured, completed requests, so at
concurrency above 1 the system's tokens):

- ``busy_ms_per_token`` = busy share x wall / tokens;
- ``host_ms_per_token`` = (1 - busy share) x wall / tokens.

A kernel running counts as busy however few SMs it fills, so the busy share is an upper
bound on GPU-bound time and a low share is a reliable sign of idle gaps. Speculative
decoding adds host work per step (drafting, verification bookkeeping); where that work
dominates, the arm's speed follows the host, which differs between machines and between
server starts, while its GPU time per token stays put. On five H200 machines (vLLM 0.26.0,
draft_model n = 4 at concurrency 1) that cell's GPU time per token was 2.81-3.05 ms on every
one of 15 trials and its host time 1.47-7.66 ms, so it ran at 100-233 tok/s
(``benchmarks/README.md``,
"Host-bound speculative arms"). The analysis warns ``host_bound`` for such an arm
(``analyze``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossbench.analysis.rundir import CellData
from crossbench.analysis.stats import cv

HOST_BOUND_SHARE = 0.5
"""A speculative arm whose GPU was busy less than this share of its measured time is
host-bound (``host_bound`` warning)."""


@dataclass(frozen=True)
class TrialTime:
    """One trial's measured window split into GPU-busy and host time (module docstring)."""

    trial: int
    wall_s: float
    tokens: int
    gpu_busy_share: float

    @property
    def busy_ms_per_token(self) -> float:
        """GPU-busy milliseconds per output token."""
        return 1e3 * self.gpu_busy_share * self.wall_s / self.tokens

    @property
    def host_ms_per_token(self) -> float:
        """Milliseconds per output token in which no kernel ran."""
        return 1e3 * (1.0 - self.gpu_busy_share) * self.wall_s / self.tokens


def trial_times(cell: CellData) -> list[TrialTime]:
    """Each trial with GPU telemetry, a measured wall time and output tokens, in trial order.

    Trials without a utilization figure (no NVML, a CPU engine, an import) give nothing.
    """
    tokens: dict[int, int] = {}
    for f in cell.figures:
        if f.tokens is not None:
            tokens[f.trial] = tokens.get(f.trial, 0) + int(f.tokens)
    out = []
    for entry in cell.manifest.get("trials") or []:
        if entry.get("status") != "ok":
            continue
        trial = int(entry.get("trial", 0))
        gpus = ((entry.get("telemetry") or {}).get("gpus")) or []
        utils = [g.get("mean_util_gpu_pct") for g in gpus]
        phases = entry.get("phase_s") or {}
        wall = phases.get("measured") or (entry.get("load") or {}).get("wall_s")
        if not utils or any(u is None for u in utils) or not wall or not tokens.get(trial):
            continue
        share = min(max(sum(utils) / len(utils) / 100.0, 0.0), 1.0)
        out.append(TrialTime(trial, float(wall), tokens[trial], share))
    return out


def _spread(values: list[float]) -> dict[str, Any]:
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values),
            "cv": cv(values)}


def cell_host_time(cell: CellData) -> dict[str, Any] | None:
    """A cell's ``host_time`` figures (None without GPU utilization telemetry).

    ``gpu_busy_share`` is the mean over trials; ``busy_ms_per_token`` and
    ``host_ms_per_token`` give mean, min, max and CV over trials; ``per_trial`` keeps each
    trial's figures so every statistic can be recomputed.
    """
    times = trial_times(cell)
    if not times:
        return None
    return {
        "trials": len(times),
        "gpu_busy_share": sum(t.gpu_busy_share for t in times) / len(times),
        "busy_ms_per_token": _spread([t.busy_ms_per_token for t in times]),
        "host_ms_per_token": _spread([t.host_ms_per_token for t in times]),
        "per_trial": {str(t.trial): {"wall_s": t.wall_s, "tokens": t.tokens,
                                     "gpu_busy_share": t.gpu_busy_share,
                                     "busy_ms_per_token": t.busy_ms_per_token,
                                     "host_ms_per_token": t.host_ms_per_token}
                      for t in times},
        "source": "NVML utilization.gpu, mean over the measured window, x measured wall "
                  "time / output tokens of the trial's completed requests",
    }


def host_bound(spec: dict[str, Any] | None, base: dict[str, Any] | None) -> str | None:
    """Why a speculative arm is host-bound (its ``host_time`` against the baseline's), or
    None when it is not, or there is no telemetry."""
    if not spec or spec["gpu_busy_share"] >= HOST_BOUND_SHARE:
        return None
    host, busy = spec["host_ms_per_token"], spec["busy_ms_per_token"]
    text = (f"the speculative arm's GPU was busy {spec['gpu_busy_share']:.0%} of its measured "
            f"time{_against(base)}: per output token {host['mean']:.2f} ms waiting on the "
            f"host against {busy['mean']:.2f} ms of GPU work")
    if spec["trials"] >= 2:
        text += (f"; over {spec['trials']} trials the host time ran {host['min']:.2f}-"
                 f"{host['max']:.2f} ms (CV {host['cv']:.0%}), the GPU time "
                 f"{busy['min']:.2f}-{busy['max']:.2f} ms (CV {busy['cv']:.0%})")
    return text + (": the speed, and so the verdict, follow this host's CPU (the engine's "
                   "own host work per step, other load), which differs between machines")


def _against(base: dict[str, Any] | None) -> str:
    return f" (its baseline {base['gpu_busy_share']:.0%})" if base else ""
