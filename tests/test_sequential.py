"""Sequential stopping against simulated studies whose truth is known.

A simulated study has ``TRIALS`` trials of ``PROMPTS`` prompts; the log ratio of prompt p in
trial t is log(truth) + a trial effect (one per server start, shared by every prompt of the
trial) + prompt noise. Fixed per-prompt effects would shift every trial's mean alike, so they
are left out: the truth is the speedup on the workload's prompts. Every study is run through
``SequentialRule.decide`` look by look, as a runner would.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from crossbench.analysis import sequential
from crossbench.analysis.sequential import Decision, SequentialRule
from crossbench.errors import UserError

TRIALS = 10
PROMPTS = 8
STUDIES = 4000
ALPHA = 0.05


def simulate(seed: int, truth: float, trial_sd: float, prompt_sd: float = 0.03,
             studies: int = STUDIES, heavy: bool = False) -> np.ndarray:
    """Log ratios, studies x trials x prompts; ``heavy``: trial effects from a t with 3
    degrees of freedom scaled to ``trial_sd`` (heavy tails)."""
    rng = np.random.default_rng(seed)
    if heavy:
        trial = rng.standard_t(3, size=(studies, TRIALS)) * trial_sd / math.sqrt(3.0)
    else:
        trial = rng.normal(0.0, trial_sd, size=(studies, TRIALS))
    noise = rng.normal(0.0, prompt_sd, size=(studies, TRIALS, PROMPTS))
    out: np.ndarray = math.log(truth) + trial[:, :, None] + noise
    return out


def run_study(rule: SequentialRule, study: list[list[float]]) -> Decision:
    """The decision a runner would act on: the first look that stops, else the last."""
    for k in range(1, rule.max_trials + 1):
        d = rule.decide(study[:k])
        if d.stopped:
            return d
    raise AssertionError("the rule did not stop at max_trials")


def run_all(rule: SequentialRule, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Actions and trials used of every simulated study (given as lists, as a runner has)."""
    decisions = [run_study(rule, s) for s in data.tolist()]
    return (np.array([d.action for d in decisions]), np.array([d.look for d in decisions]))


