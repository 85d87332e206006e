"""A speculative step's cost per server start, from an analysis: the pieces the step-cost
benchmarks share (``benchmarks/step_cost_by_acceptance.py``: two alphas in one run;
``benchmarks/cross_engine_step.py``: one method in two engines) and the report's "Across
engines" section (:func:`across_engines`: every arm a run holds in several engines).

Each trial of a ``--trials-per-start 1`` run is one server start, and the analysis keeps each
trial's pooled decode rate (``per_trial_pooled_tok_s``), so a figure computed per trial is a
figure per start; :func:`over_starts` gives its geometric mean with the interval that takes
each start as one sample (:func:`crossbench.analysis.stats.unit_interval`).
"""

from __future__ import annotations

import math
from typing import Any

from crossbench.analysis.stats import unit_interval, welch_interval
from crossbench.errors import UserError


def find_cell(analysis: dict[str, Any], arm: str, *, engine: str | None = None,
              n: int | None = None, concurrency: int = 1, where: str = "") -> dict[str, Any]:
    """The one analysed cell of ``arm`` at ``concurrency`` (and ``n``, ``engine`` where
    given); UserError naming the arm's cells and what to pass where none or several match.
    ``where`` prefixes the message (``"run B: "``) when a command reads several runs."""
    found = [c for c in analysis["cells"]
             if c["arm"] == arm and c["concurrency"] == concurrency
             and (engine is None or c["engine"] == engine) and (n is None or c["n"] == n)]
    if len(found) != 1:
        which = ", ".join(sorted(c["cell"] for c in analysis["cells"] if c["arm"] == arm))
        at = f"c={concurrency}" + ("" if n is None else f", n={n}") + (
            "" if engine is None else f", engine {engine}")
        raise UserError(f"{where}--arm {arm}: {len(found)} cells at {at} match "
                        f"(cells of that arm: {which or 'none'})",
                        "name one cell: its engine (--engine, or --engine-a/-b for two runs), --n "
                        "and --concurrency")
    cell: dict[str, Any] = found[0]
    return cell


def baseline_of(analysis: dict[str, Any], cell: dict[str, Any], where: str = "") -> dict[str, Any]:
    """The baseline cell ``cell`` is paired with, in the same analysis."""
    base = next((c for c in analysis["cells"] if c["cell"] == cell.get("baseline_cell")), None)
    if base is None:
        raise UserError(f"{where}cell {cell['cell']} has no baseline cell in this run",
                        "compare runs that hold each arm's baseline")
    found: dict[str, Any] = base
    return found


def trial_rates(cell: dict[str, Any], where: str = "", need: int = 2) -> dict[str, float]:
    """Each trial's pooled decode rate (tok/s) by trial index; UserError below ``need``
    trials."""
    rates = cell.get("per_trial_pooled_tok_s") or {}
    if len(rates) < need:
        raise UserError(f"{where}cell {cell['cell']}: {len(rates)} trial(s) with a decode rate",
                        "this comparison needs two or more trials, each on its own start "
                        "(--trials-per-start 1)")
    return {str(k): float(v) for k, v in rates.items()}


def mean_accepted_length(cell: dict[str, Any], where: str = "") -> float:
    """The cell's mean accepted length (tokens a step), over all its trials."""
    mal = (cell.get("acceptance") or {}).get("mean_acceptance_length")
    if not mal:
        raise UserError(f"{where}cell {cell['cell']}: no mean accepted length",
                        "compare speculative arms whose engine reports acceptance counters")
    return float(mal)


def over_starts(values: dict[str, float], level: float) -> dict[str, Any]:
    """Per-start ``values`` (by trial index) as their geometric mean, its starts-as-samples
    interval (None below two starts), the values in trial order and their count."""
    keys = sorted(values)
    logs = [math.log(values[k]) for k in keys]
    ci = unit_interval(logs, keys, level)
    return {"geomean": math.exp(sum(logs) / len(logs)), "ci": list(ci) if ci else None,
            "per_start": [values[k] for k in keys], "starts": len(keys)}


