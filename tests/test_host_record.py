"""The host side of every trial (issue 33 item 6): the runner records the CPU and its load over
the measured window the same way for every engine; the frames and the analysis's ``host_time``
carry it per trial; ``host_bound`` fires on the real vLLM and llama.cpp records of the H200
methods study for every method it should; a pair whose arms ran on different CPUs is
confounded."""

from __future__ import annotations

import json
import os
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from standins.study import Arm, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.host_time import cell_host_time
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.host import HostWindow, cpu_model

ROOT = Path(__file__).resolve().parents[1]
METHODS = ROOT / "examples" / "h200-methods"
OPTS = StatsOptions(resamples=200)
HZ = os.sysconf("SC_CLK_TCK")
HOST_KEYS = {"schema", "cpu", "cpus", "cpus_usable", "governor", "before", "after",
             "window_s", "cpu_busy_share", "steal_share", "server_cores", "client_cores",
             "busy_others"}


def _proc(root: Path, load: str, cpu: list[int], procs: dict[int, tuple[str, int]]) -> None:
    """A /proc with ``loadavg``, the ``cpu`` line of ``stat`` (user nice system idle iowait
    irq softirq steal) and each pid's ``stat`` with its user + system ticks."""
    root.mkdir(exist_ok=True)
    (root / "loadavg").write_text(load)
    (root / "stat").write_text("cpu  " + " ".join(map(str, cpu)) + "\ncpu0 1 2 3\n")
    for pid, (name, ticks) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        # pid (comm) state ppid ... utime is the 14th field, stime the 15th
        rest = ["S", "1"] + ["0"] * 9 + [str(ticks - 1), "1"] + ["0"] * 5
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(rest))


