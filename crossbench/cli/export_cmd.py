"""``crossbench export``: a run's frames as Parquet or CSV, its cells as vLLM bench JSON."""

from __future__ import annotations

from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors


@click.command(epilog="""\b
Examples:
  crossbench export runs/h200 --format parquet --out runs/h200-parquet
  crossbench export deposit/study.zip --format csv --out study-csv
  crossbench export runs/h200 --format vllm-bench --out vllm-json   # one JSON per cell
""")
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv", "vllm-bench"]),
              required=True, help="parquet or csv: the frames of `crossbench.open_run` "
              "(requests, trials, cells, pairs, sweeps); vllm-bench: one `vllm bench serve "
              "--save-result` file per cell.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder for the exported files (created).")
@user_errors
def export(run: Path, fmt: str, out: Path) -> None:
    """Export a run directory or archive for other tools; prints the files written.

    Columns, units and meanings: docs/python-api.md. Parquet needs pyarrow
    (pip install 'crossbench[parquet]').
    """
    from crossbench.frames import open_run
    from crossbench.frames.export import export as do_export

    with open_run(run) as frames:
        files = do_export(frames, fmt, out)
    for f in files:
        click.echo(str(f))
    progress(f"wrote {len(files)} file(s) to {out}")
