"""Merge pieces of one matrix run into one run directory (``crossbench merge``).

A matrix is sometimes run in pieces: the same matrix file, each invocation with other
``--only``/``--skip`` filters, each into its own ``--out``. A speculative cell's baseline may
then sit in another piece, so no piece pairs alone. :func:`merge_runs` writes a new run
directory that every reader (``analyze``, ``status``, ``report``, ``archive``) takes as one
run:

- ``cells/``: every source's cell folders, copied (the sources are never written);
- ``state.json``: the union of the cells and of the ``order``, each source's order kept and
  the sources taken in the order their first trial started (the earliest ``started_utc`` in
  their cells' manifests; a source without a started trial goes last, in the order given),
  ``warnings`` concatenated, and ``merged_from``: per source its folder name, the sha256 of
  its ``state.json``, its cells and when its first trial started;
- ``journal.jsonl`` (and ``stops.jsonl``, ``predictions.jsonl`` where a source has them):
  the sources' complete lines, concatenated in the same order;
- ``matrix.yaml`` and ``start-spread.json`` copied, ``summary.json`` recomputed
  (:func:`crossbench.runner.matrix_run.matrix_status`, as ``crossbench status`` does).

Refused before anything is written (a :class:`~crossbench.errors.UserError` naming the field):
fewer than two sources, sources of different matrix files (``matrix_sha256``, ``study``,
``trials``, ``schedule``, ``matrix.yaml``), a cell in two sources (no trial may count twice),
start spreads that differ, a non-empty ``--out``. The result is built in a hidden folder
beside ``--out`` and renamed into place at the end: a crash leaves no half run.

A merged directory is a matrix run like any other: ``crossbench matrix MATRIX --out MERGED
--resume`` continues it with filters that select none but its cells (each piece's own filters
do), and refuses filters that select cells it does not hold (docs/matrix.md "Merging pieces
of a run").

Example::

    from crossbench.runner.merge import merge_runs

    summary = merge_runs([Path("runs/base"), Path("runs/eagle3")], Path("runs/merged"))
    print(summary["totals"])  # {'done': ..., 'failed': ..., 'missing': ...}
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.errors import UserError
from crossbench.runner.matrix_run import (
    Progress,
    matrix_status,
    read_journal,
    read_state,
)
from crossbench.store import rundir
from crossbench.store.atomic import (
    fsync_dir,
    sha256_file,
    torn_tail,
    write_bytes_atomic,
    write_json_atomic,
)

SAME_FIELDS = ("matrix_sha256", "study", "trials", "schedule")
"""The state.json fields every piece of one matrix run shares."""
SAME_FIX = ("merge only pieces of one matrix file (`crossbench matrix FILE --only ... --out "
            "PIECE`, the same FILE for every piece)")
"""The fix of sources that are not pieces of one matrix run."""
DISJOINT_FIX = ("merge pieces with disjoint cells (each cell's trials in one piece), or continue "
                "one run with `crossbench matrix MATRIX_FILE --out DIR --resume`")
"""The fix of a cell found in two sources."""
JSONL_FILES = (rundir.JOURNAL, rundir.STOPS, rundir.PREDICTIONS)
"""The per-cell line files of a matrix run, concatenated by a merge."""
DERIVED = (rundir.ANALYSIS, rundir.ANALYSIS_DIR, rundir.REPORT_DIR)
"""What a source may hold that a merge leaves out because it is derived from the whole run:
``crossbench analyze`` and ``crossbench report`` make it again from the merged directory."""
TAKEN = (rundir.STATE, rundir.SUMMARY, rundir.MATRIX_FILE, rundir.START_SPREAD,
         rundir.CELLS_DIR, *JSONL_FILES)
"""The files and folders of a source a merge reads."""


@dataclass
class Piece:
    """One source run directory, read and checked."""

    root: Path
    state: dict[str, Any]
    state_sha256: str
    first_utc: str | None
    """The earliest ``started_utc`` of its cells' trials (None: no trial started)."""
    lines: dict[str, bytes] = field(default_factory=dict)
    """Complete lines of each file of :data:`JSONL_FILES` it has (torn tails left out)."""
    torn: dict[str, int] = field(default_factory=dict)
    """Bytes of a torn last line left out, by file."""
    journal_cells: set[str] = field(default_factory=set)
    """The cells its journal has entries for."""

    @property
    def cell_ids(self) -> list[str]:
        """Its cells' ids, in its state's order."""
        return [c["id"] for c in self.state["cells"]]


