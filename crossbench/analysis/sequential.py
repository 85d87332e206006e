"""Sequential stopping: settle a cell's paired speedup with as few trials as its data allow.

After each completed trial (a *look*) a rule decides ``faster``, ``slower``, ``equivalent``,
``continue`` or ``undecided`` (at the last look), each wrong with probability at most
``alpha`` over all looks: :class:`SequentialRule` (a group-sequential t test with Lan-DeMets
alpha spending on the trial means) or :class:`SpreadRule` (the known start spread's interval,
the spending split over the looks). Method, error rates and savings: docs/analysis.md,
"Sequential stopping"; stopping a running matrix's cells is :mod:`crossbench.runner.stopping`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from crossbench.analysis.stats import band_log, t_quantile
from crossbench.errors import UserError

if TYPE_CHECKING:
    from crossbench.analysis.start_spread import Prior

Action = Literal["continue", "faster", "slower", "equivalent", "undecided"]
"""What a look decides: keep running, or stop with one of four outcomes."""

Spending = Literal["obrien-fleming", "pocock"]
"""Lan-DeMets alpha-spending families (module docstring)."""

SPENDING: tuple[Spending, ...] = ("obrien-fleming", "pocock")
"""The spending functions :class:`SequentialRule` accepts."""

BOUNDARY_SIMULATIONS = 400_000
"""Null studies simulated to set the boundaries (Monte Carlo standard error of the achieved
error rate: sqrt(alpha (1 - alpha) / 400 000), 0.0003 at alpha 0.05)."""

BOUNDARY_SEED = 0
"""Seed of the boundary simulation: the same rule always gets the same boundaries."""

MAX_PLANNED_TRIALS = 100
"""Largest ``max_trials`` accepted: the rule is meant for tens of trials (server starts)."""

ZERO_SPREAD = 1e-12
"""Standard deviation of the trial means (log scale) at or below which they count as equal."""


def spent(fraction: float, alpha: float, spending: Spending) -> float:
    """Error rate a spending function allows by information fraction ``fraction`` (0 to 1)."""
    if fraction <= 0.0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * min(fraction, 1.0))
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(min(fraction, 1.0)))


@lru_cache(maxsize=64)
def boundaries(alpha: float, max_trials: int, min_trials: int,
               spending: Spending) -> tuple[float, ...]:
    """Boundaries c_k of the looks k = ``min_trials`` .. ``max_trials`` (module docstring).

    Simulates ``BOUNDARY_SIMULATIONS`` studies of standard normal trial means and, look by
    look, takes as c_k the quantile of |t| among the studies that have not yet crossed that
    makes the share of all studies crossing at look k equal to the spending function's
    increment (the shortfall of earlier looks carried over). One pass, O(simulations) memory.
    """
    rng = np.random.default_rng(BOUNDARY_SEED)
    n = BOUNDARY_SIMULATIONS
    s1, s2 = np.zeros(n), np.zeros(n)
    alive = np.ones(n, dtype=bool)
    out: list[float] = []
    for k in range(1, max_trials + 1):
        x = rng.standard_normal(n)
        s1 += x
        s2 += x * x
        if k < min_trials:
            continue
        mean = s1 / k
        var = np.maximum(s2 - k * mean * mean, 1e-300) / (k - 1)
        t = np.abs(mean) * np.sqrt(k / var)
        crossed_so_far = 1.0 - float(alive.mean())
        share = max(spent(k / max_trials, alpha, spending) - crossed_so_far, 0.0)
        live = t[alive]
        q = 1.0 - share * n / live.size
        c = float(np.quantile(live, min(max(q, 0.0), 1.0)))
        alive &= t <= c
        out.append(c)
    return tuple(out)


@dataclass(frozen=True)
class Decision:
    """What one look decided, with the interval it decided on (log scale, spec / baseline)."""

    action: Action
    look: int  # trials seen
    estimate_log: float | None  # mean of the trial means (None before the first trial)
    ci_log: tuple[float, float] | None  # repeated confidence interval (None before min_trials)
    boundary: float | None  # c_k of this look (None before min_trials)
    fixed_ci_log: tuple[float, float] | None  # ordinary t interval, at max_trials only
    reason: str
    rule: SequentialRule | SpreadRule = field(repr=False)
    level: float | None = None  # the interval's coverage, with a known spread (SpreadRule)
    prior: dict[str, Any] | None = None  # the known-spread interval's terms (SpreadRule)

    @property
    def stopped(self) -> bool:
        """True when the cell may stop (any action but ``continue``)."""
        return self.action != "continue"

    @property
    def ratio(self) -> float | None:
        """Geometric-mean speedup over the trials (exp of ``estimate_log``)."""
        return None if self.estimate_log is None else math.exp(self.estimate_log)

    @property
    def ci(self) -> tuple[float, float] | None:
        """``ci_log`` as speedups."""
        return None if self.ci_log is None else (math.exp(self.ci_log[0]),
                                                 math.exp(self.ci_log[1]))

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready record for analysis.json or a run journal; carries the rule."""
        fixed = self.fixed_ci_log
        return {"action": self.action, "look": self.look, "max_trials": self.rule.max_trials,
                "ratio": self.ratio, "ci": list(self.ci) if self.ci else None,
                "estimate_log": self.estimate_log,
                "ci_log": list(self.ci_log) if self.ci_log else None,
                "boundary": self.boundary,
                "fixed_ci": [math.exp(fixed[0]), math.exp(fixed[1])] if fixed else None,
                "reason": self.reason, "rule": self.rule.to_record(),
                **({"level": self.level, "start_prior": self.prior}
                   if self.level is not None else {})}


