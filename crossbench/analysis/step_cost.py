"""A speculative step's cost per server start, from an analysis: the pieces the step-cost
benchmarks share (``benchmarks/step_cost_by_acceptance.py``: two alphas in one run;
``benchmarks/cross_engine_step.py``: one method in two engines).

Each trial of a ``--trials-per-start 1`` run is one server start, and the analysis keeps each
trial's pooled decode rate (``per_trial_pooled_tok_s``), so a figure computed per trial is a
figure per start; :func:`over_starts` gives its geometric mean with the interval that takes
each start as one sample (:func:`crossbench.analysis.stats.unit_interval`).
"""

from __future__ import annotations

import math
from typing import Any

from crossbench.analysis.stats import unit_interval
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


def trial_rates(cell: dict[str, Any], where: str = "") -> dict[str, float]:
    """Each trial's pooled decode rate (tok/s) by trial index; UserError below two trials."""
    rates = cell.get("per_trial_pooled_tok_s") or {}
    if len(rates) < 2:
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
