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
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from crossbench.analysis.metrics import request_figures
from crossbench.analysis.paired import decode_speedup, pair
from crossbench.analysis.sequential import SequentialRule, trial_log_ratios
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
        self.rule = SequentialRule(max_trials=math.ceil(m.trials / m.block), alpha=s.alpha,
                                   min_trials=s.min_trials,
                                   min_prompts=s.min_prompts, equivalence=s.equivalence,
                                   spending=s.spending)
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
                record = {"cell": sid, "baseline": base, "trials": used,
                          **({"server_starts": len(units)} if self.block > 1 else {}),
                          **decision}
                sink.write(record)
                self.stopped[sid] = record
                starts = f" on {len(units)} server starts" if self.block > 1 else ""
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
        """Server starts (blocks of ``block`` trials; one trial each without reuse) whose
        every trial finished ok in both cells of the pair."""
        have = set(ok)
        return {u for u in {t // self.block for t in ok}
                if all(t in have for t in range(u * self.block,
                                                min((u + 1) * self.block, self.trials)))}

    def _decide(self, sid: str, base: str, trials: list[int]) -> dict[str, Any] | None:
        spec_figs, _ = request_figures(read_records(self.dirs[sid]))
        base_figs, _ = request_figures(read_records(self.dirs[base]))
        keep = set(trials)
        p = pair([f for f in spec_figs if f.trial in keep],
                 [f for f in base_figs if f.trial in keep])
        logs, prompts, ts = [], [], []
        for s, b in zip(p.spec, p.base, strict=True):
            r = decode_speedup(s, b)
            if r is not None and r > 0:
                logs.append(math.log(r))
                prompts.append(s.prompt_id)
                ts.append(s.trial // self.block)  # the unit: a server start
        try:
            return self.rule.decide(trial_log_ratios(logs, prompts, ts)).to_record()
        except UserError as e:  # e.g. no spread yet, too few prompts: keep running
            return {"action": "continue", "reason": e.one_line()}
