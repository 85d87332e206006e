"""A scripted NVML: a ``pynvml``-shaped stand-in whose GPUs report what a test scripts.

Never a measurement. It lets the sampler, provenance, checks and ``crossbench doctor`` run with
known values on machines without a GPU, through the same :class:`crossbench.telemetry.gpu.Nvml`
session the real ``pynvml`` goes through (pass ``lambda: scripted`` wherever an
:data:`~crossbench.telemetry.gpu.NvmlProvider` is taken). Unlike the stand-in servers it does not
name itself in its readings (tests script real-looking values); it lives in the caller's process
and is read only where a caller passes it as the provider, so no run ever records it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScriptedGpu:
    """The state a :class:`ScriptedNvml` reports for one GPU (mutable: tests script it)."""

    name: str = "NVIDIA H200"
    memory_used_bytes: int = 0
    memory_total_bytes: int = 150_000_000_000
    util_gpu_pct: int = 0
    util_mem_pct: int = 0
    sm_clock_mhz: int = 345
    mem_clock_mhz: int = 2619
    power_mw: int = 75_000
    temperature_c: int = 30
    throttle_mask: int = 0x1
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> used bytes
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pcie_width: tuple[int, int] = (16, 16)  # current, max
    pcie_gen: tuple[int, int] = (5, 5)
    power_limit_mw: int = 700_000
    default_power_limit_mw: int = 700_000
    app_clocks_mhz: tuple[int, int] = (1980, 3201)  # SM, memory
    default_app_clocks_mhz: tuple[int, int] = (1980, 3201)
    max_clocks_mhz: tuple[int, int] = (1980, 3201)
    persistence: bool = True
    ecc: tuple[bool, bool] = (True, True)


class _ScriptedError(Exception):
    pass


@dataclass
class _Mem:
    used: int
    total: int


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int | None


class ScriptedNvml:
    """A pynvml-shaped stand-in (same function names) whose GPUs report what a test scripts.

    Never a measurement: it lets the sampler, provenance, checks and ``doctor`` run with known
    values on machines without a GPU. ``fail_init`` makes ``nvmlInit`` fail with that text.
    Pass ``lambda: scripted`` wherever an :data:`NvmlProvider` is taken.
    """

    NVMLError = _ScriptedError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[ScriptedGpu] | None = None, driver: str = "570.133.20",
                 cuda_version: int = 12080, fail_init: str | None = None) -> None:
        self.gpus = gpus if gpus is not None else [ScriptedGpu()]
        self.driver = driver
        self.cuda_version = cuda_version
        self.fail_init = fail_init
        self.initialised = 0  # nvmlInit calls minus nvmlShutdown calls

    def nvmlInit(self) -> None:
        """Start a session (or fail with ``fail_init``)."""
        if self.fail_init is not None:
            raise _ScriptedError(self.fail_init)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        """End a session."""
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        """Number of scripted GPUs."""
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> ScriptedGpu:
        """The scripted GPU itself serves as its handle."""
        return self.gpus[i]

    def nvmlSystemGetDriverVersion(self) -> str:
        """Scripted driver version."""
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        """Scripted CUDA driver version (e.g. 12080 for 12.8)."""
        return self.cuda_version

    def nvmlDeviceGetName(self, h: ScriptedGpu) -> str:
        """GPU name."""
        return h.name

    def nvmlDeviceGetUUID(self, h: ScriptedGpu) -> str:
        """GPU UUID."""
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h: ScriptedGpu) -> _Mem:
        """Used and total device memory."""
        return _Mem(h.memory_used_bytes, h.memory_total_bytes)

    def nvmlDeviceGetUtilizationRates(self, h: ScriptedGpu) -> _Util:
        """GPU and memory utilization (percent)."""
        return _Util(h.util_gpu_pct, h.util_mem_pct)

    def nvmlDeviceGetClockInfo(self, h: ScriptedGpu, kind: int) -> int:
        """Current SM or memory clock."""
        return h.sm_clock_mhz if kind == self.NVML_CLOCK_SM else h.mem_clock_mhz

    def nvmlDeviceGetPowerUsage(self, h: ScriptedGpu) -> int:
        """Power draw in milliwatts."""
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: ScriptedGpu, _sensor: int) -> int:
        """Temperature in degrees C."""
        return h.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: ScriptedGpu) -> int:
        """Clock-event (throttle) reason bits."""
        return h.throttle_mask

    def nvmlDeviceGetComputeRunningProcesses(self, h: ScriptedGpu) -> list[_Proc]:
        """Processes holding memory on the GPU."""
        return [_Proc(pid, used) for pid, used in h.processes.items()]

    def nvmlDeviceGetGraphicsRunningProcesses(self, _h: ScriptedGpu) -> list[_Proc]:
        """No graphics processes."""
        return []

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: ScriptedGpu) -> int:
        """Current PCIe link width."""
        return h.pcie_width[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: ScriptedGpu) -> int:
        """Maximum PCIe link width."""
        return h.pcie_width[1]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: ScriptedGpu) -> int:
        """Current PCIe generation."""
        return h.pcie_gen[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: ScriptedGpu) -> int:
        """Maximum PCIe generation."""
        return h.pcie_gen[1]

    def nvmlDeviceGetPowerManagementLimit(self, h: ScriptedGpu) -> int:
        """Power limit in milliwatts."""
        return h.power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: ScriptedGpu) -> int:
        """Default power limit in milliwatts."""
        return h.default_power_limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: ScriptedGpu) -> int:
        """Enforced power limit in milliwatts."""
        return h.power_limit_mw

    def nvmlDeviceGetApplicationsClock(self, h: ScriptedGpu, kind: int) -> int:
        """Application clock (SM or memory)."""
        return h.app_clocks_mhz[0 if kind == self.NVML_CLOCK_SM else 1]

    def nvmlDeviceGetDefaultApplicationsClock(self, h: ScriptedGpu,
                                              kind: int) -> int:
        """Default application clock (SM or memory)."""
        return h.default_app_clocks_mhz[0 if kind == self.NVML_CLOCK_SM else 1]

    def nvmlDeviceGetMaxClockInfo(self, h: ScriptedGpu, kind: int) -> int:
        """Maximum clock (SM or memory)."""
        return h.max_clocks_mhz[0 if kind == self.NVML_CLOCK_SM else 1]

    def nvmlDeviceGetPersistenceMode(self, h: ScriptedGpu) -> int:
        """Persistence mode (1 on)."""
        return int(h.persistence)

    def nvmlDeviceGetEccMode(self, h: ScriptedGpu) -> tuple[int, int]:
        """ECC mode, current and pending."""
        return int(h.ecc[0]), int(h.ecc[1])
