"""Statistics for paired comparisons: geometric means, a two-way clustered and stratified
bootstrap, verdicts, robust outliers, spread and straight-line fits.

The bootstrap resamples prompts (clusters, within their category strata) and, crossed with
them, trials (rounds), weighting each sample by the product of its prompt's and its trial's
multiplicities: the pigeonhole bootstrap (Owen, 2007, Ann. Appl. Stat. 1(2)), mildly
conservative. The statistic is the mean of log ratios, so ``exp`` of it is a geometric mean;
strata of a single prompt are pooled. Draws come from a seeded numpy generator: the same seed
gives the same interval. Why both factors: docs/analysis.md, "Paired speedup".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

Verdict = Literal["faster", "slower", "indistinguishable", "too few samples", "confounded"]
"""Outcome of a paired comparison."""

MAD_THRESHOLD = 3.5
"""Modified z-score above which a value is an outlier (Iglewicz and Hoaglin, 1993)."""

MIN_CLUSTERS = 2
"""Fewest prompts a bootstrap needs: with one, every resample is the same."""

EQUIVALENCE = 0.02
"""Default practical-equivalence band of a verdict, relative (0.02: +-2 %): an interval that
lies wholly within ``[1/(1+e), 1+e]`` reads ``indistinguishable`` even where it excludes 1,
so a baseline rerun against its baseline (a null control) does not read ``slower, 0.999
[0.998, 0.999]``. 2 % is about the smallest start-to-start spread measured between fresh
server starts of one cell on the H200 (a baseline's 1.5 % log SD, docs/analysis.md "Known
start spread"): a difference below it is not one a rerun on another start would keep.
``analyze --equivalence`` changes it; 0 turns the band off."""


def band_log(equivalence: float | None) -> float | None:
    """Half-width of an equivalence band ``equivalence`` on the log scale, log(1 + e); None
    without a band (None or 0). The one definition of the band: verdicts and the sequential
    rule's ``equivalent`` both use it."""
    return math.log1p(equivalence) if equivalence else None


def within_band(ci: tuple[float, float] | Sequence[float] | None,
                equivalence: float | None) -> bool:
    """Does a ratio interval lie wholly within the band ``[1/(1+e), 1+e]`` (edges count)?"""
    band = band_log(equivalence)
    if ci is None or band is None or ci[0] <= 0:
        return False
    return -band <= math.log(ci[0]) and math.log(ci[1]) <= band


def geomean(values: Sequence[float] | FloatArray) -> float | None:
    """Geometric mean of positive values (None when empty)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return None
    if np.any(a <= 0):
        raise ValueError("geometric mean needs positive values")
    return float(np.exp(np.mean(np.log(a))))


@dataclass(frozen=True)
class Clusters:
    """Sums and counts of sample values per (cluster, round), with each cluster's stratum.

    ``sums`` and ``counts`` have one row per cluster (prompt) and one column per round
    (trial); without rounds there is a single column.
    """

    sums: FloatArray
    counts: FloatArray
    strata: npt.NDArray[np.int64]

    @classmethod
    def of(cls, values: Sequence[float] | FloatArray, cluster: Sequence[str],
           stratum: Sequence[str], rounds: Sequence[object] | None = None) -> Clusters:
        """Group ``values`` by ``cluster`` and ``rounds`` (a cluster keeps the stratum of its
        first sample)."""
        index: dict[str, int] = {}
        strata_of: list[str] = []
        ids = np.empty(len(cluster), dtype=np.int64)
        for i, (c, s) in enumerate(zip(cluster, stratum, strict=True)):
            if c not in index:
                index[c] = len(index)
                strata_of.append(s)
            ids[i] = index[c]
        round_index: dict[object, int] = {}
        cols = np.zeros(len(cluster), dtype=np.int64)
        if rounds is not None:
            if len(rounds) != len(cluster):
                raise ValueError("rounds and clusters differ in length")
            for i, r in enumerate(rounds):
                cols[i] = round_index.setdefault(r, len(round_index))
        n_rounds = max(1, len(round_index))
        sums, counts = _cell_sums(ids * n_rounds + cols, values, len(index), n_rounds)
        return cls(sums, counts, _pool_singletons(strata_of))

    @property
    def n_clusters(self) -> int:
        """Number of clusters."""
        return int(self.sums.shape[0])

    @property
    def n_rounds(self) -> int:
        """Number of rounds (1 without rounds)."""
        return int(self.sums.shape[1])


def _pool_singletons(strata_of: list[str]) -> npt.NDArray[np.int64]:
    """Stratum index per cluster, strata of one cluster pooled (module docstring)."""
    size = {s: strata_of.count(s) for s in dict.fromkeys(strata_of)}
    pooled = "\0pooled"
    label = [s if size[s] >= MIN_CLUSTERS else pooled for s in strata_of]
    if label.count(pooled) == 1 and len(set(label)) > 1:
        smallest = min((s for s in size if size[s] >= MIN_CLUSTERS), key=lambda s: size[s])
        label = [smallest if s == pooled else s for s in label]
    names = {s: i for i, s in enumerate(dict.fromkeys(label))}
    return np.array([names[s] for s in label], dtype=np.int64)


def _cell_sums(flat: npt.NDArray[np.int64], values: Sequence[float] | FloatArray, rows: int,
               cols: int) -> tuple[FloatArray, FloatArray]:
    """Sums and counts of ``values`` per (row, column) cell, ``flat`` = row * cols + column."""
    sums = np.bincount(flat, weights=np.asarray(values, dtype=float),
                       minlength=rows * cols).astype(float)
    counts = np.bincount(flat, minlength=rows * cols).astype(float)
    return sums.reshape(rows, cols), counts.reshape(rows, cols)


def _two_way(prompts: FloatArray, rounds: FloatArray, sums: FloatArray, counts: FloatArray
             ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Totals, counts and hits (any sample drawn) of each two-way resample's cells."""
    total = ((prompts @ sums) * rounds).sum(axis=1)
    count = ((prompts @ counts) * rounds).sum(axis=1)
    return total, count, count > 0


def _multiplicities(draws: npt.NDArray[np.int64], size: int) -> FloatArray:
    """How often each of ``size`` items occurs in each row of ``draws`` (rows x size)."""
    rows = draws.shape[0]
    flat = (np.arange(rows)[:, None] * size + draws).ravel()
    return np.bincount(flat, minlength=rows * size).reshape(rows, size).astype(float)


def bootstrap_means(c: Clusters, resamples: int, seed: int) -> FloatArray:
    """Means of the values over ``resamples`` two-way clustered, stratified resamples: m of
    every stratum's m clusters and r of the r rounds drawn with replacement, each (cluster,
    round) cell weighted by the product of their multiplicities. A resample holding no sample
    (some prompts miss some trials) is left out, so fewer means may come back."""
    rng = np.random.default_rng(seed)
    n, r = c.n_clusters, c.n_rounds
    prompts = np.zeros((resamples, n))
    for h in range(int(c.strata.max(initial=-1)) + 1):
        members = np.flatnonzero(c.strata == h)
        draw = rng.integers(0, members.size, size=(resamples, members.size))
        prompts[:, members] += _multiplicities(draw, members.size)
    if r == 1:
        one: FloatArray = (prompts @ c.sums[:, 0]) / (prompts @ c.counts[:, 0])
        return one
    rounds = _multiplicities(rng.integers(0, r, size=(resamples, r)), r)
    total, count, hit = _two_way(prompts, rounds, c.sums, c.counts)
    means: FloatArray = total[hit] / count[hit]
    return means


def joint_bootstrap_means(groups: Sequence[tuple[FloatArray, Sequence[str], Sequence[object]]],
                          resamples: int, seed: int) -> FloatArray:
    """Means of several samples under one shared two-way resample: ``resamples`` x groups.

    Each group is (values, cluster of each value, round of each value); the same cluster
    (prompt) and round (trial) multiplicities weight every group in a resample, so groups
    that share their clusters (cells paired with one baseline, over the same prompts and
    trials) keep their correlation, which a fit across them (the cost model) must see.
    Unstratified. A resample that leaves a group without any sample gives NaN there.
    """
    keys = sorted({str(c) for _, cl, _ in groups for c in cl})
    rounds = sorted({str(r) for _, _, rd in groups for r in rd})
    ci = {k: i for i, k in enumerate(keys)}
    ri = {k: i for i, k in enumerate(rounds)}
    rng = np.random.default_rng(seed)
    w = _multiplicities(rng.integers(0, len(keys), size=(resamples, len(keys))), len(keys))
    u = _multiplicities(rng.integers(0, len(rounds), size=(resamples, len(rounds))),
                        len(rounds))
    out = np.full((resamples, len(groups)), np.nan)
    for g, (values, cl, rd) in enumerate(groups):
        flat = np.array([ci[str(c)] * len(rounds) + ri[str(r)] for c, r in
                         zip(cl, rd, strict=True)], dtype=np.int64)
        total, count, hit = _two_way(w, u, *_cell_sums(flat, values, len(keys), len(rounds)))
        out[hit, g] = total[hit] / count[hit]
    return out


def interval(samples: FloatArray, level: float) -> tuple[float, float]:
    """Percentile interval of bootstrap samples at confidence ``level``."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def ratio_interval(log_ratios: Sequence[float] | FloatArray, cluster: Sequence[str],
                   stratum: Sequence[str], resamples: int, seed: int,
                   level: float, rounds: Sequence[object] | None = None
                   ) -> tuple[float, float] | None:
    """Bootstrap interval of the geometric mean of ratios given as logs (None: no data);
    ``rounds`` (the trial of each ratio) adds the trial draw of :func:`bootstrap_means`."""
    if len(log_ratios) == 0:
        return None
    c = Clusters.of(log_ratios, cluster, stratum, rounds)
    low, high = interval(bootstrap_means(c, resamples, seed), level)
    return float(np.exp(low)), float(np.exp(high))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 <= p < 1) of Student's t with ``df`` degrees of freedom, by
    bisection on the regularized incomplete beta function (numpy has no t distribution;
    within 1e-12 relative of scipy's ``t.ppf``; cached). The one t quantile of the package:
    the sequential rule and the start-spread intervals use it too."""
    if not 0.5 <= p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    tail = 1.0 - p

    def upper(t: float) -> float:
        return 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))

    low, high = 0.0, 1.0
    while upper(high) > tail:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if upper(mid) > tail:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def unit_interval(log_ratios: Sequence[float] | FloatArray, units: Sequence[object],
                  level: float) -> tuple[float, float] | None:
    """Interval of the geometric mean ratio that takes each unit (a trial, or a pair of
    server starts) as one sample: the mean log ratio of every unit, then Student's t with
    (units - 1) degrees of freedom over those means, the few-cluster interval of Cameron,
    Gelbach and Miller (2008). None with fewer than two units."""
    by_unit: dict[object, list[float]] = {}
    for u, v in zip(units, log_ratios, strict=True):
        by_unit.setdefault(u, []).append(float(v))
    means = np.asarray([np.mean(v) for v in by_unit.values()], dtype=float)
    g = int(means.size)
    if g < 2:
        return None
    half = t_quantile((1 + level) / 2, g - 1) * float(means.std(ddof=1)) / math.sqrt(g)
    m = float(means.mean())
    return float(np.exp(m - half)), float(np.exp(m + half))


