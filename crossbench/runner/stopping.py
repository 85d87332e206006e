"""Sequential stopping in a running matrix (``sequential:`` in the matrix file).

After every finished trial, each speculative cell whose baseline has finished the same
trials is looked at with :class:`crossbench.analysis.sequential.SequentialRule`: the per-trial
mean log ratio of its decode rate against its baseline's, request by request as the analysis
pairs them. A cell whose decision stops (``faster``, ``slower``, ``equivalent``) runs no
more trials; a baseline stops once every speculative cell paired with it has. Decisions are
appended to ``stops.jsonl`` in the run directory by the driver alone (one line per stopped
cell), so ``--resume`` skips what stopped before, and ``crossbench status`` counts those
trials as ``stopped``, not missing. The reported verdict stays the analysis's bootstrap over
the trials that ran. Both executors use it (with Ray the driver decides as lanes report).

With server reuse (``trials_per_start`` K > 1) the unit is the server start, not the trial:
K reused trials are one start's worth of start-to-start variation, as the analysis treats
them. The rule then looks once per completed block of K trials (both cells of the pair
complete), each prompt's log ratio averaged over the block's trials, and its ``min_trials``
and planned count are server starts. A block with a failed trial never completes, so the
cell runs on to its planned trials.

With a known start spread (the matrix's ``start_spread``, copied into the run directory) the
rule is :class:`crossbench.analysis.sequential.SpreadRule`: it looks after every completed
trial, reused ones too (they add pairs, not starts), and its interval adds the spread's share
for the server starts each side ran so far, so a clear cell can stop on one start while one
near 1 goes on to fresh starts (with ``trials_per_start`` below ``trials``). ``min_trials``
then counts trials and ``min_samples`` paired requests; the stop record carries each side's
starts. The analysis of the run uses the same spread (``crossbench analyze``), so the
reported interval is the fixed-design counterpart of the one the rule stopped on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from crossbench.analysis import stats
from crossbench.analysis.metrics import request_figures
from crossbench.analysis.paired import StatsOptions, decode_speedup, pair
from crossbench.analysis.sequential import SequentialRule, SpreadRule, trial_log_ratios
from crossbench.analysis.start_spread import (
    Prior,
    StartSpread,
    pair_spreads,
    run_start_spread,
    within_se,
)
from crossbench.errors import UserError
from crossbench.runner.matrix import Cell, Matrix
from crossbench.store.atomic import JsonlAppender
from crossbench.store.rundir import STOPS, read_records, read_stops


class StopController:
    """Decides, after each trial, which cells of a matrix may stop (module docstring)."""

    def __init__(self, m: Matrix, out: Path, cells: dict[str, Cell],
                 cell_dirs: dict[str, Path]) -> None:
        assert m.sequential is not None
        s = m.sequential
        self.block, self.trials = m.block, m.trials
        self.known: StartSpread | None = run_start_spread(out)
        self.rule: SequentialRule | SpreadRule
        if self.known is None:
            self.rule = SequentialRule(max_trials=math.ceil(m.trials / m.block), alpha=s.alpha,
                                       min_trials=s.min_trials,
                                       min_prompts=s.min_prompts, equivalence=s.equivalence,
                                       spending=s.spending)
            self.unit = self.block  # a look per server start
        else:
            self.rule = SpreadRule(max_trials=m.trials, alpha=s.alpha, min_trials=s.min_trials,
                                   min_samples=s.min_samples, equivalence=s.equivalence,
                                   spending=s.spending)
            self.unit = 1  # a look per trial: the spread stands for the starts not yet run
        self.out, self.cells, self.dirs = out, cells, cell_dirs
        self.stopped = read_stops(out)
        self.looked: dict[str, int] = {}

    def skip(self, cid: str) -> bool:
        """Whether ``cid`` stopped: its remaining trials are not run."""
        return cid in self.stopped

    def after_trial(self, cid: str, done: dict[tuple[str, int], dict[str, Any]],
                    progress: Any) -> None:
        """Look at every speculative cell the finished trial of ``cid`` concerns."""
        cell = self.cells[cid]
        spec = [cid] if cell.baseline else [c.id for c in self.cells.values()
                                            if c.baseline == cid]
        with JsonlAppender(self.out / STOPS) as sink:
            for sid in spec:
                if sid in self.stopped:
                    continue
                base = self.cells[sid].baseline
                assert base is not None
                ok = sorted(t for (c, t), r in done.items() if c == sid and r["status"] == "ok"
                            and done.get((base, t), {}).get("status") == "ok")
                units = self._complete_units(ok)
                if len(units) < self.rule.min_trials or self.looked.get(sid) == len(units):
                    continue
                self.looked[sid] = len(units)
                used = [t for t in ok if t // self.block in units]
                decision = self._decide(sid, base, used)
                if decision is None or decision["action"] == "continue":
                    continue
                prior = decision.get("start_prior") or {}
                n_starts = prior.get("spec_starts", len(units) if self.block > 1 else None)
                record = {"cell": sid, "baseline": base, "trials": used,
                          **({"server_starts": n_starts} if self.block > 1 else {}),
                          **decision}
                sink.write(record)
                self.stopped[sid] = record
                starts = (f" on {n_starts} server start{'' if n_starts == 1 else 's'}"
                          if self.block > 1 else "")
                progress(f"{sid}: stopped after {len(used)} trials{starts}: "
                         f"{decision['reason']}")
            b = cell.baseline or cid  # the baseline of every pair this trial concerns
            partners = [c.id for c in self.cells.values() if c.baseline == b]
            if b not in self.stopped and partners and all(p in self.stopped for p in partners):
                record = {"cell": b, "baseline": None, "action": "partners_stopped",
                          "reason": "every speculative cell paired with it stopped"}
                sink.write(record)
                self.stopped[b] = record
                progress(f"{b}: stopped: {record['reason']}")

    def _complete_units(self, ok: list[int]) -> set[int]:
        """Units of a look (blocks of ``unit`` trials: a server start, or one trial with a
        known spread) whose every trial finished ok in both cells of the pair."""
        have = set(ok)
        return {u for u in {t // self.unit for t in ok}
                if all(t in have for t in range(u * self.unit,
                                                min((u + 1) * self.unit, self.trials)))}

    def _decide(self, sid: str, base: str, trials: list[int]) -> dict[str, Any] | None:
        spec_figs, _ = request_figures(read_records(self.dirs[sid]))
        base_figs, _ = request_figures(read_records(self.dirs[base]))
        keep = set(trials)
        p = pair([f for f in spec_figs if f.trial in keep],
                 [f for f in base_figs if f.trial in keep])
        logs, prompts, cats, ts, starts = [], [], [], [], []
        for s, b in zip(p.spec, p.base, strict=True):
            r = decode_speedup(s, b)
            if r is not None and r > 0:
                logs.append(math.log(r))
                prompts.append(s.prompt_id)
                cats.append(s.category)
                ts.append(s.trial)
                starts.append((s.server_start, b.server_start))
        try:
            if isinstance(self.rule, SpreadRule):
                return self._decide_known(sid, trials, logs, prompts, cats, ts, starts)
            units = [t // self.block for t in ts]  # the unit: a server start
            return self.rule.decide(trial_log_ratios(logs, prompts, units)).to_record()
        except UserError as e:  # e.g. no spread yet, too few prompts: keep running
            return {"action": "continue", "reason": e.one_line()}

    def _decide_known(self, sid: str, used: list[int], logs: list[float], prompts: list[str],
                      cats: list[str], trials: list[int],
                      starts: list[tuple[int, int]]) -> dict[str, Any]:
        """The known-spread rule's decision over the pairs of the ``used`` trials (module
        docstring): the within-start error from the analysis's prompt bootstrap, each side's
        starts; every used trial is a look, those without a pair too."""
        assert isinstance(self.rule, SpreadRule) and self.known is not None
        cell = self.cells[sid]
        got = pair_spreads(self.known, cell.engine_kind, str(cell.engine_config["spec"]["type"]))
        if isinstance(got, str):  # validate_cells refuses such a matrix before it runs
            raise UserError(got, "measure the engine's start spread")
        opts = StatsOptions().for_run("matrix")
        strata = cats if opts.strata == "category" else ["all"] * len(logs)
        within = stats.ratio_interval(logs, prompts, strata, opts.resamples, opts.seed,
                                      opts.level)
        per_trial = [trials.count(t) for t in used]
        prior = Prior(got[0], got[1], got[2], len({s for s, _ in starts}),
                      len({b for _, b in starts}))
        mean = math.fsum(logs) / len(logs) if logs else None
        return self.rule.decide(prior, mean, within_se(within, opts.level),
                                per_trial).to_record()
