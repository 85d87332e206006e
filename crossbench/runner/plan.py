"""Expected GPU time of a matrix under four designs, before it runs (``crossbench plan``).

naive (a server start per trial), reuse (one start per block of trials), sequential (a cell
stops once its verdict is settled: best case by default) and probe-and-predict (of each
n-sweep only the probes and follow-ups are measured, on the cheaper of reuse and
sequential). Timings per engine kind come from recorded runs' ``phase_s`` (``--from``), or
are assumed (registered start-up, ``estimate_tok_s``) and marked so. What each design counts
and why (means, ``other`` per start, the follow-up allowance): docs/matrix.md, "Planning GPU
time".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from crossbench.engines import registry
from crossbench.errors import UserError
from crossbench.runner.config import several_starts_block
from crossbench.runner.matrix import (
    Cell,
    Matrix,
    TrialWork,
    decode_estimate_s,
    probe_split,
    server_groups,
    sweeps,
    trial_work,
)
from crossbench.store import rundir

DESIGNS = ("naive", "reuse", "sequential", "probe-and-predict")
"""The designs, in the order each adds its saving to the one above it."""

MIN_TRIALS = 2
"""Fewest trials a sequential cell runs before it may stop: two give a spread (docs/matrix.md:
``trials`` at least 2 to report a spread)."""

PROBES = 3
"""n measured per n-sweep: the largest n measures the per-position acceptance of every smaller
n, two n fix the cost line C(n) = d + v * n (crossbench.analysis.sweep), a third checks its
fit."""

FOLLOW_UPS = 2
"""Cells per sweep allowed for follow-up measurements: under the cost model the speedup
tau(n) / (d + v * n) is a concave function over an affine one, so the n faster than the
baseline form one interval with at most two ends; the n next to each end may need measuring
when its predicted interval straddles 1. The worst case, so the plan does not under-count."""

Statistic = Literal["mean", "median"]

PHASES = ("startup", "stop", "warmup", "scrape_write", "measured", "total")
"""The keys of a trial's ``phase_s`` the plan reads; ``other`` is total minus the rest."""


@dataclass(frozen=True)
class Figure:
    """One timing figure with where it came from: measured in a run, or assumed."""

    value: float
    measured: bool
    source: str


ASSUMED_STOP = Figure(0.0, False, "assumed: stop 0 s (not measured)")
"""The stop of an engine nothing measured."""

ASSUMED_OTHER = Figure(0.0, False, "assumed: other time per start 0 s (not measured)")
"""The time outside named phases of an engine nothing measured."""


@dataclass(frozen=True)
class RecordedTrial:
    """The phases of one finished trial of a recorded run."""

    concurrency: int
    output_tokens: int
    startup_s: float | None  # None: the trial reused a running server
    stop_s: float
    warmup_s: float
    scrape_s: float
    measured_s: float
    total_s: float
    start: str | None = None
    """``cold``, ``warm`` or ``partial`` where the engine records whether its start found its
    compile cache (:func:`crossbench.store.rundir.trial_start`); None elsewhere. Only cold and
    warm starts price the two kinds apart."""

    @property
    def other_s(self) -> float:
        """The trial's time outside every named phase."""
        return max(0.0, self.total_s - (self.startup_s or 0.0) - self.stop_s - self.warmup_s
                   - self.scrape_s - self.measured_s)

    @property
    def per_trial_s(self) -> float:
        """Scrapes, and for a trial on a running server its ``other`` too."""
        return self.scrape_s + (self.other_s if self.startup_s is None else 0.0)


@dataclass
class Recorded:
    """Trials read from recorded runs, by engine kind, and what was left out."""

    sources: list[str] = field(default_factory=list)
    trials: dict[str, list[RecordedTrial]] = field(default_factory=dict)
    gpus: dict[str, set[str]] = field(default_factory=dict)
    models: dict[str, set[str]] = field(default_factory=dict)
    failed: int = 0
    without_phases: int = 0


