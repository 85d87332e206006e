"""n-sweeps: the cost model recovers known d and v, the best n and its neighbours, and the
net-loss-despite-high-acceptance flag."""

from __future__ import annotations

import pytest
from standins.study import Arm, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.sweep import cost_model, net_loss_finding, predicted_tau

D, V = 1.2, 0.15
CURVE = [0.9, 0.8, 0.6, 0.25, 0.1, 0.05]  # unconditional per-position acceptance


def true_speedup(n: int) -> float:
    return predicted_tau(CURVE, n) / (D + V * n)


def test_predicted_tau():
    assert predicted_tau(CURVE, 0) == 1.0
    assert predicted_tau(CURVE, 2) == pytest.approx(2.7)


def test_cost_model_recovers_d_and_v_from_exact_points():
    points = [{"n": n, "speedup": true_speedup(n),
               "mean_acceptance_length": predicted_tau(CURVE, n)} for n in (1, 2, 3, 4, 6)]
    m = cost_model(points, CURVE)
    assert m["fitted"]
    assert (m["d"], m["v"], m["r2"]) == pytest.approx((D, V, 1.0))
    pred = {p["n"]: p["speedup"] for p in m["predicted"]}
    assert [pred[n] for n in range(1, 7)] == pytest.approx([true_speedup(n) for n in range(1, 7)])
    assert m["predicted_best_n"] == max(range(1, 7), key=true_speedup) == 3
    assert cost_model(points[:1], CURVE) == {
        "fitted": False,
        "reason": "needs two n with a measured mean acceptance length and speedup (has [1])"}


def _acceptance(n: int, drafts: int = 1000) -> dict[str, object]:
    per_pos = [round(p * drafts) for p in CURVE[:n]]
    return {"drafts": drafts, "draft_tokens": n * drafts, "accepted": sum(per_pos),
            "per_position": per_pos}


