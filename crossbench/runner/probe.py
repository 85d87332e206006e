"""Probe-and-predict n-sweeps in a running matrix (``probe_predict:`` in the matrix file).

Of each n-sweep longer than ``probes`` the matrix first runs the probes (smallest, largest
and evenly spaced n) with every other cell; then, once, :class:`ProbeController` fits the
sweep's cost model on what ran and decides each remaining cell ``measure``, ``holdout`` or
``predict`` (written to ``predictions.jsonl``), and after the follow-ups re-decides the
sweeps whose holdouts missed (the holdout gate). The rules, the records and what was tested:
docs/matrix.md, "Probe-and-predict sweeps".
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossbench.analysis.start_spread import run_start_spread
from crossbench.analysis.stats import EQUIVALENCE, within_band
from crossbench.runner.matrix import Cell, ProbePredict, probe_split, sweeps
from crossbench.store.atomic import JsonlAppender
from crossbench.store.rundir import PREDICTIONS, read_predictions


class ProbeController:
    """Splits a matrix's cells into the probe phase and the rest, and decides the rest once
    the probes have run (module docstring)."""

    def __init__(self, cfg: ProbePredict, out: Path, cells: dict[str, Cell]) -> None:
        self.cfg, self.out, self.cells = cfg, out, cells
        self.splits = [probe_split(s, cfg.probes) for s in sweeps(cells.values())]
        self.later = {c.id for _, rest in self.splits for c in rest}
        self.decided = read_predictions(out)

    def first_phase(self, cid: str) -> bool:
        """Whether ``cid`` runs before the decisions (a probe, a baseline, any cell outside
        a sweep longer than ``probes``)."""
        return cid not in self.later

    def runs(self, cid: str) -> bool:
        """Whether a cell of the second phase runs (decided ``measure`` or ``holdout``)."""
        return self.decided.get(cid, {}).get("action") in ("measure", "holdout")

    def decide(self, progress: Callable[[str], None]) -> None:
        """Decide every undecided cell of the second phase from the probes' records and
        append the decisions to ``predictions.jsonl``."""
        todo = [(probes, rest) for probes, rest in self.splits
                if any(c.id not in self.decided for c in rest)]
        if not todo:
            return
        t0 = time.monotonic()
        result, by_id, opts = self._analyze()
        decided = [rec for probes, rest in todo
                   for rec in self._decide_sweep(probes, rest, result, by_id, opts)]
        took = round(time.monotonic() - t0, 3)  # the GPU is held meanwhile: count it
        with JsonlAppender(self.out / PREDICTIONS) as sink:
            for rec in decided:
                rec["decide_s"] = took
                sink.write(rec)
                self.decided[rec["cell"]] = rec
                p = rec["predicted"]
                ci = p.get("ci95")
                shown = (f"{p['speedup']:.3f} {_shown(ci[0], ci[1])}"
                         if p.get("speedup") is not None and ci else "none")
                progress(f"{rec['cell']}: {rec['action']} (predicted speedup {shown}): "
                         f"{rec['reason']}")

    def _analyze(self) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """The analysis of what ran so far (with the run's start spread), its cells by id and
        the options it ran with."""
        from crossbench.analysis.analyze import analyze_run
        from crossbench.analysis.paired import StatsOptions
        from crossbench.analysis.rundir import load_run

        opts = StatsOptions(start_spread=run_start_spread(self.out))
        run = load_run(self.out)
        return analyze_run(run, opts), {c.id: c for c in run.cells}, opts

    def _decide_sweep(self, probes: list[Cell], rest: list[Cell], result: dict[str, Any],
                      by_id: dict[str, Any], opts: Any) -> list[dict[str, Any]]:
        from crossbench.analysis import sweep as sw

        ids = {c.id for c in probes}
        members = sorted((p for p in result["pairs"] if p["cell"] in ids),
                         key=lambda p: int(p["n"]))
        points = [{"n": p["n"], "cell": p["cell"], "speedup": p["speedup"]["geomean"],
                   "ci95": p["speedup"]["ci95"],
                   **{k: p["acceptance"].get(k) for k in ("mean_acceptance_length",
                                                          "per_position")}}
                  for p in members]
        curve = sw.acceptance_curve(points) or []
        draws = sw.joint_log_speedups(members, by_id, opts) if members else None
        ns = [int(c.coords["n"]) for c in rest]
        if draws is None or len(members) < 2:
            why = (f"only {len(members)} of {len(probes)} probes have paired records"
                   if len(members) < 2 else "a probe has no paired decode speedup")
            preds = {n: {"n": n, "speedup": None, "ci95": None, "reason": why} for n in ns}
        else:
            preds = sw.predict_speedups(points, curve, draws, ns, opts.level)
        model = {"probes": [p["n"] for p in points], "probe_cells": [p["cell"] for p in points],
                 **{k: v for k, v in sw.cost_model(points, curve or None, draws, opts.level)
                    .items() if k in ("fitted", "d", "v", "d_ci95", "v_ci95", "reason")}}
        # the best n so far: measured probes and predictions alike, by point estimate
        scored = [(float(p["speedup"]), p["ci95"]) for p in [*points, *preds.values()]
                  if p["speedup"] is not None and p["ci95"]]
        best = max(scored, key=lambda s: s[0]) if scored else None
        records: list[dict[str, Any]] = []
        for c in rest:
            q = preds[int(c.coords["n"])]
            action, reason, verdict = self._rule(q, best)
            records.append({"cell": c.id, "baseline": c.baseline, "n": int(c.coords["n"]),
                            "action": action, "reason": reason,
                            "predicted": {"speedup": q["speedup"], "ci95": q["ci95"],
                                          "tau": q.get("tau"), "verdict": verdict,
                                          "level": opts.level},
                            "model": model})
        clear = [r for r in records if r["action"] == "predict"]
        for r in random.Random(self.cfg.seed).sample(clear, min(self.cfg.holdout, len(clear))):
            r["action"] = "holdout"
            r["reason"] = f"{r['reason']}; measured anyway as a holdout, to check the prediction"
        return records

    def check_holdouts(self, progress: Callable[[str], None]) -> set[str]:
        """After the follow-ups, the holdout gate: every cell still ``predict`` of a sweep whose
        holdout was measured outside its predicted interval gets a new decision (a new line in
        ``predictions.jsonl``, ``replaces: predict``; :func:`_gate`). Returns the cells to
        measure."""
        held = [r for r in self.decided.values() if r.get("action") == "holdout"]
        if not held:
            return set()
        from crossbench.analysis import sweep as sw

        result = self._analyze()[0]
        checks = {r["cell"]: r for r in sw.prediction_checks(self.decided, result["pairs"])
                  ["cells"]}
        missed: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in held:
            got = checks.get(r["cell"], {})
            if got.get("inside") is False:
                missed[tuple(r["model"]["probe_cells"])].append({**got, "n": r["n"]})
        again: set[str] = set()
        with JsonlAppender(self.out / PREDICTIONS) as sink:
            for rec in list(self.decided.values()):
                misses = missed.get(tuple(rec["model"]["probe_cells"]))
                if not misses or rec.get("action") != "predict":
                    continue
                new = {**rec, **_gate(rec, misses), "replaces": rec["action"]}
                sink.write(new)
                self.decided[rec["cell"]] = new
                if new["action"] == "measure":
                    again.add(rec["cell"])
                progress(f"{rec['cell']}: {new['action']}: {new['reason']}")
        return again

    @staticmethod
    def _rule(q: dict[str, Any], best: tuple[float, list[Any]] | None
              ) -> tuple[str, str, str | None]:
        """(action, reason, predicted verdict) of one prediction."""
        if q["speedup"] is None or not q["ci95"]:
            return "measure", f"no prediction: {q['reason']}", None
        lo, hi = q["ci95"][0], q["ci95"][1]
        top = math.inf if hi is None else float(hi)
        shown = _shown(lo, hi)
        if within_band((lo, top), EQUIVALENCE):  # as the analysis decides a verdict
            return ("predict", f"predicted indistinguishable: the interval {shown} lies within "
                    f"the +-{EQUIVALENCE:.0%} equivalence band", "indistinguishable")
        if lo <= 1.0 <= top:
            return "measure", f"the predicted interval {shown} straddles 1", None
        verdict = "faster" if lo > 1.0 else "slower"
        # which n is best matters only while the best n may beat the baseline
        contended = best is not None and bool(best[1]) and (
            best[1][1] is None or float(best[1][1]) >= 1.0)
        if best is not None and contended and top >= float(best[1][0]):
            return ("measure", f"may be the best n: its predicted interval {shown} reaches "
                    f"the best n's lower end {float(best[1][0]):.3f}", verdict)
        return "predict", f"predicted {verdict}: the interval {shown} excludes 1", verdict


MODEL_ERROR_MARGIN = 2.0
"""How many times the holdouts' largest relative miss a predicted interval is widened by
when the holdouts missed their intervals with the right verdict: a holdout measures the cost
line's error at one n, twice that allows for a larger error at the n it did not test."""


def _shown(lo: float, hi: float | None) -> str:
    return f"[{lo:.3f}, {'inf' if hi is None else format(hi, '.3f')}]"


def _gate(rec: dict[str, Any], misses: list[dict[str, Any]]) -> dict[str, Any]:
    """The new action, reason and prediction of a ``predict`` cell of a sweep whose holdouts
    ``misses`` (prediction checks) were measured outside their intervals: a holdout with the
    wrong verdict rejects the model (measure); else the interval is widened by
    :data:`MODEL_ERROR_MARGIN` times the largest relative miss and measured if it then
    straddles 1."""
    wrong = [m for m in misses if m.get("verdict_agrees") is False]
    if wrong:
        m = wrong[0]
        return {"action": "measure",
                "reason": f"the holdout n={m['n']} measured {m['measured']['speedup']:.3f} "
                          f"({m['measured']['verdict']}), where {m['predicted']['verdict']} "
                          f"was predicted: the cost model is rejected for this sweep, so its "
                          "predictions are measured"}
    def miss(m: dict[str, Any]) -> float:
        return abs(math.log(m["measured"]["speedup"] / m["predicted"]["speedup"]))

    worst = max(misses, key=miss)
    widen = math.exp(MODEL_ERROR_MARGIN * miss(worst))
    p = rec["predicted"]
    lo, hi = p["ci95"][0] / widen, None if p["ci95"][1] is None else p["ci95"][1] * widen
    why = (f"the holdout n={worst['n']} measured {worst['measured']['speedup']:.3f} against "
           f"{worst['predicted']['speedup']:.3f} predicted, outside its interval with the "
           f"right verdict: widened by {MODEL_ERROR_MARGIN:g} x that miss ({widen - 1:.1%}), "
           f"the predicted interval {_shown(p['ci95'][0], p['ci95'][1])} becomes "
           f"{_shown(lo, hi)}")
    if lo <= 1.0 <= (math.inf if hi is None else hi):
        return {"action": "measure", "reason": f"{why}, which straddles 1: measured"}
    return {"action": "predict", "reason": f"{why}, which still excludes 1: the predicted "
            f"verdict stands", "predicted": {**p, "ci95": [lo, hi],
                                              "widened_by": widen}}