@dataclass(frozen=True)
class EngineTimings:
    """Per-start and per-trial figures of one engine kind, each measured or assumed."""

    kind: str
    startup: Figure
    """A start's start-up; where the recorded starts say cold or warm, a cold start's (the
    first of a configuration on a machine)."""
    stop: Figure
    other: Figure
    """Per start: the time of a trial outside its named phases (module docstring)."""
    warmup: Figure
    scrapes: Figure
    """Per trial: metrics scrapes and their writes."""
    rates: dict[int, Figure]
    """Decode rate by concurrency: requested output tokens per second of the measured phase."""
    estimate: Figure | None = None
    """The matrix's ``estimate_tok_s`` (assumed): the rate when no run measured the engine."""
    startup_warm: Figure | None = None
    """A warm start's start-up (a later start of a configuration, its compile cache found),
    where the recorded starts measured both kinds; None: every start costs ``startup``."""
    cold_per: Literal["config", "machine"] = "config"
    """What a cold start is the first of: a server ``config`` uration (vLLM) or the
    ``machine``'s starts of the engine (SGLang: :func:`registry.cold_start`)."""

    @property
    def start_s(self) -> float:
        """Seconds per server start: start-up, stop and the rest of a start's share (a cold
        start where warm and cold differ)."""
        return self.startup.value + self.stop.value + self.other.value

    @property
    def warm_start_s(self) -> float:
        """Seconds per later start of a configuration already started on the machine."""
        warm = self.startup_warm or self.startup
        return warm.value + self.stop.value + self.other.value

    @property
    def figures(self) -> dict[str, Figure]:
        """The per-start and per-trial figures by name."""
        return {"start-up": self.startup, "stop": self.stop, "other": self.other,
                "warm-up": self.warmup, "scrapes": self.scrapes}

    def rate(self, concurrency: int) -> tuple[float, str | None]:
        """The decode rate at ``concurrency`` and a note when it was not measured there."""
        if concurrency in self.rates:
            return self.rates[concurrency].value, None
        if not self.rates:
            assert self.estimate is not None
            return self.estimate.value, None
        below = [c for c in self.rates if c <= concurrency]
        use = max(below) if below else min(self.rates)
        return self.rates[use].value, (
            f"{self.kind} at concurrency {concurrency}: assumed the rate measured at "
            f"concurrency {use} (no trial at {concurrency}); "
            + ("more requests in flight usually decode faster, so this over-counts"
               if below else "fewer requests in flight usually decode slower, so this "
               "under-counts"))


@dataclass(frozen=True)
class PlanOptions:
    """The parameters of the designs (module docstring)."""

    block: int | None = None
    """Trials per server start in reuse and later designs; None: all of a cell's trials."""
    min_trials: int = MIN_TRIALS
    expected_trials_fraction: float | None = None
    """Expected share of a cell's trials a sequential cell runs; None: the best case."""
    probes: int = PROBES
    follow_ups: int = FOLLOW_UPS
    statistic: Statistic = "mean"
    startup_s: Mapping[str, float] = field(default_factory=dict)
    """Assumed start-up seconds by engine kind (``--startup KIND=S``)."""
    share: bool = False
    """Shared server starts in reuse and later designs: one start per server group and
    round, not per cell (the matrix's ``share_servers``)."""
    known_spread: bool = False
    """The matrix has a ``start_spread``: its sequential rule looks after every trial and
    may stop a cell on its first start (crossbench.runner.stopping)."""
    min_samples: int = 10
    """Paired requests before a known-spread stop (``sequential.min_samples``)."""
    look_every: int | None = None
    """Looks inside a trial (``sequential.look_every``), with a known spread: a cell that
    settles at its first look stops part-way into its first trial."""


@dataclass(frozen=True)
class DesignRow:
    """One design's expected GPU time for one engine of the matrix (or ``total``)."""

    design: str
    engine: str
    gpu_s: float
    ratio_to_naive: float
    server_starts: float
    trials: float
    cells: int


