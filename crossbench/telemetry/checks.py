"""Checks of the GPU state around a trial (docs/confounds.md, "Checks"); each ends in an
action, as a typed :class:`Check`.

Statuses: ``ok``; ``info`` (recorded, harmless); ``warn`` (worth fixing, does not by itself
confound); ``fail`` (would confound results: the runner warns or refuses by policy, and
``crossbench doctor`` exits 2).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from crossbench.telemetry.derive import DEFAULT_RELEASE_TOLERANCE
from crossbench.telemetry.gpu import GpuProcess, Nvml, NvmlProvider, NvmlUnavailable

Status = Literal["ok", "info", "warn", "fail"]
#: NVML's clock-event bit for clocks limited by a user setting (``nvidia-smi -ac`` or ``-lgc``)
USER_CLOCKS = 0x2
_GIB = 1024**3


@dataclass(frozen=True)
class Check:
    """One checked fact: its status, what was seen, and what to do about it."""

    id: str
    status: Status
    message: str
    action: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return asdict(self)


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / _GIB:.2f} GiB"


def _describe(procs: list[tuple[int, GpuProcess]]) -> str:
    return ", ".join(f"{p.name or '?'} (pid {p.pid}, GPU {g}, {_gib(p.used_bytes)})"
                     for g, p in procs)


def _listed(procs: list[tuple[int, GpuProcess]]) -> list[dict[str, Any]]:
    return [{"gpu": g, "pid": p.pid, "name": p.name, "used_bytes": p.used_bytes}
            for g, p in procs]


def other_gpu_processes(nv: Nvml, own_pids: Iterable[int] = ()) -> Check:
    """``fail`` when a process not in ``own_pids`` holds memory on any GPU."""
    own = set(own_pids)
    others = [(i, p) for i in nv.indices() for p in nv.processes(i) if p.pid not in own]
    details = {"processes": _listed(others)}
    if not others:
        return Check("gpu-processes", "ok", "no other process holds GPU memory", None, details)
    return Check("gpu-processes", "fail",
                 f"other processes hold GPU memory: {_describe(others)}; they compete for "
                 "compute and memory bandwidth, and shrink what the engine can allocate",
                 "stop them (kill PID), or give this study other GPUs with CUDA_VISIBLE_DEVICES",
                 details)


SETTLE_S = 5.0
"""How long a trial's check waits for a busy GPU to fall idle. NVML's utilization is the share
of its last sample period (up to a second) with a kernel running, and the GPU finishes a
stopped server's work after the process has gone: on an H200 (2026-12-05) the check right after
one vLLM server stopped read 23 % for a GPU that had no process on it."""


def gpu_busy(nv: Nvml, max_util_pct: float = 10.0, settle_s: float = 0.0,
             poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Check:
    """``fail`` when any GPU's utilization is above ``max_util_pct`` before a trial, and stays
    above it for ``settle_s`` (polled every ``poll_s``); the first reading and how long the
    GPUs took to fall idle are in the details."""

    def read() -> dict[int, float | None]:
        return {i: nv.sample(i, with_processes=False).util_gpu_pct for i in nv.indices()}

    def busy_of(util: dict[int, float | None]) -> dict[int, float]:
        return {i: u for i, u in util.items() if u is not None and u > max_util_pct}

    first = util = read()
    start = clock()
    while busy_of(util) and clock() - start < settle_s:
        sleep(poll_s)
        util = read()
    waited = round(clock() - start, 2) if busy_of(first) else 0.0
    busy = busy_of(util)
    details = {"util_gpu_pct": util, "max_util_pct": max_util_pct, "first_util_gpu_pct": first,
               "waited_s": waited}
    if not busy:
        after = (f" (after {waited:g} s: {_util_list(busy_of(first))} at first)" if waited
                 else "")
        return Check("gpu-idle", "ok", f"every GPU is at or below {max_util_pct:g} % "
                     f"utilization{after}", None, details)
    still = f" (still after {waited:g} s)" if waited else ""
    return Check("gpu-idle", "fail", f"GPUs are busy before the trial: {_util_list(busy)}"
                 f"{still}", "wait for the other work to finish (nvidia-smi shows it), or use "
                 "other GPUs", details)


def _util_list(busy: Mapping[int, float]) -> str:
    return ", ".join(f"GPU {i} at {u:g} %" for i, u in busy.items())


def clocks_and_power(nv: Nvml) -> list[Check]:
    """Application clocks at their defaults, power limit at its default, persistence mode on."""
    clocks: list[str] = []
    power: list[str] = []
    persist: list[int] = []
    facts = [nv.device_facts(i) for i in nv.indices()]
    for f in facts:
        i = f["index"]
        mask = nv.sample(i, with_processes=False).throttle_mask
        if mask is not None and mask & USER_CLOCKS:
            clocks.append(f"GPU {i} clocks are held by a user setting (locked or application "
                          "clocks)")
        for kind in ("sm", "mem"):
            cur, stock = f[f"app_clock_{kind}_mhz"], f[f"default_app_clock_{kind}_mhz"]
            if cur is not None and stock is not None and cur != stock:
                clocks.append(f"GPU {i} {kind.upper()} application clock {cur:g} MHz "
                              f"(stock {stock:g})")
        limit, default = f["power_limit_w"], f["default_power_limit_w"]
        if limit is not None and default is not None and limit != default:
            what = "lowered" if limit < default else "raised"
            power.append(f"GPU {i} power limit {limit:g} W, {what} from {default:g} W")
        if f["persistence_mode"] is False:
            persist.append(i)
    details = {"gpus": facts}
    out = [
        Check("clocks", "fail", "clocks are not at stock: " + "; ".join(clocks),
              "reset with `sudo nvidia-smi -rac` (and `-rgc` for locked clocks), or run every "
              "arm and every study you compare with the same setting", details) if clocks
        else Check("clocks", "ok", "application clocks are at stock", None, details),
        Check("power-limit", "fail", "power limit is not at its default: " + "; ".join(power),
              "restore it with `sudo nvidia-smi -i N -pl <default W>`, or run every arm and "
              "every study you compare under the same limit", details) if power
        else Check("power-limit", "ok", "power limits are at their defaults", None, details),
    ]
    if persist:
        out.append(Check("persistence-mode", "warn",
                         f"persistence mode is off on GPU {', '.join(map(str, persist))}: the "
                         "driver re-initialises between server starts (slower start-up, "
                         "clocks ramp from idle)", "enable it: `sudo nvidia-smi -pm 1`", details))
    return out


def before_trial(own_pids: Iterable[int] = (), nvml: NvmlProvider | None = None,
                 max_util_pct: float = 10.0) -> list[Check]:
    """Processes, utilization (a busy GPU given :data:`SETTLE_S` to fall idle), clocks and
    power before a trial; one ``info`` without a GPU."""
    try:
        nv = Nvml.open(nvml)
    except NvmlUnavailable as e:
        return [Check("gpu", "info", f"no GPU: {e.reason}", None, {"reason": e.reason})]
    with nv:
        return [other_gpu_processes(nv, own_pids),
                gpu_busy(nv, max_util_pct, settle_s=SETTLE_S), *clocks_and_power(nv)]


def memory_used_now(nvml: NvmlProvider | None = None) -> dict[int, int]:
    """Device memory in use per GPU index right now (empty without a GPU): the idle level a
    trial's release is checked against."""
    try:
        nv = Nvml.open(nvml)
    except NvmlUnavailable:
        return {}
    with nv:
        used = {i: nv.sample(i, with_processes=False).memory_used_bytes for i in nv.indices()}
        return {i: u for i, u in used.items() if u is not None}


