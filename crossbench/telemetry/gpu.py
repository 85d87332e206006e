"""Readings of the GPUs through NVML: point readings, the thermal gate a matrix waits on, and
typed NVML sessions (:class:`Nvml`) over ``pynvml`` or any provider of the same functions (an
:data:`NvmlProvider`; tests pass ``ScriptedNvml`` of ``tests/standins/nvml.py``) that the
sampler, provenance, checks and ``crossbench doctor`` share."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crossbench.host import process_stats


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment."""

    index: int
    name: str
    temperature_c: float
    power_w: float | None
    sm_clock_mhz: float | None


@dataclass(frozen=True)
class GpuSnapshot:
    """Every visible GPU at one moment, or why none could be read."""

    available: bool
    reason: str | None = None
    gpus: list[GpuReading] = field(default_factory=list)


def read_gpus(provider: NvmlProvider | None = None) -> GpuSnapshot:
    """Temperature, power and SM clock of each GPU (``available=False`` without NVML), read
    through :class:`Nvml`."""
    try:
        nv = Nvml.open(provider)
    except NvmlUnavailable as e:
        return GpuSnapshot(False, e.reason)
    with nv:
        try:
            out = []
            for i in nv.indices():
                s = nv.sample(i, with_processes=False)
                name = _text(nv._get("nvmlDeviceGetName", nv.handle(i)) or f"GPU {i}")
                if s.temperature_c is None:
                    return GpuSnapshot(False, f"GPU {i} reports no temperature")
                out.append(GpuReading(i, name, s.temperature_c, s.power_w, s.sm_clock_mhz))
            return GpuSnapshot(True, None, out)
        except Exception as e:  # NVML errors on count/handle
            return GpuSnapshot(False, f"NVML query failed ({e})")


@dataclass(frozen=True)
class GateResult:
    """What the thermal gate saw before a trial: waited, passed, or could not check."""

    checked: bool
    passed: bool
    waited_s: float
    max_temperature_c: float | None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (recorded in the matrix journal)."""
        return asdict(self)


def thermal_gate(max_temp_c: float, timeout_s: float, poll_s: float = 2.0,
                 read: Callable[[], GpuSnapshot] = read_gpus,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> GateResult:
    """Wait until every GPU is at or below ``max_temp_c``, at most ``timeout_s`` seconds.

    Never raises: a gate that cannot read the GPUs returns ``checked=False`` with the reason,
    and one that times out returns ``passed=False`` (the caller records and warns).
    """
    t0 = clock()
    while True:
        snap = read()
        if not snap.available or not snap.gpus:
            return GateResult(False, False, clock() - t0, None,
                              snap.reason or "no GPU visible")
        hottest = max(g.temperature_c for g in snap.gpus)
        if hottest <= max_temp_c:
            return GateResult(True, True, clock() - t0, hottest)
        if clock() - t0 >= timeout_s:
            return GateResult(True, False, clock() - t0, hottest,
                              f"still {hottest:g} C after {timeout_s:g} s (gate {max_temp_c:g} C)")
        sleep(poll_s)


# -- NVML sessions: typed readers over pynvml or a scripted stand-in -------------------------

#: a zero-argument callable returning a pynvml-shaped object (the module, or a stand-in)
NvmlProvider = Callable[[], Any]

#: clock-event ("throttle") reason bits of NVML, by the names crossbench records
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
#: the reasons that slow a busy GPU down (idle, user-set clocks and display are not throttling)
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80 | 0x200 | 0x400


def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clock-event mask (unknown bits as ``bit_N``)."""
    return [THROTTLE_REASONS.get(1 << bit, f"bit_{bit}") for bit in range(32) if mask & (1 << bit)]


class NvmlUnavailable(Exception):
    """NVML cannot be used here; ``reason`` says why (no library, no driver, no GPU)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU (``used_bytes`` is None where NVML cannot tell)."""

    pid: int
    used_bytes: int | None
    name: str | None = None


@dataclass(frozen=True)
class DeviceSample:
    """One GPU's state at one moment; a field is None when the device does not report it."""

    index: int
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    util_gpu_pct: float | None
    util_mem_pct: float | None
    sm_clock_mhz: float | None
    mem_clock_mhz: float | None
    power_w: float | None
    temperature_c: float | None
    throttle_mask: int | None
    processes: tuple[GpuProcess, ...] = ()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pynvml() -> Any:
    import pynvml

    return pynvml