@dataclass(frozen=True)
class Plan:
    """What ``crossbench plan`` prints."""

    study: str
    cells: int
    trials_per_cell: int
    rows: list[DesignRow]
    timings: dict[str, EngineTimings]
    assumptions: list[str]
    notes: list[str]
    matrix_design: DesignRow | None = None
    """The design ``crossbench matrix`` runs this matrix in (:func:`matrix_design`), in total:
    one of the rows, or the reuse design at the matrix's own trials per start where the rows'
    reuse keeps a cell's trials on fewer starts; None where ``--share-servers`` plans it
    otherwise."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``crossbench plan --json``)."""
        return {
            "study": self.study, "cells": self.cells, "trials_per_cell": self.trials_per_cell,
            "matrix_design": asdict(self.matrix_design) if self.matrix_design else None,
            "designs": [asdict(r) for r in self.rows],
            "timings": {k: {**{f"{name}_s": asdict(getattr(t, name))
                               for name in ("startup", "stop", "other", "warmup", "scrapes")},
                            **({"startup_warm_s": asdict(t.startup_warm),
                                "cold_per": t.cold_per} if t.startup_warm else {}),
                            "decode_tok_s": {str(c): asdict(f) for c, f in sorted(t.rates.items())},
                            "estimate_tok_s": asdict(t.estimate) if t.estimate else None}
                        for k, t in sorted(self.timings.items())},
            "assumptions": self.assumptions, "notes": self.notes}


# -- recorded timings -------------------------------------------------------------------------

def _trial(work: TrialWork, entry: Any) -> RecordedTrial | None:
    """A trial's phases, or None when it has none usable."""
    phases = entry.get("phase_s") if isinstance(entry, dict) else None
    if not isinstance(phases, dict):
        return None
    got = {k: rundir.duration_s(phases.get(k)) for k in PHASES}
    if any(got[k] is None for k in ("warmup", "measured", "total")) or not got["measured"]:
        return None
    start = rundir.trial_start(entry)
    return RecordedTrial(work.concurrency, work.output_tokens, got["startup"],
                         got["stop"] or 0.0, got["warmup"] or 0.0, got["scrape_write"] or 0.0,
                         got["measured"] or 0.0, got["total"] or 0.0,
                         start.cache if start else None)


def read_recorded(paths: Sequence[Path]) -> Recorded:
    """Every finished trial with phases in the runs or archives at ``paths``.

    A path whose trials record no phases (an import, or a run from before phases were
    recorded) is a :class:`UserError`: it was asked for, and measures nothing.
    """
    from crossbench import open_run

    out = Recorded()
    for path in paths:
        found = 0
        with open_run(path) as frames:
            for cell in frames.run.cells:
                kind = str(cell.config.get("engine") or cell.coords.get("engine") or "?")
                entries = cell.manifest.get("trials")
                entries = entries if isinstance(entries, list) else []
                try:
                    work = trial_work(cell.load, f"{cell.id}: load")
                except UserError:  # a damaged recorded load: its trials measure nothing
                    out.without_phases += len(entries)
                    continue
                for entry in entries:
                    if not isinstance(entry, dict) or entry.get("status") != "ok":
                        out.failed += 1
                        continue
                    t = _trial(work, entry)
                    if t is None:
                        out.without_phases += 1
                        continue
                    found += 1
                    out.trials.setdefault(kind, []).append(t)
                    gpus = ((entry.get("provenance") or {}).get("gpu") or {}).get("gpus") or []
                    out.gpus.setdefault(kind, set()).update(
                        str(g["name"]) for g in gpus if isinstance(g, dict) and g.get("name"))
                    ref = (cell.config.get("model_refs") or {}).get("model")
                    if ref:
                        out.models.setdefault(kind, set()).add(str(ref))
        if not found:
            raise UserError(f"{path} records no per-trial phases (phase_s) in a finished "
                            "trial: nothing in it measures start-up or decode time",
                            "pass a run or archive made by `crossbench matrix` or `crossbench "
                            "run` (imports record no phases), or leave out --from to plan "
                            "from the matrix's estimate_tok_s (assumed figures)")
        out.sources.append(str(path))
    return out


