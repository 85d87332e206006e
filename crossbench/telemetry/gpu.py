"""Point readings of the GPUs through NVML, and the thermal gate a matrix waits on."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


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


def read_gpus() -> GpuSnapshot:
    """Temperature, power and SM clock of each GPU (``available=False`` without NVML)."""
    try:
        import pynvml
    except ImportError:
        return GpuSnapshot(False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return GpuSnapshot(False, f"no NVIDIA driver or GPU ({e})")
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            power = _optional(pynvml.nvmlDeviceGetPowerUsage, h)
            clock = _optional(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
            out.append(GpuReading(i, name if isinstance(name, str) else name.decode(),
                                  float(temp), None if power is None else power / 1000.0,
                                  clock))
        return GpuSnapshot(True, None, out)
    except pynvml.NVMLError as e:
        return GpuSnapshot(False, f"NVML query failed ({e})")
    finally:
        pynvml.nvmlShutdown()


def _optional(read: Callable[..., Any], *args: Any) -> float | None:
    try:
        return float(read(*args))
    except Exception:
        return None


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
