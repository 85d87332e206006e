"""Where a trial's measured time went: GPU work, or the GPU waiting on the host.

NVML's mean ``utilization.gpu`` over a trial's measured window (``telemetry.derive``:
``mean_util_gpu_pct``) times the window's wall time is the GPU's busy time, the rest host
time; per output token of the trial:

- ``busy_ms_per_token`` = busy share x wall / tokens;
- ``host_ms_per_token`` = (1 - busy share) x wall / tokens.

Why a host-bound arm's verdict follows its host, with the H200 figures: docs/analysis.md,
"Host time".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossbench.analysis.decode_window import cell_decode_time
from crossbench.analysis.rundir import CellData
from crossbench.analysis.stats import spread

HOST_BOUND_SHARE = 0.5
"""A speculative arm whose GPU was busy less than this share of its measured time is
host-bound (``host_bound`` warning)."""

HOST_ADDED_SHARE = 0.25
"""A speculative arm that waits on the host longer per output token than its baseline by at
least this share of the baseline's time per token is flagged ``host_bound`` too: a host with
a slower CPU moves its speed by a large part of that (:func:`host_bound`)."""


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


def trial_host(entry: dict[str, Any]) -> dict[str, Any]:
    """The host side of one trial from its manifest entry, the same keys for every engine
    (docs/analysis.md, "The host of every trial"); ``cpu`` and ``cpus`` fall back on the
    trial's provenance (runs recorded before the ``host`` record); None where not recorded."""
    rec = entry.get("host") or {}
    prov = (entry.get("provenance") or {}).get("host") or {}
    before, after = rec.get("before") or {}, rec.get("after") or {}
    others = rec.get("busy_others")
    return {
        "cpu": rec.get("cpu") or prov.get("cpu"),
        "cpus": rec.get("cpus") or prov.get("cpus"),
        "cpus_usable": rec.get("cpus_usable"), "governor": rec.get("governor"),
        "loadavg_before": (before.get("loadavg") or [None])[0],
        "loadavg_after": (after.get("loadavg") or [None])[0],
        "runnable_before": before.get("runnable"), "runnable_after": after.get("runnable"),
        "cpu_busy_share": rec.get("cpu_busy_share"), "steal_share": rec.get("steal_share"),
        "server_cores": rec.get("server_cores"), "client_cores": rec.get("client_cores"),
        "busy_others": ("; ".join(f"{o.get('name')} ({o.get('pid')}) {o.get('cores')}"
                                  for o in others) if others is not None else None),
    }


def cell_host_time(cell: CellData) -> dict[str, Any] | None:
    """A cell's ``host_time`` figures (None without GPU utilization telemetry).

    ``gpu_busy_share`` is the mean over trials; ``busy_ms_per_token`` and
    ``host_ms_per_token`` give mean, min, max and CV over trials; ``per_trial`` keeps each
    trial's figures so every statistic can be recomputed, with the host it ran on and that
    host's load (``host``: :func:`trial_host`); ``decode`` the same over the decode alone
    (:func:`crossbench.analysis.decode_window.cell_decode_time`).
    """
    times = trial_times(cell)
    if not times:
        return None
    hosts = {int(e.get("trial", 0)): trial_host(e) for e in cell.manifest.get("trials") or []}
    return {
        "trials": len(times),
        "gpu_busy_share": sum(t.gpu_busy_share for t in times) / len(times),
        "busy_ms_per_token": spread([t.busy_ms_per_token for t in times]),
        "host_ms_per_token": spread([t.host_ms_per_token for t in times]),
        "per_trial": {str(t.trial): {"wall_s": t.wall_s, "tokens": t.tokens,
                                     "gpu_busy_share": t.gpu_busy_share,
                                     "busy_ms_per_token": t.busy_ms_per_token,
                                     "host_ms_per_token": t.host_ms_per_token,
                                     "host": hosts.get(t.trial)}
                      for t in times},
        "source": "NVML utilization.gpu, mean over the measured window, x measured wall "
                  "time / output tokens of the trial's completed requests",
        "decode": cell_decode_time(cell.root, cell.manifest, cell.records),
    }


