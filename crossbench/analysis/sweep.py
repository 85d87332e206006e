"""n-sweeps: speedup and acceptance against n, the best n with its evidence, a cost model.

A sweep is every speculative cell of one :data:`SWEEP_KEY` with a numeric n, at least two
distinct n. Its best n is compared with each neighbouring n by their paired ratio; its cost
model fits C(n) = tau / speedup = d + v * n (tau the mean acceptance length, d and v in
baseline token-times) and predicts speedup(n) = tau(n) / (d + v * n) with tau(n) = 1 +
sum_{k<n} p_k. A pair with a draft acceptance rate of at least :data:`HIGH_ACCEPTANCE` that
reads ``slower`` is flagged ``net loss despite high acceptance``. Definitions:
docs/analysis.md, "n-sweeps".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crossbench.analysis import paired, stats
from crossbench.analysis import start_spread as start_spreads
from crossbench.analysis.paired import StatsOptions, neighbour_ratio
from crossbench.analysis.rundir import CellData
from crossbench.analysis.stability import Finding, WarningKind
from crossbench.analysis.stats import FloatArray

HIGH_ACCEPTANCE = 0.5
"""Draft acceptance rate (fraction) from which a net loss is flagged as a cost problem."""

SWEEP_KEY = ("engine", "model", "arm", "method", "workload", "concurrency")


def predicted_tau(curve: list[float], n: int) -> float:
    """Mean acceptance length at n from per-position acceptance: 1 + sum of the first n."""
    return 1.0 + float(sum(curve[:n]))


Draws = dict[int, FloatArray] | FloatArray
"""Bootstrap draws of sweep points' mean log speedups: by n (:func:`joint_log_speedups`, one
cell per n), or a resamples x points array by the points' position (points of several runs,
which may share an n: ``crossbench fit``)."""


def measured_tau(points: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """``points`` with the tau the cost model uses, and a note where it is estimated: the
    mean acceptance length, else (no point has one: no draft counters, an import of response
    bodies) the estimate from per-request counts."""
    if not any(p.get("mean_acceptance_length") for p in points) and \
            any(p.get("mean_acceptance_length_estimate") for p in points):
        return ([{**p, "mean_acceptance_length": p.get("mean_acceptance_length_estimate")}
                 for p in points],
                "tau estimated as tokens per target step, (tokens - 1) / ((tokens - 1) - "
                "accepted), from per-request counts (no draft counter)")
    return points, None


def cost_model(points: list[dict[str, Any]], curve: list[float] | None,
               draws: Draws | None = None, level: float = 0.95) -> dict[str, Any]:
    """Fit C(n) = tau / speedup = d + v * n over points with n, tau and speedup; predictions
    from ``curve`` (per-position acceptance) up to its length, else from each point's tau;
    ``draws`` (:data:`Draws`) give ``d_ci95`` and ``v_ci95`` with tau held as measured
    (docs/analysis.md, "n-sweeps")."""
    points, note = measured_tau(points)
    at = [i for i, p in enumerate(points) if p.get("mean_acceptance_length") and p.get("speedup")]
    usable = [points[i] for i in at]
    if len({p["n"] for p in usable}) < 2:
        have = sorted({p["n"] for p in usable})
        return {"fitted": False, "reason": "needs two n with a measured mean acceptance "
                "length and speedup" + (f" (has {have})" if have else
                                        ": no point has a mean acceptance length")}
    ns = [float(p["n"]) for p in usable]
    cost = [p["mean_acceptance_length"] / p["speedup"] for p in usable]
    line = stats.fit_line(ns, cost)
    taus = ({n: predicted_tau(curve, n) for n in range(1, len(curve) + 1)} if curve
            else {int(p["n"]): float(p["mean_acceptance_length"]) for p in usable})
    predicted: list[dict[str, Any]] = [
        {"n": n, "tau": tau, "speedup": tau / line(n) if line(n) > 0 else None}
        for n, tau in sorted(taus.items())]
    valid = [p for p in predicted if p["speedup"] is not None]
    best = max(valid, key=lambda p: float(p["speedup"]))["n"] if valid else None
    refits = line_draws(usable, _columns(draws, usable, at)) if draws is not None else None
    out_ci: dict[str, Any] = {"d_ci95": None, "v_ci95": None}
    ns_pred = sorted(taus)
    negative_ci = None
    if refits is not None:
        out_ci = {"d_ci95": list(stats.interval(refits[0], level)),
                  "v_ci95": list(stats.interval(refits[1], level)),
                  "ci_method": "joint two-way (prompt x trial) bootstrap of every point's "
                               "speedup, line refitted per draw"}
        negative_ci = negative_from_interval(ns_pred, [taus[n] for n in ns_pred], refits,
                                             level)
    return {"fitted": True, "d": line.intercept, "v": line.slope, "r2": line.r2, **out_ci,
            "tau_note": note,
            "points": len(usable), "acceptance_curve": "measured per-position acceptance"
            if curve else "measured mean acceptance length at each n",
            "predicted": predicted, "predicted_best_n": best,
            "predicted_negative_from": negative_from(
                ns_pred, [p["speedup"] for p in predicted]),
            "predicted_negative_from_ci95": negative_ci}


def negative_from(ns: list[int], speedups: list[float | None]) -> int | None:
    """The smallest n of ``ns`` (ascending) from which every speedup is below 1: where the
    sweep turns negative and stays so; None when the last is not below 1. A None speedup (a
    cost that is not positive: unbounded) is not below 1."""
    return _trailing_from(ns, [s is not None and s < 1.0 for s in speedups])


def _trailing_from(ns: list[int], flags: list[bool]) -> int | None:
    """The first n of the trailing run of true ``flags`` (ns ascending); None without one."""
    out = None
    for n, flag in zip(reversed(ns), reversed(flags), strict=True):
        if not flag:
            break
        out = n
    return out


def negative_from_interval(ns: list[int], taus: list[float],
                           refits: tuple[FloatArray, FloatArray], level: float
                           ) -> list[int | None]:
    """Percentile interval of :func:`negative_from` over the refitted lines (one per
    bootstrap draw), tau held as measured: a draw that does not turn negative within ``ns``
    counts as beyond them, and an interval end beyond them is None."""
    x = np.asarray(ns, dtype=float)
    cost = refits[0][:, None] + refits[1][:, None] * x[None, :]
    below = (cost > 0) & (np.asarray(taus)[None, :] < cost)  # speedup tau / cost < 1
    # a draw turns negative at the first n of the trailing run of True: count that run
    trailing = np.cumprod(below[:, ::-1], axis=1).sum(axis=1)
    beyond = len(ns)  # index meaning "not within ns"
    idx = np.where(trailing > 0, len(ns) - trailing, beyond)
    tail = (1.0 - level) / 2.0
    lo, hi = (int(i) for i in np.quantile(idx, [tail, 1.0 - tail], method="inverted_cdf"))
    return [ns[lo] if lo < beyond else None, ns[hi] if hi < beyond else None]


def _columns(draws: Draws, points: list[dict[str, Any]], at: list[int] | None = None
             ) -> FloatArray | None:
    """The draws of ``points`` as resamples x points: an array's columns ``at`` (the points'
    positions in it; default all), a dict's entries by each point's n; None where an n has
    none."""
    if isinstance(draws, np.ndarray):
        return draws if at is None else draws[:, at]
    if any(int(p["n"]) not in draws for p in points):
        return None
    return np.column_stack([draws[int(p["n"])] for p in points])


def line_draws(points: list[dict[str, Any]], logs: FloatArray | None
               ) -> tuple[FloatArray, FloatArray] | None:
    """(d, v) of the cost line refitted on each bootstrap draw of the points' mean log
    speedups (``logs``: resamples x points, one column per point in order; draws where a
    point has no finite value are dropped), tau held as measured; None without two draws."""
    if logs is None:
        return None
    x = np.asarray([float(p["n"]) for p in points])
    tau = np.asarray([float(p["mean_acceptance_length"]) for p in points])
    keep = np.all(np.isfinite(logs), axis=1)
    if keep.sum() < 2:
        return None
    cost = tau[None, :] / np.exp(logs[keep])
    xc = x - x.mean()
    v = (cost * xc[None, :]).sum(axis=1) / float((xc**2).sum())
    d = cost.mean(axis=1) - v * x.mean()
    return d, v


def predict_speedups(points: list[dict[str, Any]], curve: list[float],
                     draws: dict[int, FloatArray], ns: list[int],
                     level: float) -> dict[int, dict[str, Any]]:
    """Predicted decode speedup at each n of ``ns`` from the cost model of ``points``.

    ``speedup`` is tau(n) / (d + v * n) with the least-squares line; ``ci95`` the percentile
    interval of the same over the line refitted on every joint bootstrap draw (a draw whose
    cost at n is not positive counts as an unbounded speedup: ``draws_unbounded``; an
    unbounded upper end is None). tau(n) comes from ``curve`` (per-position acceptance
    measured at a larger n); an n beyond the curve has no prediction (``reason`` says so),
    nor has any n when the line cannot be fitted.
    """
    usable = [p for p in points if p.get("mean_acceptance_length") and p.get("speedup")]
    out: dict[int, dict[str, Any]] = {}
    if len({p["n"] for p in usable}) < 2:
        return {n: {"n": n, "speedup": None, "ci95": None, "reason": "the cost line needs "
                    "two measured n with a mean acceptance length and a speedup"} for n in ns}
    line = stats.fit_line([float(p["n"]) for p in usable],
                          [p["mean_acceptance_length"] / p["speedup"] for p in usable])
    refits = line_draws(usable, _columns(draws, usable))
    for n in ns:
        if n > len(curve):
            out[n] = {"n": n, "speedup": None, "ci95": None,
                      "reason": f"acceptance was measured at positions 1-{len(curve)} only"}
            continue
        tau = predicted_tau(curve, n)
        point = tau / line(n) if line(n) > 0 else None
        rec: dict[str, Any] = {"n": n, "tau": tau, "speedup": point, "ci95": None,
                               "reason": None}
        if refits is not None:
            cost = refits[0] + refits[1] * n
            # a draw whose cost at n is not positive predicts no finite speedup: counted as
            # an unbounded one, so such draws widen the interval instead of vanishing
            draw = np.where(cost > 0, tau / np.where(cost > 0, cost, 1.0), np.inf)
            rec["draws_unbounded"] = int((cost <= 0).sum())
            tail = (1.0 - level) / 2.0
            lo, hi = np.quantile(draw, [tail, 1.0 - tail], method="inverted_cdf")
            rec["ci95"] = [float(lo), float(hi) if np.isfinite(hi) else None]
        if point is None:
            rec["reason"] = "the fitted cost at this n is not positive"
        elif rec["ci95"] is None:
            rec["reason"] = "no bootstrap draws of the cost line"
        out[n] = rec
    return out


def joint_log_speedups(members: list[dict[str, Any]], cells: dict[str, CellData],
                       opts: StatsOptions) -> dict[int, FloatArray] | None:
    """Bootstrap draws of each sweep point's mean log decode speedup, drawn jointly (one
    prompt and trial resample shared by every point: they share the baseline).

    With a known start spread (``opts.start_spread``) the draw resamples prompts only and
    adds the starts' share instead (:func:`crossbench.analysis.start_spread.start_shifts`:
    a shift per point for its speculative starts, one shared by all for the baseline's), so
    a fit over probes of one start each carries the start-to-start variation their own
    bootstrap cannot see."""
    groups = []
    ns = []
    roles: list[tuple[str, str, float, float]] = []  # engine, role, spec starts, baseline starts
    for p in members:
        spec, base = cells.get(p["cell"]), cells.get(p["baseline_cell"])
        if spec is None or base is None:
            return None
        pr = paired.pair(spec.figures, base.figures)
        vals, prompts, trials = [], [], []
        for s, b in zip(pr.spec, pr.base, strict=True):
            r = paired.decode_speedup(s, b)
            if r is not None and r > 0:
                vals.append(float(np.log(r)))
                prompts.append(s.prompt_id)
                trials.append(s.server_start)  # trials of one server start move together
        if not vals:
            return None
        if opts.start_spread is not None:
            roles.append((str(spec.config.get("engine")), str(spec.spec.get("type") or "none"),
                          start_spreads.effective_starts([s.server_start for s in pr.spec]),
                          start_spreads.effective_starts([b.server_start for b in pr.base])))
            trials = [0] * len(vals)  # one round: the starts' share comes from the spread
        groups.append((np.asarray(vals), prompts, trials))
        ns.append(int(p["n"]))
    means = stats.joint_bootstrap_means(groups, opts.resamples, opts.seed)
    if opts.start_spread is not None:
        means = means + start_spreads.start_shifts(opts.start_spread, roles, opts.resamples,
                                                   opts.seed)
    return {n: means[:, i] for i, n in enumerate(ns)}


def prediction_checks(decisions: dict[str, dict[str, Any]],
                      pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Probe-and-predict decisions (crossbench.runner.probe) against what was measured.

    Every decided cell is listed with its prediction; a measured one (``measure`` or
    ``holdout``) gets its measured speedup and verdict, ``inside`` (the measured geometric
    mean lies in the predicted interval) and ``verdict_agrees`` (the measured verdict is the
    predicted one, where the prediction had one). ``holdouts`` counts the held-out checks:
    cells the rule would have predicted, measured to test the predictions.
    """
    by_cell = {p["cell"]: p for p in pairs}
    rows = []
    for cid, d in sorted(decisions.items()):
        pred = d.get("predicted") or {}
        row: dict[str, Any] = {"cell": cid, "n": d.get("n"), "action": d.get("action"),
                               "reason": d.get("reason"), "predicted": pred,
                               "measured": None, "inside": None, "verdict_agrees": None}
        got = by_cell.get(cid)
        if got is not None and d.get("action") != "predict":
            g, ci = got["speedup"]["geomean"], pred.get("ci95")
            row["measured"] = {"speedup": g, "ci95": got["speedup"]["ci95"],
                               "verdict": got["verdict"]}
            if g is not None and ci:
                row["inside"] = bool(ci[0] <= g and (ci[1] is None or g <= ci[1]))
            if pred.get("verdict") is not None:
                row["verdict_agrees"] = got["verdict"] == pred["verdict"]
        rows.append(row)
    held = [r for r in rows if r["action"] == "holdout" and r["measured"] is not None]
    return {"cells": rows,
            "counts": {a: sum(1 for r in rows if r["action"] == a)
                       for a in ("measure", "holdout", "predict")},
            "holdouts": {"measured": len(held),
                         "inside": sum(1 for r in held if r["inside"]),
                         "verdict_agrees": sum(1 for r in held if r["verdict_agrees"])}}