def welch_interval(logs_b: Sequence[float] | FloatArray, logs_a: Sequence[float] | FloatArray,
                   level: float) -> tuple[float, float] | None:
    """Interval of exp(mean(logs_b) - mean(logs_a)), the ratio of two geometric means over
    independent samples (two engines' server starts): Welch's t, its Welch-Satterthwaite df
    floored (as the start-spread prior does), which errs wide. None with fewer than two
    samples on a side."""
    a, b = np.asarray(logs_a, dtype=float), np.asarray(logs_b, dtype=float)
    if a.size < 2 or b.size < 2:
        return None
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    d = float(b.mean() - a.mean())
    se2 = va + vb
    if se2 == 0.0:
        return math.exp(d), math.exp(d)
    df = se2 ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = t_quantile((1 + level) / 2, max(1, math.floor(df))) * math.sqrt(se2)
    return math.exp(d - half), math.exp(d + half)


def verdict(ci: tuple[float, float] | None, n_samples: int, n_clusters: int,
            min_samples: int, confounded: bool = False,
            equivalence: float | None = None) -> Verdict:
    """The one place a comparison's verdict is decided, first match wins: ``confounded``
    (something besides the compared variable differs, ``crossbench.analysis.confounding``:
    the numbers stay, the label changes), ``too few samples`` (under ``min_samples`` paired
    samples or two prompts), ``indistinguishable`` within the band (:func:`within_band`),
    then by where the interval lies against 1."""
    if confounded:
        return "confounded"
    if ci is None or n_samples < min_samples or n_clusters < MIN_CLUSTERS:
        return "too few samples"
    if within_band(ci, equivalence):
        return "indistinguishable"
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "indistinguishable"


