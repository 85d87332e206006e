"""Which engine runs a method more cheaply, at the same acceptance, on one machine? Two runs
(one per engine, each with its own baseline, each trial on its own server start:
``--trials-per-start 1``) of the same method at the same n and concurrency.

Per start k of each engine (trial k of the arm against trial k of its own baseline, as the
analysis pairs them for its ``start_ci95``) this script takes

    plain step ms  = 1000 / baseline rate_k
    step ms        = 1000 x MAL / arm rate_k       (one speculative step: MAL tokens)
    C_k            = step ms / plain step ms       (the step in the engine's own plain steps)

and gives each engine's geometric means with Student's t over its starts
(:func:`crossbench.analysis.stats.unit_interval`). Across the engines the starts are
independent, so each ratio (B over A: the arm's decode rate, its step in ms, the plain step
in ms, C) is the ratio of the two geometric means with Welch's interval on the logs
(:func:`crossbench.analysis.stats.welch_interval`: each start one sample, the
Welch-Satterthwaite df floored, which errs wide). Where the GPU telemetry covers the trials,
the arm's mean GPU-busy share (NVML, over the measured window) splits each engine's step
into GPU-busy and host milliseconds: where an engine's step spends its time.

The two runs must come from one GPU (the trials' GPU UUIDs) unless ``--other-machines``: a
machine difference is in no interval, so across machines the figures are not a comparison.

    python benchmarks/cross_engine_step.py LLAMA_ARCHIVE VLLM_ARCHIVE --arm eagle3-a0.9 --n 4
    python benchmarks/cross_engine_step.py RUN RUN --arm synth-a0.9 --n 2 \
        --engine-a llama --engine-b vllm          # one run of both engines

Reads run directories or archives; runs nothing. docs/cross-engine.md cites its output for
``examples/h100-methods/verdicts-same-part1`` and ``-part2``, and for the draft-model study
of ``examples/h200-cross/round1`` (tests/test_cross_engine_doc.py re-derives it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossbench.analysis.step_cost import engine_ratio, engine_step, find_cell, fmt
from crossbench.errors import UserError


def side(analysis: dict[str, Any], arm: str, n: int | None, concurrency: int,
         level: float, name: str = "A", engine: str | None = None) -> dict[str, Any]:
    """One engine's figures for ``arm`` (:func:`crossbench.analysis.step_cost.engine_step`),
    its errors prefixed with the run's name."""
    where = f"run {name}: "
    cell = find_cell(analysis, arm, engine=engine, n=n, concurrency=concurrency, where=where)
    return engine_step(analysis, cell, level, where)


def compare(analysis_a: dict[str, Any], analysis_b: dict[str, Any], arm: str,
            arm_b: str | None = None, n: int | None = None, concurrency: int = 1,
            level: float = 0.95, engines: tuple[str | None, str | None] = (None, None)
            ) -> dict[str, Any]:
    """Both engines' figures for the method (``arm`` in run A, ``arm_b`` or the same name in
    run B; ``engines`` picks each run's engine where a run holds several) and each ratio
    B / A with Welch's interval over the two runs' starts."""
    a = side(analysis_a, arm, n, concurrency, level, "A", engines[0])
    b = side(analysis_b, arm_b or arm, a["n"] if n is None else n, concurrency, level, "B",
             engines[1])
    return {"level": level, "concurrency": concurrency, "a": a, "b": b,
            "mal_ratio": b["mal"] / a["mal"], "ratios": engine_ratio(a, b, level)}


def machines(trials: Any) -> tuple[set[str], set[str]]:
    """The GPU UUID lists and host boot ids of a run's trials (a trials frame)."""
    gpus = {str(g) for g in trials["gpus"].dropna()}
    boots = {str(b) for b in trials["boot_id"].dropna()}
    return gpus, boots


