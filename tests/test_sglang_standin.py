"""``crossbench run --engine sglang`` and a matrix with ``kind: sglang``, against the
stand-in (not SGLang): every result is marked as a stand-in's."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from standins.sglang import write_launcher

from crossbench.cli.main import cli
from crossbench.runner.matrix_run import run_matrix


def test_run_engine_sglang_through_the_cli(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0",
                        "--standin-accept", "0.8")
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, [
        "run", "--engine", "sglang", "--binary", str(py), "--model", "Qwen/Qwen3-8B",
        "--spec", "NGRAM", "--n", "3", "--requests", "6", "--max-tokens", "48",
        "--trials", "2", "--seed", "1", "--set", "disable_radix_cache=true", "--json",
        "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    acc = summary["acceptance"]
    assert acc["source"] == "metrics" and acc["draft_acceptance_rate"] is None
    # alpha 0.8, n 3: true mean acceptance length 1 + 0.8 + 0.64 + 0.512 = 2.952
    assert abs(acc["mean_acceptance_length"] - 2.952) < 0.35
    assert summary["integrity"]["passed"] is True
    man = json.loads((out / "manifest.json").read_text())
    assert man["engine"]["kind"] == "sglang" and man["engine"]["standin"] is True
    assert man["engine"]["version"] == "0.5.17+crossbench.standin"
    assert man["engine"]["spec_metric_prefix"] == "sglang:spec_"
    trial = man["trials"][0]
    assert trial["argv"][1:3] == ["-m", "sglang.launch_server"]
    assert "--enable-metrics" in trial["argv"] and "--disable-radix-cache" in trial["argv"]
    assert trial["server_props"]["standin"] is True
    assert trial["server_props"]["startup"]["speculative_algorithm"] == "NGRAM"
    assert trial["stop_report"]["sigkill"] == [] and trial["stop_report"]["leftover"] == []
    assert all(t["status"] == "ok" for t in man["trials"])
    assert (out / "metrics" / "t0-after.prom").read_text().count(
        "sglang:spec_verify_calls_total{") == 1


def test_run_refuses_options_and_methods_sglang_lacks(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python")
    base = ["run", "--engine", "sglang", "--binary", str(py), "--model", "Qwen/Qwen3-8B",
            "--out", str(tmp_path / "o")]
    r = CliRunner().invoke(cli, [*base, "--spec", "draft-simple"])
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --spec 'draft-simple' is not a sglang method "
                        "(fix: use one of: none, DFLASH, EAGLE, EAGLE3, NEXTN, NGRAM, "
                        "STANDALONE)\n")
    r = CliRunner().invoke(cli, [*base, "--ctx-size", "2048"])
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --ctx-size: sglang has no ctx_size setting (fix: "
                        "drop --ctx-size, or set one of the engine's own fields with --set "
                        "FIELD=VALUE)\n")
    r = CliRunner().invoke(cli, [*base, "--spec", "EAGLE3", "--n", "3"])
    assert r.exit_code == 2
    assert r.stderr.startswith("crossbench: error: spec: EAGLE3 needs a draft model")
    assert r.stderr.endswith("(fix: fix --spec)\n")
    assert not (tmp_path / "o").exists()


def test_run_dflash_on_the_standin_with_a_local_drafter(tmp_path: Path) -> None:
    """DFLASH's argv (a block of n+1) goes through the CLI and the stand-in's parser, and the
    drafter's block size bounds n before anything starts."""
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    drafter = tmp_path / "dflash"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(
        {"architectures": ["DFlashDraftModel"], "block_size": 16,
         "dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 7}}))
    base = ["run", "--engine", "sglang", "--binary", str(py), "--model", "Qwen/Qwen3-8B",
            "--spec", "DFLASH", "--draft", str(drafter), "--requests", "3",
            "--max-tokens", "32", "--json"]
    r = CliRunner().invoke(cli, [*base, "--n", "4", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    trial = json.loads((tmp_path / "run" / "manifest.json").read_text())["trials"][0]
    argv = trial["argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    assert argv[argv.index("--speculative-dflash-block-size") + 1] == "5"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "5"
    assert "--speculative-num-steps" not in argv and "--speculative-eagle-topk" not in argv
    assert trial["server_props"]["startup"]["speculative_num_draft_tokens"] == 5
    r = CliRunner().invoke(cli, [*base, "--n", "16", "--out", str(tmp_path / "o")])
    assert r.exit_code != 0
    assert "spec.n: DFLASH drafts at most 15 tokens per step" in r.output
    assert "set n <= 15" in r.output


def test_matrix_with_kind_sglang_on_the_standin(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    matrix = {
        "schema_version": 1,
        "study": {"name": "sglang-standin", "notes": "stand-in, not SGLang"},
        "engines": {"s": {"kind": "sglang", "binary": str(py),
                          "server": {"disable_radix_cache": True}}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 3, "warmup": 1, "max_tokens": 32},
        "arms": [{"method": "none"}, {"method": "NGRAM", "n": [2, 4]}],
        "axes": {"engine": ["s"], "target": ["m"], "workload": ["builtin:code"]},
        "trials": 2,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    s = run_matrix(path, tmp_path / "out")
    assert s["totals"] == {"done": 6, "failed": 0, "missing": 0}
    by_id = {c["id"]: c for c in s["cells"]}
    assert by_id["s/m/none/builtin-code/c1"]["integrity_passed"] is True
    for n in (2, 4):
        cell = by_id[f"s/m/NGRAM/n{n}/builtin-code/c1"]
        assert cell["baseline"] == "s/m/none/builtin-code/c1"
        assert cell["integrity_passed"] is True
    for man in (tmp_path / "out" / "cells").glob("*/manifest.json"):
        engine = json.loads(man.read_text())["engine"]
        assert engine["standin"] is True and engine["kind"] == "sglang"


def test_the_standins_generate_answers_in_sglangs_meta_info_format(tmp_path: Path) -> None:
    """``/generate`` as SGLang 0.5.17's tokenizer_manager.py builds its answer: the keys of
    ``meta_info`` and how its speculative figures relate (stand-in, not SGLang)."""
    from crossbench.engines import registry
    from crossbench.engines.sglang.server import SglangServer
    from crossbench.runner.engine_check import post_json

    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0",
                        "--standin-accept", "0.7")
    srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                     "spec": {"type": "EAGLE3", "n": 3, "draft_model": "a/b"}},
                          tmp_path / "server.log")
    assert isinstance(srv, SglangServer)
    with srv:
        srv.wait_ready(30)
        answer = post_json(srv, "/generate", {"text": "Count:", "sampling_params": {
            "temperature": 0, "max_new_tokens": 100, "ignore_eos": True}})
        with pytest.raises(urllib.error.HTTPError) as e:
            post_json(srv, "/generate", {"text": "x", "stream": True})
        assert e.value.code == 400
    assert set(answer) == {"text", "output_ids", "meta_info"}
    meta = answer["meta_info"]
    assert set(meta) == {
        "id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
        "reasoning_tokens", "completion_tokens", "cached_tokens", "e2e_latency",
        "spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts",
        "spec_num_proposed_drafts", "spec_verify_ct", "spec_accepted_drafts",
        "spec_proposed_drafts", "spec_correct_drafts_histogram", "spec_accept_histogram"}
    steps, hist = meta["spec_verify_ct"], meta["spec_correct_drafts_histogram"]
    assert meta["completion_tokens"] == len(answer["output_ids"]) == 100
    assert meta["finish_reason"] == {"type": "length", "length": 100}
    assert sum(hist) == steps and hist[-1] > 0
    assert meta["spec_num_correct_drafts"] == sum(a * c for a, c in enumerate(hist))
    # the first token is the prefill's; every step emits its accepted drafts plus one
    assert meta["completion_tokens"] == 1 + steps + meta["spec_num_correct_drafts"]
    assert meta["spec_num_proposed_drafts"] == 3 * steps
    assert meta["spec_accept_length"] == 100 / steps


def test_the_run_table_says_drafted_tokens_are_not_counted(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    r = CliRunner().invoke(cli, [
        "run", "--engine", "sglang", "--binary", str(py), "--model", "Qwen/Qwen3-8B",
        "--spec", "NGRAM", "--n", "3", "--requests", "4", "--max-tokens", "32",
        "--trials", "1", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("drafts / drafted"))
    assert " / n/a (not counted by the engine) / " in line
    assert line.split()[-1] != "0"  # accepted tokens are derived from the counters


def test_stop_kills_a_worker_that_left_the_group_and_records_it(tmp_path: Path) -> None:
    """SGLang's scheduler and detokenizer are child processes: stop() finds them through the
    server's session (as vLLM's adapter does), kills one that ignores SIGTERM and says so."""
    import os
    import time

    from crossbench.engines import registry
    from crossbench.engines.process import alive_processes, session_processes

    pidfile = tmp_path / "worker.pid"
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0",
                        "--standin-spawn-orphan", str(pidfile))
    srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B",
                                     "stop_timeout_s": 1, "gpu_release_timeout_s": 0},
                          tmp_path / "server.log")
    srv.start()
    try:
        srv.wait_ready(timeout_s=30)
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline, "the stand-in did not spawn its worker"
            time.sleep(0.05)
        worker, sid = int(pidfile.read_text()), srv.pid
        assert sid is not None and os.getpgid(worker) != sid  # killpg alone would miss it
    finally:
        srv.stop()
    assert not alive_processes(session_processes(sid))
    assert any(str(worker) in s for s in srv.stop_report["sigkill"])
    assert srv.stop_report["leftover"] == []
    assert "gpu" in srv.stop_report and srv.stop_report["stop_s"] >= 1
    srv.stop()  # a second stop is a no-op
