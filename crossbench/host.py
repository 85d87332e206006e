"""Facts about the machine crossbench runs on."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def proc_field(path: Path, key: str) -> str | None:
    """What follows the ``:`` of the first line of ``path`` (``/proc/cpuinfo``,
    ``/proc/meminfo``) that starts with ``key``; None when none does or it is unreadable."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    model = proc_field(Path("/proc/cpuinfo"), "model name")
    return model.strip() if model is not None else platform.processor() or "unknown"


def cpu_flags_digest() -> str:
    """Digest of the CPU's feature flags: a native CPU build is only valid on the same set."""
    flags = proc_field(Path("/proc/cpuinfo"), "flags")
    if flags is None:
        return "unknown"
    return hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]


def _query_gpus(fields: str) -> list[list[str]]:
    """``nvidia-smi --query-gpu=FIELDS``: one row of values per GPU (empty without a driver
    or GPU, or where nvidia-smi refuses a field)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [[v.strip() for v in ln.split(",")] for ln in out.stdout.splitlines() if ln.strip()]


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs ``nvidia-smi`` sees (empty without a driver or GPU)."""
    return [",".join(row) for row in _query_gpus("name")]


def gpu_archs() -> list[tuple[str, str]]:
    """Each NVIDIA GPU ``nvidia-smi`` sees as (name, CUDA compute capability such as
    ``"9.0"``); empty without a driver or GPU. Compiled kernels serve only their capability:
    the H100 and the H200 are both 9.0."""
    return [(",".join(row[:-1]), row[-1]) for row in _query_gpus("name,compute_cap")
            if len(row) >= 2]


def hardware_mismatch(gpu: str | None, gpu_count: int | None) -> str | None:
    """A warning when this host lacks the GPUs a study expects, else None."""
    if gpu is None and not gpu_count:
        return None
    names = gpu_names()
    want = f"{gpu_count or 1} x {gpu or 'GPU'}"
    have = ", ".join(names) if names else "no NVIDIA GPU visible (nvidia-smi finds none)"
    matching = [n for n in names if gpu is None or gpu.lower() in n.lower()]
    if len(matching) < (gpu_count or 1):
        return (f"the matrix expects {want}, this host has {have}: its results will not "
                "describe that hardware; run it there, or change `hardware` to what you have")
    return None


LOAD_SCHEMA = 1
"""Version of a trial's ``host`` record (:class:`HostWindow`)."""

BUSY_OTHER_CORES = 0.25
"""A process outside the engine's server and crossbench that used at least this many cores on
average over a trial's measured window is listed in ``busy_others``."""


def cpus_usable() -> int | None:
    """CPUs this process may run on (its affinity mask), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def cpu_governor(root: Path = Path("/sys/devices/system/cpu")) -> str | None:
    """The cpufreq governors of the CPUs, comma-separated when they differ (``performance``,
    ``powersave``...), or None where cpufreq is not exposed (most VMs and containers)."""
    found = set()
    for p in root.glob("cpu[0-9]*/cpufreq/scaling_governor"):
        try:
            found.add(p.read_text().strip())
        except OSError:
            continue
    return ",".join(sorted(found)) or None


def load_now(proc: Path = Path("/proc")) -> dict[str, Any]:
    """The host's load at this instant, from ``/proc/loadavg``: ``loadavg`` (1, 5 and 15
    min) and ``runnable``, the threads running or ready to run now (the reader included);
    None for what the host does not expose."""
    out: dict[str, Any] = {"loadavg": None, "runnable": None}
    try:
        fields = (proc / "loadavg").read_text().split()
        out["loadavg"] = [round(float(x), 2) for x in fields[:3]]
        out["runnable"] = int(fields[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        with contextlib.suppress(OSError):
            out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return out


def cpu_times(proc: Path = Path("/proc")) -> tuple[int, int, int] | None:
    """(total, idle, steal) jiffies of all CPUs since boot (``/proc/stat``'s ``cpu`` line;
    idle includes iowait), or None where unreadable."""
    try:
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("cpu "):
                v = [int(x) for x in line.split()[1:9]]
                v += [0] * (8 - len(v))
                return sum(v), v[3] + v[4], v[7]
    except (OSError, ValueError):
        return None
    return None


def process_stats(proc: Path = Path("/proc")) -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the ``stat`` fields after the name) of every process; the name is
    in parentheses and may hold spaces, so the fields follow the last ")"."""
    for entry in proc.glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        close = stat.rfind(")")
        yield int(entry.name), stat[stat.find("(") + 1:close], stat[close + 2:].split()