def test_the_window_reads_load_cpu_shares_and_who_used_the_cores(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    me = os.getpid()
    # 2 s window: the server (pids 10, 11) used 3 s of CPU, crossbench 1 s, "stress" 1.5 s,
    # "idle-ish" 0.2 s (under 0.25 cores); all CPUs 800 ticks, 200 idle, 40 stolen
    _proc(proc, "0.50 0.40 0.30 2/300 99\n", [100, 0, 100, 800, 0, 0, 0, 10],
          {10: ("vllm", 10), 11: ("VLLM::Worker", 5), me: ("python3", 7),
           20: ("stress", 0), 21: ("idle-ish", 0)})
    clock = iter([100.0, 102.0])
    w = HostWindow(proc, clock=lambda: next(clock))
    w.start()
    _proc(proc, "3.10 1.00 0.50 5/310 120\n",
          [100 + 500, 0, 100 + 60, 800 + 200, 0, 0, 0, 10 + 40],
          {10: ("vllm", 10 + 2 * HZ), 11: ("VLLM::Worker", 5 + HZ), me: ("python3", 7 + HZ),
           20: ("stress", int(1.5 * HZ)), 21: ("idle-ish", int(0.2 * HZ))})
    rec = w.stop({10, 11})
    assert set(rec) == HOST_KEYS
    assert rec["before"] == {"loadavg": [0.5, 0.4, 0.3], "runnable": 2}
    assert rec["after"] == {"loadavg": [3.1, 1.0, 0.5], "runnable": 5}
    assert rec["window_s"] == 2.0
    assert rec["cpu_busy_share"] == pytest.approx(1 - 200 / 800)
    assert rec["steal_share"] == pytest.approx(40 / 800)
    assert rec["server_cores"] == pytest.approx(1.5)
    assert rec["client_cores"] == pytest.approx(0.5)
    assert rec["busy_others"] == [{"pid": 20, "name": "stress", "cores": 0.75}]
    assert rec["cpu"] == cpu_model() and rec["cpus"] == os.cpu_count()


def _check_host(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        rec = e["host"]
        assert set(rec) == HOST_KEYS, e["trial"]
        assert rec["cpu"] == cpu_model() and rec["cpus"] == os.cpu_count()
        assert len(rec["before"]["loadavg"]) == 3 and len(rec["after"]["loadavg"]) == 3
        assert rec["window_s"] == pytest.approx(e["phase_s"]["measured"], abs=0.05)
        assert isinstance(rec["server_cores"], float) and rec["server_cores"] >= 0
        assert 0 <= rec["cpu_busy_share"] <= 1


def _check_clock(run_dir: Path, man: dict[str, Any]) -> None:
    """Each trial's clock anchor places its measured requests' monotonic times inside the
    trial's wall-clock start and end (``started_utc``/``ended_utc``, whole seconds)."""
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    for e in man["trials"]:
        clock = e["clock"]
        offset = clock["wall_ns"] - clock["monotonic_ns"]
        lo, hi = (datetime.fromisoformat(e[k].replace("Z", "+00:00")).timestamp() * 1e9
                  for k in ("started_utc", "ended_utc"))
        mine = [r for r in records if r["trial"] == e["trial"] and not r["warmup"]]
        assert mine
        for r in mine:
            for t in (r["t_sent_ns"], r["t_done_ns"]):
                assert lo - 1e9 <= t + offset <= hi + 1e9, (e["trial"], r["request_index"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_stand_in_engine_records_the_host_the_same_way(tmp_path: Path,
                                                             engine: str) -> None:
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    if engine == "vllm":
        from standins.vllm import write_launcher
        spec = {"type": "ngram", "n": 2}
    else:
        from standins.sglang import write_launcher  # type: ignore[no-redef]
        spec = {"type": "NGRAM", "n": 2}
    binary = write_launcher(tmp_path / engine, "--standin-step-ms", "1")
    cfg = RunConfig.model_validate({
        "engine": engine, "trials": 2, "load": {"requests": 3, "max_tokens": 16},
        "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B", "spec": spec}})
    run(cfg, tmp_path / "run")
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert len(man["trials"]) == 2
    _check_host(man["trials"])
    _check_clock(tmp_path / "run", man)


def test_the_real_llama_server_records_the_host_the_same_way(  # type: ignore[no-untyped-def]
        llama_server, fixture_models, tmp_path) -> None:
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    target, draft = fixture_models
    cfg = RunConfig.model_validate({
        "trials": 1, "load": {"requests": 2, "max_tokens": 16},
        "engine_config": {"binary": str(llama_server), "model": str(target), "ctx_size": 1024,
                          "spec": {"type": "draft-simple", "n": 2, "draft_model": str(draft)}}})
    run(cfg, tmp_path / "run")
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    _check_host(man["trials"])
    assert man["trials"][0]["host"]["server_cores"] > 0  # llama-server decoded on the CPU
    _check_clock(tmp_path / "run", man)


@pytest.fixture(scope="module")
def methods_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The H200 methods study's real records: llama.cpp (round 1) and vLLM (round 2)."""
    root = tmp_path_factory.mktemp("methods")
    out = {}
    for engine, z in (("llama", "round1/h200-methods-round1.zip"),
                      ("vllm", "round2/h200-methods-round2.zip")):
        with zipfile.ZipFile(METHODS / z) as f:
            f.extractall(root / engine)
        (data,) = (root / engine).glob("*/data")
        out[engine] = data
    return out


def _flags(run: Path) -> dict[str, tuple[float, bool]]:
    """Each pair's (GPU busy share of its speculative arm, flagged host_bound) by
    method/n/concurrency."""
    r = analyze(run, OPTS)
    busy = {c["cell"]: (c.get("host_time") or {}).get("gpu_busy_share") for c in r["cells"]}
    return {"/".join(p["cell"].split("/")[2:3] + p["cell"].split("/")[-1:]) +
            (f"/n{p['n']}" if p.get("n") else ""):
            (busy[p["cell"]], any(w["kind"] == "host_bound" for w in p["warnings"]))
            for p in r["pairs"]}


def test_host_bound_fires_for_every_vllm_method_that_waits_on_the_host(
        methods_runs: dict[str, Path]) -> None:
    flags = _flags(methods_runs["vllm"])
    # c=16: the draft and DFlash arms' GPUs were busy 8-15 %: host-bound
    assert flags["draft-a0.9/c16/n4"][1] and flags["dflash-a0.9/c16/n8"][1]
    assert flags["draft-a0.9/c16/n4"][0] < 0.2 and flags["dflash-a0.9/c16/n8"][0] < 0.2
    # c=1 n-gram: busy 64 %, but 2.98 ms host per token against the baseline's 1.24 of 6.48
    assert flags["ngram/c1/n4"] == (pytest.approx(0.64, abs=0.01), True)
    # c=1 DFlash and draft model: the host time they add is small against a plain token
    assert not flags["dflash-a0.9/c1/n8"][1] and not flags["draft-a0.9/c1/n4"][1]


def test_host_bound_fires_for_every_llama_method_that_waits_on_the_host(
        methods_runs: dict[str, Path]) -> None:
    flags = _flags(methods_runs["llama"])
    c16 = {k: v for k, v in flags.items() if "/c16" in k}
    assert len(c16) == 11  # 3 draft, 3 EAGLE-3, 4 DFlash, n-gram
    for k, (share, flagged) in c16.items():  # every method with drafts: busy under half
        assert flagged == (share < 0.5), k
    assert {k.split("/")[0] for k, v in c16.items() if v[1]} == {
        "draft-a0.9", "eagle3-a0.9", "dflash-a0.9"}
    # c=1: the draft model adds 1.6-2.4 ms of host time per token to a 5.9 ms plain token;
    # EAGLE-3 and DFlash at most 0.5 ms, n-gram none
    c1 = {k: v[1] for k, v in flags.items() if "/c1" in k and "/c16" not in k}
    assert {k for k, v in c1.items() if v} == {"draft-a0.9/c1/n2", "draft-a0.9/c1/n4",
                                               "draft-a0.9/c1/n8"}


def test_host_time_keeps_each_trial_s_host(methods_runs: dict[str, Path]) -> None:
    run = load_run(methods_runs["vllm"])
    (cell,) = [c for c in run.cells if c.id.endswith("ngram/n4/builtin-mixed/c1")]
    fig = cell_host_time(cell)
    assert fig is not None
    (trial,) = fig["per_trial"].values()
    prov = cell.manifest["trials"][0]["provenance"]["host"]
    # recorded before the host record existed: CPU from provenance, load unknown
    assert trial["host"]["cpu"] == prov["cpu"] and trial["host"]["cpus"] == prov["cpus"] == 16
    assert trial["host"]["loadavg_before"] is None


PROMPTS = [(f"p{i}", "code") for i in range(8)]
ACC = {"drafts": 400, "draft_tokens": 800, "accepted": 600, "per_position": [320, 280]}


def _two_arms(root: Path, cpus: dict[tuple[str, int], tuple[str, int]]) -> Path:
    """A baseline and a draft arm, 2 trials each; ``cpus`` gives (method, trial) the host
    (model, logical CPUs) its trial's ``host`` record names, the rest a 16-CPU Xeon."""
    study(root, PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          lambda a, p, t, o: 100.0 if a.method == "none" else 150.0, trials=2)
    for man_path in root.glob("cells/*/manifest.json"):
        man = json.loads(man_path.read_text())
        method = man["config"]["engine_config"]["spec"]["type"]
        for e in man["trials"]:
            model, n = cpus.get((method, e["trial"]), ("Intel Xeon 8480+", 16))
            e["host"] = {"cpu": model, "cpus": n, "before": {"loadavg": [1.0, 1.0, 1.0],
                                                             "runnable": 2},
                         "after": {"loadavg": [1.5, 1.1, 1.0], "runnable": 3},
                         "busy_others": []}
        man_path.write_text(json.dumps(man))
    return root


def _pair(root: Path) -> dict[str, Any]:
    (pair,) = analyze(root, OPTS)["pairs"]
    return pair


def test_a_pair_on_one_cpu_is_not_confounded_by_it(tmp_path: Path) -> None:
    pair = _pair(_two_arms(tmp_path / "s", {}))
    assert pair["verdict"] == "faster"
    assert not [f for f in pair["confounds"]["findings"] if f["rule"] == "different_cpus"]


@pytest.mark.parametrize("other", [("AMD EPYC 9654", 16), ("Intel Xeon 8480+", 8)])
def test_a_pair_whose_arms_ran_on_different_cpus_is_confounded(
        tmp_path: Path, other: tuple[str, int]) -> None:
    # the speculative arm's second trial resumed on another host (model or core count)
    pair = _pair(_two_arms(tmp_path / "s", {("draft-simple", 1): other}))
    assert pair["verdict"] == "confounded" and pair["statistical_verdict"] == "faster"
    (f,) = [f for f in pair["confounds"]["findings"] if f["rule"] == "different_cpus"]
    assert f["severity"] == "confounding"
    assert f["message"].startswith(
        f"the spec cell's trials ran on {other[0]} ({other[1]} CPUs); Intel Xeon 8480+ (16 "
        "CPUs) and the baseline cell's on Intel Xeon 8480+ (16 CPUs)"
        if other[0] == "AMD EPYC 9654" else
        "the spec cell's trials ran on Intel Xeon 8480+ (16 CPUs); Intel Xeon 8480+ (8 "
        "CPUs) and the baseline cell's on Intel Xeon 8480+ (16 CPUs)")


def test_the_frames_carry_each_trial_s_host(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    from crossbench.frames import open_run

    frames = open_run(_two_arms(tmp_path / "s", {("draft-simple", 1): ("AMD EPYC 9654", 32)}),
                      OPTS)
    t = frames.trials.sort_values(["method", "trial"]).set_index(["method", "trial"])
    assert t.loc[("draft-simple", 1), "cpu"] == "AMD EPYC 9654"
    assert t.loc[("draft-simple", 1), "cpus"] == 32 and t.loc[("none", 0), "cpus"] == 16
    assert t["loadavg_before"].tolist() == [1.0] * 4
    assert t["loadavg_after"].tolist() == [1.5] * 4
    assert t["runnable_after"].tolist() == [3] * 4
    assert t["busy_others"].tolist() == [""] * 4
    assert t["cpu_governor"].isna().all()  # not recorded here


def test_host_bound_names_the_cpu_the_load_and_other_busy_processes(tmp_path: Path) -> None:
    root = _two_arms(tmp_path / "s", {})
    for man_path in root.glob("cells/*/manifest.json"):
        man = json.loads(man_path.read_text())
        spec = man["config"]["engine_config"]["spec"]["type"] != "none"
        for e in man["trials"]:
            e["telemetry"] = {"available": True,
                              "gpus": [{"gpu": 0, "mean_util_gpu_pct": 30.0 if spec else 80.0}]}
            e["phase_s"] = {"measured": 4.0}
            if spec and e["trial"] == 1:
                e["host"]["busy_others"] = [{"pid": 7, "name": "stress", "cores": 1.5}]
        man_path.write_text(json.dumps(man))
    (w,) = [w for w in _pair(root)["warnings"] if w["kind"] == "host_bound"]
    assert ("; on Intel Xeon 8480+ (16 CPUs), 1-min load 1.00-1.50; other processes busy in "
            "1 of 2 trial(s): stress (7) 1.5: the speed") in w["message"]
