"""``crossbench report``: a run directory -> one folder a reader opens.

``report.html`` (self-contained), ``report.md`` (its Markdown twin), ``datapoint.md`` (when
the pairs fit one) and ``plots/<name>.png|svg``. Same run directory, same bytes: nothing in
the report depends on when it was made.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from crossbench.analysis.paired import StatsOptions
from crossbench.errors import UserError
from crossbench.report.card import study_card
from crossbench.report.datapoint import datapoint
from crossbench.report.html import Image, render_html, render_markdown
from crossbench.report.plots import figures, render
from crossbench.report.study import Study, load_study
from crossbench.store import rundir
from crossbench.store.atomic import write_bytes_atomic

PLOT_DIR = "plots"


def write_report(study: Study, out: Path, here: str = "") -> list[Path]:
    """Write the report of a loaded study into ``out``; returns the files written. ``here``
    is the run directory as the report's commands name it (empty: the current directory)."""
    card = study_card(study)
    images = [Image(p, *render(p)) for p in figures(study)]
    plot_dir = out / PLOT_DIR
    if plot_dir.is_dir():  # figures of an earlier report that no longer apply
        for old in plot_dir.iterdir():
            if old.suffix in (".png", ".svg") and old.is_file():
                old.unlink()
    written: list[Path] = []
    for img in images:
        for suffix, data in ((".png", img.png), (".svg", img.svg)):
            path = plot_dir / f"{img.plot.name}{suffix}"
            write_bytes_atomic(path, data)
            written.append(path)
    files = {"report.html": render_html(study, card, images, here),
             "report.md": render_markdown(study, card, images, PLOT_DIR, here)}
    if study.analysis.get("pairs"):
        # too many pairs for one datapoint: `crossbench datapoint --cells` picks some
        with contextlib.suppress(UserError):
            files["datapoint.md"] = datapoint(study)
    for name, text in files.items():
        write_bytes_atomic(out / name, text.encode("utf-8"))
        written.append(out / name)
    return written


def build_report(root: Path, out: Path | None = None,
                 opts: StatsOptions | None = None) -> list[Path]:
    """Write the report of ``root`` into ``out`` (default ``root/report``; nothing else is
    written: without an ``analysis.json`` the analysis is computed in memory); returns the
    files written. An ``out`` other than the default must be new, empty or an earlier
    report's folder (:func:`~crossbench.store.rundir.check_new_out`): a report never writes
    among a user's or a run's files."""
    default = root / rundir.REPORT_DIR
    if out is None or out.resolve() == default.resolve():
        return write_report(load_study(root, opts), default)
    rundir.check_new_out(out, rundir.REPORT_KIND)
    study = load_study(root, opts)
    rundir.make_out_dir(out)
    written = write_report(study, out)
    rundir.mark_output(out, rundir.REPORT_KIND)
    return written