def fmt(x: dict[str, Any], key: str = "geomean") -> str:
    """``x[key]`` and its interval to three decimals, as the step-cost commands print them."""
    ci = x["ci"]
    return f"{x[key]:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def engine_step(analysis: dict[str, Any], cell: dict[str, Any], level: float,
                where: str = "", need: int = 2) -> dict[str, Any]:
    """One engine's step for a speculative ``cell``: its MAL, and per start (trial) the plain
    step and the speculative step in ms, C = their ratio and the arm's decode rate, each over
    the starts (:func:`over_starts`). The arm and its baseline must share trial indices;
    UserError below ``need`` trials a cell."""
    base = baseline_of(analysis, cell, where)
    mal = mean_accepted_length(cell, where)
    ra, r0 = trial_rates(cell, where, need), trial_rates(base, where, need)
    if set(ra) != set(r0):
        raise UserError(f"{where}trial indices differ: {cell['arm']} {sorted(ra)}, baseline "
                        f"{sorted(r0)}", "run the arm and its baseline with the same number of "
                        "trials (crossbench status)")
    return {
        "engine": cell["engine"], "cell": cell["cell"], "baseline_cell": base["cell"],
        "n": cell["n"], "mal": mal,
        "tok_s": over_starts(ra, level), "baseline_tok_s": over_starts(r0, level),
        "plain_ms": over_starts({k: 1000.0 / r0[k] for k in r0}, level),
        "step_ms": over_starts({k: 1000.0 * mal / ra[k] for k in ra}, level),
        "cost": over_starts({k: mal * r0[k] / ra[k] for k in ra}, level),
    }


RATIO_KEYS = ("tok_s", "step_ms", "plain_ms", "cost")
"""The figures of :func:`engine_step` two engines are compared by."""


def engine_ratio(a: dict[str, Any], b: dict[str, Any], level: float,
                 intervals: bool = True) -> dict[str, dict[str, Any]]:
    """Each figure of :data:`RATIO_KEYS`, engine B's geometric mean over engine A's, with
    Welch's interval over the two engines' starts (independent samples; None with fewer
    than two a side, or without ``intervals``: trials that shared starts are no samples)."""
    out = {}
    for key in RATIO_KEYS:
        la = [math.log(v) for v in a[key]["per_start"]]
        lb = [math.log(v) for v in b[key]["per_start"]]
        ci = welch_interval(lb, la, level) if intervals else None
        out[key] = {"ratio": b[key]["geomean"] / a[key]["geomean"],
                    "ci": list(ci) if ci else None}
    return out


def own_starts(pair: dict[str, Any]) -> bool:
    """Whether each trial of a pair had its own server start (the analysis records
    ``n_server_starts`` only where trials reused a start)."""
    return "n_server_starts" not in (pair.get("speedup") or {})


def across_engines(analysis: dict[str, Any], level: float) -> list[dict[str, Any]]:
    """Every arm the analysis holds at one n, concurrency and workload in two or more
    engines: per engine (and target) its pair's speedup and :func:`engine_step` (None where
    the cell has no MAL), and for each two engines the ratios of :func:`engine_ratio`, with
    intervals only where every trial on both sides had its own start (the ratio's
    ``own_starts``). Engines in name order;
    each ratio is the later engine over the earlier."""
    cells = {c["cell"]: c for c in analysis.get("cells", [])}
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for p in analysis.get("pairs", []):
        key = (str(p.get("arm")), str(p.get("n")), str(p.get("concurrency")),
               str(p.get("workload")))
        groups.setdefault(key, []).append(p)
    out = []
    for (arm, _, _, _), pairs in sorted(groups.items()):
        if len({p.get("engine") for p in pairs}) < 2:
            continue
        sides: list[dict[str, Any]] = []
        for p in sorted(pairs, key=lambda p: (str(p.get("engine")), str(p.get("model")))):
            try:
                step = engine_step(analysis, cells[p["cell"]], level, need=1)
            except (UserError, KeyError, TypeError, ValueError):
                step = None
            sides.append({"engine": p.get("engine"), "target": p.get("model"),
                          "speedup": p.get("speedup") or {}, "own_starts": own_starts(p),
                          "step": step})
        ratios = []
        for i in range(len(sides)):
            for j in range(i + 1, len(sides)):
                a, b = sides[i], sides[j]
                if a["engine"] == b["engine"] or a["step"] is None or b["step"] is None:
                    continue
                own = a["own_starts"] and b["own_starts"]
                ratios.append({"a": i, "b": j, "own_starts": own,
                               "figures": engine_ratio(a["step"], b["step"], level, own)})
        out.append({"arm": arm, "n": pairs[0].get("n"), "concurrency": pairs[0].get("concurrency"),
                    "workload": pairs[0].get("workload"), "sides": sides, "ratios": ratios})
    return out
