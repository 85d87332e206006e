"""GPU telemetry: the sampler on this GPU-less host, a scripted NVML trace whose derived figures
are known exactly, and the checks around a trial (processes, clocks, power, VRAM release)."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest
from standins.nvml import ScriptedGpu, ScriptedNvml

from crossbench.telemetry.checks import (
    before_trial,
    clocks_and_power,
    gpu_busy,
    memory_used_now,
    other_gpu_processes,
    wait_vram_released,
)
from crossbench.telemetry.derive import TrialPhases, derive_trial, draft_vram_cost, read_trace
from crossbench.telemetry.gpu import Nvml, process_tree, read_gpus, visible_indices
from crossbench.telemetry.sampler import COLUMNS, GpuSampler, note_path

GIB = 1024**3
S = 1_000_000_000  # ns per second
ABSENT_PID = 4_194_301  # above any pid this host hands out in practice


def test_sampler_without_gpu_writes_header_and_note(tmp_path):
    from crossbench.host import gpu_names

    if gpu_names():
        pytest.skip("this host has a GPU")
    path = tmp_path / "telemetry" / "t0.csv"
    with GpuSampler(path, pids=[os.getpid()]) as sampler:
        assert sampler.sample_once() is False
    res = sampler.stop()  # a second stop is harmless
    assert (res.available, res.samples) == (False, 0)
    assert res.reason is not None and res.reason.startswith("no GPU: ")
    assert path.read_bytes() == (",".join(COLUMNS) + "\n").encode()
    assert note_path(path).read_text() == res.reason + "\n"
    figures = derive_trial(path, TrialPhases(1, 2, 3, 4, 5))
    assert (figures.available, figures.reason, figures.gpus) == (False, res.reason, [])
    assert figures.peak_bytes is None and figures.released is None
    assert draft_vram_cost(figures, figures) is None


def test_derive_of_an_empty_trace_without_note(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    got = derive_trial(path, TrialPhases(1, 2, 3, 4, 5))
    assert (got.available, got.reason) == (False, f"no samples in {path}")
    assert derive_trial(tmp_path / "missing.csv", TrialPhases(1, 2, 3, 4, 5)).available is False


class Script:
    """A scripted GPU and clock: each step sets the state, then the sampler takes one row."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.gpu = ScriptedGpu(memory_used_bytes=1 * GIB, processes={ABSENT_PID: GIB})
        self.nvml = ScriptedNvml([self.gpu])
        self.t = 0
        self.path = tmp_path / f"{name}.csv"
        self.sampler = GpuSampler(self.path, nvml=lambda: self.nvml, clock=lambda: self.t)
        assert self.sampler.open()

    def at(self, seconds: float, used_gib: float, mine_gib: float | None = None,
           throttle: int = 0, sm: int = 1980, power_w: int = 100, util: int = 0,
           temp: int = 40) -> None:
        self.t = int(seconds * S)
        g = self.gpu
        g.memory_used_bytes = int(used_gib * GIB)
        g.processes = {ABSENT_PID: GIB}
        if mine_gib is not None:
            g.processes[os.getpid()] = int(mine_gib * GIB)
        g.throttle_mask, g.sm_clock_mhz, g.power_mw = throttle, sm, power_w * 1000
        g.util_gpu_pct, g.temperature_c = util, temp
        assert self.sampler.sample_once()


PHASES = TrialPhases(start_ns=2 * S, ready_ns=3 * S, measured_start_ns=4 * S,
                     measured_end_ns=7 * S, stop_ns=8 * S)


def run_trial(tmp_path: Path, name: str, peak_gib: float) -> Path:
    s = Script(tmp_path, name)
    s.at(1.0, 1, throttle=0x1)  # idle: another tool's 1 GiB context
    s.sampler.set_pids([os.getpid()])  # the "server" starts: its tree is this process
    s.at(2.5, 10, mine_gib=9, throttle=0x1)  # loading weights
    s.at(3.5, 40, mine_gib=39, throttle=0x1)  # ready: weights, KV cache, graphs
    s.at(4.5, 41, mine_gib=40, throttle=0x4, sm=1500, power_w=600, util=90, temp=70)
    s.at(5.5, peak_gib, mine_gib=peak_gib - 1, throttle=0x4 | 0x20, sm=1700, power_w=650,
         util=100, temp=83)
    s.at(6.5, 42, mine_gib=41, throttle=0, sm=1900, power_w=700, util=80, temp=79)
    s.at(8.5, 30, throttle=0x1)  # stopped; the driver is still releasing
    s.at(9.5, 1.1, throttle=0x1)  # back within 256 MiB of idle
    s.at(10.5, 1, throttle=0x1)
    res = s.sampler.stop()
    assert (res.available, res.samples, res.reason) == (True, 9, None)
    assert s.nvml.initialised == 0
    return s.path