class Nvml:
    """An initialised NVML with typed readers; a context manager that shuts NVML down.

    ``Nvml.open()`` uses ``pynvml`` (package ``nvidia-ml-py``); tests pass a provider of a
    stand-in with the same functions
    (``ScriptedNvml`` of ``tests/standins/nvml.py``)::

        with Nvml.open() as nv:          # raises NvmlUnavailable(reason) without a GPU
            s = nv.sample(0)             # DeviceSample
            facts = nv.device_facts(0)   # name, PCIe link, power limits, clocks, ECC...

    Every reader returns None for a value the device does not support, never raises for it.
    """

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._open = True

    @classmethod
    def open(cls, provider: NvmlProvider | None = None) -> Nvml:
        """Initialise NVML; raise :class:`NvmlUnavailable` with the reason when it cannot."""
        try:
            lib = (provider or _pynvml)()
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                                  ) from None
        try:
            lib.nvmlInit()
        except lib.NVMLError as e:
            raise NvmlUnavailable(f"no NVIDIA driver or GPU ({e})") from None
        return cls(lib)

    def close(self) -> None:
        """Shut NVML down (safe to call twice)."""
        if self._open:
            self._open = False
            with contextlib.suppress(Exception):
                self.lib.nvmlShutdown()

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, fn: str, *args: Any) -> Any:
        """Call an NVML function; None when it is missing or the device does not support it."""
        read = getattr(self.lib, fn, None)
        if read is None:
            return None
        try:
            return read(*args)
        except Exception:
            return None

    def count(self) -> int:
        """Number of GPUs NVML sees."""
        return int(self.lib.nvmlDeviceGetCount())

    def indices(self, environ: Mapping[str, str] | None = None) -> list[int]:
        """NVML indices of the GPUs an engine started from here can use (see
        :func:`visible_indices`); every GPU when ``CUDA_VISIBLE_DEVICES`` is unset."""
        env = os.environ if environ is None else environ
        return visible_indices(env.get("CUDA_VISIBLE_DEVICES"), self.count(),
                               lambda i: _opt_text(self._get("nvmlDeviceGetUUID",
                                                             self.handle(i))))

    def handle(self, index: int) -> Any:
        """NVML's handle of GPU ``index``."""
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def processes(self, index: int) -> list[GpuProcess]:
        """Compute and graphics processes on a GPU, with their memory and names (/proc)."""
        h = self.handle(index)
        seen: dict[int, GpuProcess] = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses",
                   "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self._get(fn, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                pid = int(p.pid)
                if pid not in seen:
                    seen[pid] = GpuProcess(pid, None if used is None else int(used),
                                           process_name(pid))
        return sorted(seen.values(), key=lambda p: p.pid)

    def sample(self, index: int, with_processes: bool = True) -> DeviceSample:
        """Memory, utilization, clocks, power, temperature and throttle reasons of one GPU."""
        lib, h = self.lib, self.handle(index)
        mem = self._get("nvmlDeviceGetMemoryInfo", h)
        util = self._get("nvmlDeviceGetUtilizationRates", h)
        mask = self._get("nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:
            mask = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return DeviceSample(
            index=index,
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            sm_clock_mhz=_num(self._get("nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_SM)),
            mem_clock_mhz=_num(self._get("nvmlDeviceGetClockInfo", h, lib.NVML_CLOCK_MEM)),
            power_w=_watts(self._get("nvmlDeviceGetPowerUsage", h)),
            temperature_c=_num(self._get("nvmlDeviceGetTemperature", h,
                                         lib.NVML_TEMPERATURE_GPU)),
            throttle_mask=None if mask is None else int(mask),
            processes=tuple(self.processes(index)) if with_processes else (),
        )

    def system_facts(self) -> dict[str, Any]:
        """Driver version and the CUDA version the driver supports (e.g. ``"12.4"``)."""
        cuda = self._get("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self._get("nvmlSystemGetCudaDriverVersion")
        driver = self._get("nvmlSystemGetDriverVersion")
        return {"driver": None if driver is None else _text(driver),
                "cuda_driver_version": None if cuda is None
                else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}"}

    def device_facts(self, index: int) -> dict[str, Any]:
        """What a GPU is and how it is set: name, PCIe link, power limits, clocks, modes."""
        lib, h = self.lib, self.handle(index)
        g = self._get
        sm, mem = lib.NVML_CLOCK_SM, lib.NVML_CLOCK_MEM
        ecc = g("nvmlDeviceGetEccMode", h)
        mem_info = g("nvmlDeviceGetMemoryInfo", h)
        return {
            "index": index,
            "name": _opt_text(g("nvmlDeviceGetName", h)),
            "uuid": _opt_text(g("nvmlDeviceGetUUID", h)),
            "memory_total_bytes": None if mem_info is None else int(mem_info.total),
            "pcie_link_width_current": g("nvmlDeviceGetCurrPcieLinkWidth", h),
            "pcie_link_width_max": g("nvmlDeviceGetMaxPcieLinkWidth", h),
            "pcie_link_gen_current": g("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_link_gen_max": g("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "power_limit_w": _watts(g("nvmlDeviceGetPowerManagementLimit", h)),
            "default_power_limit_w": _watts(g("nvmlDeviceGetPowerManagementDefaultLimit", h)),
            "enforced_power_limit_w": _watts(g("nvmlDeviceGetEnforcedPowerLimit", h)),
            "app_clock_sm_mhz": _num(g("nvmlDeviceGetApplicationsClock", h, sm)),
            "app_clock_mem_mhz": _num(g("nvmlDeviceGetApplicationsClock", h, mem)),
            "default_app_clock_sm_mhz": _num(g("nvmlDeviceGetDefaultApplicationsClock", h, sm)),
            "default_app_clock_mem_mhz": _num(g("nvmlDeviceGetDefaultApplicationsClock", h,
                                                mem)),
            "max_clock_sm_mhz": _num(g("nvmlDeviceGetMaxClockInfo", h, sm)),
            "max_clock_mem_mhz": _num(g("nvmlDeviceGetMaxClockInfo", h, mem)),
            "persistence_mode": _flag(g("nvmlDeviceGetPersistenceMode", h)),
            "ecc_current": None if ecc is None else bool(ecc[0]),
            "ecc_pending": None if ecc is None else bool(ecc[1]),
        }


def visible_indices(setting: str | None, count: int,
                    uuid: Callable[[int], str | None]) -> list[int]:
    """The NVML indices a ``CUDA_VISIBLE_DEVICES`` value leaves visible, in its order.

    Unset: all ``count`` GPUs. Entries are GPU UUIDs (``GPU-8932f937...``, a unique prefix is
    enough) or indices; like CUDA, the list ends at the first entry that names no GPU (a MIG
    instance too: it is not resolved here), and an empty value hides every GPU. Indices are
    read in NVML's PCI-bus order, which is CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or on
    hosts of identical GPUs; UUIDs are exact everywhere.
    """
    if setting is None:
        return list(range(count))
    out: list[int] = []
    uuids: list[str] | None = None
    for entry in (e.strip() for e in setting.split(",")):
        if entry.lstrip("-").isdigit():
            i = int(entry)
            if not 0 <= i < count:
                break
        elif entry.startswith("GPU-"):
            if uuids is None:
                uuids = [uuid(i) or "" for i in range(count)]
            hits = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(hits) != 1:
                break
            i = hits[0]
        else:
            break
        if i in out:
            break
        out.append(i)
    return out


def _num(v: Any) -> float | None:
    return None if v is None else float(v)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


def _flag(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _opt_text(v: Any) -> str | None:
    return None if v is None else _text(v)


# -- processes (/proc) --------------------------------------------------------------------------


def process_name(pid: int, proc: Path = Path("/proc")) -> str | None:
    """A process's command name (``/proc/PID/comm``), None when it is gone or unreadable."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return None


def process_tree(roots: Iterable[int], proc: Path = Path("/proc")) -> set[int]:
    """The given pids and all their descendants, found through each process's parent pid."""
    children: dict[int, list[int]] = {}
    for pid, _, fields in process_stats(proc):
        if len(fields) > 1:  # state is 0, the parent's pid 1
            children.setdefault(int(fields[1]), []).append(pid)
    out: set[int] = set()
    todo = [int(r) for r in roots]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, []))
    return out

