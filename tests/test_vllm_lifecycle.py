"""The vLLM adapter's lifecycle against crossbench's stand-in ``vllm serve`` (not vLLM).

The stand-in accepts the adapter's argv, logs with vLLM's format strings, streams several
tokens per chunk under speculation and serves vLLM-format /metrics whose counters match what
it streamed; with synthetic rates its acceptance follows them, so the suite must recover them.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from standins.vllm import write_launcher

from crossbench.analysis import acceptance
from crossbench.engines import registry
from crossbench.engines.process import session_processes
from crossbench.engines.prometheus import parse_samples
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import RunError, UserError
from crossbench.load.client import ClientConfig, ConcurrencyMode, run_load_sync
from crossbench.load.workloads import Prompt, RequestSpec
from crossbench.runner.vllm_check import run_check

PREFIX = registry.spec_metric_prefix("vllm")
FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0")
MODEL = "Qwen/Qwen3-8B"

Launcher = Callable[..., Path]


@pytest.fixture
def standin(tmp_path: Path) -> Launcher:
    """Factory of stand-in launchers usable as a config's ``binary``."""
    def make(*args: str, name: str = "vllm") -> Path:
        return write_launcher(tmp_path / name, *args)
    return make


def create(tmp_path: Path, binary: Path, **config: Any) -> VllmServer:
    srv = registry.create("vllm", {"binary": str(binary), "model": MODEL, **config},
                          tmp_path / "server.log")
    assert isinstance(srv, VllmServer)
    return srv


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def post(url: str, body: dict[str, Any]) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        data: bytes = r.read()
        return data


def test_full_lifecycle_recovers_synthetic_rates(tmp_path: Path, standin: Launcher) -> None:
    rates = [0.9, 0.6, 0.3]
    srv = create(tmp_path, standin(*FAST, "--standin-startup-s", "0.3"), seed=7,
                 data_parallel_size=2,
                 spec={"type": "draft_model", "draft_model": "Qwen/Qwen3-0.6B",
                       "synth_rates": rates})
    srv.validate()
    ident = srv.identity()
    assert ident.version == "0.33.0+crossbench.standin" and ident.extra["standin"] is True
    srv.start()
    try:
        srv.wait_ready(timeout_s=30)
        props = srv.props()
        assert props["standin"] is True and props["served_models"] == [MODEL]
        facts = props["startup"]
        assert facts["version"] == "0.33.0+crossbench.standin"
        assert facts["model_runner"] == "V2" and facts["kv_cache_tokens"] == 81_920
        assert "draft_model" in facts["speculative_config"]
        before = srv.scrape()
        records: list[dict[str, Any]] = []
        cfg = ClientConfig(base_url=srv.base_url, model=srv.served_model_name, max_tokens=400,
                           seed=1, extra_body={"stream_options": {
                               "include_usage": True, "continuous_usage_stats": True}})
        reqs = [RequestSpec(Prompt(f"p{i}", "test", f"prompt number {i}", None), i)
                for i in range(6)]
        stats = run_load_sync(cfg, reqs, ConcurrencyMode(concurrency=3), records.append)
        after = srv.scrape()
    finally:
        srv.stop()
    assert stats.n_ok == 6, [r["error"] for r in records]
    for r in records:
        assert r["usage"]["completion_tokens"] == 400
        assert sum(n for _, n in r["chunks"]) == 400  # tokens per chunk from usage deltas
        assert max(n for _, n in r["chunks"]) == len(rates) + 1  # several tokens per chunk
    d = acceptance.counter_delta(before.samples, after.samples, PREFIX)
    for engine in ("0", "1"):  # both data-parallel engines drafted; the delta sums them
        key = f'{PREFIX}num_drafts_total{{engine="{engine}",model_name="{MODEL}"}}'
        assert after.samples[key] > 0
    steps = sum(r["n_chunks"] - 1 for r in records)  # chunks after the first are steps
    assert 0 <= steps - d.drafts <= len(records)  # at most one draft-less step per request
    assert d.draft_tokens == 3 * d.drafts
    assert 6 + d.drafts + d.accepted >= 6 * 400  # tokens: prefill + (accepted + bonus)/step
    acc = acceptance.compute(d, records)
    assert d.drafts >= 700
    assert acc.per_position == pytest.approx(rates, abs=0.05)
    assert acc.mean_acceptance_length == pytest.approx(1 + sum(rates), abs=0.1)
    assert not [c for c in acceptance.integrity(acc, d, 3, True)
                if c.name in ("accepted_le_drafted", "mal_le_n_plus_1", "per_position_consistent")
                and not c.passed]
    assert srv.stop_report["leftover"] == [] and srv.stop_report["gpu"].startswith("no GPU")


