"""``crossbench plan``: expected GPU time of a matrix per design; runs nothing."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors
from crossbench.errors import UserError


def _startup_pairs(values: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for v in values:
        kind, sep, secs = v.partition("=")
        try:
            seconds = float(secs)
        except ValueError:
            seconds = -1.0
        if not sep or not kind or not (seconds >= 0 and seconds < float("inf")):
            raise UserError(f"--startup {v!r} is not KIND=SECONDS",
                            "write e.g. --startup vllm=90 (seconds from launch until ready)")
        from crossbench.engines import registry

        if kind not in registry.names():  # a typo would be ignored silently
            raise UserError(f"--startup {v!r}: {kind!r} is no engine kind",
                            f"use one of: {', '.join(registry.names())}")
        out[kind] = seconds
    return out


@click.command(epilog="""\b
Examples:
  crossbench plan matrices/h200-cross.yaml
  crossbench plan matrices/h200-cross.yaml --from examples/h200-cross/round1/h200-cross-round1.zip
  crossbench plan matrices/h200.yaml --from runs/h200 --block 2 --probe 4 --json
""")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--from", "runs", multiple=True, type=click.Path(path_type=Path),
              help="Run directory or archive .zip whose trials' recorded phases give the "
                   "timings (repeatable; pooled per engine kind). Without it, or for an engine "
                   "it lacks, figures are assumed: the engine's registered start-up and the "
                   "matrix's estimate_tok_s.")
@click.option("--block", type=click.IntRange(min=1), default=None,
              help="Trials per server start in the reuse designs (default: the matrix's "
                   "trials_per_start where it sets one, else all of a cell's).")
@click.option("--min-trials", type=click.IntRange(min=1), default=None,
              help="Sequential: units (server starts with reuse, else trials) a cell runs "
                   "before it may stop (default: the matrix's sequential.min_trials, else 2).")
@click.option("--expected-trials-fraction", type=click.FloatRange(min=0, max=1,
                                                                  min_open=True),
              default=None, help="Sequential: expected share of a cell's trials it runs "
              "(default: the best case, min-trials; the real share depends on effect sizes).")
@click.option("--probe", "probes", type=click.IntRange(min=2), default=3, show_default=True,
              help="Probe-and-predict: n measured per n-sweep (smallest, largest, evenly "
                   "spaced between).")
@click.option("--follow-ups", type=click.IntRange(min=0), default=2, show_default=True,
              help="Probe-and-predict: cells per sweep allowed for predictions straddling 1.")
@click.option("--statistic", type=click.Choice(["mean", "median"]), default="mean",
              show_default=True, help="Per-engine summary of the recorded trials (the mean "
              "adds up to the expected total).")
@click.option("--startup", multiple=True, metavar="KIND=SECONDS",
              help="Assumed start-up of an engine kind, over a measured or registered one.")
@click.option("--share-servers/--no-share-servers", "share", default=None,
              help="Shared server starts in the designs but naive: one start per server "
                   "group (cells differing only in workload or concurrency) and round "
                   "(default: the matrix's share_servers).")
@click.option("--only", multiple=True,
              help="Plan only cells with KEY=VALUE (repeatable), as `matrix --only`: a round.")
@click.option("--skip", multiple=True,
              help="Leave out cells with KEY=VALUE (repeatable; K=V,K2=V2: cells matching "
                   "both), as `matrix --skip`.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@user_errors
def plan(matrix_file: Path, runs: tuple[Path, ...], block: int | None, min_trials: int | None,
         expected_trials_fraction: float | None, probes: int, follow_ups: int,
         statistic: str, startup: tuple[str, ...], share: bool | None, only: tuple[str, ...],
         skip: tuple[str, ...], as_json: bool) -> None:
    """Expected GPU time of a matrix under four designs, from measured or assumed timings.

    Designs the runner can run: naive (a server start per trial, as `matrix` runs by
    default), reuse (one start per block of a cell's trials; with shared servers, of every
    cell of its server group), sequential (a start per trial,
    and a cell stops once its verdict is settled), probe-and-predict (of each n-sweep only a
    few n are measured, on top of the cheaper of reuse and sequential). Prints GPU time,
    its ratio to naive, server starts, trials and cells per engine
    and in total, then every figure used, marked measured (with its source) or assumed.
    Nothing is started.
    """
    from crossbench.runner.matrix import expand, load_matrix
    from crossbench.runner.plan import (
        MIN_TRIALS,
        PlanOptions,
        format_plan,
        make_plan,
        read_recorded,
    )

    m = load_matrix(matrix_file)
    cells = expand(m, matrix_file)
    if only or skip:  # one round of the matrix, selected as `crossbench matrix` selects it
        from crossbench.runner.matrix_run import select

        cells = select(cells, only, skip)
        if not cells:
            raise UserError("--only/--skip leave no cells", "loosen the filters")
    if block is None and m.block > 1:
        block = m.block  # the matrix's own reuse
    seq = m.sequential
    opts = PlanOptions(block=block,
                       min_trials=min_trials or (seq.min_trials if seq else MIN_TRIALS),
                       expected_trials_fraction=expected_trials_fraction, probes=probes,
                       follow_ups=follow_ups,
                       statistic="median" if statistic == "median" else "mean",
                       startup_s=_startup_pairs(startup),
                       share=m.share_servers if share is None else share,
                       known_spread=m.start_spread is not None,
                       min_samples=seq.min_samples if seq else PlanOptions.min_samples,
                       look_every=seq.look_every if seq else None)
    if runs:
        progress(f"reading timings from {', '.join(map(str, runs))}")
    result = make_plan(m, cells, read_recorded(runs) if runs else None, opts)
    if as_json:
        click.echo(json.dumps({"matrix": str(matrix_file), **result.to_dict()}, indent=2))
        return
    click.echo(format_plan(result, str(matrix_file)))