def added_host_share(spec: dict[str, Any] | None, base: dict[str, Any] | None) -> float | None:
    """The host time per output token the speculative arm adds to its baseline's, as a share
    of the baseline's whole time per token (None without both arms' ``host_time``)."""
    if not spec or not base:
        return None
    per_token = base["host_ms_per_token"]["mean"] + base["busy_ms_per_token"]["mean"]
    if per_token <= 0:
        return None
    return float((spec["host_ms_per_token"]["mean"] - base["host_ms_per_token"]["mean"])
                 / per_token)


def host_bound(spec: dict[str, Any] | None, base: dict[str, Any] | None) -> str | None:
    """Why a speculative arm's speed depends on the host (its ``host_time`` against the
    baseline's), or None when it does not, or there is no telemetry. Two triggers, for every
    engine and method alike: GPU busy under :data:`HOST_BOUND_SHARE` of the measured time, or
    host time per token above the baseline's by :data:`HOST_ADDED_SHARE` of a baseline token's
    time (docs/analysis.md, "When the analysis flags the host")."""
    if not spec:
        return None
    host, busy = spec["host_ms_per_token"], spec["busy_ms_per_token"]
    added = added_host_share(spec, base)
    if spec["gpu_busy_share"] < HOST_BOUND_SHARE:
        text = (f"the speculative arm's GPU was busy {spec['gpu_busy_share']:.0%} of its "
                f"measured time{_against(base)}: per output token {host['mean']:.2f} ms "
                f"waiting on the host against {busy['mean']:.2f} ms of GPU work")
    elif added is not None and base is not None and added >= HOST_ADDED_SHARE:
        bh = base["host_ms_per_token"]["mean"]
        text = (f"the speculative arm waited on the host {host['mean']:.2f} ms per output "
                f"token against its baseline's {bh:.2f} ms, {added:.0%} of the baseline's "
                f"time per token more (GPU work {busy['mean']:.2f} against "
                f"{base['busy_ms_per_token']['mean']:.2f} ms; GPU busy "
                f"{spec['gpu_busy_share']:.0%}{_against(base)})")
    else:
        return None
    if spec["trials"] >= 2:
        text += (f"; over {spec['trials']} trials the host time ran {host['min']:.2f}-"
                 f"{host['max']:.2f} ms (CV {host['cv']:.0%}), the GPU time "
                 f"{busy['min']:.2f}-{busy['max']:.2f} ms (CV {busy['cv']:.0%})")
    dec = spec.get("decode") or {}
    if dec.get("available"):
        text += (f"; over the decode alone the GPU was busy {dec['gpu_busy_share']:.0%}, "
                 f"{dec['host_ms_per_token']['mean']:.2f} ms per token waiting on the host")
    text += _cpus(spec)
    return text + (": the speed, and so the verdict, follow this host's CPU (the engine's "
                   "own host work per step, other load), which differs between machines")


def _cpus(fig: dict[str, Any]) -> str:
    """Where the arm's trials ran and the host's load then (``per_trial``'s ``host``)."""
    hosts = [t.get("host") or {} for t in (fig.get("per_trial") or {}).values()]
    cpus = sorted({f"{h['cpu']} ({h['cpus']} CPUs)" for h in hosts if h.get("cpu")})
    if not cpus:
        return ""
    loads = [x for h in hosts for x in (h.get("loadavg_before"), h.get("loadavg_after"))
             if x is not None]
    load = f", 1-min load {min(loads):.2f}-{max(loads):.2f}" if loads else ""
    busy = [h["busy_others"] for h in hosts if h.get("busy_others")]
    others = (f"; other processes busy in {len(busy)} of {len(hosts)} trial(s): {busy[0]}"
              if busy else "")
    return f"; on {', '.join(cpus)}{load}{others}"


def _against(base: dict[str, Any] | None) -> str:
    return f" (its baseline {base['gpu_busy_share']:.0%})" if base else ""