def merge_runs(sources: Sequence[Path], out: Path,
               progress: Progress = lambda _: None) -> dict[str, Any]:
    """Merge the matrix run directories ``sources`` (pieces of one matrix file with disjoint
    cells) into the new run directory ``out`` (module docstring); returns its status summary
    (what ``crossbench status`` prints), which is also written to ``out/summary.json``."""
    if len(sources) < 2:
        raise UserError(f"merge needs at least 2 run directories, got {len(sources)}",
                        "give every piece of the run: crossbench merge PIECE1 PIECE2 ... "
                        "--out NEW_DIR")
    _check_distinct(sources)
    _check_out(out, sources)
    pieces = [_read_piece(src) for src in sources]
    _check_same(pieces)
    _check_disjoint(pieces)
    matrix_file = _matrix_file(pieces)
    spread = _start_spread(pieces)
    pieces = [p for _, p in sorted(enumerate(pieces), key=lambda x: (
        x[1].first_utc is None, x[1].first_utc or "", x[0]))]
    progress("sources in the order their first trial started: "
             + ", ".join(f"{p.root} ({p.first_utc or 'no trial started'})" for p in pieces))
    for p in pieces:
        for name, size in p.torn.items():
            progress(f"warning: {p.root / name} ends in an incomplete line ({size} bytes "
                     "without a newline, left by a crash during a write): left out of the "
                     "merged file, as every reader leaves it out"
                     + ("; the trial it was for counts as missing" if name == rundir.JOURNAL
                        else ""))
        others = _others(p)
        if others:
            progress(f"note: left out of {p.root}: {', '.join(others)} (not part of a matrix "
                     "run, or derived from the whole run: analyze and report make it again)")
    tmp = out.with_name(f".{out.name}.merge.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            tmp.mkdir(parents=True)
        except OSError as e:
            raise UserError(f"--out {out} cannot be written ({e.strerror or e})",
                            "choose an --out in a folder you can write to") from None
        summary = _write(pieces, tmp, matrix_file, spread)
        if out.exists():  # an empty folder (_check_out): the merged one takes its place
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out.parent)
    return summary


def _check_distinct(sources: Sequence[Path]) -> None:
    """Refuse a source given twice."""
    seen: dict[Path, Path] = {}
    for src in sources:
        key = src.resolve()
        if key in seen:
            raise UserError(f"{src} is given twice (as {seen[key]} and {src})",
                            "give each piece once")
        seen[key] = src


def _check_out(out: Path, sources: Sequence[Path]) -> None:
    """Refuse an ``--out`` that is a file, a non-empty folder, or inside a source."""
    try:
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out} is a file, not a directory",
                            "choose a new --out directory")
        if out.is_dir() and any(out.iterdir()):
            raise UserError(f"--out {out} already exists and is not empty",
                            "choose a new --out (a merge writes a new run directory and "
                            "never writes into one)")
    except OSError as e:
        raise UserError(f"--out {out} cannot be read ({e.strerror or e})",
                        "choose an --out you can read and write") from None
    target = out.resolve()
    for src in sources:
        if src.resolve() in target.parents:
            raise UserError(f"--out {out} is inside the source {src}",
                            "choose an --out outside the sources (they are never written)")