def _measured(kind: str, trials: list[RecordedTrial], rec: Recorded,
              statistic: Statistic) -> EngineTimings:
    """An engine kind's timings from its recorded trials."""
    where = ", ".join(rec.sources)

    def fig(values: list[float], what: str = "trials") -> Figure:
        return Figure(statistics.fmean(values) if statistic == "mean"
                      else statistics.median(values), True,
                      f"measured: {statistic} of {len(values)} {what} in {where}")

    started = [t for t in trials if t.startup_s is not None]
    warm: Figure | None = None
    per_machine = kind in registry.names() and registry.cold_start(kind) == "machine"
    # a machine's later starts of such an engine are warm or partial (they add their own
    # kernels to the caches the first start filled): both price a later start
    later = ("warm", "partial") if per_machine else ("warm",)
    if started:
        by = {"cold": [t.startup_s for t in started
                       if t.start == "cold" and t.startup_s is not None],
              "warm": [t.startup_s for t in started
                       if t.start in later and t.startup_s is not None]}
        if by["cold"] and by["warm"]:  # both kinds measured
            cold_what, warm_what = (
                ("cold starts (the machine's first of the engine, its kernel caches empty)",
                 "later starts (warm or partial: the kernel caches found)") if per_machine
                else ("cold starts (a configuration's first on its machine)",
                      "warm starts (its compile cache found)"))
            startup, warm = fig(by["cold"], cold_what), fig(by["warm"], warm_what)
        else:
            startup = fig([t.startup_s for t in started if t.startup_s is not None])
        stop = fig([t.stop_s for t in started])
        other = fig([t.other_s for t in started])
    else:  # every trial reused a server (fresh_server: false): no start-up measured
        startup, stop, other = _assumed_startup(kind, {}), ASSUMED_STOP, ASSUMED_OTHER
    rates: dict[int, Figure] = {}
    for conc in sorted({t.concurrency for t in trials}):
        at = [t for t in trials if t.concurrency == conc]
        if statistic == "mean":  # ratio of sums: the rate that adds the measured times up
            rate = sum(t.output_tokens for t in at) / sum(t.measured_s for t in at)
        else:
            rate = statistics.median(t.output_tokens / t.measured_s for t in at)
        rates[conc] = Figure(rate, True, f"measured: decode at c{conc}, {statistic} of "
                             f"{len(at)} trials in {where} (requested output tokens per "
                             "second of the measured phase)")
    return EngineTimings(kind, startup, stop, other,
                         fig([t.warmup_s for t in trials]), fig([t.per_trial_s for t in trials]),
                         rates, startup_warm=warm,
                         cold_per="machine" if per_machine else "config")


def _assumed_startup(kind: str, given: Mapping[str, float]) -> Figure:
    if kind in given:
        return Figure(given[kind], False, f"assumed: --startup {kind}={given[kind]:g}")
    guess = registry.planning_startup_s(kind)
    if guess is None:
        raise UserError(f"nothing measured the start-up of engine {kind} and it registers no "
                        "start-up figure", f"pass --from RUN with trials of {kind}, or "
                        f"--startup {kind}=SECONDS")
    return Figure(guess, False, f"assumed: {kind}'s registered start-up figure "
                  f"({guess:g} s), not a measurement")


def _assumed(kind: str, m: Matrix, warmup_tokens: float, opts: PlanOptions) -> EngineTimings:
    """An engine kind's timings with nothing measured: registered start-up, estimate_tok_s."""
    if not m.estimate_tok_s:
        raise UserError(f"nothing measured engine {kind} and the matrix has no estimate_tok_s",
                        f"pass --from RUN with trials of {kind} (a run or archive of "
                        "`crossbench matrix`), or set estimate_tok_s in the matrix")
    est = Figure(m.estimate_tok_s, False, "assumed: the matrix's estimate_tok_s")
    warm = decode_estimate_s(m, warmup_tokens) or 0.0
    return EngineTimings(
        kind, _assumed_startup(kind, opts.startup_s), ASSUMED_STOP, ASSUMED_OTHER,
        Figure(warm, False, "assumed: the warm-up tokens at estimate_tok_s"),
        Figure(0.0, False, "assumed: metrics scrapes 0 s (not measured)"), {}, est)


def engine_timings(m: Matrix, cells: list[Cell], rec: Recorded | None,
                   opts: PlanOptions) -> tuple[dict[str, EngineTimings], list[str]]:
    """Timings of every engine kind of the matrix, and notes on what fell back."""
    notes: list[str] = []
    out: dict[str, EngineTimings] = {}
    for kind in sorted({c.engine_kind for c in cells}):
        trials = (rec.trials.get(kind) or []) if rec is not None else []
        if trials:
            assert rec is not None
            t = _measured(kind, trials, rec, opts.statistic)
            if kind in opts.startup_s:  # given on the command line: it replaces the measured
                t = replace(t, startup=_assumed_startup(kind, opts.startup_s),
                            startup_warm=None)
            out[kind] = t
            continue
        mine = [c for c in cells if c.engine_kind == kind]
        warm = statistics.fmean(trial_work(c.load).warmup_tokens for c in mine)
        out[kind] = _assumed(kind, m, warm, opts)
        if rec is not None:
            notes.append(f"engine {kind}: no trial of it in {', '.join(rec.sources)}; its "
                         "figures are assumed (registered start-up, estimate_tok_s)")
    return out, notes