def _speedup(log_ratio: float) -> str:
    """A log ratio as a speedup, e.g. ``1.034x``."""
    return f"{math.exp(log_ratio):.3f}x"


@dataclass(frozen=True)
class SequentialRule:
    """Group-sequential stopping rule for a cell's paired speedup (module docstring).

    ``max_trials``: the planned number of trials (the cell's trials in the matrix), the
    latest stop. ``alpha``: the error rate of every decision together (0.05: the repeated
    intervals are 95 % intervals over all looks). ``min_trials`` (at least 2) and
    ``min_prompts`` (prompts in every trial): no stop before them, so that several server
    starts and several prompts are always sampled. ``equivalence``: a relative band e (0.02:
    within +-2 %) inside which the speedup counts as no difference; None: never
    ``equivalent``. ``spending``: ``obrien-fleming`` (default) or ``pocock``.
    """

    max_trials: int
    alpha: float = 0.05
    min_trials: int = 3
    min_prompts: int = 2
    equivalence: float | None = None
    spending: Spending = "obrien-fleming"

    def __post_init__(self) -> None:
        _check_settings(self.max_trials, 2, self.min_trials, self.alpha, self.equivalence,
                        self.spending)
        _check_count("min_prompts", self.min_prompts, "use min_prompts=2 (the default)")

    @property
    def boundaries(self) -> tuple[float, ...]:
        """c_k of the looks ``min_trials`` .. ``max_trials`` (computed once per rule)."""
        return boundaries(float(self.alpha), self.max_trials, self.min_trials, self.spending)

    @property
    def band_log(self) -> float | None:
        """Half-width of the equivalence band on the log scale, log(1 + e)."""
        return band_log(self.equivalence)

    def to_record(self) -> dict[str, Any]:
        """The rule's settings and boundaries, JSON-ready."""
        return {"method": f"group-sequential t, Lan-DeMets {self.spending} spending",
                "alpha": self.alpha, "max_trials": self.max_trials,
                "min_trials": self.min_trials, "min_prompts": self.min_prompts,
                "equivalence": self.equivalence, "spending": self.spending,
                "boundaries": list(self.boundaries),
                "boundary_simulations": BOUNDARY_SIMULATIONS}

    def _trial_means(self, trial_log_ratios: Sequence[Sequence[float]]) -> list[float]:
        """Mean of each trial's log ratios, after checking them (errors name the trial)."""
        if len(trial_log_ratios) > self.max_trials:
            raise UserError(f"trial_log_ratios holds {len(trial_log_ratios)} trials, more "
                            f"than max_trials={self.max_trials}",
                            "stop at max_trials, or plan more trials in the rule")
        means = []
        for k, trial in enumerate(trial_log_ratios):
            try:
                values = list(map(float, trial))
            except (TypeError, ValueError):
                raise UserError(f"trial_log_ratios[{k}] is not a flat list of numbers",
                                "give one log ratio per prompt for each trial") from None
            if len(values) < self.min_prompts:
                raise UserError(f"trial_log_ratios[{k}] holds {len(values)} prompt(s), "
                                f"fewer than min_prompts={self.min_prompts}",
                                "use a workload with more prompts per trial, or lower "
                                "min_prompts (1 accepts single-prompt trials)")
            if not all(map(math.isfinite, values)):
                i, v = next((i, v) for i, v in enumerate(values) if not math.isfinite(v))
                raise UserError(f"trial_log_ratios[{k}][{i}] is {v!r}, not a finite log ratio",
                                "leave out pairs without a positive rate on both sides before "
                                "taking logs")
            means.append(math.fsum(values) / len(values))
        return means

    def decide(self, trial_log_ratios: Sequence[Sequence[float]]) -> Decision:
        """Decision after the trials so far: ``trial_log_ratios[k]`` holds trial k's log
        ratios (spec / baseline), one per prompt (average a prompt's repeats first).

        Raises :class:`UserError` for more trials than ``max_trials``, a trial with fewer
        than ``min_prompts`` values, a value that is not finite, or trial means that are all
        equal (no spread: the rule cannot tell noise from signal).
        """
        means = self._trial_means(trial_log_ratios)
        k = len(means)
        estimate = math.fsum(means) / k if means else None
        if k < self.min_trials:
            return Decision("continue", k, estimate, None, None, None,
                            f"{k} of at least min_trials={self.min_trials} trials",
                            self)
        assert estimate is not None
        sd = math.sqrt(math.fsum((m - estimate) ** 2 for m in means) / (k - 1))
        if sd <= ZERO_SPREAD:
            raise UserError(f"trial_log_ratios: the {k} trial means are all equal "
                            f"({_speedup(means[0])}), so their spread is zero",
                            "check that spec and baseline were measured separately (a cell "
                            "paired with itself gives ratio 1 exactly)")
        c = self.boundaries[k - self.min_trials]
        half = c * sd / math.sqrt(k)
        ci = (estimate - half, estimate + half)
        fixed = None
        if k == self.max_trials:
            t = t_quantile(1.0 - self.alpha / 2.0, k - 1) * sd / math.sqrt(k)
            fixed = (estimate - t, estimate + t)
        return _classify(self, k, estimate, ci, c, fixed)