def test_scripted_trace_gives_exact_idle_peak_and_release(tmp_path):
    path = run_trial(tmp_path, "spec", peak_gib=45)
    rows = list(csv.DictReader(path.open()))
    assert [r["process_used_bytes"] for r in rows] == [
        "", str(9 * GIB), str(39 * GIB), str(40 * GIB), str(44 * GIB), str(41 * GIB), "0", "0",
        "0"]
    assert rows[4]["throttle_reasons"] == "sw_power_cap|sw_thermal_slowdown"
    assert rows[4]["throttle_mask"] == "36" and rows[4]["power_w"] == "650"
    assert len(read_trace(path)) == 9
    fig = derive_trial(path, PHASES)
    assert fig.available and len(fig.gpus) == 1
    g = fig.gpus[0]
    assert (g.idle_bytes, g.post_load_bytes, g.peak_bytes, g.peak_process_bytes) == (
        1 * GIB, 40 * GIB, 45 * GIB, 44 * GIB)
    assert (g.after_stop_bytes, g.release_s) == (1 * GIB, 1.5)
    assert (g.throttled_s, g.throttle_reasons) == (2.0, ["sw_power_cap", "sw_thermal_slowdown"])
    assert (g.mean_sm_clock_mhz, g.mean_power_w, g.mean_util_gpu_pct, g.max_temperature_c) == (
        1700.0, 650.0, 90.0, 83.0)
    assert fig.released is True
    assert fig.to_dict()["totals"] == {"idle_bytes": GIB, "post_load_bytes": 40 * GIB,
                                       "peak_bytes": 45 * GIB, "after_stop_bytes": GIB}
    base = derive_trial(run_trial(tmp_path, "baseline", peak_gib=42.5), PHASES)
    assert draft_vram_cost(fig, base) == int(2.5 * GIB)


def test_memory_never_released_in_the_trace(tmp_path):
    s = Script(tmp_path, "leak")
    s.at(1, 1)
    s.at(2.5, 20, mine_gib=19)
    s.at(8.5, 20)  # a worker kept its memory
    s.sampler.stop()
    g = derive_trial(s.path, PHASES).gpus[0]
    assert (g.release_s, g.after_stop_bytes, g.post_load_bytes) == (None, 20 * GIB, 20 * GIB)
    assert derive_trial(s.path, PHASES).released is False


def test_threaded_sampler_with_scripted_gpus(tmp_path):
    nvml = ScriptedNvml([ScriptedGpu(memory_used_bytes=5 * GIB), ScriptedGpu(util_gpu_pct=7)])
    path = tmp_path / "t.csv"
    with GpuSampler(path, rate_hz=100, nvml=lambda: nvml, gpus=[1]) as sampler:
        time.sleep(0.3)
    res = sampler.result()
    assert res.available and res.samples >= 3
    rows = read_trace(path)
    assert {r.gpu for r in rows} == {1} and all(r.util_gpu_pct == 7 for r in rows)
    assert [r.t_ns for r in rows] == sorted(r.t_ns for r in rows)
    assert all(r.process_used_bytes is None for r in rows)  # no pids set: blank
    assert nvml.initialised == 0
    with pytest.raises(ValueError):
        GpuSampler(path, rate_hz=0)


def test_sampling_error_stops_the_trace_with_a_note(tmp_path):
    nvml = ScriptedNvml()
    path = tmp_path / "t.csv"
    sampler = GpuSampler(path, nvml=lambda: nvml)
    assert sampler.open() and sampler.sample_once()
    nvml.gpus.clear()  # the GPU fell off the bus
    assert sampler.sample_once() is False
    res = sampler.stop()
    assert (res.available, res.samples) == (True, 1)
    assert note_path(path).read_text().startswith("sampling stopped after 1 samples: ")


