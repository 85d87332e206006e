"""Paired comparison of a speculative cell against its baseline.

Requests pair by (trial, prompt, occurrence). Per pair the decode speedup is spec decode rate
/ baseline decode rate and the end-to-end speedup baseline / spec end-to-end latency (per
output token where the lengths differ); each is summarized by its geometric mean, median,
net-loss share, the two-way bootstrap interval (``stats.py``) with its verdict, and
``start_ci95`` (Student's t over each trial's or start pair's mean, ``stats.unit_interval``).
With a known start spread (``start_spread.py``) ``ci95`` is the union of the bootstrap's
interval and the one with the starts' spread (``start_prior``). Definitions:
docs/analysis.md, "Paired speedup" and "Known start spread".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from crossbench.analysis import stats
from crossbench.analysis.metrics import RequestFigures
from crossbench.analysis.start_spread import Prior, Spread, StartSpread, effective_starts


@dataclass(frozen=True)
class StatsOptions:
    """Bootstrap and verdict settings (the CLI's --resamples, --seed, --level, --min-samples,
    --strata, --start-spread, --equivalence; docs/analysis.md).

    ``strata``: ``category`` resamples prompts within each prompt category, ``none`` across
    them; ``auto`` is category for crossbench's own runs and none for imports (:meth:`for_run`).
    ``start_spread``: the known spread between server starts (None: the bootstrap alone).
    ``equivalence``: the verdicts' practical-equivalence band (``stats.EQUIVALENCE``; 0: none).
    """

    resamples: int = 10_000
    seed: int = 0
    level: float = 0.95
    min_samples: int = 10
    strata: str = "auto"
    start_spread: StartSpread | None = None
    equivalence: float = stats.EQUIVALENCE

    def for_run(self, kind: str) -> StatsOptions:
        """``auto`` strata made concrete for a run of ``kind`` (``import``: the prompts'
        categories are labels the importer was given, not a sampling design)."""
        if self.strata != "auto":
            return self
        return replace(self, strata="none" if kind == "import" else "category")

    def to_record(self) -> dict[str, Any]:
        """The ``options`` object of analysis.json."""
        return {"resamples": self.resamples, "seed": self.seed, "level": self.level,
                "min_samples": self.min_samples, "strata": self.strata,
                "start_spread": self.start_spread.to_record() if self.start_spread else None,
                "equivalence": self.equivalence}

    @classmethod
    def from_record(cls, o: dict[str, Any] | None) -> StatsOptions:
        """Options as recorded in an analysis.json (older files, without ``strata``, were
        made with the category design, and without a start spread; files before format 7,
        without ``equivalence``, had no equivalence band, and are re-derived without one)."""
        o = o or {}
        spread = o.get("start_spread")
        return cls(resamples=int(o.get("resamples", 10_000)), seed=int(o.get("seed", 0)),
                   level=float(o.get("level", 0.95)), min_samples=int(o.get("min_samples", 10)),
                   strata=str(o.get("strata", "category")),
                   start_spread=StartSpread.from_record(spread, "options.start_spread")
                   if spread else None,
                   equivalence=float(o.get("equivalence", 0.0)))


def design(opts: StatsOptions, categories: list[str], trials: Sequence[object] | None,
           reused: bool = False) -> str:
    """The resampling design that made an interval, in words, e.g. ``prompts x trials,
    stratified by category (6)``, or ``prompts x server starts`` when trials reused a
    server."""
    unit = "server starts" if reused else "trials"
    clusters = f"prompts x {unit}" if trials is not None and len(set(trials)) > 1 \
        else "prompts"
    cats = len(set(categories))
    if opts.strata == "category" and cats > 1:
        return f"{clusters}, stratified by category ({cats})"
    return f"{clusters}, unstratified"


@dataclass
class Paired:
    """Requests of two cells matched by (trial, prompt, occurrence)."""

    spec: list[RequestFigures]
    base: list[RequestFigures]
    unmatched_spec: int
    unmatched_base: int

    def __len__(self) -> int:
        return len(self.spec)


def pair(spec: list[RequestFigures], base: list[RequestFigures]) -> Paired:
    """Match requests by key; requests without a partner are counted, not used."""
    by_key = {f.key: f for f in base}
    s_out: list[RequestFigures] = []
    b_out: list[RequestFigures] = []
    for f in spec:
        b = by_key.get(f.key)
        if b is not None:
            s_out.append(f)
            b_out.append(b)
    return Paired(s_out, b_out, len(spec) - len(s_out), len(base) - len(b_out))


def decode_speedup(s: RequestFigures, b: RequestFigures) -> float | None:
    """Spec decode rate / baseline decode rate of one pair."""
    if s.rate_tok_s and b.rate_tok_s:
        return s.rate_tok_s / b.rate_tok_s
    return None


def e2e_speedup(s: RequestFigures, b: RequestFigures) -> float | None:
    """Baseline / spec end-to-end latency of one pair, each per its own output tokens where
    the two produced different numbers of tokens (else an arm generating less would be
    credited for it); the plain ratio without a token count on either side."""
    if not (s.e2e_ms and b.e2e_ms):
        return None
    if s.tokens and b.tokens and s.tokens != b.tokens:
        return (b.e2e_ms / b.tokens) / (s.e2e_ms / s.tokens)
    return b.e2e_ms / s.e2e_ms


def lengths(p: Paired) -> dict[str, Any]:
    """Output lengths of the pairs: how many were compared, how many produced different
    numbers of tokens (``mismatched``; their end-to-end ratio is per output token, see
    :func:`e2e_speedup`), how many lack a count on a side (``unknown``), and each side's
    mean tokens over the compared pairs."""
    known = [(s.tokens, b.tokens) for s, b in zip(p.spec, p.base, strict=True)
             if s.tokens is not None and b.tokens is not None]
    mismatched = sum(1 for s, b in known if s != b)
    return {"compared": len(known), "mismatched": mismatched,
            "mismatched_share": mismatched / len(known) if known else None,
            "unknown": len(p) - len(known),
            "spec_mean_tokens": float(np.mean([s for s, _ in known])) if known else None,
            "baseline_mean_tokens": float(np.mean([b for _, b in known])) if known else None,
            "e2e": "per output token where lengths differ" if mismatched else
                   "latency ratio (lengths equal)"}


Ratio = Callable[[RequestFigures, RequestFigures], "float | None"]


PairSpreads = tuple[Spread, Spread, bool]
"""The known start spreads of a pair's speculative and baseline side, and whether the
speculative method had its own (``StartSpread.lookup``)."""


def summarize_speedup(p: Paired, ratio: Ratio, opts: StatsOptions,
                      spreads: PairSpreads | None = None) -> dict[str, Any]:
    """Geometric mean, median, interval, net-loss share, counts and verdict of one ratio;
    with ``spreads``, the interval with the starts' known share too."""
    values, prompts, cats, starts = [], [], [], []
    for s, b in zip(p.spec, p.base, strict=True):
        r = ratio(s, b)
        if r is not None and r > 0:
            values.append(r)
            prompts.append(s.prompt_id)
            cats.append(s.category)
            # the unit of the trial draw is the pair of server starts: trials that reused a
            # server share its state, so they move together and never count as restarts
            starts.append((s.server_start, b.server_start))
    reused = any(s.start is not None and s.start != s.trial for s in p.spec + p.base)
    prior = None
    if spreads is not None and starts:
        prior = Prior(spreads[0], spreads[1], spreads[2],
                      effective_starts([s for s, _ in starts]),
                      effective_starts([b for _, b in starts]))
    out = speedup_of(np.asarray(values, dtype=float), prompts, cats, opts, starts,
                     reused=reused, prior=prior)
    if reused:
        out["n_trials"] = len({s.trial for s in p.spec})
        out["n_server_starts"] = len(set(starts))
    return out