def test_sweep_of_a_study_built_from_the_cost_model(tmp_path):
    ns = [1, 2, 3, 4, 5]
    arms = [Arm("none")] + [Arm("dft", "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    prompts = [(f"p{i}", "code" if i % 2 else "math") for i in range(6)]

    def rate(arm, pid, trial, occ):
        return 100.0 if arm.n is None else 100.0 * true_speedup(arm.n)

    study(tmp_path / "s", prompts, arms, rate, trials=2)
    (sw,) = analyze(tmp_path / "s", StatsOptions(resamples=1000))["sweeps"]
    assert [p["n"] for p in sw["points"]] == ns
    assert [p["speedup"] for p in sw["points"]] == pytest.approx([true_speedup(n) for n in ns])
    assert [p["mean_acceptance_length"] for p in sw["points"]] == pytest.approx(
        [predicted_tau(CURVE, n) for n in ns])
    best = sw["best"]
    assert best["n"] == 3
    assert [x["n"] for x in best["neighbours"]] == [2, 4]
    assert [x["ratio"] for x in best["neighbours"]] == pytest.approx(
        [true_speedup(3) / true_speedup(2), true_speedup(3) / true_speedup(4)])
    # noiseless: every ratio's interval is above 1, but n = 4 is only 1.4 % behind n = 3,
    # inside the default +-2 % equivalence band, so the best n is not distinguishable from it
    assert [x["distinguishable"] for x in best["neighbours"]] == [True, False]
    assert best["distinguishable"] is False
    cm = sw["cost_model"]
    assert (cm["d"], cm["v"], cm["r2"]) == pytest.approx((D, V, 1.0), abs=1e-6)
    assert cm["predicted_best_n"] == 3
    assert cm["acceptance_curve"] == "measured per-position acceptance"
    assert sw["net_loss_despite_high_acceptance"] == []


def _pair(rate: float | None, verdict: str, speedup: float = 0.8) -> dict[str, object]:
    return {"cell": "x", "verdict": verdict, "speedup": {"geomean": speedup},
            "acceptance": {"draft_acceptance_rate": rate}}


def test_net_loss_despite_high_acceptance():
    f = net_loss_finding(_pair(0.7, "slower"))
    assert f is not None and f.kind == "net_loss_despite_high_acceptance"
    assert f.message == ("slower than the baseline (speedup 0.800) although 70% of drafted "
                         "tokens are accepted")
    assert "lower n" in f.action
    assert net_loss_finding(_pair(0.3, "slower")) is None        # low acceptance: expected
    assert net_loss_finding(_pair(0.9, "indistinguishable")) is None
    assert net_loss_finding(_pair(None, "slower")) is None


def _noisy_cost_models(tmp_path, speedup, seeds, prompt_sd, noise_sd):
    """The cost model of one noisy study per seed: 8 prompts (a lognormal effect each),
    n = 1, 2, 4, 6 at the true ``speedup(n)``, 3 trials with lognormal noise per request."""
    import numpy as np

    ns = [1, 2, 4, 6]
    arms = [Arm("none")] + [Arm("dft", "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    prompts = [(f"p{i}", "code") for i in range(8)]
    for seed in seeds:
        rng = np.random.default_rng(seed)
        prompt_effect = {p: rng.normal(0, prompt_sd) for p, _ in prompts}
        noise = {}

        def rate(arm, pid, trial, occ, prompt_effect=prompt_effect, rng=rng, noise=noise):
            key = (arm.n, pid, trial, occ)
            noise.setdefault(key, rng.normal(0, noise_sd))
            s = 1.0 if arm.n is None else speedup(arm.n)
            return 100.0 * s * float(np.exp(prompt_effect[pid] + noise[key]))

        study(tmp_path / f"s{seed}", prompts, arms, rate, trials=3)
        yield analyze(tmp_path / f"s{seed}", StatsOptions(resamples=400))["sweeps"][0][
            "cost_model"]


def test_cost_model_intervals_cover_the_true_d_and_v(tmp_path):
    """Noisy studies with known d and v: the joint-bootstrap intervals of d and v hold the
    truth in most of 20 studies (nominal 95 %), and collapse onto it without noise."""
    hits_d = hits_v = 0
    for cm in _noisy_cost_models(tmp_path, true_speedup, range(20), 0.05, 0.03):
        hits_d += cm["d_ci95"][0] <= D <= cm["d_ci95"][1]
        hits_v += cm["v_ci95"][0] <= V <= cm["v_ci95"][1]
    print("coverage of d, v over 20 studies:", hits_d, hits_v)
    assert hits_d >= 16 and hits_v >= 16, (hits_d, hits_v)


def test_cost_model_intervals_collapse_without_noise(tmp_path):
    ns = [1, 2, 4]
    arms = [Arm("none")] + [Arm("dft", "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    prompts = [(f"p{i}", "code") for i in range(4)]
    study(tmp_path / "s", prompts, arms,
          lambda arm, pid, trial, occ: 100.0 if arm.n is None else 100.0 * true_speedup(arm.n),
          trials=2)
    cm = analyze(tmp_path / "s", StatsOptions(resamples=200))["sweeps"][0]["cost_model"]
    assert cm["d_ci95"] == pytest.approx([D, D], abs=1e-9)
    assert cm["v_ci95"] == pytest.approx([V, V], abs=1e-9)


def test_an_empty_sweeps_table_says_why(tmp_path):
    from crossbench.analysis.analyze import write_outputs

    arms = [Arm("none"), Arm("dft", "draft-simple", 4, acceptance=_acceptance(4))]
    study(tmp_path / "s", [("p0", "code"), ("p1", "math")], arms,
          lambda arm, pid, trial, occ: 100.0, trials=2)
    r = analyze(tmp_path / "s", StatsOptions(resamples=200))
    assert r["sweeps"] == []
    write_outputs(tmp_path / "s", r)
    text = (tmp_path / "s" / "analysis" / "sweeps.md").read_text()
    assert "No n-sweep: a sweep needs two or more n in one (engine, model, arm, method, " \
           "workload, concurrency); found synthetic/synthetic-model/dft: n=[4]." in text


SPREAD_STUDIES = 40
"""Simulated studies of the known-spread coverage test."""


def test_with_a_known_start_spread_one_start_per_cell_still_covers_d_and_v(tmp_path):
    """Studies of one server start per cell whose starts move every cell's rate by a known
    spread (spec 5 %, baseline 2 %): the bootstrap alone sees only the prompts, so its
    intervals of d and v miss the truth in most studies; with the spread they hold it in most
    (the draws add each probe's and the shared baseline's start shifts): 49 of 60 studies held
    both d and v against none for the bootstrap alone when this test was written; d and v
    each have a 95 % interval, so both together hold less often than 95 %."""
    import numpy as np

    from crossbench.analysis.start_spread import Spread, StartSpread

    known = StartSpread((Spread("synthetic", "baseline", 0.02, 20, 4, 24),
                         Spread("synthetic", "draft-simple", 0.05, 20, 4, 24)), ())
    ns = [1, 2, 4, 6]
    arms = [Arm("none")] + [Arm("dft", "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    prompts = [(f"p{i}", "code") for i in range(8)]
    hits = {"bootstrap": 0, "spread": 0}
    for seed in range(SPREAD_STUDIES):
        rng = np.random.default_rng(100 + seed)
        shift = {n: rng.normal(0, 0.05) for n in ns} | {None: rng.normal(0, 0.02)}
        noise = {}

        def rate(arm, pid, trial, occ, rng=rng, noise=noise, shift=shift):
            key = (arm.n, pid, trial, occ)
            noise.setdefault(key, rng.normal(0, 0.01))
            s = 1.0 if arm.n is None else true_speedup(arm.n)
            return 100.0 * s * float(np.exp(shift[arm.n] + noise[key]))

        study(tmp_path / f"s{seed}", prompts, arms, rate, trials=1)
        for name, spread in (("bootstrap", None), ("spread", known)):
            cm = analyze(tmp_path / f"s{seed}", StatsOptions(resamples=400,
                                                             start_spread=spread)
                         )["sweeps"][0]["cost_model"]
            hits[name] += (cm["d_ci95"][0] <= D <= cm["d_ci95"][1]
                           and cm["v_ci95"][0] <= V <= cm["v_ci95"][1])
    print(f"studies whose d and v intervals both hold the truth, of {SPREAD_STUDIES}:", hits)
    assert hits["spread"] >= 0.75 * SPREAD_STUDIES and hits["bootstrap"] <= 4, hits


V_STEEP = 0.5  # with D and CURVE: speedup 1.118, 1.227, 1.222, 1.109, 0.986, 0.881 at n = 1..6


def steep_speedup(n: int) -> float:
    return predicted_tau(CURVE, n) / (D + V_STEEP * n)


def test_negative_from_is_where_the_sweep_turns_negative_and_stays():
    from crossbench.analysis.sweep import loses_from, negative_from

    assert [round(steep_speedup(n), 3) for n in range(1, 7)] == [
        1.118, 1.227, 1.222, 1.109, 0.986, 0.881]
    assert negative_from([1, 2, 3, 4, 5, 6], [steep_speedup(n) for n in range(1, 7)]) == 5
    assert negative_from([1, 2, 4], [0.9, 1.1, 0.8]) == 4       # a dip below 1 that recovers
    assert negative_from([1, 2, 4], [0.9, 0.95, 0.8]) == 1      # negative everywhere
    assert negative_from([1, 2], [0.9, 1.0]) is None            # 1.0 is not a loss
    assert negative_from([1, 2], [0.9, None]) is None           # an unbounded speedup
    verdicts = [{"n": n, "verdict": v} for n, v in
                zip((1, 2, 4, 8), ("slower", "faster", "slower", "slower"), strict=True)]
    assert loses_from(verdicts) == 4
    assert loses_from(verdicts[:2]) is None
    assert loses_from([{"n": 1, "verdict": "slower"}]) == 1


def test_a_study_that_turns_negative_is_found_measured_and_predicted(tmp_path):
    """A noiseless study whose true speedup drops below 1 from n = 5 (and a measured sweep at
    n = 1, 2, 3, 6): the measured sweep loses from n = 6 (5 was not measured), the cost line
    predicts negative from 5, and its interval collapses onto 5."""
    ns = [1, 2, 3, 6]
    arms = [Arm("none")] + [Arm("dft", "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    prompts = [(f"p{i}", "code") for i in range(6)]
    study(tmp_path / "s", prompts, arms,
          lambda arm, pid, trial, occ: 100.0 if arm.n is None else 100.0 * steep_speedup(arm.n),
          trials=2)
    (sw,) = analyze(tmp_path / "s", StatsOptions(resamples=300))["sweeps"]
    assert [p["verdict"] for p in sw["points"]] == ["faster", "faster", "faster", "slower"]
    assert sw["loses_from"] == 6
    cm = sw["cost_model"]
    assert (cm["d"], cm["v"]) == pytest.approx((D, V_STEEP), abs=1e-6)
    assert cm["predicted_negative_from"] == 5
    assert cm["predicted_negative_from_ci95"] == [5, 5]
    from crossbench.analysis.analyze import negative_text

    assert negative_text(cm) == "5 [5, 5]"
    assert negative_text({**cm, "predicted_negative_from": None,
                          "predicted_negative_from_ci95": [None, None]}) == "none [>6, >6]"


def test_negative_from_intervals_cover_the_truth(tmp_path):
    """Noisy studies of the steep line: the interval of the predicted negative-from n holds
    the true 5 in most of 12 studies, and is not the whole range."""
    hits = narrow = 0
    for cm in _noisy_cost_models(tmp_path, steep_speedup, range(100, 112), 0.03, 0.02):
        lo, hi = cm["predicted_negative_from_ci95"]
        hits += (lo is not None and lo <= 5) and (hi is None or hi >= 5)
        narrow += lo is not None and hi is not None and hi - lo <= 2
    print("negative-from intervals holding 5:", hits, "of 12; narrow:", narrow)
    assert hits >= 10 and narrow >= 6, (hits, narrow)