def test_per_request_metrics_match_the_counters(tmp_path: Path, standin: Launcher) -> None:
    srv = create(tmp_path, standin(*FAST), per_request_spec_decode_metrics="detailed",
                 spec={"type": "ngram", "n": 4, "synth_len": 2.5})
    with srv:
        before = parse_samples(srv.scrape().text)
        whole = json.loads(post(srv.base_url + "/v1/completions",
                                {"model": MODEL, "prompt": "a b c", "max_tokens": 64}))
        streamed = post(srv.base_url + "/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64,
            "stream": True, "stream_options": {"include_usage": True}}).decode()
        after = parse_samples(srv.scrape().text)
    events = [json.loads(e[6:]) for e in streamed.split("\n\n") if e.startswith("data: {")]
    final = events[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 64
    assert streamed.rstrip().endswith("data: [DONE]")
    per = [whole["metrics"]["speculative_decoding"], final["metrics"]["speculative_decoding"]]
    d = acceptance.counter_delta(before, after, PREFIX)
    assert d.drafts == sum(p["num_spec_steps"] for p in per)
    assert d.draft_tokens == sum(p["num_draft_tokens"] for p in per)
    assert d.accepted == sum(p["num_accepted_draft_tokens"] for p in per)
    assert per[0]["per_step_accepted"] and len(per[0]["acceptance_histogram"]) == 5
    # synth_len 2.5 with n=4 is vLLM's minimum-variance schedule [1, 0.5, 0, 0]
    assert set(per[0]["per_step_accepted"]) <= {1, 2}


def test_wrong_model_name_gets_vllms_404(tmp_path: Path, standin: Launcher) -> None:
    srv = create(tmp_path, standin(*FAST))
    with srv:
        records: list[dict[str, Any]] = []
        cfg = ClientConfig(base_url=srv.base_url, max_tokens=4)  # model "default"
        run_load_sync(cfg, [RequestSpec(Prompt("p", "t", "x", None), 0)],
                      ConcurrencyMode(), records.append)
    assert records[0]["status"] == "error"
    assert records[0]["error"] == "HTTP 404: The model `default` does not exist."


def test_stop_kills_a_child_that_outlived_its_parent(tmp_path: Path,
                                                     standin: Launcher) -> None:
    pidfile = tmp_path / "orphan.pid"
    srv = create(tmp_path, standin(*FAST, "--standin-spawn-orphan", str(pidfile)),
                 stop_timeout_s=1)
    srv.start()
    try:
        srv.wait_ready(timeout_s=30)
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "the stand-in did not spawn its child"
            time.sleep(0.05)
        orphan = int(pidfile.read_text())
        sid = srv.pid
        assert sid is not None and alive(orphan)
        assert orphan in {p[0] for p in session_processes(sid)}
        assert os.getpgid(orphan) != sid  # killpg of the server's group would miss it
    finally:
        srv.stop()
    assert not alive(orphan), "the child that outlived the server is still running"
    assert not [p for p in session_processes(sid) if p[2] not in ("Z", "X")]
    assert any(str(orphan) in s for s in srv.stop_report["sigkill"])  # it ignored SIGTERM
    assert srv.stop_report["leftover"] == []
    srv.stop()  # a second stop is a no-op


def test_stop_escalates_to_sigkill(tmp_path: Path, standin: Launcher) -> None:
    srv = create(tmp_path, standin(*FAST, "--standin-ignore-sigterm"), stop_timeout_s=0.5)
    with srv:
        sid = srv.pid
        assert sid is not None
    assert not alive(sid)
    assert any(str(sid) in s for s in srv.stop_report["sigkill"])


def test_validate_checks_the_reported_release(tmp_path: Path, standin: Launcher) -> None:
    old = standin(*FAST, "--standin-version", "0.10.2", name="vllm-0.10.2")
    with pytest.raises(UserError) as e:
        create(tmp_path, old, spec={"type": "ngram", "n": 2}).validate()
    assert e.value.message.startswith("version: the config pins vLLM 0.33.0")
    assert "set version: 0.10.2" in (e.value.hint or "")
    ok = create(tmp_path, old, version="0.10.2", spec={"type": "medusa", "n": 2,
                                                       "draft_model": "a/medusa"})
    ok.validate()
    assert ok.identity().extra == {**ok.identity().extra, "standin": True, "release": "0.10.2"}


def test_a_server_that_dies_at_startup_fails_fast(tmp_path: Path, standin: Launcher) -> None:
    srv = create(tmp_path, standin(*FAST), env={"CROSSBENCH_STANDIN_ARGS": "--no-such-flag"})
    srv.start()
    t0 = time.monotonic()
    with pytest.raises(RunError) as e:
        srv.wait_ready(timeout_s=60)
    assert time.monotonic() - t0 < 20
    assert "unrecognized arguments: --no-such-flag" in e.value.message
    assert "flag is unknown" in (e.value.hint or "")


def test_missing_local_model_is_a_user_error(tmp_path: Path, standin: Launcher) -> None:
    with pytest.raises(UserError, match="model: /nonexistent/qwen does not exist"):
        create(tmp_path, standin(), model="/nonexistent/qwen").validate()


def test_sigterm_to_the_group_is_what_stops_a_polite_server(tmp_path: Path,
                                                            standin: Launcher) -> None:
    srv = create(tmp_path, standin(*FAST))
    with srv:
        pid = srv.pid
        assert pid is not None
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
    assert srv.stop_report["sigkill"] == []
    assert "Shutting down (stand-in)" in (tmp_path / "server.log").read_text()


def test_the_one_command_check_passes_on_the_standin(tmp_path: Path, standin: Launcher) -> None:
    lines: list[str] = []
    failed = run_check(str(standin(*FAST)), MODEL, None, tmp_path / "check", requests=16,
                       max_tokens=256, say=lines.append)
    assert failed == 0, lines
    assert [ln.split(":")[0] for ln in lines] == [
        "ok   profile", "ok   config", "ok   ready", "ok   startup log", "ok   streaming",
        "ok   acceptance", "ok   per-request metrics", "ok   stop"]
    assert "STAND-IN, not vLLM" in lines[0]
    assert (tmp_path / "check" / "after.prom").read_text().count("vllm:spec_decode_") > 4


def test_the_check_fails_loudly_when_acceptance_is_off(tmp_path: Path,
                                                       standin: Launcher) -> None:
    # a stand-in whose synthetic rates are ignored (acceptance 0.5^(k+1)) must fail the check
    broken = standin(*FAST, "--standin-accept", "0.5", "--standin-ignore-synthetic")
    lines: list[str] = []
    failed = run_check(str(broken), MODEL, None, tmp_path / "check", requests=16,
                       max_tokens=256, say=lines.append)
    assert failed == 1
    assert [ln.split(":")[0] for ln in lines if ln.startswith("FAIL")] == ["FAIL acceptance"]


def test_a_crossbench_run_on_the_standin(tmp_path: Path, standin: Launcher) -> None:
    """`crossbench run` with engine vllm: records, metrics files and acceptance from them.

    No ``served_model_name`` is set: the runner must send the adapter's (vLLM 404s any other
    name), and ask for usage on every chunk (tokens per chunk under speculation).
    """
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    cfg = RunConfig.model_validate({
        "engine": "vllm", "trials": 1, "load": {"requests": 4, "max_tokens": 96},
        "engine_config": {"binary": str(standin(*FAST)), "model": MODEL,
                          "per_request_spec_decode_metrics": "summary",
                          "spec": {"type": "ngram", "n": 3, "synth_rates": [0.9, 0.6, 0.3]}}})
    summary = run(cfg, tmp_path / "run")
    checks = {c["name"]: c["passed"] for c in summary["integrity"]["checks"]}
    assert checks["per_request_sums_equal_counters"] is True  # per-request = counters
    assert summary["acceptance"]["requests_with_drafts"] == 4
    assert summary["requests"]["ok"] == 4
    acc = summary["acceptance"]
    assert acc["source"] == "metrics" and acc["drafts"] > 100
    assert len(acc["per_position"]) == 3
    for got, want in zip(acc["per_position"], (0.9, 0.6, 0.3), strict=True):
        assert abs(got - want) < 0.12, acc["per_position"]
    assert summary["integrity"]["passed"], summary["integrity"]
    records = [json.loads(ln) for ln in (tmp_path / "run" / "requests.jsonl").open()]
    assert any(c[1] > 1 for r in records for c in r["chunks"])  # several tokens per chunk
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["engine"]["standin"] is True
    assert manifest["engine"]["spec_metric_prefix"] == PREFIX
    assert "--speculative-config" in manifest["trials"][0]["argv"]


def test_server_decode_rate_from_vllms_request_histograms(tmp_path: Path,
                                                           standin: Launcher) -> None:
    """The server's own decode rate comes from vLLM's per-request histograms
    (``request_generation_tokens``, ``request_decode_time_seconds``: first token to last), and
    the client's pooled rate, over the same window, agrees with it. Known truth: with a 20 ms
    step and no speculation the stand-in decodes at most 50 tokens a second (a sleep is never
    shorter; a loaded machine makes it longer, so only the bound is asserted), and it counts
    exactly the tokens it sent."""
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    cfg = RunConfig.model_validate({
        "engine": "vllm", "trials": 2, "load": {"requests": 3, "max_tokens": 40, "warmup": 1},
        "engine_config": {"binary": str(standin("--standin-step-ms", "20",
                                                "--standin-prefill-ms", "0")),
                          "model": MODEL}})
    summary = run(cfg, tmp_path / "run")
    th = summary["throughput"]
    assert th["server_rate_source"] == ("vllm:request_generation_tokens, "
                                        "vllm:request_decode_time_seconds")
    assert 0 < th["server_pooled_tok_s"] <= 50.0 * 1.001
    assert abs(th["client_vs_server"]) < 0.01, th
    for trial in summary["per_trial"]:
        assert 0 < trial["throughput"]["server_pooled_tok_s"] <= 50.0 * 1.001
    # warm-up requests ran before the trial's first scrape: 3 measured requests a trial,
    # 39 tokens after the first each
    before = parse_samples((tmp_path / "run" / "metrics" / "t0-before.prom").read_text())
    after = parse_samples((tmp_path / "run" / "metrics" / "t0-after.prom").read_text())
    from crossbench.analysis.summary import server_decode

    tokens, seconds = server_decode(before, after, registry.decode_histograms("vllm") or ("", ""))
    assert tokens == 3 * 39
    assert seconds >= 3 * 39 * 0.020 * 0.999


def test_version_is_asked_once_per_executable(tmp_path: Path) -> None:
    """``vllm --version`` imports vLLM (about 20 s on the H200 host): a matrix makes a server
    object per trial, so the answer is cached per executable, and asked again once the
    executable changes."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho run >> {calls}\necho 0.26.0\n")
    fake.chmod(0o755)
    for _ in range(3):
        assert create(tmp_path, fake).version_text() == "0.26.0"
    assert calls.read_text().count("run") == 1
    st = fake.stat()
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # reinstalled
    assert create(tmp_path, fake).version_text() == "0.26.0"
    assert calls.read_text().count("run") == 2
