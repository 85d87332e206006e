"""GPU readings and the thermal gate, with a scripted reader (true temperatures known)."""

from __future__ import annotations

from crossbench.telemetry.gpu import GpuReading, GpuSnapshot, read_gpus, thermal_gate


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def reader(temps: list[list[float]]):  # type: ignore[no-untyped-def]
    seq = iter(temps)

    def read() -> GpuSnapshot:
        cur = next(seq)
        return GpuSnapshot(True, None, [GpuReading(i, "GPU", t, None, None)
                                        for i, t in enumerate(cur)])
    return read


def test_gate_waits_for_the_hottest_gpu_to_cool() -> None:
    c = FakeClock()
    res = thermal_gate(60, 100, poll_s=5, read=reader([[58, 71], [59, 64], [57, 60]]),
                       sleep=c.sleep, clock=c.now)
    assert res.checked and res.passed
    assert res.waited_s == 10 and res.max_temperature_c == 60


def test_gate_times_out_and_says_how_hot() -> None:
    c = FakeClock()
    res = thermal_gate(60, 4, poll_s=2, read=reader([[80], [79], [78], [77]]),
                       sleep=c.sleep, clock=c.now)
    assert res.checked and not res.passed
    assert res.reason == "still 78 C after 4 s (gate 60 C)"


def test_gate_without_gpu_records_why() -> None:
    res = thermal_gate(60, 10, read=lambda: GpuSnapshot(False, "no NVIDIA driver or GPU"))
    assert (res.checked, res.passed, res.reason) == (False, False, "no NVIDIA driver or GPU")


def test_read_gpus_on_this_host_matches_nvidia_smi() -> None:
    from crossbench.host import gpu_names

    snap = read_gpus()
    assert snap.available == bool(gpu_names())
    if not snap.available:
        assert snap.reason
    else:
        assert [g.name for g in snap.gpus] == gpu_names()