# -- the designs ------------------------------------------------------------------------------

def probe_selection(cells: list[Cell], probes: int,
                    follow_ups: int) -> tuple[set[str], int, int]:
    """(ids of the cells measured, probe cells, follow-up cells) of probe-and-predict.

    Of each sweep with more n than ``probes``, the n at evenly spaced positions from the
    smallest to the largest are probed (:func:`crossbench.runner.matrix.probe_split`, as the
    matrix runs them), and up to ``follow_ups`` of the rest are counted as
    follow-ups (which ones is decided after the probes; a sweep's cells differ only in n, so
    any of them costs the same here). Every other cell is measured.
    """
    measured = {c.id for c in cells}
    n_probes = n_follow = 0
    for sweep in sweeps(cells):
        picked, rest = probe_split(sweep, probes)
        if not rest:
            continue
        follow = rest[:follow_ups]
        n_probes += len(picked)
        n_follow += len(follow)
        measured -= {c.id for c in rest[len(follow):]}
    return measured, n_probes, n_follow


def expected_trials(trials: int, opts: PlanOptions) -> float:
    """Expected trials of a sequential cell of at most ``trials``."""
    low = min(opts.min_trials, trials)
    if opts.expected_trials_fraction is None:
        return float(low)
    return min(float(trials), max(float(low), opts.expected_trials_fraction * trials))


def spread_first_look(opts: PlanOptions, requests: int) -> int:
    """The first trial a known-spread rule may stop at: ``min_trials``, and enough trials of
    ``requests`` pairs each for ``min_samples``."""
    return max(1, opts.min_trials, math.ceil(opts.min_samples / max(1, requests)))


def within_share(opts: PlanOptions, requests: int) -> float:
    """The share of its first trial's measured requests a known-spread cell sends before its
    first look that may stop it: all of them, or with ``look_every`` the looks needed for
    ``min_samples`` pairs (1 when the first look is at a trial's end)."""
    if opts.look_every is None or not opts.known_spread or opts.min_trials > 1:
        return 1.0
    needed = math.ceil(opts.min_samples / opts.look_every) * opts.look_every
    return min(1.0, needed / max(1, requests))


def matrix_design(m: Matrix) -> str:
    """The design ``crossbench matrix`` runs ``m`` in: probe-and-predict or sequential where
    the matrix sets them, reuse where it keeps a server for more than one trial or shares
    starts, else naive (a fresh start per trial)."""
    if m.probe_predict is not None:
        return "probe-and-predict"
    if m.sequential is not None:
        return "sequential"
    return "reuse" if m.block > 1 or m.share_servers else "naive"