def net_loss_finding(pair: dict[str, Any]) -> Finding | None:
    """The ``net loss despite high acceptance`` flag of one analysed pair, if it applies."""
    rate = (pair.get("acceptance") or {}).get("draft_acceptance_rate")
    if rate is None or rate < HIGH_ACCEPTANCE or pair.get("verdict") != "slower":
        return None
    suspect = (pair.get("acceptance") or {}).get("counter_suspect")
    if suspect:  # accepted == drafted everywhere: the rate itself may be misread
        return Finding(WarningKind.NET_LOSS_HIGH_ACCEPTANCE,
                       f"slower than the baseline (speedup {pair['speedup']['geomean']:.3f}) "
                       f"with {rate:.0%} of drafted tokens counted as accepted, but {suspect}: "
                       "the acceptance counter may be misread (see acceptance_counter), so "
                       "the acceptance rate is not evidence that drafting is right",
                       "check the acceptance counter first (acceptance_counter); only then "
                       "read the loss as drafting and verifying costing more than acceptance "
                       "saves", pair["cell"])
    return Finding(WarningKind.NET_LOSS_HIGH_ACCEPTANCE,
                   f"slower than the baseline (speedup {pair['speedup']['geomean']:.3f}) "
                   f"although {rate:.0%} of drafted tokens are accepted",
                   "drafting or verifying costs more than acceptance saves: try a smaller or "
                   "quantized draft, a lower n (see the sweep's predicted best n), or a "
                   "method without a draft model", pair["cell"])