def _classify(rule: SequentialRule | SpreadRule, k: int, estimate: float,
              ci: tuple[float, float], boundary: float | None,
              fixed: tuple[float, float] | None, level: float | None = None,
              prior: dict[str, Any] | None = None) -> Decision:
    """The decision of look ``k`` from its interval ``ci`` (log scale): ``faster``,
    ``slower``, ``equivalent``, ``continue``, or ``undecided`` at the last look (``fixed``
    given)."""
    def decision(action: Action, reason: str) -> Decision:
        return Decision(action, k, estimate, ci, boundary, fixed, reason, rule, level, prior)

    where = f"look {k} of {rule.max_trials}: interval {_speedup(ci[0])} to {_speedup(ci[1])}"
    if level is not None:
        where += f" ({level:.2%})"
    band = band_log(rule.equivalence)
    in_band = band is not None and -band <= ci[0] and ci[1] <= band
    also = f" (and within the +-{rule.equivalence:g} band)" if in_band else ""
    if ci[0] > 0.0:
        return decision("faster", f"{where} lies above 1{also}")
    if ci[1] < 0.0:
        return decision("slower", f"{where} lies below 1{also}")
    if in_band:
        return decision("equivalent", f"{where} lies within the +-{rule.equivalence:g} band")
    if fixed is None:
        return decision("continue", f"{where} contains 1")
    return decision("undecided", f"{where} still contains 1 at max_trials; fixed "
                    f"{1 - rule.alpha:.0%} interval {_speedup(fixed[0])} to "
                    f"{_speedup(fixed[1])}")


