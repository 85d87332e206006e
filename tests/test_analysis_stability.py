"""Stability checks: each fires on data built to trip it, names the action, and a clean study
raises none."""

from __future__ import annotations

import math

import pytest
from standins.study import Arm, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions

PROMPTS = [(f"p{i}", "code" if i % 2 else "math") for i in range(10)]
OPTS = StatsOptions(resamples=500)
ACC = {"drafts": 500, "draft_tokens": 1000, "accepted": 700, "per_position": [400, 300]}


def _kinds(result):
    return sorted({w["kind"] for w in result["stability"]})


def _warning(result, kind):
    (w,) = [w for w in result["stability"] if w["kind"] == kind]
    return w


def flat(arm, pid, trial, occ):
    return 100.0 if arm.method == "none" else 110.0


def test_clean_study_has_no_warnings(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)], flat, trials=3)
    r = analyze(tmp_path / "s", OPTS)
    assert r["stability"] == []
    assert r["pairs"][0]["warnings"] == []


def test_trial_spread_over_ten_percent(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none")],
          lambda a, p, t, o: [100.0, 130.0, 100.0][t], trials=3)
    w = _warning(analyze(tmp_path / "s", OPTS), "trial_spread")
    assert w["message"] == ("per-trial pooled decode rates vary by 16% (CV; tok/s: t0 100.0, "
                            "t1 130.0, t2 100.0), over the 10% limit")
    assert w["action"].startswith("run more trials (trials: 6 in a matrix, --trials 6 with "
                                  "crossbench run); stop other programs")


def test_mad_outlier_is_flagged_with_its_prompt_and_trial(tmp_path):
    def rate(arm, pid, trial, occ):
        if (pid, trial) == ("p3", 2):
            return 40.0
        return 100.0 + trial + 0.5 * int(pid[1:])  # small, regular spread

    study(tmp_path / "s", PROMPTS, [Arm("none")], rate, trials=5)
    r = analyze(tmp_path / "s", OPTS)
    w = _warning(r, "outliers")
    assert w["message"].startswith("1 of 50 requests are outliers against the other trials "
                                   "of their prompt (|modified z| > 3.5): p3 t2 (40.0 tok/s")
    assert "kept in every statistic" in w["action"]
    assert r["cells"][0]["requests"]["ok"] == 50  # flagged, never dropped


def test_baseline_drift_is_checked_on_baselines_only(tmp_path):
    def rate(arm, pid, trial, occ):
        return [100.0, 95.0, 90.0, 85.0][trial] * (1.0 if arm.method == "none" else 1.1)

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)], rate, trials=4)
    r = analyze(tmp_path / "s", OPTS)
    drift = [w for w in r["stability"] if w["kind"] == "baseline_drift"]
    assert len(drift) == 1 and "/none/" in drift[0]["cell"]
    assert drift[0]["message"].startswith("the baseline's pooled decode rate falls 16% from "
                                          "the first round to the last")


def test_output_length_cache_and_thinking(tmp_path):
    def extra(arm, pid, trial, occ):
        if pid != "p1":
            return {}
        return {"max_tokens": 128, "timings": {"cache_n": 12},
                "text": "<think>let me see</think> answer"}

    study(tmp_path / "s", PROMPTS, [Arm("none")], flat, trials=3, extra=extra,
          load={"thinking": False})
    r = analyze(tmp_path / "s", OPTS)
    assert _kinds(r) == ["output_length", "prompt_cache", "thinking_text"]
    assert _warning(r, "output_length")["message"] == (
        "3 outputs differ from max_tokens although ignore_eos was set (p1: 64 of 128, "
        "p1: 64 of 128, p1: 64 of 128)")
    assert _warning(r, "prompt_cache")["message"] == (
        "3 requests reused cached prompt tokens (timings.cache_n > 0) although cache_prompt "
        "was false")
    assert "ignored load.thinking: false" in _warning(r, "thinking_text")["action"]


def test_thinking_left_to_the_template_suggests_turning_it_off(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none")], flat, trials=2,
          extra=lambda a, p, t, o: {"text": "<think>hm</think>"})
    w = _warning(analyze(tmp_path / "s", OPTS), "thinking_text")
    assert w["action"].startswith("set load.thinking: false")


def test_failed_requests_are_counted_and_named(tmp_path):
    def extra(arm, pid, trial, occ):
        return {"status": "error", "error": "HTTP 500"} if (pid, trial) == ("p0", 1) else {}

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)], flat, trials=3,
          extra=extra)
    r = analyze(tmp_path / "s", OPTS)
    assert "failed_requests" in _kinds(r)
    pair = r["pairs"][0]
    assert pair["pairing"] == {"paired": 29, "unmatched_spec": 0, "unmatched_baseline": 0,
                               "ended_early": 0}
    assert {w["kind"] for w in pair["warnings"]} == {"failed_requests"}