def test_process_tree_follows_children():
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert {os.getpid(), child.pid} <= process_tree([os.getpid()])
        assert os.getppid() not in process_tree([os.getpid()])
    finally:
        child.kill()
        child.wait()


# -- checks ----------------------------------------------------------------------------------


def test_other_processes_and_busy_gpus_fail():
    nvml = ScriptedNvml([ScriptedGpu(processes={ABSENT_PID: 2 * GIB}, util_gpu_pct=55),
                         ScriptedGpu()])
    with Nvml(nvml) as nv:
        procs = other_gpu_processes(nv)
        assert procs.status == "fail"
        assert procs.message.startswith(f"other processes hold GPU memory: ? (pid {ABSENT_PID}, "
                                        "GPU 0, 2.00 GiB)")
        assert other_gpu_processes(nv, own_pids=[ABSENT_PID]).status == "ok"
        busy = gpu_busy(nv)
        assert (busy.status, busy.message) == ("fail", "GPUs are busy before the trial: GPU 0 "
                                                       "at 55 %")
        assert gpu_busy(nv, max_util_pct=60).status == "ok"


def test_a_busy_gpu_is_given_time_to_fall_idle():
    """NVML's utilization trails the work: a GPU that finishes a stopped server's kernels reads
    busy for a moment (23 % on an H200, right after a vLLM server stopped). The trial's check
    polls for ``settle_s`` and fails only when the GPU stays busy."""
    gpu = ScriptedGpu(util_gpu_pct=23)
    now = [0.0]
    readings = iter([23, 15, 4])

    def sleep(s: float) -> None:  # the scripted GPU winds down, one reading per poll
        now[0] += s
        gpu.util_gpu_pct = next(readings, 4)

    with Nvml(ScriptedNvml([gpu])) as nv:
        ok = gpu_busy(nv, settle_s=5.0, poll_s=0.5, clock=lambda: now[0], sleep=sleep)
        assert (ok.status, ok.message) == ("ok", "every GPU is at or below 10 % utilization "
                                                 "(after 1.5 s: GPU 0 at 23 % at first)")
        assert ok.details["first_util_gpu_pct"] == {0: 23} and ok.details["waited_s"] == 1.5
        gpu.util_gpu_pct, now[0] = 40, 0.0
        readings = iter([40] * 100)
        busy = gpu_busy(nv, settle_s=5.0, poll_s=0.5, clock=lambda: now[0], sleep=sleep)
        assert (busy.status, busy.message) == ("fail", "GPUs are busy before the trial: GPU 0 "
                                                       "at 40 % (still after 5 s)")
        assert gpu_busy(nv).message == "GPUs are busy before the trial: GPU 0 at 40 %"


def test_clocks_and_power_off_stock():
    nvml = ScriptedNvml([ScriptedGpu(app_clocks_mhz=(1500, 3201), power_limit_mw=450_000,
                                     persistence=False)])
    with Nvml(nvml) as nv:
        got = {c.id: c for c in clocks_and_power(nv)}
    assert got["clocks"].status == "fail"
    assert got["clocks"].message == ("clocks are not at stock: GPU 0 SM application clock "
                                     "1500 MHz (stock 1980)")
    assert got["power-limit"].message == ("power limit is not at its default: GPU 0 power "
                                          "limit 450 W, lowered from 700 W")
    assert "nvidia-smi -i N -pl" in (got["power-limit"].action or "")
    assert got["persistence-mode"].status == "warn"
    with Nvml(ScriptedNvml()) as nv:
        assert [c.status for c in clocks_and_power(nv)] == ["ok", "ok"]
    with Nvml(ScriptedNvml([ScriptedGpu(throttle_mask=0x2)])) as nv:  # nvidia-smi -lgc
        locked = clocks_and_power(nv)[0]
    assert locked.message == ("clocks are not at stock: GPU 0 clocks are held by a user "
                              "setting (locked or application clocks)")


def test_before_trial_without_gpu_is_one_info():
    got = before_trial(nvml=lambda: ScriptedNvml(fail_init="NVML Shared Library Not Found"))
    assert [(c.id, c.status, c.message) for c in got] == [
        ("gpu", "info", "no GPU: no NVIDIA driver or GPU (NVML Shared Library Not Found)")]
    assert [c.status for c in before_trial(nvml=ScriptedNvml)] == ["ok", "ok", "ok", "ok"]


