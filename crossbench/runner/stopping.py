"""Sequential stopping in a running matrix (``sequential:`` in the matrix file).

After every finished trial, each speculative cell whose baseline has finished the same trials
is looked at with :class:`crossbench.analysis.sequential.SequentialRule` (per-trial mean log
ratios of the decode rate, paired as the analysis pairs them); a stopped cell runs no more
trials, and a baseline stops once every cell paired with it has. The driver alone appends the
decisions to ``stops.jsonl``, which ``--resume`` and ``crossbench status`` read. With
``trials_per_start`` K > 1 the unit is the server start (a look per completed block of K
trials of both cells). With a known start spread the rule is
:class:`~crossbench.analysis.sequential.SpreadRule`, looking after every trial and, with
``look_every``, inside a trial too (:meth:`StopController.look`). The rules and their tests:
docs/matrix.md, "Sequential stopping" and its sections.
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
    effective_starts,
    pair_spreads,
    run_start_spread,
    within_se,
)
from crossbench.errors import UserError
from crossbench.runner.matrix import Cell, Matrix, trial_work
from crossbench.runner.single import Look
from crossbench.store.atomic import JsonlAppender
from crossbench.store.rundir import STOPS, read_records, read_stops


class StopController:
    """Decides, after each trial, which cells of a matrix may stop (module docstring)."""

    def __init__(self, m: Matrix, out: Path, cells: dict[str, Cell],
                 cell_dirs: dict[str, Path]) -> None:
        assert m.sequential is not None
        s = m.sequential
        self.block, self.trials, self.min_units = m.block, m.trials, s.min_trials
        self.every: int | None = None  # look_every, when a trial has looks inside it
        self.per_trial = 1  # planned looks per trial
        self.warmup: dict[str, int] = {}
        self.known: StartSpread | None = run_start_spread(out)
        self.rule: SequentialRule | SpreadRule
        if self.known is None:
            self.rule = SequentialRule(max_trials=math.ceil(m.trials / m.block), alpha=s.alpha,
                                       min_trials=s.min_trials,
                                       min_prompts=s.min_prompts, equivalence=s.equivalence,
                                       spending=s.spending)
            self.unit = self.block  # a look per server start
        else:
            # looks per trial: 1, or its parts of look_every measured requests
            work = {cid: trial_work(c.load) for cid, c in cells.items()}
            requests = max((w.requests for w in work.values()), default=1)
            self.every = s.look_every if s.look_every is not None and \
                s.look_every < requests else None
            self.per_trial = -(-requests // self.every) if self.every else 1
            self.warmup = {cid: w.warmup_requests for cid, w in work.items()}
            self.rule = SpreadRule(max_trials=m.trials * self.per_trial, alpha=s.alpha,
                                   min_trials=(s.min_trials - 1) * self.per_trial + 1,
                                   min_samples=s.min_samples, equivalence=s.equivalence,
                                   spending=s.spending)
            self.unit = 1  # a look per trial: the spread stands for the starts not yet run
        self.out, self.cells, self.dirs = out, cells, cell_dirs
        self.stopped = read_stops(out)
        self.looked: dict[str, int] = {}
        self.cut: set[tuple[str, int]] = set()  # trials a look inside them ended
        # stops decided inside a trial, until the trial is journaled: (trials, decision, sent)
        self.pending: dict[tuple[str, int], tuple[list[int], dict[str, Any], int]] = {}

    def look(self, cid: str, t: int, done: dict[tuple[str, int], dict[str, Any]],
             progress: Any) -> Look | None:
        """The looks inside trial ``t`` of ``cid`` (``sequential.look_every``), or None: only
        a speculative cell, not stopped, whose baseline's trial ``t`` finished ok has them
        (baselines run first in every round)."""
        cell = self.cells[cid]
        if self.every is None or cell.baseline is None or cid in self.stopped or \
                done.get((cell.baseline, t), {}).get("status") != "ok":
            return None

        def ask(sent: int) -> str | None:
            return self._look_within(cid, t, sent, done, progress)

        return Look(self.every, ask)

    def _look_within(self, sid: str, t: int, sent: int,
                     done: dict[tuple[str, int], dict[str, Any]], progress: Any) -> str | None:
        """Look ``sent`` requests into trial ``t`` of ``sid``: a stop ends the trial and is
        recorded as after a trial once the trial is journaled ok; a start no further request
        could settle (:meth:`SpreadRule.can_settle`) ends the trial too."""
        assert isinstance(self.rule, SpreadRule) and self.every is not None
        base = self.cells[sid].baseline
        assert base is not None
        used = [*sorted(u for (c, u), r in done.items() if c == sid and u < t
                        and r["status"] == "ok"
                        and done.get((base, u), {}).get("status") == "ok"), t]
        at = t * self.per_trial + -(-sent // self.every)
        decision = self._decide(sid, base, used, at)
        if decision is None:
            return None
        if decision["action"] != "continue":
            self.cut.add((sid, t))
            # recorded by after_trial, once the trial is journaled ok: a kill before that
            # leaves no stop resting on records a resume drops
            self.pending[(sid, t)] = (used, decision, sent)
            return f"stopped: {decision['reason']}"
        mean, prior = decision.get("estimate_log"), decision.get("_prior")
        end = (t + 1) * self.per_trial
        if mean is None or prior is None or end > self.rule.max_trials or \
                self.rule.can_settle(prior, mean, decision["_pairs"], end):
            return None
        self.cut.add((sid, t))
        return ("no more requests on this server start could settle the cell (the known "
                "spread of its starts dominates): going on to the next start")

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
            for (sid, t), (kept, found, sent) in list(self.pending.items()):
                if sid == cid:
                    del self.pending[(sid, t)]
                    if done.get((sid, t), {}).get("status") == "ok" and cell.baseline:
                        self._record(sink, sid, cell.baseline, kept, found, progress,
                                     {"last_trial_requests": sent})
            for sid in spec:
                if sid in self.stopped:
                    continue
                base = self.cells[sid].baseline
                assert base is not None
                ok = sorted(t for (c, t), r in done.items() if c == sid and r["status"] == "ok"
                            and done.get((base, t), {}).get("status") == "ok")
                units = self._complete_units(ok)
                if len(units) < self.min_units or self.looked.get(sid) == len(units):
                    continue
                self.looked[sid] = len(units)
                used = [t for t in ok if t // self.block in units]
                if (sid, max(used)) in self.cut:
                    continue  # the look that ended that trial was its last
                decision = self._decide(sid, base, used, (max(used) + 1) * self.per_trial)
                if decision is None or decision["action"] == "continue":
                    continue
                self._record(sink, sid, base, used, decision, progress)
            b = cell.baseline or cid  # the baseline of every pair this trial concerns
            partners = [c.id for c in self.cells.values() if c.baseline == b]
            if b not in self.stopped and partners and all(p in self.stopped for p in partners):
                record = {"cell": b, "baseline": None, "action": "partners_stopped",
                          "reason": "every speculative cell paired with it stopped"}
                sink.write(record)
                self.stopped[b] = record
                progress(f"{b}: stopped: {record['reason']}")

    def _record(self, sink: JsonlAppender, sid: str, base: str, used: list[int],
                decision: dict[str, Any], progress: Any,
                extra: dict[str, Any] | None = None) -> None:
        """Append the stop of ``sid`` (its decision over the ``used`` trials) and say it."""
        decision = {k: v for k, v in decision.items() if not k.startswith("_")}
        n_starts = len(used) if self.block == 1 else len({t // self.block for t in used})
        record = {"cell": sid, "baseline": base, "trials": used,
                  **({"server_starts": n_starts} if self.block > 1 else {}),
                  **(extra or {}), **decision}
        sink.write(record)
        self.stopped[sid] = record
        starts = (f" on {n_starts} server start{'' if n_starts == 1 else 's'}"
                  if self.block > 1 else "")
        within = (f" ({extra['last_trial_requests']} requests into the last)"
                  if extra and "last_trial_requests" in extra else "")
        progress(f"{sid}: stopped after {len(used)} trial{'' if len(used) == 1 else 's'}"
                 f"{within}{starts}: {decision['reason']}")

    def _complete_units(self, ok: list[int]) -> set[int]:
        """Units of a look (blocks of ``unit`` trials: a server start, or one trial with a
        known spread) whose every trial finished ok in both cells of the pair."""
        have = set(ok)
        return {u for u in {t // self.unit for t in ok}
                if all(t in have for t in range(u * self.unit,
                                                min((u + 1) * self.unit, self.trials)))}

    def _decide(self, sid: str, base: str, trials: list[int],
                at: int) -> dict[str, Any] | None:
        """The rule's decision over the pairs of ``trials`` (the last one maybe still
        running), as look ``at`` of the plan (known spread: 1-based; else unused)."""
        spec_figs, _ = request_figures(read_records(self.dirs[sid]))
        base_figs, _ = request_figures(read_records(self.dirs[base]))
        keep = set(trials)
        p = pair([f for f in spec_figs if f.trial in keep],
                 [f for f in base_figs if f.trial in keep])
        logs, prompts, cats, ts, starts, looks = [], [], [], [], [], []
        warm = self.warmup[sid] if isinstance(self.rule, SpreadRule) else 0
        for s, b in zip(p.spec, p.base, strict=True):
            r = decode_speedup(s, b)
            if r is not None and r > 0:
                logs.append(math.log(r))
                prompts.append(s.prompt_id)
                cats.append(s.category)
                ts.append(s.trial)
                starts.append((s.server_start, b.server_start))
                part = (s.request_index - warm) // self.every if self.every else 0
                looks.append(s.trial * self.per_trial + min(part, self.per_trial - 1))
        try:
            if isinstance(self.rule, SpreadRule):
                return self._decide_known(sid, at, logs, prompts, cats, looks, starts)
            units = [t // self.block for t in ts]  # the unit: a server start
            return self.rule.decide(trial_log_ratios(logs, prompts, units)).to_record()
        except UserError as e:  # e.g. no spread yet, too few prompts: keep running
            return {"action": "continue", "reason": e.one_line()}

    def _decide_known(self, sid: str, at: int, logs: list[float], prompts: list[str],
                      cats: list[str], looks: list[int],
                      starts: list[tuple[int, int]]) -> dict[str, Any]:
        """The known-spread rule's decision at look ``at`` (module docstring): the within-start
        error from the analysis's prompt bootstrap, each side's effective starts, the pairs
        each planned look added (``looks``: each pair's, 0-based), looks that added none too.
        The record carries ``_prior`` and ``_pairs`` for the caller, not for the file."""
        assert isinstance(self.rule, SpreadRule) and self.known is not None
        cell = self.cells[sid]
        got = pair_spreads(self.known, cell.engine_kind, str(cell.engine_config["spec"]["type"]))
        if isinstance(got, str):  # validate_cells refuses such a matrix before it runs
            raise UserError(got, "measure the engine's start spread")
        opts = StatsOptions().for_run("matrix")
        strata = cats if opts.strata == "category" else ["all"] * len(logs)
        within = stats.ratio_interval(logs, prompts, strata, opts.resamples, opts.seed,
                                      opts.level)
        pairs = [looks.count(k) for k in range(at)]
        prior = Prior(got[0], got[1], got[2], effective_starts([s for s, _ in starts]),
                      effective_starts([b for _, b in starts]))
        mean = math.fsum(logs) / len(logs) if logs else None
        record = self.rule.decide(prior, mean, within_se(within, opts.level), pairs).to_record()
        return {**record, "_prior": prior, "_pairs": pairs}