def naive(data: np.ndarray, min_trials: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Repeated fixed-sample testing: an ordinary 95 % t interval of the trial means after
    every trial from ``min_trials`` on, stopping at the first that excludes 0. Returns the
    actions (faster / slower / undecided) and the full design's verdict at ``TRIALS``."""
    means = data.mean(axis=2)
    action = np.full(len(means), "undecided", dtype=object)
    full = action.copy()
    open_ = np.ones(len(means), dtype=bool)
    for k in range(min_trials, TRIALS + 1):
        m = means[:, :k].mean(axis=1)
        half = sequential.t_quantile(0.975, k - 1) * means[:, :k].std(axis=1, ddof=1) \
            / math.sqrt(k)
        verdict = np.where(m - half > 0, "faster", np.where(m + half < 0, "slower",
                                                             "undecided"))
        hit = open_ & (verdict != "undecided")
        action[hit] = verdict[hit]
        open_ &= ~hit
        if k == TRIALS:
            full = verdict
    return action, full


def bound(rate: float, n: int = STUDIES) -> float:
    """``rate`` plus three binomial standard errors over ``n`` studies."""
    return rate + 3.0 * math.sqrt(rate * (1.0 - rate) / n)


def test_t_quantile_matches_the_tables():
    for df, p, q in [(1, 0.975, 12.706205), (2, 0.975, 4.302653), (4, 0.975, 2.776445),
                     (9, 0.975, 2.262157), (30, 0.995, 2.749996), (2, 0.5, 0.0)]:
        assert sequential.t_quantile(p, df) == pytest.approx(q, abs=2e-6)
    with pytest.raises(ValueError):
        sequential.t_quantile(0.3, 4)


def test_boundaries_shrink_toward_the_fixed_interval():
    b = SequentialRule(max_trials=TRIALS).boundaries
    assert len(b) == TRIALS - 3 + 1
    assert all(x > y for x, y in itertools.pairwise(b))
    fixed = sequential.t_quantile(0.975, TRIALS - 1)
    # O'Brien-Fleming spends little early: the last look costs a little over a fixed design
    assert fixed < b[-1] < 1.2 * fixed
    p = SequentialRule(max_trials=TRIALS, spending="pocock").boundaries
    assert p[0] < b[0] and p[-1] > b[-1]
    assert SequentialRule(max_trials=TRIALS).boundaries == b  # seeded: the same every time


@pytest.mark.parametrize(("trial_sd", "heavy", "seed"),
                         [(0.05, False, 1), (0.10, False, 2), (0.07, True, 3)])
def test_type_one_error_at_most_alpha_where_naive_looks_exceed_it(trial_sd, heavy, seed):
    # truth exactly 1: a `faster` or `slower` stop is an error
    data = simulate(seed, 1.0, trial_sd, heavy=heavy)
    actions, used = run_all(SequentialRule(max_trials=TRIALS, alpha=ALPHA), data)
    errors = float(np.mean((actions == "faster") | (actions == "slower")))
    assert errors <= bound(ALPHA)
    naive_actions, _ = naive(data)
    naive_errors = float(np.mean(naive_actions != "undecided"))
    assert naive_errors > bound(ALPHA)
    assert naive_errors > 2 * errors
    assert set(actions) <= {"faster", "slower", "undecided"}  # no band: never `equivalent`
    assert used.min() >= 3


def test_a_clear_speedup_stops_early_and_never_says_slower():
    data = simulate(4, 1.3, 0.07)
    for spending, most in [("obrien-fleming", 6.0), ("pocock", 4.5)]:
        actions, used = run_all(SequentialRule(max_trials=TRIALS, spending=spending), data)
        assert np.mean(actions == "faster") >= 0.99
        assert not np.any(actions == "slower")
        assert used.mean() <= most  # of 10 planned trials


def test_early_looks_cost_little_power_on_a_modest_speedup():
    # 1.1x with a 7 % trial spread: the full 10-trial design says `faster` in about 97 %
    data = simulate(4, 1.1, 0.07)
    actions, used = run_all(SequentialRule(max_trials=TRIALS), data)
    _, full = naive(data)
    assert np.mean(actions == "faster") >= np.mean(full == "faster") - 0.05
    assert not np.any(actions == "slower")
    assert used.mean() <= 8.0


@pytest.mark.parametrize("truth", [0.9, 1.0, 1.03, 1.1])
def test_verdicts_do_not_flip_against_the_full_design(truth):
    data = simulate(5, truth, 0.07, studies=2000)
    actions, _ = run_all(SequentialRule(max_trials=TRIALS, equivalence=0.05), data)
    _, full = naive(data)
    flips = np.mean(((actions == "faster") & (full == "slower"))
                    | ((actions == "slower") & (full == "faster")))
    assert flips <= 0.002
    # `equivalent` where the full design names a direction: with the truth outside the band
    # that is an error of the rule's interval, rare (1 in 2000 at 1.1)
    if abs(math.log(truth)) > math.log(1.05):
        assert np.mean((actions == "equivalent") & (full != "undecided")) <= 0.002


def test_equivalence_inside_the_band_and_never_far_outside():
    rule = SequentialRule(max_trials=TRIALS, equivalence=0.05)
    actions, used = run_all(rule, simulate(6, 1.0, 0.02))
    assert np.mean(actions == "equivalent") >= 0.9
    assert used[actions == "equivalent"].mean() < TRIALS
    actions, _ = run_all(rule, simulate(7, 1.2, 0.02, studies=1000))
    assert not np.any(actions == "equivalent")
    # at the band's edge `equivalent` is an error: at most alpha / 2 (one side of the interval)
    actions, _ = run_all(rule, simulate(8, 1.05, 0.02))
    assert np.mean(actions == "equivalent") <= bound(ALPHA / 2)


def test_minimum_trials_hold_even_for_a_huge_effect():
    data = simulate(9, 2.0, 0.01, studies=200)
    for min_trials in (3, 5):
        rule = SequentialRule(max_trials=TRIALS, min_trials=min_trials)
        for k in range(1, min_trials):
            d = rule.decide(data[0, :k].tolist())
            assert (d.action, d.ci_log, d.boundary) == ("continue", None, None)
            assert f"min_trials={min_trials}" in d.reason
        _, used = run_all(rule, data)
        assert used.min() == min_trials


def test_minimum_prompts_per_trial():
    one_prompt = [[0.1], [0.2], [0.15]]
    with pytest.raises(UserError, match=r"trial_log_ratios\[0\] holds 1 prompt\(s\), fewer "
                                        r"than min_prompts=2") as e:
        SequentialRule(max_trials=5).decide(one_prompt)
    assert "min_prompts" in (e.value.hint or "")
    d = SequentialRule(max_trials=5, min_prompts=1).decide(one_prompt)
    assert d.action == "continue" and d.look == 3


def test_zero_spread_nan_and_too_many_trials_are_user_errors():
    rule = SequentialRule(max_trials=5)
    with pytest.raises(UserError, match="3 trial means are all equal") as e:
        rule.decide([[0.0, 0.0]] * 3)
    assert "measured separately" in (e.value.hint or "")
    with pytest.raises(UserError, match=r"trial_log_ratios\[1\]\[1\] is nan") as e:
        rule.decide([[0.1, 0.2], [0.1, float("nan")]])
    assert "positive rate" in (e.value.hint or "")
    with pytest.raises(UserError, match=r"trial_log_ratios\[0\] is not a flat list"):
        rule.decide([[[0.1, 0.2]], [0.1, 0.2]])
    with pytest.raises(UserError, match="6 trials, more than max_trials=5"):
        rule.decide([[0.1, 0.2]] * 6)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_trials": 1}, "max_trials"), ({"max_trials": 5, "min_trials": 1}, "min_trials"),
    ({"max_trials": 5, "min_trials": 6}, "min_trials"), ({"max_trials": 5, "alpha": 0.7}, "alpha"),
    ({"max_trials": 5, "min_prompts": 0}, "min_prompts"),
    ({"max_trials": 5, "equivalence": 2.0}, "equivalence"),
    ({"max_trials": 5, "spending": "linear"}, "spending")])
