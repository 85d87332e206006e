"""``crossbench fit``: one method's cost model C(n) = d + v n over the sweep points of several
runs, each point in its own run's baseline steps, each run resampled on its own."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import click

from crossbench.cli.analyze_cmd import _opts, stats_options
from crossbench.cli.common import progress, user_errors
from crossbench.errors import UserError


@click.command(epilog="""\b
Examples:
  crossbench fit examples/h200-methods/round4/h200-methods-round4-vllm.zip \\
      --arm eagle3-a0.9 --engine vllm
  crossbench fit runs/round4.zip runs/fits2 --arm eagle3-a0.9 --engine vllm --json fit.json
  crossbench fit runs/a runs/b runs/c --arm draft-a0.9 --concurrency 16
  crossbench fit runs/a runs/b --arm draft-a0.9 --start-spread spread.json --seed 1
  crossbench fit runs/moe-part1 --arm mtp-a0.9 --engine llama --target moe-f16
""")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--arm", required=True, help="The speculative arm whose cells (one n or "
              "several per run) the line goes through.")
@click.option("--engine", "engine", help="The engine name of the arm's cells, where a run "
              "holds the arm on several engines.")
@click.option("--target", "target", help="The target (the matrix's model name) of the arm's "
              "cells, where a run holds the arm on several targets (a MoE target and its "
              "dense twin, or one target at several quantizations).")
@click.option("--concurrency", type=click.IntRange(1), default=1, show_default=True,
              help="The concurrency of the arm's cells.")
@click.option("--json", "out", type=click.Path(path_type=Path), metavar="FILE",
              help="Write the whole result (fit, points, sources, notes, warnings) as JSON to "
                   "this new file.")
@click.option("--start-spread", "spread_file", type=click.Path(path_type=Path),
              metavar="FILE", help="A known start spread (`crossbench start-spread RUN -o "
              "FILE`) for every source's analysis; default: each matrix run's own "
              "start-spread.json, if any (docs/analysis.md \"Known start spread\").")
@stats_options
@user_errors
def fit(sources: tuple[Path, ...], arm: str, engine: str | None, target: str | None,
        concurrency: int, out: Path | None, spread_file: Path | None, resamples: int,
        seed: int, level: float, min_samples: int, strata: str, equivalence: float) -> None:
    """Fit one method's cost model C(n) = tau / speedup = d + v n over the cells of ARM in
    several runs (SOURCES: run directories or archives), each cell paired with its own run's
    baseline, so a run may give a single n. The intervals (95 %) of d and v resample each run on
    its own (independent bootstrap streams), the line refitted per draw over all points; they
    do not hold a machine-to-machine difference or, for a point on one server start, the
    start-to-start spread (notes say which apply). Settings that differ between runs (engine
    version, target, load) are printed as warnings (docs/analysis.md "A cost model across
    runs"). Each source is resampled on seed --seed plus its rank by when its first trial
    started, so the order of SOURCES changes nothing; the other statistics options are those
    of `crossbench analyze`, for every source's analysis."""
    from dataclasses import replace

    from crossbench.analysis.fit import Source, fit_across, format_fit
    from crossbench.frames import open_run

    opts = _opts(resamples, seed, level, min_samples, strata, equivalence)
    if spread_file is not None:
        from crossbench.analysis.start_spread import StartSpread

        opts = replace(opts, start_spread=StartSpread.load(spread_file))

    if out is not None:  # before the runs are read: a bad --json is one line, not a traceback
        from crossbench.store.rundir import check_out_file

        check_out_file(out, "--json")
        if out.exists():
            raise UserError(f"--json {out} already exists",
                            "give --json a new file path, or remove the file first")
    with ExitStack() as stack:
        runs = []
        for path in sources:
            progress(f"reading {path}")
            frames = stack.enter_context(open_run(path, opts))  # or the run's start spread
            runs.append(Source(str(path), frames.analysis,
                               {c.id: c for c in frames.run.cells}, frames.opts))
        result = fit_across(runs, arm, engine, concurrency, target)
    click.echo(format_fit(result))
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n")
        progress(f"wrote {out}")
