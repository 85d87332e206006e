"""Does a speculative step cost more when more of its drafts are accepted? Two arms of one run
at the same n and concurrency that differ in acceptance only (``ROUND=alpha-same``: alpha 0.9
against 0.7), each trial on its own server start (``--trials-per-start 1``).

A step's cost in plain decode steps is C(n) = MAL / speedup. Per trial index k (the k-th start
of each arm, as the analysis pairs a speculative start with its baseline's for its
``start_ci95``) this script takes

    C_k = MAL x baseline rate_k / arm rate_k          (each arm, against the baseline's start k)
    R_k = C_k(arm) / C_k(against) = (MAL_arm / MAL_against) x rate_k(against) / rate_k(arm)

(the baseline cancels from R) and gives each geometric mean with Student's t over the start
pairs (:func:`crossbench.analysis.stats.unit_interval`): each start pair is one sample, so the
interval holds the start-to-start spread. The rates are each trial's pooled decode rate
(``per_trial_pooled_tok_s``); MAL is the cell's, over all its trials (llama-server's synthetic
draws are seeded, and the analysis keeps no per-trial counter).

    python benchmarks/step_cost_by_acceptance.py ARCHIVE --arm eagle3-a0.9 --against eagle3-a0.7
    python benchmarks/step_cost_by_acceptance.py ARCHIVE --arm dflash-a0.9 --against dflash-a0.7 \\
        --json out.json

Reads a run directory or an archive; runs nothing. docs/cross-engine.md cites its output for
``examples/h100-methods/alpha-same-part1`` (tests/test_cross_engine_doc.py re-derives it).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from crossbench.analysis.stats import unit_interval
from crossbench.errors import UserError


def _cell(analysis: dict[str, Any], arm: str, engine: str | None, n: int | None,
          concurrency: int) -> dict[str, Any]:
    """The one analysed cell of ``arm`` (at ``n`` and ``concurrency``, on ``engine`` where
    given); UserError naming what to pass where none or several match."""
    found = [c for c in analysis["cells"]
             if c["arm"] == arm and c["concurrency"] == concurrency
             and (engine is None or c["engine"] == engine) and (n is None or c["n"] == n)]
    if len(found) != 1:
        which = ", ".join(sorted(c["cell"] for c in analysis["cells"] if c["arm"] == arm))
        raise UserError(f"--arm {arm}: {len(found)} cells at c={concurrency} match "
                        f"(cells of that arm: {which or 'none'})",
                        "name one cell with --engine, --n and --concurrency")
    cell: dict[str, Any] = found[0]
    return cell


def _rates(cell: dict[str, Any]) -> dict[str, float]:
    rates = cell.get("per_trial_pooled_tok_s") or {}
    if len(rates) < 2:
        raise UserError(f"cell {cell['cell']}: {len(rates)} trial(s) with a decode rate",
                        "this comparison needs two or more trials, each on its own start "
                        "(--trials-per-start 1)")
    return {str(k): float(v) for k, v in rates.items()}


def _mal(cell: dict[str, Any]) -> float:
    mal = (cell.get("acceptance") or {}).get("mean_acceptance_length")
    if not mal:
        raise UserError(f"cell {cell['cell']}: no mean accepted length",
                        "compare speculative arms whose engine reports acceptance counters")
    return float(mal)


def _interval(values: dict[str, float], level: float) -> dict[str, Any]:
    keys = sorted(values)
    logs = [math.log(values[k]) for k in keys]
    ci = unit_interval(logs, keys, level)
    return {"geomean": math.exp(sum(logs) / len(logs)), "ci": list(ci) if ci else None,
            "per_start": [values[k] for k in keys], "starts": len(keys)}


def compare(analysis: dict[str, Any], arm: str, against: str, engine: str | None = None,
            n: int | None = None, concurrency: int = 1, level: float = 0.95) -> dict[str, Any]:
    """C(n) of ``arm`` and ``against`` (same run, n, concurrency) and their ratio, each with
    its starts-as-samples interval; the trial indices of the three cells must match."""
    a = _cell(analysis, arm, engine, n, concurrency)
    b = _cell(analysis, against, a["engine"], a["n"], concurrency)
    base = next((c for c in analysis["cells"] if c["cell"] == a["baseline_cell"]), None)
    if base is None or b["baseline_cell"] != a["baseline_cell"]:
        raise UserError(f"{arm} and {against} do not share one baseline cell in this run",
                        "compare two arms of one matrix run against the same baseline")
    ra, rb, r0 = _rates(a), _rates(b), _rates(base)
    if set(ra) != set(rb) or set(ra) != set(r0):
        raise UserError(f"trial indices differ: {arm} {sorted(ra)}, {against} {sorted(rb)}, "
                        f"baseline {sorted(r0)}",
                        "run the arms with the same number of trials (crossbench status)")
    ma, mb = _mal(a), _mal(b)
    return {
        "engine": a["engine"], "n": a["n"], "concurrency": concurrency, "level": level,
        "baseline_tok_s": _interval(r0, level)["geomean"],
        "arms": {
            arm: {"mal": ma, "tok_s": [ra[k] for k in sorted(ra)],
                  "cost": _interval({k: ma * r0[k] / ra[k] for k in ra}, level)},
            against: {"mal": mb, "tok_s": [rb[k] for k in sorted(rb)],
                      "cost": _interval({k: mb * r0[k] / rb[k] for k in rb}, level)},
        },
        "ratio": _interval({k: (ma / mb) * rb[k] / ra[k] for k in ra}, level),
    }


def _fmt(x: dict[str, Any]) -> str:
    ci = x["ci"]
    return f"{x['geomean']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def main(argv: list[str] | None = None) -> int:
    """Print (and with --json write) the comparison of two arms' step costs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a run directory or an archive")
    p.add_argument("--arm", required=True, help="the arm whose step cost is the numerator")
    p.add_argument("--against", required=True, help="the arm it is compared with")
    p.add_argument("--engine", help="the engine, where the run holds the arm on several")
    p.add_argument("--n", type=int, help="the draft length, where the arm has several")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--json", type=Path, help="also write the result as JSON to this file")
    args = p.parse_args(argv)
    from crossbench.frames import open_run

    with open_run(args.source) as frames:
        out = compare(frames.analysis, args.arm, args.against, args.engine, args.n,
                      args.concurrency)
    pct = int(out["level"] * 100)
    print(f"{out['engine']}, n={out['n']}, c={out['concurrency']}: C(n) = MAL / speedup in "
          f"plain steps (baseline {out['baseline_tok_s']:.1f} tok/s), {pct} % intervals over "
          f"{out['ratio']['starts']} start pairs")
    for name, arm in out["arms"].items():
        print(f"  {name}: MAL {arm['mal']:.3f}, C(n) {_fmt(arm['cost'])}")
    print(f"  {args.arm} / {args.against}: {_fmt(out['ratio'])}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
