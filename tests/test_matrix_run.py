"""Running matrices on the real CPU llama-server: end to end, kill -9 and --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from crossbench.errors import UserError
from crossbench.runner.matrix_run import Tick, matrix_status, read_journal, run_matrix
from crossbench.runner.single import other_engine_processes
from crossbench.store.atomic import read_jsonl

pytestmark = pytest.mark.server


def small_matrix(tmp_path: Path, binary: Path, requests: int = 2, trials: int = 2,
                 **extra: object) -> Path:
    data = {
        "schema_version": 1,
        "study": {"name": "small"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(binary)}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                   "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
        "server": {"ctx_size": 1024},
        "load": {"requests": requests, "warmup": 1, "max_tokens": 16},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "draft-simple", "draft": "d", "n": 2,
                  "synth_rates": [0.8, 0.5]}],
        "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:code"]},
        "trials": trials,
        **extra,
    }
    p = tmp_path / "small.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_matrix_end_to_end(llama_server, fixture_models, tmp_path):
    m = small_matrix(tmp_path, llama_server, thermal_gate={"max_temp_c": 70},
                     load={"requests": 2, "warmup": 1, "max_tokens": 16,
                           "warmup_max_tokens": 4})
    out = tmp_path / "run"
    ticks: list[Tick] = []
    s = run_matrix(m, out, on_tick=ticks.append)
    assert s["totals"] == {"done": 4, "failed": 0, "missing": 0}
    assert [(t.index, t.ended) for t in ticks] == [(i, e) for i in range(4) for e in (0, 1)]
    assert all(t.status == "ok" for t in ticks if t.ended)
    assert ticks[-1].eta_s == 0 and ticks[-1].last_tok_s and ticks[-1].last_tok_s > 0
    by_id = {c["id"]: c for c in s["cells"]}
    synth = by_id["llama/t/synth/n2/builtin-code/c1"]
    assert synth["baseline"] == "llama/t/none/builtin-code/c1"
    assert synth["integrity_passed"] is True
    assert 0 < synth["draft_acceptance_rate"] <= 1
    assert matrix_status(out)["totals"] == s["totals"]
    gates = [r["thermal_gate"] for r in read_journal(out).values()]
    assert len(gates) == 4 and all(g["checked"] is False and "NVIDIA" in g["reason"]
                                   for g in gates)  # this host has no GPU: recorded, ungated
    man = json.loads((out / "cells" / "llama__t__none__builtin-code__c1" / "manifest.json")
                     .read_text())
    recs = read_jsonl(out / "cells" / "llama__t__none__builtin-code__c1" / "requests.jsonl")
    assert {r["max_tokens"] for r in recs if r["warmup"]} == {4}  # short warm-up requests
    assert {r["usage"]["completion_tokens"] for r in recs if not r["warmup"]} == {16}
    # provenance per trial: the recorded hash is the fixture file's
    import hashlib

    prov = man["trials"][0]["provenance"]
    target = fixture_models[0]
    assert prov["models"]["model"]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest()
    binary = Path(prov["engine"]["binary"])
    assert binary.resolve() == llama_server.resolve()
    assert prov["engine"]["sha256"][binary.name] == hashlib.sha256(
        binary.read_bytes()).hexdigest()
    # telemetry on a host without a GPU: an empty trace with its reason, the run goes on
    tele = man["trials"][0]["telemetry"]
    assert tele["available"] is False
    assert "NVML" in tele["reason"] or "NVIDIA" in tele["reason"]
    cell = out / "cells" / "llama__t__none__builtin-code__c1"
    assert (cell / "telemetry" / "t0.csv").read_text().startswith("timestamp_ns,gpu,")
    phases = man["trials"][0]["phase_s"]
    assert set(phases) == {"startup", "warmup", "scrape_write", "measured", "stop", "total"}
    assert sum(v for k, v in phases.items() if k != "total") <= phases["total"]
    order = json.loads((out / "state.json").read_text())["order"]
    assert [t for _, t in order] == [0, 0, 1, 1]  # interleaved rounds
    with pytest.raises(UserError, match="already holds a matrix run"):
        run_matrix(m, out)
    m.write_text(m.read_text().replace("max_tokens: 16", "max_tokens: 17", 1))
    with pytest.raises(UserError, match="changed since"):
        run_matrix(m, out, resume=True)


def _parent(pid: int) -> int | None:
    """The parent pid of ``pid`` (None once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (zombies count as gone)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            out.add(pid)
    return out


def test_kill_9_then_resume_runs_every_trial_exactly_once(llama_server, fixture_models,
                                                          tmp_path):
    m = small_matrix(tmp_path, llama_server, requests=3, trials=3)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "crossbench", "matrix", str(m), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if len(read_journal(out)) >= 2:
            break
        time.sleep(0.05)
    # land inside the next trial: its server is up. This matrix's servers are the
    # llama-servers whose parent is the matrix (other programs on the host, e.g. a parallel
    # test run, may have theirs)
    ours: set[int] = set()
    while time.monotonic() < deadline and not ours:
        ours = {p for p, n in other_engine_processes(set()) if n == "llama-server"
                and _parent(p) == proc.pid}
        time.sleep(0.05)
    assert ours, "the matrix started no server within the time allowed"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the server died with its parent (parent-death signal)
    for _ in range(100):
        if not ours & _alive(ours):
            break
        time.sleep(0.05)
    assert not _alive(ours)
    before = len(read_journal(out))
    assert 2 <= before < 6
    r = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    journal = read_jsonl(out / "journal.jsonl")
    keys = [(j["cell"], j["trial"]) for j in journal]
    assert len(keys) == len(set(keys)) == 6
    for cell in json.loads((out / "state.json").read_text())["cells"]:
        recs = read_jsonl(out / cell["dir"] / "requests.jsonl")
        seen = [(x["trial"], x["request_index"]) for x in recs]
        assert len(seen) == len(set(seen)) == 3 * (3 + 1)  # trials x (requests + warm-up)


def test_server_crash_mid_trial_is_recorded_and_the_next_cell_runs(
        llama_server, fixture_models, tmp_path, monkeypatch):
    from crossbench.engines.llamacpp import server as server_mod

    started: list[int] = []
    real_wait = server_mod.LlamaServer.wait_ready

    def wait_ready(self, timeout_s=None):  # type: ignore[no-untyped-def]
        real_wait(self, timeout_s)
        started.append(self.pid)
        if len(started) == 1:  # the first trial's server dies once it is ready
            os.killpg(self.pid, signal.SIGKILL)

    monkeypatch.setattr(server_mod.LlamaServer, "wait_ready", wait_ready)
    m = small_matrix(tmp_path, llama_server, trials=1)
    s = run_matrix(m, tmp_path / "run")
    assert s["totals"] == {"done": 1, "failed": 1, "missing": 0}
    failed = [c for c in s["cells"] if c["failed"]]
    assert len(failed) == 1 and failed[0]["errors"][0]


def test_engine_version_constraint_is_checked_before_any_trial(llama_server, fixture_models,
                                                               tmp_path):
    """b11312 satisfies >=11312 and is refused by >=11434 before a server starts."""
    from crossbench.engines.base import EngineIdentity
    from crossbench.runner.versions import unmet

    vllm = EngineIdentity("vllm", "0.33.0", None, None, "/usr/bin/vllm")
    assert unmet(">=0.33,<0.34", vllm) is None
    assert unmet(">=0.34", vllm) == "vllm 0.33.0 (from /usr/bin/vllm) does not satisfy >=0.34"
    m = small_matrix(tmp_path, llama_server)
    m.write_text(m.read_text().replace("kind: llama-server",
                                       "kind: llama-server\n    requires: '>=11434'"))
    with pytest.raises(UserError, match=r"engines.llama.requires: llama-server 11312 .* does "
                       "not satisfy >=11434"):
        run_matrix(m, tmp_path / "run")
    assert not (tmp_path / "run").exists()
