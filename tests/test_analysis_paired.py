"""Per-request figures and paired speedups on records with known timing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from standins.study import Arm, request, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.metrics import pooled_rate, request_figures, token_itl_ms
from crossbench.analysis.paired import StatsOptions, compare, pair
from crossbench.analysis.summary import summarize_records

PROMPTS = [(f"a{i}", "code") for i in range(4)] + [(f"b{i}", "math") for i in range(4)]


def test_request_figures_known_timing_and_keys():
    recs = [
        request(trial=0, index=0, prompt_id="p", category="c", t_sent_ns=0, rate_tok_s=100.0,
                tokens=65, ttft_ms=20.0, warmup=True),
        request(trial=0, index=1, prompt_id="p", category="c", t_sent_ns=0, rate_tok_s=100.0,
                tokens=65, ttft_ms=20.0),
        request(trial=0, index=2, prompt_id="p", category="c", t_sent_ns=0, rate_tok_s=50.0,
                tokens=65, ttft_ms=20.0),
        {"trial": 0, "request_index": 3, "prompt_id": "q", "status": "error"},
        {"trial": 0, "request_index": 4, "prompt_id": "q", "status": "incomplete"},
    ]
    figs, counts = request_figures(recs)
    assert (counts.ok, counts.error, counts.incomplete, counts.warmup) == (2, 1, 1, 1)
    assert [f.key for f in figs] == [(0, "p", 0), (0, "p", 1)]  # second send is occurrence 1
    f = figs[0]
    assert f.ttft_ms == pytest.approx(20.0)
    assert f.decode_ms == pytest.approx(640.0)     # 64 tokens after the first at 100 tok/s
    assert f.rate_tok_s == pytest.approx(100.0)
    assert f.e2e_ms == pytest.approx(660.0)
    # pooled: 128 tokens over 0.64 + 1.28 s
    assert pooled_rate(figs) == pytest.approx(128 / 1.92)


def test_pooled_rate_is_summarys_pooled_rate():
    rng = np.random.default_rng(3)
    recs = [request(trial=0, index=i, prompt_id=f"p{i}", category="c", t_sent_ns=0,
                    rate_tok_s=float(rng.uniform(20, 200)), tokens=int(rng.integers(2, 300)))
            for i in range(40)]
    figs, _ = request_figures(recs)
    assert pooled_rate(figs) == pytest.approx(
        summarize_records(recs)["throughput"]["pooled_tok_s"], rel=1e-12)


def test_token_itl_spreads_a_chunk_gap_over_its_tokens():
    rec = {"chunks": [[0, 1], [40_000_000, 4], [50_000_000, 1], [60_000_000, None]]}
    assert list(token_itl_ms([rec])) == pytest.approx([10.0, 10.0, 10.0, 10.0, 10.0])
    # the gap from one request's last chunk to the next request's first is not a latency
    other = {"chunks": [[90_000_000, 1], [92_000_000, 2]]}
    assert list(token_itl_ms([rec, {"chunks": []}, other])) == pytest.approx(
        [10.0] * 5 + [1.0, 1.0])
    # their mean is TPOT when the first chunk holds one token: 50 ms over 5 tokens
    rec = request(trial=0, index=0, prompt_id="p", category="c", t_sent_ns=0, rate_tok_s=80.0,
                  tokens=33, chunk_tokens=4)
    assert np.mean(token_itl_ms([rec])) == pytest.approx(1000 / 80.0)


def _rate(arm, pid, trial, occ):
    if arm.method == "none":
        return 100.0
    return 150.0 if pid.startswith("a") else 75.0


def test_paired_speedup_hand_computed(tmp_path):
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 4)], _rate,
          trials=3, tokens=64)
    r = analyze(tmp_path / "s", StatsOptions(resamples=2000, strata="category"))
    (p,) = r["pairs"]
    s = p["speedup"]
    assert s["geomean"] == pytest.approx(math.sqrt(1.5 * 0.75))
    assert s["median"] == pytest.approx((1.5 + 0.75) / 2)   # 12 samples of each
    assert s["net_loss_share"] == pytest.approx(0.5)
    assert (s["n_samples"], s["n_prompts"]) == (24, 8)
    # every code prompt is 1.5 and every math prompt 0.75, and each category keeps its four
    # prompts in every resample: the interval collapses onto the geometric mean
    assert s["ci95"] == pytest.approx([math.sqrt(1.5 * 0.75)] * 2)
    assert p["verdict"] == "faster"
    base_e2e, fast, slow = 10 + 630.0, 10 + 630 / 1.5, 10 + 630 / 0.75
    assert p["speedup_e2e"]["geomean"] == pytest.approx(
        math.sqrt(base_e2e / fast * base_e2e / slow))
    cats = p["per_category"]
    assert cats["code"]["speedup"]["geomean"] == pytest.approx(1.5)
    assert cats["code"]["speedup"]["verdict"] == "faster"
    assert cats["math"]["speedup"]["geomean"] == pytest.approx(0.75)
    assert cats["math"]["speedup"]["verdict"] == "slower"
    assert p["baseline_tok_s"] == pytest.approx(100.0)


def test_noisy_speedup_interval_covers_the_truth(tmp_path):
    rng = np.random.default_rng(11)
    noise = {(pid, t): float(np.exp(rng.normal(0, 0.05))) for pid, _ in PROMPTS
             for t in range(3)}

    def rate(arm, pid, trial, occ):  # true speedup 1.2, with 5 % log-normal noise
        return 100.0 if arm.method == "none" else 120.0 * noise[(pid, trial)]

    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 4)], rate, trials=3)
    p = analyze(tmp_path / "s", StatsOptions(resamples=4000))["pairs"][0]
    low, high = p["speedup"]["ci95"]
    assert low < 1.2 < high
    assert low < p["speedup"]["geomean"] < high
    assert p["verdict"] == "faster"
    again = analyze(tmp_path / "s", StatsOptions(resamples=4000))["pairs"][0]
    assert again["speedup"]["ci95"] == p["speedup"]["ci95"]  # seeded


def test_unmatched_requests_are_counted_not_used():
    spec = [request(trial=t, index=0, prompt_id="p", category="c", t_sent_ns=0,
                    rate_tok_s=120.0) for t in range(3)]
    base = [request(trial=t, index=0, prompt_id="p", category="c", t_sent_ns=0,
                    rate_tok_s=100.0) for t in range(2)]
    p = pair(request_figures(spec)[0], request_figures(base)[0])
    assert (len(p), p.unmatched_spec, p.unmatched_base) == (2, 1, 0)
    out = compare(request_figures(spec)[0], request_figures(base)[0], StatsOptions())
    assert out["pairing"] == {"paired": 2, "unmatched_spec": 1, "unmatched_baseline": 0}
    assert out["verdict"] == "too few samples"
    assert out["speedup"]["geomean"] == pytest.approx(1.2)


def test_the_resampling_design_is_an_explicit_option(tmp_path):
    """--strata picks the design, both designs say which they are, and without categories
    both are the same unstratified design."""
    import numpy as np
    from standins.study import Arm, study

    from crossbench.analysis.analyze import analyze, verdict_table

    rng = np.random.default_rng(3)
    # categories differ in speedup: stratifying by them removes that spread from the interval
    prompts = [(f"p{i}", ("code", "math", "prose")[i % 3]) for i in range(12)]
    effect = {"code": 0.0, "math": 0.15, "prose": -0.15}
    noise = {p: rng.normal(0, 0.02) for p, _ in prompts}
    cat = dict(prompts)

    def rate(arm, pid, trial, occ):
        return 100.0 * (1.0 if arm.n is None else float(np.exp(0.05 + effect[cat[pid]]
                                                                 + noise[pid])))

    study(tmp_path / "s", prompts, [Arm("none"), Arm("d", "draft-simple", 4)], rate, trials=2)
    by = {}
    for strata in ("category", "none"):  # explicit: a synthetic study is an import
        r = analyze(tmp_path / "s", StatsOptions(resamples=2000, strata=strata))
        (p,) = r["pairs"]
        by[strata] = p["speedup"]
        assert r["options"]["strata"] == strata
        assert f"(--strata {strata})" in verdict_table(r)
    assert by["category"]["design"] == "prompts x trials, stratified by category (3)"
    assert by["none"]["design"] == "prompts x trials, unstratified"
    width = {k: v["ci95"][1] - v["ci95"][0] for k, v in by.items()}
    assert width["category"] < width["none"] / 2, width
    assert by["category"]["geomean"] == by["none"]["geomean"]  # only the interval differs
    # an old record: the category design, and no equivalence band (format 7 added it)
    assert StatsOptions.from_record({"resamples": 500}) == StatsOptions(
        resamples=500, strata="category", equivalence=0.0)


def test_auto_strata_follow_the_run_kind():
    assert StatsOptions(strata="auto").for_run("import").strata == "none"
    assert StatsOptions(strata="auto").for_run("matrix").strata == "category"
    assert StatsOptions(strata="none").for_run("matrix").strata == "none"
