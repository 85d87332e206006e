"""``crossbench doctor``: exit codes and texts for scripted machine states (NVML stand-in,
fake PATH, install list and process list), plus one run against this host's real state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from standins.nvml import ScriptedGpu, ScriptedNvml

from crossbench.cli import doctor_cmd
from crossbench.cli.doctor_cmd import engine_check, render, run_doctor
from crossbench.cli.main import cli
from crossbench.errors import UserError

BUILD = {"pin": "llama-cpp-python==0.3.36", "variant": "cuda-sm90", "build_number": 11312,
         "binary": "/cache/engines/llama-cpp-python-0.3.36-cuda-sm90/build/bin/llama-server"}


def doctor(nvml: ScriptedNvml, **over: Any):  # type: ignore[no-untyped-def]
    seams: dict[str, Any] = {"which": lambda _: None, "installs": lambda: [BUILD],
                             "engines_running": lambda: [], "gpu_evidence": lambda: None}
    seams.update(over)
    return run_doctor("llama-server", nvml=lambda: nvml, **seams)


def statuses(report) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {c.id: c.status for c in report.checks}


def test_clean_gpu_machine_exits_0():
    r = doctor(ScriptedNvml([ScriptedGpu(), ScriptedGpu()]))
    assert statuses(r) == {"engine": "ok", "engine-processes": "ok", "driver": "ok",
                           "gpu-processes": "ok", "gpu-idle": "ok", "clocks": "ok",
                           "power-limit": "ok"}
    assert r.exit_code == 0
    assert render(r).splitlines()[3] == ("  ok    driver            NVIDIA driver 570.133.20 "
                                         "(CUDA 12.8), 2 GPU(s): NVIDIA H200")
    assert render(r).splitlines()[-1] == "nothing found that would confound results"


@pytest.mark.parametrize(("gpu", "failing"), [
    (ScriptedGpu(processes={4_194_301: 10 * 1024**3}), "gpu-processes"),
    (ScriptedGpu(util_gpu_pct=97), "gpu-idle"),
    (ScriptedGpu(app_clocks_mhz=(1410, 3201)), "clocks"),
    (ScriptedGpu(power_limit_mw=400_000), "power-limit"),
])
def test_a_confounding_gpu_state_exits_2(gpu, failing):
    r = doctor(ScriptedNvml([gpu]))
    assert [c.id for c in r.failures] == [failing]
    assert r.exit_code == 2
    assert render(r).splitlines()[-1] == "1 problem(s) would confound results (exit 2)"


def test_persistence_mode_off_only_warns():
    r = doctor(ScriptedNvml([ScriptedGpu(persistence=False)]))
    assert statuses(r)["persistence-mode"] == "warn" and r.exit_code == 0


def test_no_gpu_says_so_and_checks_the_rest():
    no_gpu = ScriptedNvml(fail_init="NVML Shared Library Not Found")
    r = doctor(no_gpu)
    assert statuses(r) == {"engine": "ok", "engine-processes": "ok", "gpu": "info"}
    assert r.exit_code == 0
    assert r.checks[-1].message == ("no GPU: no NVIDIA driver or GPU (NVML Shared Library Not "
                                    "Found); GPU checks skipped")
    # a GPU that is there but unusable (driver mismatch) would confound: exit 2
    broken = doctor(no_gpu, gpu_evidence=lambda: "/dev/nvidia0 exists")
    assert statuses(broken)["driver"] == "fail" and broken.exit_code == 2
    # other inference servers on the host compete even without a GPU
    busy = doctor(no_gpu, engines_running=lambda: [(4242, "llama-server")])
    assert [c.id for c in busy.failures] == ["engine-processes"]
    assert "llama-server (pid 4242)" in busy.failures[0].message


def test_engine_binary_lookup():
    assert engine_check("llama-server", lambda _: None, lambda: [BUILD]).message == (
        f"llama-server llama-cpp-python==0.3.36 (cuda-sm90) at {BUILD['binary']}")
    on_path = engine_check("llama-server", lambda _: "/usr/bin/llama-server", lambda: [])
    assert (on_path.status, on_path.message) == ("ok", "llama-server on PATH: "
                                                       "/usr/bin/llama-server")
    missing = engine_check("llama-server", lambda _: None, lambda: [])
    assert missing.status == "fail"
    assert missing.action is not None
    assert missing.action.startswith("run `crossbench engines install llama.cpp`")
    assert doctor(ScriptedNvml(), installs=lambda: []).exit_code == 2
    assert engine_check("vllm", lambda _: "/venv/bin/vllm").status == "ok"
    with pytest.raises(UserError, match="unknown engine 'sglang'"):
        engine_check("sglang")


def patch_machine(monkeypatch, nvml: ScriptedNvml) -> None:
    monkeypatch.setattr(doctor_cmd, "NVML_PROVIDER", lambda: nvml)
    monkeypatch.setattr(doctor_cmd, "_llama_server_installs", lambda: [BUILD])
    monkeypatch.setattr(doctor_cmd, "_other_engines", lambda: [])
    monkeypatch.setattr(doctor_cmd, "_gpu_evidence", lambda: None)


def test_cli_exit_0_on_a_machine_without_gpu(monkeypatch):
    patch_machine(monkeypatch, ScriptedNvml(fail_init="NVML Shared Library Not Found"))
    r = CliRunner().invoke(cli, ["doctor"])
    assert r.exit_code == 0
    assert r.stdout == (
        "crossbench doctor (engine llama-server)\n"
        f"  ok    engine            llama-server llama-cpp-python==0.3.36 (cuda-sm90) at "
        f"{BUILD['binary']}\n"
        "  ok    engine-processes  no other inference server runs here\n"
        "  info  gpu               no GPU: no NVIDIA driver or GPU (NVML Shared Library Not "
        "Found); GPU checks skipped\n"
        "nothing found that would confound results\n")


def test_cli_json_exit_2_with_lowered_power_limit(monkeypatch):
    patch_machine(monkeypatch, ScriptedNvml([ScriptedGpu(power_limit_mw=450_000)]))
    r = CliRunner().invoke(cli, ["doctor", "--json"])
    assert r.exit_code == 2
    data = json.loads(r.stdout)
    assert data["exit_code"] == 2
    power = next(c for c in data["checks"] if c["id"] == "power-limit")
    assert (power["status"], power["message"]) == (
        "fail", "power limit is not at its default: GPU 0 power limit 450 W, lowered from "
                "700 W")


def test_cli_refuses_an_unknown_engine():
    r = CliRunner().invoke(cli, ["doctor", "--engine", "sglang"])
    assert r.exit_code == 2


def test_doctor_on_this_host_runs_every_check():
    from crossbench.host import gpu_names

    r = run_doctor()
    ids = [c.id for c in r.checks]
    assert ids[:2] == ["engine", "engine-processes"]
    if not gpu_names():
        assert ids[2:] == ["gpu"] and r.checks[2].status == "info"
    assert r.exit_code == (2 if r.failures else 0)