def wait_vram_released(idle_bytes: Mapping[int, int], timeout_s: float = 60.0,
                       poll_s: float = 1.0, tolerance_bytes: int = DEFAULT_RELEASE_TOLERANCE,
                       nvml: NvmlProvider | None = None,
                       sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> Check:
    """Wait until each GPU in ``idle_bytes`` (index -> memory used before the trial) is back
    within ``tolerance_bytes`` of idle; ``fail`` after ``timeout_s`` with who holds memory."""
    try:
        nv = Nvml.open(nvml)
    except NvmlUnavailable as e:
        return Check("vram-released", "info", f"no GPU: {e.reason}", None, {"reason": e.reason})
    t0 = clock()
    with nv:
        while True:
            used = {i: nv.sample(i, with_processes=False).memory_used_bytes
                    for i in idle_bytes}
            held = {i: u for i, u in used.items()
                    if u is not None and u > idle_bytes[i] + tolerance_bytes}
            waited = clock() - t0
            details: dict[str, Any] = {"waited_s": waited, "idle_bytes": dict(idle_bytes),
                                       "used_bytes": used}
            if not held:
                return Check("vram-released", "ok",
                             f"GPU memory back to idle {waited:.1f} s after the stop", None,
                             details)
            if waited >= timeout_s:
                procs = [(i, p) for i in held for p in nv.processes(i)]
                details["processes"] = _listed(procs)
                over = ", ".join(f"GPU {i} {_gib(u)} (idle {_gib(idle_bytes[i])})"
                                 for i, u in held.items())
                who = (f"held by {_describe(procs)}" if procs else
                       "NVML names no process (another container or PID namespace?)")
                return Check("vram-released", "fail",
                             f"GPU memory not back to idle {timeout_s:g} s after the server "
                             f"stopped: {over}; {who}",
                             "kill the listed processes (engine workers left behind), then "
                             "re-run the trial; the next trial would start with less memory",
                             details)
            sleep(poll_s)
