"""``crossbench demo``: the embedded default study (matrices/cpu-smoke.yaml), end to end."""

from __future__ import annotations

import time
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors
from crossbench.cli.live import make_view
from crossbench.paths import data_root

DEFAULT_MATRIX = "matrices/cpu-smoke.yaml"


@click.command(epilog="""\b
Examples:
  crossbench demo
  crossbench demo --out runs/demo
""")
@click.option("--matrix", "matrix_file", type=click.Path(path_type=Path), default=None,
              help=f"Matrix to run (default: {DEFAULT_MATRIX}).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: runs/demo-<time>).")
@user_errors
def demo(matrix_file: Path | None, out: Path | None) -> None:
    """Build llama-server and the fixture models if missing, then run the CPU smoke matrix.

    Baseline, draft-simple n in {2,4}, synthetic acceptance and ngram-mod on the project's own
    fixture pair, 3 interleaved trials each; prints the per-cell table and where the run
    directory is. The figures are single-study means without confidence intervals.
    """
    from crossbench.cli.matrix_cmd import format_status
    from crossbench.engines.llamacpp.build import install
    from crossbench.fixtures.resolve import ensure_fixtures
    from crossbench.runner.matrix_run import run_matrix

    install(progress=progress)
    ensure_fixtures()
    path = matrix_file or data_root() / DEFAULT_MATRIX
    root = out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    with make_view("auto") as view:
        summary = run_matrix(path, root, progress=view.message, on_tick=view.tick)
    click.echo(format_status(summary))
    progress(f"run directory: {root} (per cell: cells/<id>/summary.json; "
             f"`crossbench status {root}`)")
    progress(f"next: `crossbench analyze {root}` (paired speedups with CIs and verdicts), "
             f"`crossbench report {root}` (HTML report)")