def _read_piece(src: Path) -> Piece:
    """A source read through the runner's readers: a matrix run's state.json (the fields a
    resume needs), its journal (every complete line a journal entry) and its cells'
    manifests."""
    if not src.is_dir() or not rundir.is_matrix(src):
        raise UserError(f"{src} holds no matrix run (no {rundir.STATE})",
                        "give the --out directories of `crossbench matrix` runs")
    if rundir.read_state(src).get("kind") == rundir.IMPORT_KIND:
        raise UserError(f"{src} holds an import ({rundir.STATE} kind {rundir.IMPORT_KIND}), "
                        "not a matrix run", "merge only `crossbench matrix` run directories")
    state = read_state(src)  # refused when damaged, newer, or lacking what a resume needs
    journal = read_journal(src)  # refused when a complete line is not a journal entry
    rundir.read_stops(src)
    rundir.read_predictions(src)  # damaged lines refused as the runner refuses them
    piece = Piece(src, state, sha256_file(src / rundir.STATE), _first_start(src, state),
                  journal_cells={cid for cid, _ in journal})
    for name in JSONL_FILES:
        path = src / name
        if not path.exists():
            continue
        data, torn = path.read_bytes(), torn_tail(path)
        piece.lines[name] = data[:len(data) - len(torn)]
        if torn:
            piece.torn[name] = len(torn)
    return piece


def _others(p: Piece) -> list[str]:
    """What a source holds that a merge does not take: files a matrix run does not write,
    cell folders its state.json does not list, and the derived files of :data:`DERIVED`."""
    listed = {os.path.normpath(c["dir"]) for c in p.state["cells"]}
    found = sorted(e.name for e in p.root.iterdir() if e.name not in TAKEN)
    cells = p.root / rundir.CELLS_DIR
    if cells.is_dir():
        found += sorted(f"{rundir.CELLS_DIR}/{e.name}" for e in cells.iterdir()
                        if os.path.normpath(f"{rundir.CELLS_DIR}/{e.name}") not in listed)
    return found


def _first_start(src: Path, state: dict[str, Any]) -> str | None:
    """The earliest ``started_utc`` of the trials recorded in a run's cell manifests."""
    starts = [str(t["started_utc"]) for _, d in rundir.ran_cells(src, state)
              for t in rundir.read_manifest(d).get("trials") or []
              if isinstance(t, dict) and t.get("started_utc")]
    return min(starts) if starts else None


def _check_same(pieces: list[Piece]) -> None:
    """Refuse sources whose state.json differs in a field of :data:`SAME_FIELDS`."""
    first = pieces[0]
    for p in pieces[1:]:
        for key in SAME_FIELDS:
            a, b = first.state.get(key), p.state.get(key)
            if a != b:
                raise UserError(f"{key} differs between the sources: {first.root} has "
                                f"{_shown(a)}, {p.root} has {_shown(b)}", SAME_FIX)


def _shown(value: Any) -> str:
    """A state value in a message (a sha256 shortened to 12 digits)."""
    if isinstance(value, str) and len(value) == 64:
        return value[:12]
    return repr(value)


def _check_disjoint(pieces: list[Piece]) -> None:
    """Refuse a cell (by id, in state.json or the journal) or a cell folder found in two
    sources: no trial may count twice."""
    owner: dict[str, Path] = {}
    folders: dict[str, tuple[str, Path]] = {}
    for p in pieces:
        ids = set(p.cell_ids) | p.journal_cells
        for cid in sorted(ids, key=lambda c: (c not in p.cell_ids, c)):
            if cid in owner:
                raise UserError(f"cell {cid} is in two sources: {owner[cid]} and {p.root}",
                                DISJOINT_FIX)
            owner[cid] = p.root
        for c in p.state["cells"]:
            key = os.path.normpath(c["dir"])
            if key in folders:
                cid, where = folders[key]
                raise UserError(f"cells {cid} of {where} and {c['id']} of {p.root} have the "
                                f"same folder {c['dir']}", DISJOINT_FIX)
            folders[key] = (c["id"], p.root)