def sweep_point(pair: dict[str, Any]) -> dict[str, Any]:
    """One analysed pair as a sweep point: n, speedup with interval and verdict, end-to-end
    speedup, acceptance."""
    return {"n": pair["n"], "cell": pair["cell"], "speedup": pair["speedup"]["geomean"],
            "ci95": pair["speedup"]["ci95"], "verdict": pair["verdict"],
            "speedup_e2e": pair["speedup_e2e"]["geomean"],
            **{k: pair["acceptance"].get(k) for k in (
                "draft_acceptance_rate", "mean_acceptance_length",
                "mean_acceptance_length_estimate", "per_position")}}


def sweeps(pairs: list[dict[str, Any]], cells: dict[str, CellData],
           opts: StatsOptions) -> list[dict[str, Any]]:
    """Every sweep of the analysed pairs (see the module docstring)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for p in pairs:
        if p["n"] is not None:
            groups.setdefault(tuple(p[k] for k in SWEEP_KEY), []).append(p)
    out = []
    for key, members in groups.items():
        members = sorted(members, key=lambda p: int(p["n"]))
        if len({p["n"] for p in members}) < 2:
            continue
        points = [sweep_point(p) for p in members]
        out.append({**dict(zip(SWEEP_KEY, key, strict=True)),
                    "baseline_cell": members[0]["baseline_cell"], "points": points,
                    "best": _best(points, cells, opts),
                    "loses_from": loses_from(points),
                    "cost_model": cost_model(points, acceptance_curve(points),
                                             joint_log_speedups(members, cells, opts),
                                             opts.level),
                    "net_loss_despite_high_acceptance": [
                        p["n"] for p in members if net_loss_finding(p) is not None]})
    return out


def loses_from(points: list[dict[str, Any]]) -> int | None:
    """The smallest measured n from which every measured n of the sweep (points in ascending
    n) reads ``slower``: its interval wholly below 1 and outside the equivalence band. None
    when the largest n does not read ``slower``."""
    return _trailing_from([p["n"] for p in points],
                          [p.get("verdict") == "slower" for p in points])


def absent_reason(pairs: list[dict[str, Any]]) -> str:
    """Why an analysis has no sweep, in one sentence naming what it has."""
    with_n: dict[tuple[Any, ...], set[Any]] = {}
    for p in pairs:
        if p.get("n") is not None:
            with_n.setdefault(tuple(p.get(k) for k in SWEEP_KEY), set()).add(p["n"])
    if not pairs:
        return "No n-sweep: no speculative cell was paired with a baseline."
    if not with_n:
        return ("No n-sweep: no speculative cell has a numeric n (an import can read it from "
                "arm names with --n-from-arm).")
    groups = "; ".join(f"{'/'.join(str(x) for x in k[:3])}: n={sorted(v)}"
                       for k, v in sorted(with_n.items(), key=str))
    return ("No n-sweep: a sweep needs two or more n in one (engine, model, arm, method, "
            f"workload, concurrency); found {groups}.")


def acceptance_curve(points: list[dict[str, Any]]) -> list[float] | None:
    """Per-position acceptance of the sweep point with the largest n that has one."""
    with_curve = [p for p in points if p.get("per_position")]
    if not with_curve:
        return None
    return list(max(with_curve, key=lambda p: int(p["n"]))["per_position"])


def _best(points: list[dict[str, Any]], cells: dict[str, CellData],
          opts: StatsOptions) -> dict[str, Any] | None:
    scored = [i for i, p in enumerate(points) if p["speedup"] is not None]
    if not scored:
        return None
    i = max(scored, key=lambda j: float(points[j]["speedup"]))
    best = points[i]
    neighbours = []
    for j in (i - 1, i + 1):
        if 0 <= j < len(points):
            r = neighbour_ratio(cells[best["cell"]].figures, cells[points[j]["cell"]].figures,
                                opts)
            neighbours.append({"n": points[j]["n"], "ratio": r["geomean"], "ci95": r["ci95"],
                               "n_samples": r["n_samples"],
                               "distinguishable": r["verdict"] == "faster"})
    return {"n": best["n"], "speedup": best["speedup"], "ci95": best["ci95"],
            "verdict": best["verdict"], "neighbours": neighbours,
            "distinguishable": bool(neighbours) and all(x["distinguishable"]
                                                        for x in neighbours)}