def step_split(trials: Any, cell: str, step_ms: float) -> dict[str, float] | None:
    """A speculative step of ``cell`` split by its trials' mean GPU-busy share (NVML, over the
    measured window): GPU-busy and host (no kernel running) milliseconds of a ``step_ms``
    step; None where the telemetry does not cover the trials."""
    share = trials.loc[trials["cell"] == cell, "gpu_busy_share"].dropna()
    if share.empty:
        return None
    busy = float(share.mean())
    return {"gpu_busy_share": busy, "gpu_busy_ms": busy * step_ms,
            "host_ms": (1.0 - busy) * step_ms}


def main(argv: list[str] | None = None) -> int:
    """Print (and with --json write) one method's step in two engines."""
    try:
        return _main(argv)
    except UserError as e:
        print(f"cross_engine_step: {e.one_line()}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="engine A's run directory or archive")
    p.add_argument("b", type=Path, help="engine B's run directory or archive")
    p.add_argument("--arm", required=True, help="the method's arm in run A (and in B)")
    p.add_argument("--arm-b", help="the arm's name in run B, where it differs")
    p.add_argument("--n", type=int, help="the draft length, where the arm has several")
    p.add_argument("--engine-a", help="run A's engine, where it holds several (a run of "
                   "both engines may be A and B)")
    p.add_argument("--engine-b", help="run B's engine, where it holds several")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--other-machines", action="store_true",
                   help="compare runs from different GPUs (the figures are then no comparison)")
    p.add_argument("--json", type=Path, help="also write the result as JSON to this file")
    args = p.parse_args(argv)
    from crossbench.frames import open_run

    with open_run(args.a) as fa, open_run(args.b) as fb:
        out = compare(fa.analysis, fb.analysis, args.arm, args.arm_b, args.n,
                      args.concurrency, engines=(args.engine_a, args.engine_b))
        ta, tb = fa.trials, fb.trials
        (ga, boot_a), (gb, boot_b) = machines(ta), machines(tb)
        out["same_gpu"] = bool(ga) and ga == gb
        out["same_boot"] = bool(boot_a) and boot_a == boot_b
        out["gpus"] = sorted(ga | gb)
        for key, trials in (("a", ta), ("b", tb)):
            s = out[key]
            s["split"] = step_split(trials, s["cell"], s["step_ms"]["geomean"])
            s["plain_split"] = step_split(trials, s["baseline_cell"], s["plain_ms"]["geomean"])
    if not out["same_gpu"] and not args.other_machines:
        gpus = ", ".join(out["gpus"]) or "none recorded"
        raise UserError(f"the runs come from different GPUs ({gpus}): a machine difference "
                        "is in no interval",
                        "compare runs of one machine, or pass --other-machines to print the "
                        "figures anyway (they are then no comparison)")
    pct = int(out["level"] * 100)
    a, b = out["a"], out["b"]
    print(f"{a['engine']} (A) against {b['engine']} (B), n={a['n']}, c={out['concurrency']}, "
          f"{'one GPU' if out['same_gpu'] else 'DIFFERENT GPUs'}"
          f"{', one boot' if out['same_boot'] else ''}; {pct} % intervals, starts as samples")
    for key in ("a", "b"):
        s = out[key]
        extra = "".join(
            f"; {what} {sp['gpu_busy_ms']:.2f} ms GPU-busy + {sp['host_ms']:.2f} ms host "
            f"(busy share {sp['gpu_busy_share']:.3f})"
            for what, sp in (("plain step", s["plain_split"]), ("step", s["split"])) if sp)
        print(f"  {s['engine']}: {s['tok_s']['starts']} starts, MAL {s['mal']:.3f}, "
              f"{fmt(s['tok_s'])} tok/s over {fmt(s['baseline_tok_s'])}; plain step "
              f"{fmt(s['plain_ms'])} ms, step {fmt(s['step_ms'])} ms, C {fmt(s['cost'])}"
              f"{extra}")
    for key, what in (("tok_s", "decode rate"), ("step_ms", "step ms"),
                      ("plain_ms", "plain step ms"), ("cost", "C(n)")):
        print(f"  B / A {what}: {fmt(out['ratios'][key], 'ratio')}")
    print(f"  B / A MAL: {out['mal_ratio']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
