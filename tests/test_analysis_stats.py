"""Statistics against hand-computed cases: geometric mean, the clustered and stratified
bootstrap, verdict edges, MAD outliers, spread and line fits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crossbench.analysis import stats


def test_geomean_hand_computed():
    assert stats.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert stats.geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    assert stats.geomean([]) is None
    with pytest.raises(ValueError, match="positive"):
        stats.geomean([1.0, 0.0])


def test_bootstrap_two_clusters_matches_the_exact_distribution():
    # clusters a (ratio 2) and b (ratio 8), equal sizes: a resample draws 2 clusters, so its
    # geometric mean is 2 (p 1/4), 4 (p 1/2) or 8 (p 1/4)
    logs = [math.log(2.0)] * 3 + [math.log(8.0)] * 3
    c = stats.Clusters.of(logs, ["a"] * 3 + ["b"] * 3, ["s"] * 6)
    g = np.exp(stats.bootstrap_means(c, 10_000, seed=0))
    assert set(np.round(g, 9)) == {2.0, 4.0, 8.0}
    assert np.mean(np.isclose(g, 4.0)) == pytest.approx(0.5, abs=0.02)
    assert np.mean(np.isclose(g, 2.0)) == pytest.approx(0.25, abs=0.02)
    low, high = stats.ratio_interval(logs, ["a"] * 3 + ["b"] * 3, ["s"] * 6, 10_000, 0, 0.95)
    assert (low, high) == pytest.approx((2.0, 8.0))


def test_bootstrap_is_deterministic_with_a_seed():
    rng = np.random.default_rng(7)
    logs = rng.normal(0.1, 0.2, 60)
    clusters = [f"p{i % 12}" for i in range(60)]
    strata = [f"c{i % 3}" for i in range(60)]
    a = stats.ratio_interval(logs, clusters, strata, 5000, 42, 0.95)
    b = stats.ratio_interval(logs, clusters, strata, 5000, 42, 0.95)
    c = stats.ratio_interval(logs, clusters, strata, 5000, 43, 0.95)
    assert a == b
    assert a != c


def test_trial_draw_matches_the_exact_two_way_distribution():
    # one prompt per stratum pooled into two prompts x two trials; values = trial effect only
    # (trial 0: log 2, trial 1: log 8, same for both prompts): the prompt draw changes nothing,
    # the trial draw gives 2 (p 1/4), 4 (p 1/2), 8 (p 1/4) -- as for two prompt clusters above
    logs = [math.log(2.0), math.log(8.0)] * 2
    prompts, trials = ["a", "a", "b", "b"], [0, 1, 0, 1]
    c = stats.Clusters.of(logs, prompts, ["s"] * 4, trials)
    assert (c.n_clusters, c.n_rounds) == (2, 2)
    g = np.exp(stats.bootstrap_means(c, 10_000, seed=0))
    assert set(np.round(g, 9)) == {2.0, 4.0, 8.0}
    assert np.mean(np.isclose(g, 4.0)) == pytest.approx(0.5, abs=0.02)
    # prompts alone see no variation at all: every resample is the overall mean
    assert stats.ratio_interval(logs, prompts, ["s"] * 4, 2000, 0, 0.95) == pytest.approx(
        (4.0, 4.0))
    assert stats.ratio_interval(logs, prompts, ["s"] * 4, 2000, 0, 0.95, trials) == (
        pytest.approx((2.0, 8.0)))


def test_one_trial_gives_the_prompt_bootstrap_exactly():
    rng = np.random.default_rng(3)
    logs = rng.normal(0.0, 0.3, 24)
    prompts = [f"p{i % 8}" for i in range(24)]
    strata = [f"c{i % 2}" for i in range(24)]
    alone = stats.ratio_interval(logs, prompts, strata, 3000, 5, 0.95)
    assert stats.ratio_interval(logs, prompts, strata, 3000, 5, 0.95, [0] * 24) == (
        pytest.approx(alone, rel=1e-12))


def _crossed(n_trials: int, n_prompts: int) -> tuple[list[str], list[int], list[str]]:
    """Every prompt in every trial, one stratum: (prompts, trials, strata) per sample."""
    prompts = [f"p{p}" for _ in range(n_trials) for p in range(n_prompts)]
    trials = [t for t in range(n_trials) for _ in range(n_prompts)]
    return prompts, trials, ["s"] * len(prompts)


def _shifted_by_start(rng: np.random.Generator, trials: list[int], start_sd: float,
                      request_sd: float) -> np.ndarray:
    """Log ratios of a true speedup of 1: each trial (server start) shifts all its requests
    by one normal draw of ``start_sd``, each request varies by ``request_sd``."""
    effect = rng.normal(0.0, start_sd, max(trials) + 1)
    return np.array([effect[t] for t in trials]) + rng.normal(0.0, request_sd, len(trials))


def test_trial_aware_interval_covers_the_truth_when_server_starts_differ():
    """Known truth: speedup 1.0 exactly, each trial (server start) shifts every request of it
    by a random factor (sd 8 %), requests vary by 1 %. Over 200 simulated studies, intervals
    that resample trials cover 1.0 about as often as they claim; prompt-only intervals, which
    treat the trials as fixed, miss most of the time."""
    rng = np.random.default_rng(11)
    prompts, trials, strata = _crossed(8, 6)
    both = alone = 0
    for i in range(200):
        logs = _shifted_by_start(rng, trials, 0.08, 0.01)
        lo, hi = stats.ratio_interval(logs, prompts, strata, 1000, i, 0.95, trials)
        both += lo <= 1.0 <= hi
        lo, hi = stats.ratio_interval(logs, prompts, strata, 1000, i, 0.95)
        alone += lo <= 1.0 <= hi
    assert both / 200 >= 0.8
    assert alone / 200 <= 0.35


@pytest.mark.parametrize(("p", "df", "want"), [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 10, 2.2281),
    (0.95, 5, 2.0150), (0.995, 4, 4.6041)])
def test_t_quantile_matches_the_tables(p, df, want):
    assert stats.t_quantile(p, df) == pytest.approx(want, abs=5e-4)


def test_t_quantile_refuses_what_it_cannot_give():
    with pytest.raises(ValueError, match="df >= 1"):
        stats.t_quantile(0.975, 0)
    with pytest.raises(ValueError, match="0.5 <= p < 1"):
        stats.t_quantile(0.3, 4)


def test_unit_interval_hand_computed():
    """Two units with mean log ratios 0.1 and 0.3: mean 0.2, sd 0.1414, t(1 df) 12.706."""
    logs = [0.05, 0.15, 0.3, 0.3]
    lo, hi = stats.unit_interval(logs, ["a", "a", "b", "b"], 0.95)
    half = 12.7062 * math.sqrt(0.02) / math.sqrt(2)
    assert lo == pytest.approx(math.exp(0.2 - half), rel=1e-4)
    assert hi == pytest.approx(math.exp(0.2 + half), rel=1e-4)
    assert stats.unit_interval([0.1, 0.2], ["a", "a"], 0.95) is None  # one unit: no spread


@pytest.mark.parametrize(("b", "a", "expected"), [
    # scipy.stats.ttest_ind(log b, log a, equal_var=False): df 2.92 and 3.95, floored to 2
    # and 3, then t.ppf at those df (values computed with scipy 1.17 once, kept here)
    ((20.0, 24.0), (10.0, 13.0, 9.0), (1.126923654573537, 3.8360963017918515)),
    ((12.0, 12.3, 11.9, 12.2, 12.1), (10.0, 10.5, 9.8, 10.2),
     (1.1366570984888014, 1.257112562023487)),
])
def test_welch_interval_matches_scipy_at_the_floored_df(b, a, expected):
    lo, hi = stats.welch_interval([math.log(x) for x in b], [math.log(x) for x in a], 0.95)
    assert (lo, hi) == pytest.approx(expected, rel=1e-9)


def test_welch_interval_needs_two_samples_a_side_and_handles_no_spread():
    assert stats.welch_interval([0.1], [0.2, 0.3], 0.95) is None
    assert stats.welch_interval([0.1, 0.2], [0.3], 0.95) is None
    assert stats.welch_interval([0.5, 0.5], [0.2, 0.2], 0.95) == pytest.approx(
        (math.exp(0.3), math.exp(0.3)))


def test_with_two_starts_per_side_the_bootstrap_over_starts_is_bold_and_the_t_is_not():
    """Known truth: speedup 1.0 exactly. Each of two trials (a server start per side) shifts
    its requests by a random factor (sd 15 %, as vLLM's draft_model starts were seen to
    differ); requests vary by 2 %. Over 400 simulated studies the bootstrap over the two
    starts excludes 1 far more often than its 5 %; the t-interval over the starts' means
    (stats.unit_interval) keeps its level."""
    rng = np.random.default_rng(5)
    prompts, trials, strata = _crossed(2, 8)
    boot_decisive = t_decisive = 0
    for i in range(400):
        logs = _shifted_by_start(rng, trials, 0.15, 0.02)
        lo, hi = stats.ratio_interval(logs, prompts, strata, 400, i, 0.95, trials)
        boot_decisive += not lo <= 1.0 <= hi
        lo, hi = stats.unit_interval(logs, trials, 0.95)
        t_decisive += not lo <= 1.0 <= hi
    assert boot_decisive / 400 >= 0.3
    assert t_decisive / 400 <= 0.08


def test_clustered_resampling_keeps_the_trials_of_a_prompt_together():
    # every trial of prompt a is 0, of prompt b is 1; resampling whole prompts can only give
    # means 0, 1/2 and 1 -- resampling single requests would give thirds too
    values = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    c = stats.Clusters.of(values, ["a", "a", "a", "b", "b", "b"], ["s"] * 6)
    assert c.n_clusters == 2
    assert list(c.counts) == [3.0, 3.0]
    means = stats.bootstrap_means(c, 2000, seed=1)
    assert set(np.round(means, 9)) == {0.0, 0.5, 1.0}


def test_stratification_keeps_each_category_share():
    # category x: prompts at 0; category y: prompts at 10. Stratified, every resample keeps
    # two prompts of each, so its mean is always 5; pooled into one stratum it varies
    values = [0.0, 0.0, 10.0, 10.0]
    prompts = ["x1", "x2", "y1", "y2"]
    strat = stats.bootstrap_means(stats.Clusters.of(values, prompts, ["x", "x", "y", "y"]),
                                  1000, seed=0)
    pooled = stats.bootstrap_means(stats.Clusters.of(values, prompts, ["s"] * 4), 1000, seed=0)
    assert np.allclose(strat, 5.0)
    assert pooled.min() == 0.0 and pooled.max() == 10.0


def test_single_prompt_categories_are_pooled_so_the_interval_is_not_degenerate():
    values = [0.1, 0.1, 0.3, 0.3, 0.5, 0.5]
    prompts = ["a", "a", "b", "b", "c", "c"]
    cats = ["code", "code", "math", "math", "poem", "poem"]  # one prompt per category
    c = stats.Clusters.of(values, prompts, cats)
    assert len(set(c.strata)) == 1
    low, high = stats.ratio_interval(values, prompts, cats, 2000, 0, 0.95)
    assert low < high
    # a lone single-prompt category joins the smallest real stratum
    c2 = stats.Clusters.of([1.0] * 5, list("abcde"), ["x", "x", "y", "y", "z"])
    assert list(c2.strata) == [0, 0, 1, 1, 0]


@pytest.mark.parametrize(("ci", "n", "clusters", "expected"), [
    ((1.01, 1.2), 10, 2, "faster"),
    ((0.8, 0.99), 10, 2, "slower"),
    ((0.9, 1.1), 10, 2, "indistinguishable"),
    ((1.0, 1.2), 10, 2, "indistinguishable"),   # touching 1 is not entirely above it
    ((0.8, 1.0), 10, 2, "indistinguishable"),
    ((1.1, 1.2), 9, 5, "too few samples"),       # below min_samples
    ((1.1, 1.2), 50, 1, "too few samples"),      # one prompt: no spread to speak of
    (None, 50, 5, "too few samples"),
])
def test_verdict_edges(ci, n, clusters, expected):
    assert stats.verdict(ci, n, clusters, min_samples=10) == expected


def test_modified_z_and_mad_outliers_hand_computed():
    # median 3, absolute deviations 2 1 0 1 97, MAD 1
    z = stats.modified_z([1, 2, 3, 4, 100])
    assert z == pytest.approx([-1.349, -0.6745, 0.0, 0.6745, 65.4265])
    assert list(stats.mad_outliers([1, 2, 3, 4, 100])) == [False, False, False, False, True]
    assert list(stats.modified_z([5, 5, 5, 9])) == [0, 0, 0, 0]  # MAD 0: nothing flagged


def test_cv_and_line_fit():
    assert stats.cv([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert stats.cv([10.0]) is None
    line = stats.fit_line([1, 2, 3], [3, 5, 7])
    assert (line.intercept, line.slope, line.r2) == pytest.approx((1.0, 2.0, 1.0))
    assert line(4) == pytest.approx(9.0)
    assert stats.fit_line([1, 2], [1, 3]).r2 is None
    with pytest.raises(ValueError, match="two distinct"):
        stats.fit_line([1, 1], [1, 2])