def make_plan(m: Matrix, cells: list[Cell], rec: Recorded | None,
              opts: PlanOptions | None = None) -> Plan:
    """Expected GPU time of each design, per engine id of the matrix and in total."""
    opts = opts or PlanOptions()
    work = {c.id: trial_work(c.load) for c in cells}  # a bad load is named before anything
    timings, notes = engine_timings(m, cells, rec, opts)
    trials, requests = m.trials, min(w.requests for w in work.values())
    block = min(opts.block or trials, trials)
    n_blocks = math.ceil(trials / block)
    seq_block = block if block > 1 and n_blocks >= opts.min_trials else 1
    # expected server starts of a sequential cell (its unit), and the trials they hold
    seq_starts = expected_trials(math.ceil(trials / seq_block), opts)
    seq = min(float(trials), seq_starts * seq_block)
    if opts.known_spread:  # a look per trial, on the starts of blocks of `block` trials
        seq_block = block
        first = spread_first_look(opts, requests)
        seq = expected_trials(trials, replace(opts, min_trials=first))
        seq_starts = float(math.ceil(seq / block))
    share = within_share(opts, requests) if seq <= 1 else 1.0
    rate_notes: dict[str, None] = {}
    # cell id -> (per start, per trial outside decode, decode per trial, per warm start)
    costs: dict[str, tuple[float, float, float, float]] = {}
    for c in cells:
        t = timings[c.engine_kind]
        rate, note = t.rate(work[c.id].concurrency)
        if note:
            rate_notes[note] = None
        compiles = c.engine_config.get("compile_cache") == "off"  # every start compiles
        costs[c.id] = (t.start_s, t.warmup.value + t.scrapes.value,
                       work[c.id].output_tokens / rate, t.start_s if compiles else t.warm_start_s)
    # (trials, server starts, share of a trial's decode a speculative cell sends) per cell;
    # sequential in its unit, a start (module docstring); baselines send every request
    shape = {"naive": (float(trials), float(trials), 1.0),
             "reuse": (float(trials), float(math.ceil(trials / block)), 1.0),
             "sequential": (seq, seq_starts, share)}
    # who shares a start: with share_servers, a server group (naive never shares)
    config = server_groups(cells)  # one server configuration: one compile-cache entry
    group = config if opts.share else {c.id: i for i, c in enumerate(cells)}

    def cost(design: str, mine: list[Cell]) -> tuple[float, float]:
        """(GPU seconds, server starts) of ``mine`` under ``design``; a configuration's
        first start is cold, its later ones warm (where the engine's timings differ)."""
        n_trials, starts, part = shape[design]
        # a start is paid once per group, by its first cell (a group is one engine kind)
        first: dict[str | int, Cell] = {}
        for c in mine:
            first.setdefault(c.id if design == "naive" else group[c.id], c)
        started: set[str | int] = set()
        start_s = 0.0
        for c in first.values():  # cold: a configuration's first start, or the machine's
            key = (c.engine_kind if timings[c.engine_kind].cold_per == "machine"
                   else config[c.id])
            cold = 0.0 if key in started else min(1.0, starts)
            started.add(key)
            start_s += cold * costs[c.id][0] + (starts - cold) * costs[c.id][3]
        return (start_s
                + sum(n_trials * (costs[c.id][1] + costs[c.id][2]
                                  * (part if c.baseline is not None else 1.0))
                      for c in mine), starts * len(first))

    def total(design: str) -> float:
        return cost(design, cells)[0]

    probe_base = "reuse" if total("reuse") <= total("sequential") else "sequential"
    shape["probe-and-predict"] = shape[probe_base]
    engines = list(dict.fromkeys(c.coords["engine"] for c in cells))
    rows: list[DesignRow] = []
    naive: dict[str, float] = {}
    probed = probe_selection(cells, opts.probes, opts.follow_ups)[0]
    for design in DESIGNS:
        n_trials = shape[design][0]
        chosen = [c for c in cells if design != "probe-and-predict" or c.id in probed]
        for eid in [*engines, "total"]:
            mine = [c for c in chosen if eid in ("total", c.coords["engine"])]
            gpu, n_starts = cost(design, mine)
            if design == "naive":
                naive[eid] = gpu
            rows.append(DesignRow(design, eid, gpu, gpu / naive[eid] if naive[eid] else 0.0,
                                  n_starts, n_trials * len(mine), len(mine)))
    assumptions = _assumptions(m, cells, timings, opts, block, seq, probe_base, seq_block)
    if share < 1.0:
        assumptions.append(f"looks inside a trial (look_every {opts.look_every}): a settled "
                           f"speculative cell sends {share:.0%} of its first trial's requests "
                           "(enough for min_samples); baselines send every request")
    notes += list(rate_notes)
    if not m.fresh_server:
        notes.append("the matrix sets fresh_server: false: it keeps a server across a cell's "
                     "trials already, so naive over-counts what it will run")
    if rec is not None:
        notes += _recorded_notes(m, cells, rec)
    if trials > 1 and n_blocks == 1 and not opts.known_spread:
        k = several_starts_block(trials)
        notes.append(f"reuse keeps one server start per cell ({block} of {trials} trials per "
                     "start): its verdicts carry the analysis's single_start warning, since "
                     "an interval over one start leaves out start-to-start variation; "
                     f"--block {k} costs a design of {math.ceil(trials / k)} starts per cell; "
                     "or analyse with a known start spread (`crossbench analyze RUN "
                     "--start-spread FILE`), whose interval covers the starts")
    own: DesignRow | None = None
    if opts.share == m.share_servers:
        design = matrix_design(m)
        if design == "reuse" and block != m.block:  # the matrix's own block, one start a round
            shape["own"] = (float(trials), float(math.ceil(trials / m.block)), 1.0)
            gpu, n_starts = cost("own", cells)
            own = DesignRow(f"reuse at {m.block} trial(s) a start", "total", gpu,
                            gpu / naive["total"] if naive["total"] else 0.0, n_starts,
                            trials * len(cells), len(cells))
        else:
            own = next(r for r in rows if (r.design, r.engine) == (design, "total"))
    return Plan(m.study.name, len(cells), trials, rows, timings, assumptions, notes, own)