def process_ticks(proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """Every process's (name, user + system jiffies) since it started."""
    out: dict[int, tuple[str, int]] = {}
    for pid, name, fields in process_stats(proc):
        try:  # fields after the name: state is 0, utime 11, stime 12
            out[pid] = (name, int(fields[11]) + int(fields[12]))
        except (ValueError, IndexError):
            continue
    return out


class HostWindow:
    """The host side of a trial's measured window, recorded the same way for every engine.

    :meth:`start` just before the measured requests and :meth:`stop` just after; the record
    (``host`` of the trial's manifest entry) holds what could make two trials of one
    configuration differ on the host:

    - ``cpu``, ``cpus``, ``cpus_usable``, ``governor``: the CPU model, its logical CPUs,
      those this process may use, the cpufreq governor (None where not exposed); per trial,
      because a resumed run can finish on another machine;
    - ``before`` and ``after``: :func:`load_now` (load averages, runnable processes);
    - ``window_s``, ``cpu_busy_share`` and ``steal_share``: the share of all CPUs' time over
      the window that was busy, and stolen by a hypervisor (``/proc/stat``);
    - ``server_cores`` and ``client_cores``: the cores the engine's server (its process
      tree) and crossbench itself used on average over the window;
    - ``busy_others``: other processes that used at least :data:`BUSY_OTHER_CORES` cores on
      average (pid, name, cores), the busiest first, at most five.

    Reads ``/proc`` only: a figure the host does not expose is None.
    """

    def __init__(self, proc: Path = Path("/proc"),
                 clock: Callable[[], float] | None = None) -> None:
        self.proc = proc
        self.clock = clock or time.monotonic
        self.t0 = 0.0
        self.before: dict[str, Any] = {}
        self.cpu0: tuple[int, int, int] | None = None
        self.ticks0: dict[int, tuple[str, int]] = {}

    def start(self) -> None:
        """Read the load and the CPU counters at the window's start."""
        self.before = load_now(self.proc)
        self.cpu0 = cpu_times(self.proc)
        self.ticks0 = process_ticks(self.proc)
        self.t0 = self.clock()

    def stop(self, server_pids: set[int] | None = None) -> dict[str, Any]:
        """The record of the window (class docstring); ``server_pids``: the engine server's
        processes (None when crossbench did not start it, or it has no pid)."""
        wall = self.clock() - self.t0
        ticks1 = process_ticks(self.proc)
        cpu1 = cpu_times(self.proc)
        after = load_now(self.proc)
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        own = {os.getpid()}
        used: dict[int, tuple[str, float]] = {}
        for pid, (name, t1) in ticks1.items():
            t0 = self.ticks0[pid][1] if pid in self.ticks0 else 0  # born in the window: all
            if t1 > t0 and wall > 0:
                used[pid] = (name, (t1 - t0) / hz / wall)
        server = server_pids or set()
        others = sorted(((pid, name, c) for pid, (name, c) in used.items()
                         if pid not in server and pid not in own and c >= BUSY_OTHER_CORES),
                        key=lambda x: -x[2])
        busy = steal = None
        if self.cpu0 is not None and cpu1 is not None and cpu1[0] > self.cpu0[0]:
            total = cpu1[0] - self.cpu0[0]
            busy = round(1.0 - (cpu1[1] - self.cpu0[1]) / total, 4)
            steal = round((cpu1[2] - self.cpu0[2]) / total, 4)
        return {
            "schema": LOAD_SCHEMA, "cpu": cpu_model(), "cpus": os.cpu_count(),
            "cpus_usable": cpus_usable(), "governor": cpu_governor(),
            "before": self.before, "after": after, "window_s": round(wall, 4),
            "cpu_busy_share": busy, "steal_share": steal,
            "server_cores": (round(float(sum(used[p][1] for p in server if p in used)), 3)
                             if server_pids else None),
            "client_cores": round(float(sum(used[p][1] for p in own if p in used)), 3),
            "busy_others": [{"pid": pid, "name": name, "cores": round(c, 2)}
                            for pid, name, c in others[:5]],
        }
