"""The exact commands that reproduce a study, a pair of cells, or one server.

Server commands are the recorded argv of a trial (as the engine ran it). Client commands are
crossbench's own: ``crossbench matrix`` on the study's matrix file, with ``--only``/``--skip``
filters that select exactly the cells asked for, then ``crossbench analyze`` with the
options the analysis was made with.
"""

from __future__ import annotations

import posixpath
import shlex

from crossbench.engines.registry import install_argv
from crossbench.report.study import Cell, Study
from crossbench.store import rundir

RUN_DIR = "runs/repro"
"""The output folder the commands use (any new folder works)."""


def quote(argv: list[str]) -> str:
    """A command line a POSIX shell reads back as ``argv``."""
    return " ".join(shlex.quote(a) for a in argv)


def server_command(cell: Cell) -> str | None:
    """The recorded server command of a cell's first started trial."""
    argv = cell.argv()
    return quote(argv) if argv else None


def install_command(cell: Cell) -> str | None:
    """How to get the same engine build, where the engine says (``registry.install_argv``)."""
    config = cell.manifest.get("config") or {}
    argv = install_argv(str(config.get("engine")), dict(config.get("engine_config") or {}))
    return quote(argv) if argv else None


def _filters(study: Study, chosen: list[Cell]) -> list[str] | None:
    """``--only``/``--skip`` arguments that select exactly ``chosen`` (None: impossible)."""
    if len(chosen) == len(study.cells):
        return []
    ids = {c.id for c in chosen}
    keys = [k for k in chosen[0].coords if k in study.varying]
    only = {k: str(chosen[0].coords.get(k)) for k in keys
            if all(str(c.coords.get(k)) == str(chosen[0].coords.get(k)) for c in chosen)}
    args = [a for k, v in only.items() for a in ("--only", f"{k}={v}")]
    for other in study.cells:
        if other.id in ids or any(str(other.coords.get(k)) != v for k, v in only.items()):
            continue
        skip = next((k for k in keys
                     if all(str(c.coords.get(k)) != str(other.coords.get(k)) for c in chosen)),
                    None)
        if skip is None:
            return None
        pair = ["--skip", f"{skip}={other.coords.get(skip)}"]
        if not any(args[i:i + 2] == pair for i in range(0, len(args), 2)):
            args += pair
    return args


def analyze_command(study: Study, run_dir: str) -> str:
    """``crossbench analyze`` with the options the study's analysis was made with."""
    o = study.options
    return quote(["crossbench", "analyze", run_dir, "--resamples", str(o.resamples),
                  "--seed", str(o.seed), "--level", str(o.level),
                  "--min-samples", str(o.min_samples)])


def client_commands(study: Study, cell_ids: list[str] | None = None,
                    here: str = "") -> list[str]:
    """Commands that rerun the study (or only ``cell_ids`` and their baselines) and its
    analysis, from the run directory's matrix file; ``here`` is the run directory as the
    reader reaches it (empty: the current directory)."""
    if study.kind != "matrix" or study.matrix_text is None:
        return [f"# {study.kind} directory: no matrix file to rerun; the analysis:",
                analyze_command(study, here or ".")]
    argv = ["crossbench", "matrix", posixpath.join(here, rundir.MATRIX_FILE), "--out", RUN_DIR]
    if cell_ids is not None:
        wanted = set(cell_ids)
        for cid in cell_ids:
            c = study.cell(cid)
            if c is not None and c.baseline:
                wanted.add(c.baseline)
        chosen = [c for c in study.cells if c.id in wanted]
        extra = _filters(study, chosen) if chosen else []
        argv += extra or []
    return [quote(argv), analyze_command(study, RUN_DIR)]


def reproduce(study: Study, here: str = "") -> list[str]:
    """Every command to redo the study from scratch, with comments (``here``: the run
    directory, as in :func:`client_commands`)."""
    lines = []
    installs = sorted({cmd for c in study.cells if (cmd := install_command(c))})
    if installs:
        lines.append("# the engine build(s) the study used")
        lines += installs
    binaries = sorted({str((c.manifest.get("engine") or {}).get("binary")) for c in study.cells
                       if install_command(c) is None and (c.manifest.get("engine") or {})
                       .get("binary")})
    for b in binaries:
        lines.append(f"# engine binary as recorded: {b} (see the study card for its sha256)")
    lines.append("# run the study (from the run directory's copy of its matrix file), then "
                 "analyse it")
    lines += client_commands(study, here=here)
    lines.append(quote(["crossbench", "report", RUN_DIR]))
    return lines


def flags_that_matter(argv: list[str]) -> list[str]:
    """A server command without the binary, model files, host and port (shown elsewhere)."""
    drop_with_value = {"--model", "-m", "--host", "--port", "--spec-draft-model", "-md",
                       "--model-draft"}
    out: list[str] = []
    args = iter(argv[1:])
    for a in args:
        if a in drop_with_value:
            next(args, None)  # its value
        elif a.partition("=")[0] not in drop_with_value:
            out.append(a)
    return out