def speedup_of(ratios: stats.FloatArray, prompts: list[str], categories: list[str],
               opts: StatsOptions, trials: Sequence[object] | None = None,
               reused: bool = False, prior: Prior | None = None) -> dict[str, Any]:
    """The speedup object of the analysis for paired ratios (see the module docstring);
    ``trials`` (each ratio's trial, or its pair of server starts) lets the interval resample
    them too; ``reused``: some trials shared a server start, so the draw is over starts;
    ``prior``: the starts' known spread, whose interval joins the bootstrap's."""
    n = int(ratios.size)
    n_prompts = len(set(prompts))
    out: dict[str, Any] = {"geomean": None, "median": None, "ci95": None,
                           "ci_level": opts.level, "net_loss_share": None, "n_samples": n,
                           "n_prompts": n_prompts,
                           "n_trials": len(set(trials)) if trials is not None else None,
                           "design": design(opts, categories, trials, reused),
                           "start_ci95": None, "start_prior": None}
    ci = None
    if n:
        logs = np.log(ratios)
        strata = categories if opts.strata == "category" else ["all"] * n
        ci = stats.ratio_interval(logs, prompts, strata, opts.resamples, opts.seed,
                                  opts.level, trials)
        per_prompt: dict[str, list[float]] = {}
        for p, v in zip(prompts, logs, strict=True):
            per_prompt.setdefault(p, []).append(float(v))
        losses = sum(1 for v in per_prompt.values() if np.mean(v) < 0)
        out.update(geomean=float(np.exp(logs.mean())), median=float(np.median(ratios)),
                   ci95=list(ci) if ci else None, net_loss_share=losses / len(per_prompt))
        if trials is not None:  # the starts' (or trials') own spread, few as they are
            start_ci = stats.unit_interval(logs, trials, opts.level)
            out["start_ci95"] = list(start_ci) if start_ci else None
        if prior is not None and ci is not None:
            within = stats.ratio_interval(logs, prompts, strata, opts.resamples, opts.seed,
                                          opts.level)
            known = prior.interval(float(logs.mean()), within, opts.level)
            known["bootstrap_ci95"] = list(ci)
            ci = (min(ci[0], known["ci95"][0]), max(ci[1], known["ci95"][1]))
            out.update(ci95=list(ci), start_prior=known,
                       design=f"{out['design']}, joined with the known start spread")
    out["within_band"] = stats.within_band(ci, opts.equivalence)
    out["verdict"] = stats.verdict(ci, n, n_prompts, opts.min_samples,
                                   equivalence=opts.equivalence)
    return out