def _same_bytes(pieces: list[Piece], name: str, why: str, fix: str
                ) -> tuple[Path, bytes] | None:
    """The bytes of the file ``name`` of the sources that have one, refused (``why`` after
    the two paths, ``fix``) where two of them differ; None where no source has it."""
    found: tuple[Path, bytes] | None = None
    for p in pieces:
        path = p.root / name
        if not path.exists():
            continue
        data = path.read_bytes()
        if found is not None and data != found[1]:
            raise UserError(f"{name} differs between the sources: {found[0]} and {path}{why}",
                            fix)
        found = (path, data)
    return found


def _matrix_file(pieces: list[Piece]) -> bytes:
    """The bytes of the sources' ``matrix.yaml``: the same in every source that has one and
    of the sha256 their state.json records."""
    found = _same_bytes(pieces, rundir.MATRIX_FILE, "", SAME_FIX)
    if found is None:
        raise UserError(f"no source holds its {rundir.MATRIX_FILE}",
                        "resume one of them (`crossbench matrix MATRIX_FILE --out PIECE "
                        "--resume` with its filters writes it), then merge")
    digest = hashlib.sha256(found[1]).hexdigest()
    if digest != pieces[0].state["matrix_sha256"]:
        raise UserError(f"{found[0]} (sha256 {digest[:12]}) is not the matrix file its "
                        f"{rundir.STATE} records (matrix_sha256 "
                        f"{pieces[0].state['matrix_sha256'][:12]}): it was changed after the run",
                        "restore the matrix file the run used from a copy, then merge")
    return found[1]


def _start_spread(pieces: list[Piece]) -> bytes | None:
    """The sources' ``start-spread.json``: the one copy, or copies that are all the same."""
    found = _same_bytes(pieces, rundir.START_SPREAD,
                        " (their decisions used different start spreads)",
                        "merge pieces run with the same start_spread file (or none), or "
                        "analyse them apart")
    return None if found is None else found[1]


def _write(pieces: list[Piece], tmp: Path, matrix_file: bytes,
           spread: bytes | None) -> dict[str, Any]:
    """Write the merged run directory into the (new, empty) folder ``tmp``; returns its
    status summary."""
    for p in pieces:
        for c in p.state["cells"]:
            src = p.root / c["dir"]
            if src.is_dir():
                dest = tmp / c["dir"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(src, dest, symlinks=True)
    write_bytes_atomic(tmp / rundir.MATRIX_FILE, matrix_file)
    if spread is not None:
        write_bytes_atomic(tmp / rundir.START_SPREAD, spread)
    for name in JSONL_FILES:
        if any(name in p.lines for p in pieces):
            write_bytes_atomic(tmp / name, b"".join(p.lines.get(name, b"") for p in pieces))
    first = pieces[0].state
    state: dict[str, Any] = {
        "schema_version": rundir.STATE_SCHEMA, "kind": rundir.MATRIX_KIND,
        **{key: first[key] for key in SAME_FIELDS if key in first},
        "cells": [c for p in pieces for c in p.state["cells"]],
        "order": [e for p in pieces for e in p.state["order"]],
        "warnings": [w for p in pieces for w in p.state.get("warnings") or []],
        "merged_from": [_record(p) for p in pieces],
    }
    rundir.write_state(tmp, state)
    summary = matrix_status(tmp)
    write_json_atomic(tmp / rundir.SUMMARY, summary)
    return summary


def _record(p: Piece) -> dict[str, Any]:
    """What ``merged_from`` keeps of a source: its folder's name (never the path, which may
    name a user's home), its state.json's sha256, its cells and its first trial's start; the
    journal repairs and earlier merges its state recorded; torn tails left out."""
    rec: dict[str, Any] = {"dir": p.root.resolve().name, "state_sha256": p.state_sha256,
                           "cells": p.cell_ids, "first_started_utc": p.first_utc}
    for key in ("journal_repairs", "merged_from"):
        if p.state.get(key):
            rec[key] = p.state[key]
    if p.torn:
        rec["torn_tails_left_out"] = dict(p.torn)
    return rec


__all__ = ["DERIVED", "JSONL_FILES", "SAME_FIELDS", "TAKEN", "Piece", "merge_runs"]
