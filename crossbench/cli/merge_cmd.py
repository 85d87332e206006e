"""``crossbench merge``: pieces of one matrix run (the same matrix file, each run with other
``--only``/``--skip`` filters) as one new run directory."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors


@click.command(epilog="""\b
Examples:
  crossbench matrix study.yaml --only arm=none --out runs/base
  crossbench matrix study.yaml --only arm=eagle3-a0.9 --only n=4 --out runs/eagle3
  crossbench merge runs/base runs/eagle3 --out runs/merged
  crossbench analyze runs/merged        # eagle3 n=4 paired with the baseline of runs/base
""")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="The merged run directory: new, or an empty folder.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the merged run's status as JSON (as `crossbench status --json`).")
@user_errors
def merge(sources: tuple[Path, ...], out: Path, as_json: bool) -> None:
    """Merge pieces of one matrix run into one new run directory.

    SOURCES are matrix run directories of one matrix file, each run with other --only/--skip
    filters; merged, a speculative cell pairs with the baseline cell of another piece.

    Cells are copied (the sources are never written); state.json takes the union of cells and
    schedule, each source's order kept, sources in the order their first trial started, and
    records the merge (merged_from); the journals are concatenated; summary.json is
    recomputed. Refused, before anything is written: sources of other matrix files
    (matrix_sha256, study, trials, schedule, matrix.yaml), a cell in two sources, start
    spreads that differ, a non-empty --out. Resume the merged run with filters that select
    none but its cells, such as one piece's own (docs/matrix.md "Merging pieces of a run").
    """
    from crossbench.cli.matrix_cmd import format_status
    from crossbench.runner.merge import merge_runs

    summary = merge_runs(list(sources), out, progress=progress)
    click.echo(json.dumps(summary, indent=2) if as_json else format_status(summary))
    progress(f"merged {len(sources)} run directories into {out}")