def _assumptions(m: Matrix, cells: list[Cell], timings: dict[str, EngineTimings],
                 opts: PlanOptions, block: int, seq: float,
                 probe_base: str, seq_block: int) -> list[str]:
    out = []
    for kind, t in sorted(timings.items()):
        assumed = [name for name, f in t.figures.items() if not f.measured]
        if not t.rates:
            assumed.append("decode rate")
        if assumed:
            out.append(f"{kind}: {', '.join(assumed)} assumed, not measured (see timings)")
    for kind, t in sorted(timings.items()):
        if t.startup_warm is not None and t.cold_per == "machine":
            out.append(f"{kind}: the machine's first start of the engine costs a cold "
                       f"start-up ({t.startup.value:.1f} s: its kernel caches empty), every "
                       f"later start a warm one ({t.startup_warm.value:.1f} s: the caches "
                       "found, a configuration's own kernels added); a machine that served the "
                       "engine before (a chained round) makes its first start warm too, so "
                       "this errs long")
        elif t.startup_warm is not None:
            out.append(f"{kind}: a server configuration's first start costs a cold start-up "
                       f"({t.startup.value:.1f} s), its later starts a warm one "
                       f"({t.startup_warm.value:.1f} s: its compile cache, kept on the machine, "
                       "found; compile_cache: off makes every start cold); a cache carried from "
                       "an earlier lease on the same GPU model makes first starts warm too, so "
                       "this errs long")
    out.append(f"reuse: {block} trial(s) per server start; between trials on one server a "
               "cache reset, assumed 0 s (not measured), and the warm-up of every trial")
    if opts.share:
        n_groups = len(set(server_groups(cells).values()))
        out.append(f"shared servers: the {len(cells)} cells form {n_groups} server group(s) "
                   "(same engine, models and server settings); in every design but naive a "
                   "start serves its group's block of trials in a round")
    if opts.known_spread:
        how = ("best case, every cell settles at its first look"
               if opts.expected_trials_fraction is None
               else f"--expected-trials-fraction {opts.expected_trials_fraction:g}")
        out.append(f"sequential with the matrix's known start spread: a look after every "
                   f"trial; {how} (min_trials {opts.min_trials}, min_samples "
                   f"{opts.min_samples}): {seq:g} of {m.trials} trials on "
                   f"{math.ceil(seq / block)} start(s) of {block} trials; a cell near a "
                   "speedup of 1 runs all its trials, on every start planned")
    elif opts.expected_trials_fraction is None:
        unit = (f"server starts of {seq_block} trials (the rule looks once per start)"
                if seq_block > 1 else "trials, each on its own server start (blocks of "
                f"{block} give fewer than min_trials = {opts.min_trials} starts)")
        out.append(f"sequential: best case, every cell settles after min_trials = "
                   f"{opts.min_trials} {unit}: {seq:g} of {m.trials} trials; the real figure "
                   "depends on the effect sizes (a cell near a speedup of 1 runs all its "
                   "trials)")
    else:
        out.append(f"sequential: {seq:g} expected trials per cell (--expected-trials-fraction "
                   f"{opts.expected_trials_fraction:g} of {m.trials}, at least min_trials "
                   f"{opts.min_trials}); the real figure depends on the effect sizes")
    measured, n_probes, n_follow = probe_selection(cells, opts.probes, opts.follow_ups)
    n_sweeps = len([s for s in sweeps(cells) if len(s) > opts.probes])
    out.append(f"probe-and-predict: {n_sweeps} n-sweep(s) with more than {opts.probes} n: "
               f"{n_probes} probe cells (smallest, largest and evenly spaced n) plus an "
               f"allowance of {n_follow} follow-up cells (up to {opts.follow_ups} per sweep, "
               f"where a prediction straddles 1); {len(cells) - len(measured)} cells predicted, "
               f"not measured; on top of {probe_base}, the cheaper of reuse and sequential "
               "for this matrix")
    return out


