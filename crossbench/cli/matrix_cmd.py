"""``crossbench validate``: expand and check a matrix; launches nothing."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors


@click.command(epilog="""\b
Examples:
  crossbench validate matrices/cpu-smoke.yaml
  crossbench validate matrices/cpu-smoke.yaml --json
""")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print cells and pairs as JSON.")
@user_errors
def validate(matrix_file: Path, as_json: bool) -> None:
    """Expand a matrix, check every cell against its engine's profile, print cells and pairs.

    Checks: engines, models and arms exist and fit together; every speculative cell has a
    baseline; each method's draft and n limits; every flag exists in the expected engine build;
    local model files exist. Nothing is started.
    """
    from crossbench.runner.matrix import expand, load_matrix, schedule, validate_cells

    m = load_matrix(matrix_file)
    cells = expand(m, matrix_file)
    notes = validate_cells(m, cells, matrix_file)
    order = schedule(cells, m.trials, m.schedule.order, m.schedule.seed)
    requests = sum(int(c.load.get("requests", 20)) for c in cells) * m.trials
    tokens = sum(int(c.load.get("requests", 20)) * int(c.load.get("max_tokens", 256))
                 for c in cells) * m.trials
    if as_json:
        click.echo(json.dumps({
            "study": m.study.name, "trials": m.trials, "schedule": m.schedule.order,
            "cells": [{"id": c.id, "coords": c.coords, "baseline": c.baseline}
                      for c in cells],
            "runs": len(order), "requests": requests, "output_tokens": tokens,
            "notes": notes}, indent=2))
        return
    click.echo(f"study {m.study.name}: {len(cells)} cells x {m.trials} trials = {len(order)} "
               f"runs ({m.schedule.order}), {requests} requests, {tokens} output tokens")
    for c in cells:
        pair = f"  vs {c.baseline}" if c.baseline else "  (baseline)"
        click.echo(f"  {c.id}{pair}")
    if m.estimate_tok_s:
        minutes = tokens / m.estimate_tok_s / 60
        click.echo(f"estimated decode time: {minutes:.1f} min at {m.estimate_tok_s:g} tok/s "
                   "(plus server start-up per run)")
    else:
        click.echo("estimated duration: unknown (set estimate_tok_s in the matrix)")
    for note in notes:
        progress(f"note: {note}")