def _check_settings(max_trials: int, least_trials: int, min_trials: int, alpha: float,
                    equivalence: float | None, spending: str) -> None:
    """The checks both rules make of their settings (errors name the setting and a fix)."""
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) \
            or not least_trials <= max_trials <= MAX_PLANNED_TRIALS:
        raise UserError(f"max_trials is {max_trials!r}, not a whole number from "
                        f"{least_trials} to {MAX_PLANNED_TRIALS}",
                        "plan the cell's trials, e.g. max_trials=10")
    if isinstance(min_trials, bool) or not isinstance(min_trials, int) \
            or not least_trials <= min_trials <= max_trials:
        raise UserError(f"min_trials is {min_trials!r}, not a whole number from "
                        f"{least_trials} to max_trials ({max_trials})",
                        f"use min_trials={max(least_trials, min(3, max_trials))} or more, at "
                        "most max_trials")
    if not isinstance(alpha, (int, float)) or not 0.0 < alpha < 0.5:
        raise UserError(f"alpha is {alpha!r}, not a number between 0 and 0.5",
                        "use alpha=0.05 (95 % intervals)")
    if equivalence is not None and (not isinstance(equivalence, (int, float))
                                    or not 0.0 < equivalence < 1.0):
        raise UserError(f"equivalence is {equivalence!r}, not a relative band between 0 and 1",
                        "give the band as a fraction, e.g. equivalence=0.02 for +-2 %")
    if spending not in SPENDING:
        raise UserError(f"spending is {spending!r}", f"use one of: {', '.join(SPENDING)}")