def test_settings_are_checked(kwargs, field):
    with pytest.raises(UserError, match=f"^{field} is") as e:
        SequentialRule(**kwargs)
    assert e.value.hint


def test_undecided_at_max_trials_carries_the_fixed_interval():
    rule = SequentialRule(max_trials=4)
    trials = [[0.05, 0.07], [-0.04, -0.02], [0.02, 0.0], [-0.01, 0.01]]
    assert [rule.decide(trials[:k]).action for k in range(1, 4)] == ["continue"] * 3
    d = rule.decide(trials)
    assert d.action == "undecided" and d.look == 4 and d.fixed_ci_log is not None
    assert d.ci_log is not None
    assert d.ci_log[0] < d.fixed_ci_log[0] < 0 < d.fixed_ci_log[1] < d.ci_log[1]
    assert d.estimate_log == pytest.approx(0.01)
    record = json.loads(json.dumps(d.to_record()))
    assert record["action"] == "undecided" and record["rule"]["max_trials"] == 4
    assert record["fixed_ci"] == pytest.approx([math.exp(x) for x in d.fixed_ci_log])
    assert record["rule"]["boundaries"] == pytest.approx(list(rule.boundaries))
    assert "fixed 95% interval" in d.reason


def test_trial_log_ratios_groups_by_trial_and_averages_repeats():
    got = sequential.trial_log_ratios([0.1, 0.3, 0.2, 0.4, 0.6], ["a", "a", "b", "a", "b"],
                                      [1, 1, 1, 0, 0])
    assert got == [pytest.approx([0.4, 0.6]), pytest.approx([0.2, 0.2])]