def compare(spec: list[RequestFigures], base: list[RequestFigures],
            opts: StatsOptions, spreads: PairSpreads | None = None) -> dict[str, Any]:
    """Decode and end-to-end speedups, overall and per category, with pairing counts;
    ``spreads``: the pair's known start spreads (:func:`summarize_speedup`)."""
    p = pair(spec, base)
    out: dict[str, Any] = {
        "speedup": summarize_speedup(p, decode_speedup, opts, spreads),
        "speedup_e2e": summarize_speedup(p, e2e_speedup, opts, spreads),
        "pairing": {"paired": len(p), "unmatched_spec": p.unmatched_spec,
                    "unmatched_baseline": p.unmatched_base},
        "lengths": lengths(p),
    }
    out["verdict"] = out["speedup"]["verdict"]
    cats = sorted({s.category for s in p.spec})
    per_cat: dict[str, Any] = {}
    for c in cats:
        idx = [i for i, s in enumerate(p.spec) if s.category == c]
        sub = Paired([p.spec[i] for i in idx], [p.base[i] for i in idx], 0, 0)
        per_cat[c] = {"speedup": summarize_speedup(sub, decode_speedup, opts, spreads),
                      "speedup_e2e": summarize_speedup(sub, e2e_speedup, opts, spreads)}
    out["per_category"] = per_cat
    return out


def neighbour_ratio(a: list[RequestFigures], b: list[RequestFigures],
                    opts: StatsOptions) -> dict[str, Any]:
    """Paired ratio of two speculative cells' decode rates (a / b), e.g. best n vs n-1.

    Both were paired with the same baseline, so a / b per request is the ratio of their
    speedups; the interval tells whether the two are distinguishable.
    """
    return summarize_speedup(pair(a, b), decode_speedup, opts)
