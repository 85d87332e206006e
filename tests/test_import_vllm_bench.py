"""Importing `vllm bench serve --save-result` files (fixtures written to vLLM 0.33.0's schema
by tests/data/import/vllm_bench/make_fixtures.py): units, acceptance, trials, aggregates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.errors import UserError
from crossbench.importers.vllm_bench import arm_of, import_vllm_bench, read_results

DATA = Path(__file__).parent / "data" / "import" / "vllm_bench"
OPTS = StatsOptions(resamples=1000)


def test_detailed_results_round_trip(tmp_path):
    out = tmp_path / "v"
    import_vllm_bench([DATA / "baseline.json", DATA / "eagle3-n3.json"], out, engine="vllm")
    run = load_run(out)
    cells = {c.coords["arm"]: c for c in run.cells}
    assert set(cells) == {"baseline", "eagle3"}
    spec = cells["eagle3"]
    assert (spec.coords["method"], spec.coords["n"]) == ("eagle3", 3)  # from --metadata
    assert spec.baseline == cells["baseline"].id
    assert spec.trials() == [0, 1]  # --append-result lines are trials
    results = read_results(DATA / "eagle3-n3.json")
    for trial, res in enumerate(results):
        figs = [f for f in spec.figures if f.trial == trial]
        # seconds in the file, milliseconds here
        assert [f.ttft_ms for f in figs] == pytest.approx([t * 1000 for t in res["ttfts"]])
        assert [f.e2e_ms for f in figs] == pytest.approx([t * 1000 for t in res["latencies"]])
        # crossbench's TPOT is vLLM's: (latency - ttft) / (output tokens - 1)
        tpot = [f.decode_ms / (f.tokens - 1) for f in figs]
        assert np.mean(tpot) == pytest.approx(res["mean_tpot_ms"])
        # a chunk carries several tokens: vLLM's ITL is a chunk gap, not a token latency
        assert spec.records[0]["chunks"][1][1] is None
    r = analyze(out, OPTS)
    (p,) = r["pairs"]
    assert p["speedup"]["geomean"] == pytest.approx(1.6)  # 10 ms vs 6.25 ms per token
    assert p["verdict"] == "faster"
    assert p["baseline_tok_s"] == pytest.approx(100.0)
    acc = p["acceptance"]
    assert acc["draft_acceptance_rate"] == pytest.approx(
        results[0]["spec_decode_acceptance_rate"] / 100)  # vLLM: percent
    assert acc["draft_acceptance_rate"] == pytest.approx(0.6, abs=1e-3)
    assert acc["mean_acceptance_length"] == pytest.approx(2.8, abs=1e-3)
    assert acc["per_position"] == pytest.approx([0.8, 0.6, 0.4], abs=1e-3)  # already 0-1
    assert acc["source"] == "counters reported by vllm-bench"
    assert p["parity"]["verdict"] == "identical"


def test_metadata_and_spec_fields_are_kept(tmp_path):
    out = tmp_path / "v"
    import_vllm_bench([DATA / "eagle3-n3.json"], out, engine="vllm")
    man = json.loads(next((out / "cells").glob("*/manifest.json")).read_text())
    kept = man["imported"]["results"][0]
    assert (kept["method"], kept["n"]) == ("eagle3", "3")
    assert kept["spec_decode_acceptance_rate"] == pytest.approx(60.0)
    assert kept["spec_decode_per_position_acceptance_rates"] == [0.8, 0.6, 0.4]
    assert "ttfts" not in kept  # per-request lists live in requests.jsonl
    assert man["imported"]["acceptance"]["drafts"] == 1000 + 1010


def test_aggregate_only_results(tmp_path):
    out = tmp_path / "v"
    import_vllm_bench([DATA / "baseline-summary.json", DATA / "eagle3-n3-summary.json"], out,
                      engine="vllm")
    r = analyze(out, OPTS)
    (p,) = r["pairs"]
    assert p["speedup"]["n_samples"] == 0 and p["verdict"] == "too few samples"
    assert (p["baseline_tok_s"], p["spec_tok_s"]) == pytest.approx((100.0, 160.0))
    # vLLM keeps latencies without --save-detailed: the end-to-end speedup stays paired
    assert p["speedup_e2e"]["n_samples"] == 16
    assert p["speedup_e2e"]["verdict"] == "faster"
    kinds = [w["kind"] for w in p["warnings"]]
    assert kinds == ["aggregate_only"]
    assert "--save-detailed" in p["warnings"][0]["action"]


def test_arm_inference_without_metadata():
    res = read_results(DATA / "eagle3-n3.json")[0]
    plain = {k: v for k, v in res.items() if k not in ("method", "n")}
    assert arm_of(plain) == ("eagle3", "speculative", 3)  # label; n from per-position rates
    base = read_results(DATA / "baseline.json")[0]
    assert arm_of(base) == ("baseline", "none", None)


def test_not_vllm_json_is_a_user_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(UserError, match="is not a vllm bench serve result"):
        import_vllm_bench([bad], tmp_path / "o", engine="vllm")