def test_a_verdict_from_one_trial_says_its_interval_leaves_out_restarts(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          flat, trials=1, occurrences=2)
    r = analyze(tmp_path / "s", OPTS)
    (pair,) = r["pairs"]
    assert pair["speedup"]["n_trials"] == 1 and pair["verdict"] == "faster"
    w = _warning(r, "single_trial")
    assert "resamples prompts only" in w["message"] and "3 or more trials" in w["action"]
    assert [x["kind"] for x in pair["warnings"]] == ["single_trial"]
    # the verdict's own caveat says it, where a datapoint prints caveats beside the verdict
    assert pair["verdict_caveats"] == [
        "one trial per cell, so one server start per side: the interval leaves out "
        "start-to-start variation: see warnings"]


def test_a_verdict_from_one_server_start_per_side_says_so(tmp_path):
    """Three trials on one server start per side (a reused or shared start): the trial draw
    has one unit, so the interval says nothing about restarts; the verdict stays, marked."""
    from crossbench.analysis.analyze import START_SPREAD_NOTE

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          flat, trials=3, extra=lambda arm, pid, t, occ: {"server_start": 0})
    r = analyze(tmp_path / "s", OPTS)
    (pair,) = r["pairs"]
    assert (pair["speedup"]["n_trials"], pair["speedup"]["n_server_starts"]) == (3, 1)
    assert pair["verdict"] == "faster"
    w = _warning(r, "single_start")
    assert w["message"] == ("all 3 trials of this pair ran on one server start per side: the "
                            "interval resamples prompts only, so it leaves out how much a "
                            f"server start moves a whole cell (seen: {START_SPREAD_NOTE})")
    assert "trials_per_start at most half of trials" in w["action"]
    assert [x["kind"] for x in pair["warnings"]] == ["single_start"]
    assert pair["verdict_caveats"] == [
        "every trial ran on one server start per side (3 trials): the interval leaves out "
        "start-to-start variation: see warnings"]