def _check_count(name: str, value: object, fix: str) -> None:
    """A setting that must be a whole number >= 1 (the error names it and the fix)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} is {value!r}, not a whole number >= 1", fix)


@dataclass(frozen=True)
class SpreadRule:
    """Sequential stopping with a known start spread (module docstring): a look after every
    trial, its interval the known-spread one at the look's share of ``alpha``.

    ``max_trials``: the planned looks of the cell, the latest stop (1 or more): its trials,
    or with looks inside the trials (the matrix's ``sequential.look_every``) its trials times
    the looks of each. ``min_trials`` (1 or more, in looks) and ``min_samples`` (paired
    requests, the analysis's ``min_samples``): no stop before them, so a stopped cell always
    has a reportable verdict. A look's share of ``alpha`` is fixed by its place in the plan,
    so looks left out (a trial ended early, a failed trial) leave their share unspent.
    ``alpha``, ``equivalence``, ``spending``: as :class:`SequentialRule`'s.
    """

    max_trials: int
    alpha: float = 0.05
    min_trials: int = 1
    min_samples: int = 10
    equivalence: float | None = None
    spending: Spending = "obrien-fleming"

    def __post_init__(self) -> None:
        _check_settings(self.max_trials, 1, self.min_trials, self.alpha, self.equivalence,
                        self.spending)
        _check_count("min_samples", self.min_samples, "use min_samples=10 (the analysis's "
                     "default)")

    def to_record(self) -> dict[str, Any]:
        """The rule's settings, JSON-ready."""
        return {"method": f"known start spread, Lan-DeMets {self.spending} spending split "
                          "over the looks (union bound)",
                "alpha": self.alpha, "max_trials": self.max_trials,
                "min_trials": self.min_trials, "min_samples": self.min_samples,
                "equivalence": self.equivalence, "spending": self.spending}

    def first_look(self, pairs: Sequence[int]) -> int | None:
        """The first look (1-based) with ``min_trials`` trials and ``min_samples`` pairs, from
        each trial's paired requests ``pairs``; None before it."""
        total = 0
        for k, n in enumerate(pairs, start=1):
            total += n
            if k >= self.min_trials and total >= self.min_samples:
                return k
        return None

    def share(self, look: int, first: int) -> float:
        """The error rate look ``look`` may use: the spending function's increment, and at the
        first look that may decide (``first``) everything spent up to it."""
        k_max = self.max_trials
        before = 0.0 if look <= first else spent((look - 1) / k_max, self.alpha, self.spending)
        return spent(look / k_max, self.alpha, self.spending) - before

    def decide(self, prior: Prior, mean_log: float | None, se_w: float,
               pairs: Sequence[int]) -> Decision:
        """Decision after ``len(pairs)`` trials: ``pairs[k]`` paired requests in trial k,
        ``mean_log`` their mean log ratio (spec / baseline), ``se_w`` its within-start
        standard error, ``prior`` the pair's spreads and each side's server starts so far.

        Raises :class:`UserError` for more trials than ``max_trials`` or a mean or standard
        error that is not finite.
        """
        k = len(pairs)
        if k > self.max_trials:
            raise UserError(f"{k} trials, more than max_trials={self.max_trials}",
                            "stop at max_trials, or plan more trials in the rule")
        for name, v in (("mean_log", mean_log), ("se_w", se_w)):
            if v is not None and not (math.isfinite(v) and (name != "se_w" or v >= 0)):
                raise UserError(f"{name} is {v!r}, not a finite number"
                                + (" >= 0" if name == "se_w" else ""),
                                "leave out pairs without a positive rate on both sides before "
                                "taking logs")
        first = self.first_look(pairs)
        if mean_log is None or first is None:
            return Decision("continue", k, mean_log, None, None, None,
                            f"{k} trial(s), {sum(pairs)} pair(s): fewer than min_trials="
                            f"{self.min_trials} or min_samples={self.min_samples}", self)
        level = 1.0 - self.share(k, first)
        known = prior.interval_se(mean_log, se_w, level)
        fixed = (_log_ci(prior.interval_se(mean_log, se_w, 1.0 - self.alpha))
                 if k == self.max_trials else None)
        terms = {key: known[key] for key in ("df", "within_se_log", "sigma_spec_log",
                                             "sigma_baseline_log", "spec_role", "role_matched",
                                             "spec_starts", "baseline_starts")}
        return _classify(self, k, mean_log, _log_ci(known), None, fixed, level, terms)

    def can_settle(self, prior: Prior, mean_log: float, pairs: Sequence[int], at: int) -> bool:
        """Whether look ``at`` (1-based, at most ``max_trials``) could still stop the cell on
        the same server starts: its known-spread interval around ``mean_log``, with no
        within-start error left at all (the most that more requests on these starts can
        give), excludes 1 or lies inside the band. ``pairs``: as :meth:`decide`'s, so far.
        When it could not, only another start can settle the cell (``look_every`` then ends
        the trial); the answer spends no error rate, since it never stops a cell."""
        first = self.first_look(list(pairs) + [0] * max(0, at - len(pairs)))
        if first is None:
            return True  # min_samples not reached yet: more requests are what it needs
        ci = _log_ci(prior.interval_se(mean_log, 0.0, 1.0 - self.share(at, first)))
        return _classify(self, at, mean_log, ci, None, None).stopped


def _log_ci(known: dict[str, Any]) -> tuple[float, float]:
    """The interval of :meth:`Prior.interval_se`'s record on the log scale."""
    return math.log(known["ci95"][0]), math.log(known["ci95"][1])


def trial_log_ratios(log_ratios: Sequence[float], prompts: Sequence[str],
                     trials: Sequence[int]) -> list[list[float]]:
    """Paired log ratios grouped for :meth:`SequentialRule.decide`: one list per trial, in
    trial order, holding each prompt's mean log ratio in that trial (a prompt sent several
    times in a trial counts once)."""
    cells: dict[int, dict[str, list[float]]] = {}
    for v, p, t in zip(log_ratios, prompts, trials, strict=True):
        cells.setdefault(int(t), {}).setdefault(str(p), []).append(float(v))
    return [[float(np.mean(vs)) for vs in cells[t].values()] for t in sorted(cells)]