def _recorded_notes(m: Matrix, cells: list[Cell], rec: Recorded) -> list[str]:
    notes = []
    for kind in sorted(rec.trials):
        have = rec.models.get(kind, set())
        planned = dict.fromkeys(c.model_refs.get("model", "") for c in cells
                                if c.engine_kind == kind)
        for ref in [r for r in planned if r and have and r not in have]:
            notes.append(f"{kind}: target {ref} was not measured: its cells take the timings of "
                         f"{', '.join(sorted(have))}")
    for kind in sorted(rec.trials):
        gpus, models = sorted(rec.gpus.get(kind, ())), sorted(rec.models.get(kind, ()))
        notes.append(f"{kind} measured on {', '.join(gpus) or 'an unrecorded GPU'} with "
                     f"{', '.join(models) or 'unrecorded models'}: another GPU or model "
                     "changes start-up and rates")
        if m.hardware.gpu and gpus and m.hardware.gpu not in gpus:
            notes.append(f"{kind}: the matrix expects {m.hardware.gpu}, the timings are from "
                         f"{', '.join(gpus)}")
    if rec.failed:
        notes.append(f"{rec.failed} failed or unfinished trial(s) in the runs left out")
    if rec.without_phases:
        notes.append(f"{rec.without_phases} finished trial(s) without phases left out")
    return notes


# -- text -------------------------------------------------------------------------------------

def hms(seconds: float) -> str:
    """``h:mm:ss`` of a duration, rounded to the second."""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _trials_text(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def format_plan(plan: Plan, source: str) -> str:
    """The plan as text: the designs table, the timings, assumptions and notes."""
    lines = [f"plan for {source} (study {plan.study}): {plan.cells} cells x "
             f"{plan.trials_per_cell} trials",
             f"{'design':<18} {'engine':<12} {'GPU time':>10} {'vs naive':>8} {'starts':>7} "
             f"{'trials':>7} {'cells':>6}"]
    for r in plan.rows:
        lines.append(f"{r.design:<18} {r.engine:<12} {hms(r.gpu_s):>10} "
                     f"{r.ratio_to_naive:>8.2f} {_trials_text(r.server_starts):>7} "
                     f"{_trials_text(r.trials):>7} {r.cells:>6}")
    own = plan.matrix_design
    if own is not None:
        lines.append(f"crossbench matrix runs it as {own.design}: {hms(own.gpu_s)} of GPU "
                     f"time, {_trials_text(own.server_starts)} server starts (machine setup, "
                     "builds and transfers not counted)")
    else:
        lines.append("--share-servers differs from the matrix's share_servers: its own design "
                     "is not planned here")
    lines.append("timings per engine kind (M measured, A assumed; other: a trial's time "
                 "outside its named phases, counted per server start):")

    def mark(x: Figure) -> str:
        return "M" if x.measured else "A"

    def part(figs: dict[str, Figure], *keys: str) -> str:
        return " + ".join(f"{k} {figs[k].value:.1f} s {mark(figs[k])}" for k in keys)

    for kind, t in sorted(plan.timings.items()):
        shown = [*t.figures.values(), *t.rates.values()]
        rates = ", ".join(f"{r.value:.1f} tok/s at c{c} {mark(r)}"
                          for c, r in sorted(t.rates.items()))
        if not t.rates and t.estimate is not None:
            rates = f"{t.estimate.value:g} tok/s {mark(t.estimate)} (estimate_tok_s)"
            shown.append(t.estimate)
        warm = "" if t.startup_warm is None else \
            f" (a warm start: start-up {t.startup_warm.value:.1f} s {mark(t.startup_warm)})"
        if t.startup_warm is not None:
            shown.append(t.startup_warm)
        lines.append(f"  {kind}: per server start: {part(t.figures, 'start-up', 'stop', 'other')}"
                     f"{warm}; per trial: {part(t.figures, 'warm-up', 'scrapes')} + decode "
                     f"({rates})")
        lines += [f"    {src}" for src in dict.fromkeys(x.source for x in shown)]
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in plan.assumptions]
    if plan.notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in plan.notes]
    return "\n".join(lines)