def test_two_server_starts_per_side_raise_no_single_start_warning(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          flat, trials=4, extra=lambda arm, pid, t, occ: {"server_start": 2 * (t // 2)})
    r = analyze(tmp_path / "s", OPTS)
    (pair,) = r["pairs"]
    assert pair["speedup"]["n_server_starts"] == 2
    assert pair["warnings"] == [] and pair["verdict_caveats"] == []


def test_two_server_starts_that_disagree_mark_a_decisive_verdict(tmp_path):
    """Two starts per side; the speculative side ran 30 % faster on its first start and 10 %
    on its second. The bootstrap over the two starts says faster; the t-interval over the
    starts' means (1 df) holds 1, so the verdict is marked (starts_disagree), in the pair,
    its caveats and the verdict table."""
    from crossbench.analysis.analyze import verdict_table

    def rate(arm, pid, trial, occ):
        return 100.0 if arm.method == "none" else (130.0 if trial < 2 else 110.0)

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          rate, trials=4, extra=lambda arm, pid, t, occ: {"server_start": 2 * (t // 2)})
    r = analyze(tmp_path / "s", OPTS)
    (pair,) = r["pairs"]
    sp = pair["speedup"]
    assert sp["n_server_starts"] == 2 and pair["verdict"] == "faster"
    lo, hi = sp["start_ci95"]
    half = 12.7062 * abs(math.log(1.3) - math.log(1.1)) / math.sqrt(2) / math.sqrt(2)
    mid = (math.log(1.3) + math.log(1.1)) / 2
    assert (lo, hi) == pytest.approx((math.exp(mid - half), math.exp(mid + half)), rel=1e-3)
    w = _warning(r, "starts_disagree")
    assert "2 server starts per side" in w["message"] and "1 df" in w["message"]
    assert "more server starts per cell" in w["action"]
    assert [x["kind"] for x in pair["warnings"]] == ["starts_disagree"]
    (caveat,) = pair["verdict_caveats"]
    assert caveat.startswith("the server starts disagree") and f"[{lo:.3f}, {hi:.3f}]" in caveat
    table = verdict_table(r)
    assert "faster*" in table and "(starts_disagree)" in table


def test_trials_on_fresh_starts_that_agree_raise_no_starts_warning(tmp_path):
    """Three trials, a fresh start each, within 1 % of each other: the t-interval over them
    excludes 1 as the bootstrap does, and nothing is said."""
    def rate(arm, pid, trial, occ):
        return 100.0 if arm.method == "none" else 110.0 + trial

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)],
          rate, trials=3)
    r = analyze(tmp_path / "s", OPTS)
    (pair,) = r["pairs"]
    assert pair["verdict"] == "faster" and pair["speedup"]["start_ci95"][0] > 1
    assert "starts_disagree" not in _kinds(r)


def test_runner_warnings_on_trials_reach_the_verdict_and_compare(tmp_path):
    """A trial the runner warned about (other inference processes running beside it) marks
    the pair's verdict, is a warning of the analysis, and is a difference for compare."""
    import json

    from standins.study import Arm, study

    from crossbench.analysis.analyze import analyze, verdict_table
    from crossbench.analysis.compare import compare
    from crossbench.analysis.paired import StatsOptions
    from crossbench.analysis.rundir import load_run

    prompts = [(f"p{i}", "code") for i in range(6)]
    study(tmp_path / "s", prompts, [Arm("none"), Arm("d", "draft-simple", 4)],
          lambda arm, pid, trial, occ: 100.0 if arm.n is None else 120.0, trials=2)
    run = load_run(tmp_path / "s")
    spec = next(c for c in run.cells if c.coords["method"] != "none")
    path = spec.root / "manifest.json"
    m = json.loads(path.read_text())
    m["trials"][1]["other_engines"] = [{"pid": 4242, "name": "llama-server"}]
    m["trials"][1]["warnings"] = ["other inference processes are running: llama-server "
                                  "(pid 4242); they compete for the same cores or GPU"]
    path.write_text(json.dumps(m))
    r = analyze(tmp_path / "s", StatsOptions(resamples=300, min_samples=4, strata="none"))
    (p,) = r["pairs"]
    assert p["verdict"] == "faster"  # the numbers and the verdict stay...
    assert p["verdict_caveats"] == [
        "spec trial(s) 1 ran with runner warnings (other inference processes, a busy "
        "GPU...): see warnings"]
    table = verdict_table(r)
    assert "faster*" in table and "* the runner warned" in table  # ...marked
    kinds = [w["kind"] for w in p["warnings"]]
    assert "trial_warnings" in kinds
    # compare: trial 1 of the spec cell against trial 0 of the baseline differs in it
    base = next(c for c in load_run(tmp_path / "s").cells if c.coords["method"] == "none")
    m["trials"][0]["other_engines"] = [{"pid": 4242, "name": "llama-server"}]
    path.write_text(json.dumps(m))
    spec = next(c for c in load_run(tmp_path / "s").cells if c.coords["method"] != "none")
    out = compare(base, spec, StatsOptions(resamples=300, min_samples=4))
    fields = {d["field"]: d for d in out["differences"]}
    assert fields["trial.other_engines_running"]["kind"] == "confounding"


def test_an_interval_over_few_prompts_is_flagged_optimistic(tmp_path):
    study(tmp_path / "s", PROMPTS[:4], [Arm("none"), Arm("d", "draft-simple", 2,
                                                          acceptance=ACC)], flat, trials=3)
    r = analyze(tmp_path / "s", StatsOptions(resamples=500, min_samples=4))
    w = _warning(r, "few_clusters")
    assert "resamples 4 prompts" in w["message"] and "optimistic" in w["message"]
    assert "10 or more prompts" in w["action"]



def test_a_cell_a_cut_run_never_ran_raises_no_integrity_failure():
    """Round alpha part 1 (an H100, 2026-12-05) was cut by the lease's end as DFlash n = 1
    started: the cell holds no trial, its verdict says too few samples, and no acceptance
    check claims that speculation was configured and drafted nothing."""
    from pathlib import Path

    from crossbench.frames import open_run

    archive = (Path(__file__).resolve().parents[1]
               / "examples/h100-methods/alpha-part1/h100-alpha-part1-vllm-alpha.zip")
    with open_run(archive, OPTS) as frames:
        pairs = {p["cell"]: p for p in frames.analysis["pairs"]}
        stability = frames.analysis["stability"]
    cut = pairs["vllm/t8b-hf/dflash-a0.9/n1/builtin-mixed/c1"]
    assert cut["verdict"] == "too few samples" and cut["speedup"]["n_samples"] == 0
    assert [w for w in cut["warnings"] if w["kind"] == "integrity"] == []
    assert not [w for w in stability if w["kind"] == "integrity"]
    ran = pairs["vllm/t8b-hf/eagle3-a0.9/n1/builtin-mixed/c1"]  # the cells that ran still pass
    assert ran["speedup"]["n_samples"] == 32 and ran["verdict"] == "faster"