def test_vram_released_after_a_wait():
    gpu = ScriptedGpu(memory_used_bytes=30 * GIB)
    nvml = ScriptedNvml([gpu])
    clock = [0.0]

    def sleep(s: float) -> None:  # the workers exit after 3 s
        clock[0] += s
        if clock[0] >= 3:
            gpu.memory_used_bytes = GIB

    got = wait_vram_released({0: GIB}, timeout_s=10, poll_s=1, nvml=lambda: nvml, sleep=sleep,
                             clock=lambda: clock[0])
    assert (got.status, got.details["waited_s"]) == ("ok", 3.0)
    assert got.message == "GPU memory back to idle 3.0 s after the stop"


def test_vram_held_by_a_leftover_worker_names_it():
    nvml = ScriptedNvml([ScriptedGpu(memory_used_bytes=20 * GIB,
                                     processes={ABSENT_PID: 19 * GIB})])
    clock = [0.0]

    def sleep(s: float) -> None:
        clock[0] += s

    got = wait_vram_released({0: GIB}, timeout_s=5, poll_s=1, nvml=lambda: nvml, sleep=sleep,
                             clock=lambda: clock[0])
    assert got.status == "fail"
    assert got.message == (f"GPU memory not back to idle 5 s after the server stopped: GPU 0 "
                           f"20.00 GiB (idle 1.00 GiB); held by ? (pid {ABSENT_PID}, GPU 0, "
                           "19.00 GiB)")
    assert got.details["processes"] == [{"gpu": 0, "pid": ABSENT_PID, "name": None,
                                         "used_bytes": 19 * GIB}]
    no_gpu = wait_vram_released({0: 0}, nvml=lambda: ScriptedNvml(fail_init="x"))
    assert (no_gpu.status, no_gpu.message) == ("info", "no GPU: no NVIDIA driver or GPU (x)")


# -- CUDA_VISIBLE_DEVICES: the GPUs an engine can see are the ones watched -------------------


def _uuid(i: int) -> str:
    return f"GPU-{i}{i}{i}{i}aaaa-0000-0000-0000-00000000000{i}"


def test_visible_indices_follow_cuda_rules():
    uuid = {i: _uuid(i) for i in range(3)}.get
    assert visible_indices(None, 3, uuid) == [0, 1, 2]
    assert visible_indices("", 3, uuid) == []
    assert visible_indices("2,0", 3, uuid) == [2, 0]
    assert visible_indices("1,7,0", 3, uuid) == [1]  # CUDA stops at the first bad entry
    assert visible_indices("GPU-2222,GPU-0000aaaa", 3, uuid) == [2, 0]  # unique prefixes
    assert visible_indices("GPU-", 3, uuid) == []  # a prefix of every UUID names none
    assert visible_indices("MIG-GPU-1111/1/0", 3, uuid) == []  # MIG is not resolved
    assert visible_indices("0,0", 3, uuid) == [0]


def test_scoped_sampler_checks_and_release_watch_only_the_visible_gpu(tmp_path, monkeypatch):
    busy = ScriptedGpu(memory_used_bytes=60 * GIB, processes={ABSENT_PID: 59 * GIB},
                       util_gpu_pct=99, uuid=_uuid(0))
    free = ScriptedGpu(memory_used_bytes=1 * GIB, uuid=_uuid(1))
    nvml = ScriptedNvml([busy, free])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _uuid(1)[:12])  # the other lane holds GPU 0
    checks = {c.id: c for c in before_trial(nvml=lambda: nvml)}
    assert checks["gpu-processes"].status == "ok" and checks["gpu-idle"].status == "ok"
    assert memory_used_now(nvml=lambda: nvml) == {1: 1 * GIB}
    with GpuSampler(tmp_path / "t.csv", nvml=lambda: nvml) as sampler:
        sampler.sample_once()
    assert {r.gpu for r in read_trace(tmp_path / "t.csv")} == {1}
    with Nvml(nvml) as nv:
        assert nv.indices() == [1]
    assert [g.index for g in read_gpus(lambda: nvml).gpus] == [1]  # the thermal gate reads this
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    checks = {c.id: c for c in before_trial(nvml=lambda: nvml)}
    assert checks["gpu-processes"].status == "fail" and checks["gpu-idle"].status == "fail"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert memory_used_now(nvml=lambda: nvml) == {0: 60 * GIB, 1: 1 * GIB}
