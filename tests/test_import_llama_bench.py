"""Importing real `llama-bench -o json` output (the fixture pair on the CPU build, see
tests/data/import/README.md): per-repetition rates equal llama-bench's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.errors import UserError
from crossbench.importers.llama_bench import import_llama_bench, read_tests

FILE = Path(__file__).parent / "data" / "import" / "llama_bench" / "llama-bench.json"


def test_round_trip_matches_llama_bench(tmp_path):
    out = tmp_path / "lb"
    state = import_llama_bench(FILE, out)
    assert [c["id"] for c in state["cells"]] == [
        "llama-bench/target.gguf/none/llama-bench-pp16/c1",
        "llama-bench/target.gguf/none/llama-bench-tg16/c1",
        "llama-bench/draft.gguf/none/llama-bench-pp16/c1",
        "llama-bench/draft.gguf/none/llama-bench-tg16/c1"]
    tests = read_tests(FILE)
    run = load_run(out)
    for cell, test in zip(run.cells, tests, strict=True):
        assert cell.trials() == list(range(len(test["samples_ns"])))
        if test["n_gen"]:
            rates = [f.rate_tok_s for f in cell.figures]
            # samples_ts is printed with 6 significant digits
            assert rates == pytest.approx(test["samples_ts"], rel=1e-5)
        else:
            ttft = [f.ttft_ms for f in cell.figures]
            assert ttft == pytest.approx([ns / 1e6 for ns in test["samples_ns"]])
            assert all(f.rate_tok_s is None for f in cell.figures)
        assert cell.manifest["engine"]["build_number"] == test["build_number"]
    r = analyze(out, StatsOptions(resamples=200))
    assert r["pairs"] == []
    tg = r["cells"][1]
    assert tg["per_trial_pooled_tok_s"] == pytest.approx(
        dict(zip(("0", "1", "2"), tests[1]["samples_ts"], strict=True)), rel=1e-5)


def test_combined_tests_are_listed_not_dropped(tmp_path):
    tests = read_tests(FILE)
    pg = dict(tests[1], n_prompt=16, n_gen=16)
    src = tmp_path / "pg.jsonl"  # the -o jsonl form: one object per line
    src.write_text("\n".join(json.dumps(t) for t in (tests[0], pg)) + "\n")
    state = import_llama_bench(src, tmp_path / "o")
    assert len(state["cells"]) == 1
    assert state["not_imported"] == [{
        "file": "pg.jsonl test 1 (llama-bench-pp16+tg16)",
        "reason": "a combined prompt+generation test cannot be split into prefill and decode"}]


def test_not_llama_bench_json(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[{\"model\": 1}]")
    with pytest.raises(UserError, match="is not llama-bench output"):
        import_llama_bench(bad, tmp_path / "o")