def modified_z(values: Sequence[float] | FloatArray) -> FloatArray:
    """Modified z-scores 0.6745 (x - median) / MAD (zeros when MAD is 0 or no values)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return a
    med = np.median(a)
    mad = np.median(np.abs(a - med))
    if mad == 0:
        return np.zeros_like(a)
    return np.asarray(0.6745 * (a - med) / mad, dtype=float)


def mad_outliers(values: Sequence[float] | FloatArray,
                 threshold: float = MAD_THRESHOLD) -> npt.NDArray[np.bool_]:
    """Mask of values whose |modified z| exceeds ``threshold`` (flagged, never dropped)."""
    return np.abs(modified_z(values)) > threshold


def cv(values: Sequence[float] | FloatArray) -> float | None:
    """Coefficient of variation: sample standard deviation / mean (None below 2 values)."""
    a = np.asarray(values, dtype=float)
    if a.size < 2 or a.mean() == 0:
        return None
    return float(a.std(ddof=1) / a.mean())


@dataclass(frozen=True)
class LineFit:
    """Least-squares line y = intercept + slope * x."""

    intercept: float
    slope: float
    r2: float | None  # None with fewer than 3 points or constant y

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, min, max and CV of ``values`` (at least one), as the host-time figures give
    them."""
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values),
            "cv": cv(values)}


def fit_line(x: Sequence[float] | FloatArray, y: Sequence[float] | FloatArray) -> LineFit:
    """Ordinary least squares through at least two points with distinct x."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size < 2 or np.ptp(xa) == 0:
        raise ValueError("a line needs at least two distinct x values")
    design = np.column_stack([np.ones_like(xa), xa])
    (a, b), *_ = np.linalg.lstsq(design, ya, rcond=None)
    ss_tot = float(np.sum((ya - ya.mean()) ** 2))
    r2 = None
    if xa.size >= 3 and ss_tot > 0:
        r2 = 1.0 - float(np.sum((ya - (a + b * xa)) ** 2)) / ss_tot
    return LineFit(float(a), float(b), r2)
