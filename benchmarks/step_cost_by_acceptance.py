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
import sys
from pathlib import Path
from typing import Any

from crossbench.analysis.step_cost import (
    baseline_of,
    find_cell,
    fmt,
    mean_accepted_length,
    over_starts,
    trial_rates,
)
from crossbench.errors import UserError


def compare(analysis: dict[str, Any], arm: str, against: str, engine: str | None = None,
            n: int | None = None, concurrency: int = 1, level: float = 0.95) -> dict[str, Any]:
    """C(n) of ``arm`` and ``against`` (same run, n, concurrency) and their ratio, each with
    its starts-as-samples interval; the trial indices of the three cells must match."""
    a = find_cell(analysis, arm, engine=engine, n=n, concurrency=concurrency)
    b = find_cell(analysis, against, engine=a["engine"], n=a["n"], concurrency=concurrency)
    base = baseline_of(analysis, a)
    if b["baseline_cell"] != a["baseline_cell"]:
        raise UserError(f"{arm} and {against} do not share one baseline cell in this run",
                        "compare two arms of one matrix run against the same baseline")
    ra, rb, r0 = trial_rates(a), trial_rates(b), trial_rates(base)
    if set(ra) != set(rb) or set(ra) != set(r0):
        raise UserError(f"trial indices differ: {arm} {sorted(ra)}, {against} {sorted(rb)}, "
                        f"baseline {sorted(r0)}",
                        "run the arms with the same number of trials (crossbench status)")
    ma, mb = mean_accepted_length(a), mean_accepted_length(b)
    return {
        "engine": a["engine"], "n": a["n"], "concurrency": concurrency, "level": level,
        "baseline_tok_s": over_starts(r0, level)["geomean"],
        "arms": {
            arm: {"mal": ma, "tok_s": [ra[k] for k in sorted(ra)],
                  "cost": over_starts({k: ma * r0[k] / ra[k] for k in ra}, level)},
            against: {"mal": mb, "tok_s": [rb[k] for k in sorted(rb)],
                      "cost": over_starts({k: mb * r0[k] / rb[k] for k in rb}, level)},
        },
        "ratio": over_starts({k: (ma / mb) * rb[k] / ra[k] for k in ra}, level),
    }


def main(argv: list[str] | None = None) -> int:
    """Print (and with --json write) the comparison of two arms' step costs."""
    try:
        return _main(argv)
    except UserError as e:
        print(f"step_cost_by_acceptance: {e.one_line()}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
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
        print(f"  {name}: MAL {arm['mal']:.3f}, C(n) {fmt(arm['cost'])}")
    print(f"  {args.arm} / {args.against}: {fmt(out['ratio'])}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
