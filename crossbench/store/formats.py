"""What crossbench's directories are on disk: the kinds and format versions of their versioned
files, the checks that a file is one this crossbench reads, and the checks of an ``--out``.

Kinds (the ``kind`` of the file that marks a directory):

- ``crossbench.run`` -- ``manifest.json`` of a ``crossbench run`` directory, of every matrix
  cell and of every imported cell;
- ``crossbench.matrix`` -- ``state.json`` of a ``crossbench matrix`` directory;
- ``crossbench.import`` -- ``state.json`` of a ``crossbench import`` directory.

A file of a newer format version than this crossbench reads is refused with a one-line
:class:`~crossbench.errors.UserError` naming the file, its version and the newest version read
(the fix: upgrade crossbench); older versions are read. A file that is not what its name says
(truncated, not a JSON object, keys missing) is refused the same way, naming the file and
what to do; never a traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from crossbench import __version__
from crossbench.errors import UserError
from crossbench.store.atomic import json_error, json_type, read_jsonl, temp_name

RUN_KIND = "crossbench.run"
MATRIX_KIND = "crossbench.matrix"
IMPORT_KIND = "crossbench.import"

MANIFEST_SCHEMA = 1
# Format history of manifest.json (kind crossbench.run; runs, matrix cells, imported cells):
#   1: first version

STATE_SCHEMA = 1
# Format history of a matrix's state.json (kind crossbench.matrix). Its journal.jsonl lines
# carry no version of their own: they are read by the state's version.
#   1: first version. Added since without a version change (older readers ignore the key):
#      journal_repairs, the torn journal tails `--resume` cut (utc, offset, bytes, text)

IMPORT_SCHEMA = 1
"""Newest ``state.json`` of an import this crossbench reads (the writer's number is
``crossbench.importers.records.IMPORT_SCHEMA``; a test keeps the two equal)."""

DAMAGED = ("restore it from a copy or an archive of the run, or start again with a new --out "
           "(crossbench never guesses what a damaged file said)")
"""The fix of a versioned file that cannot be read."""

UPGRADE = "upgrade crossbench"
"""The fix of a file newer than this crossbench."""


def read_json_object(path: Path, fix: str = DAMAGED) -> dict[str, Any]:
    """A JSON object from a file; a :class:`UserError` names the file and ``fix`` when it
    cannot be read, is not JSON (truncated, say) or is not an object."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path} ({e.strerror or e})", fix) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start + 1})", fix) from None
    except (ValueError, RecursionError) as e:
        why = (f"{json_error(e)} at line {e.lineno} column {e.colno}"
               if isinstance(e, json.JSONDecodeError) else " ".join(str(e).split()))
        raise UserError(f"{path} is not valid JSON ({why})", fix) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is a JSON {json_type(data)}, not an object", fix)
    return data


def check_version(path: Path, data: dict[str, Any], newest: int, what: str,
                  fix: str = DAMAGED) -> None:
    """Refuse a file whose ``schema_version`` is newer than ``newest`` (``what``: the kind of
    file, in words) or not a version at all; a file without one (hand-made, or written before
    versions) is read as the first version."""
    if "schema_version" not in data:
        return
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path} has schema_version {version!r}, which is not a format "
                        "version", fix)
    if version > newest:
        raise UserError(f"{path} has schema_version {version} ({what}), newer than this "
                        f"crossbench ({__version__}) reads: up to {newest}", UPGRADE)


def _bad_cell(c: Any) -> str | None:
    """What is wrong with one ``cells`` entry of a state.json, or None."""
    if not isinstance(c, dict):
        return f"a {json_type(c)} where a cell object belongs"
    cid = c.get("id")
    if not isinstance(cid, str) or not cid:
        return "a cell without an id"
    if not isinstance(c.get("coords"), dict):
        return f"cell {cid}: coords"
    where = c.get("dir")
    if not isinstance(where, str) or not where or Path(where).is_absolute() \
            or ".." in Path(where).parts:
        return f"cell {cid}: dir {where!r} (a folder inside the run directory)"
    if not isinstance(c.get("baseline"), str | None):
        return f"cell {cid}: baseline"
    return None


STATE_KEYS: dict[str, Any] = {"schema_version": int, "kind": str, "study": str, "trials": int,
                              "cells": list, "matrix_sha256": str, "order": list}
"""What each key of a state.json must be (``matrix_sha256`` and ``order``: a matrix's only)."""


def check_state(path: Path, data: dict[str, Any], kinds: tuple[str, ...], need: tuple[str, ...],
                fix: str = DAMAGED) -> None:
    """Refuse a ``state.json`` that is not of one of ``kinds``, is of a newer version, or
    lacks (or has malformed) any key of ``need`` (see :data:`STATE_KEYS`); ``cells`` is
    checked entry by entry, ``order`` pair by pair."""
    kind = data.get("kind")
    newest = IMPORT_SCHEMA if kind == IMPORT_KIND else STATE_SCHEMA
    if "schema_version" in data:  # a newer file may lack what this version needs: say so first
        check_version(path, data, newest, "import state" if kind == IMPORT_KIND else
                      "matrix state", fix)
    if isinstance(kind, str) and kind not in kinds:
        raise UserError(f"{path} is the state of a {kind}, not of a "
                        f"{' or '.join(kinds)}", fix)
    bad = [k for k in need if not _is(data.get(k), STATE_KEYS[k])]
    if not bad and "cells" in need:
        bad = [why for why in map(_bad_cell, data["cells"]) if why][:1]
    if not bad and "order" in need:
        ids = {c["id"] for c in data["cells"]}
        bad = [f"order entry {e!r}" for e in data["order"]
               if not (isinstance(e, list) and len(e) == 2 and e[0] in ids
                       and _is(e[1], int))][:1]
    if bad:
        raise UserError(f"{path} is not a complete {kind_words(data)} (missing or malformed: "
                        f"{', '.join(bad)})", fix)


def kind_words(data: dict[str, Any]) -> str:
    """A state's kind in words."""
    return "import state" if data.get("kind") == IMPORT_KIND else "matrix state"


def _is(value: Any, want: Any) -> bool:
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


# -- --out ----------------------------------------------------------------------------------

_TEMP = re.compile(r"^\..+\.\d+\.tmp$")
"""Names of crossbench's own temporary files (``store.atomic.temp_name``): a kill during an
atomic write leaves one behind; it is no content of the directory."""


def _kind_of(path: Path) -> Any:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def check_new_out(out: Path, kind: str, flag: str = "--out") -> None:
    """Refuse an ``--out`` that a new run of ``kind`` (:data:`RUN_KIND` or
    :data:`MATRIX_KIND`) must not write into: a file, a path under a file, a directory that
    holds a crossbench run (each refusal says how to go on with it) or other files. A missing
    or empty directory passes; nothing is created (see :func:`make_out_dir`)."""
    try:
        _check_new_out(out, kind, flag)
    except OSError as e:
        raise UserError(f"{flag} {out} cannot be read ({e.strerror or e})",
                        f"choose a {flag} you can read and write") from None


def _check_new_out(out: Path, kind: str, flag: str) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a directory",
                        f"give {flag} the path of a new directory")
    if not out.exists():
        above = next((p for p in out.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise UserError(f"{flag} {out} is under {above}, which is a file",
                            f"give {flag} a path under a directory")
        return
    names = sorted(p.name for p in out.iterdir() if not _TEMP.match(p.name))
    if not names:
        return
    if "state.json" in names:
        found = _kind_of(out / "state.json")
        if found == MATRIX_KIND and kind == MATRIX_KIND:
            raise UserError(f"{flag} {out} already holds a matrix run",
                            f"add --resume to continue it, or choose a new {flag}")
        if found == MATRIX_KIND:
            raise UserError(f"{flag} {out} holds a matrix run (state.json), not a run",
                            f"continue it with `crossbench matrix MATRIX_FILE {flag} {out} "
                            f"--resume`, or choose a new {flag} for this run")
        if found == IMPORT_KIND:
            raise UserError(f"{flag} {out} holds an import (state.json)",
                            f"choose a new {flag} (an import is never written into)")
    elif "manifest.json" in names and kind == RUN_KIND:
        raise UserError(f"{flag} {out} already holds a run (manifest.json)",
                        f"choose a new {flag} directory (a `crossbench run` never resumes and "
                        "never overwrites)")
    elif "manifest.json" in names:
        raise UserError(f"{flag} {out} holds a `crossbench run` (manifest.json), not a matrix "
                        "run", f"choose a new {flag} for the matrix")
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{flag} {out} is not empty ({listed}) and holds no crossbench "
                    f"{'matrix run' if kind == MATRIX_KIND else 'run'}",
                    f"choose a new or empty {flag} (crossbench never writes among other "
                    "files)")


def make_out_dir(out: Path, flag: str = "--out") -> None:
    """Create ``out`` (with its parents) and prove it writable with a probe file; a
    :class:`UserError` names ``flag`` when it cannot be (a read-only place, ``/proc``...)."""
    probe = temp_name(out / "probe")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"{flag} {out} cannot be written ({e.strerror or e})",
                        f"choose a {flag} directory you can write to") from None


STOPS_FILE = "stops.jsonl"
"""A matrix run's record of the cells the sequential rule stopped (crossbench.runner.stopping):
one line per stopped cell, written by the driver alone."""


def read_stops(out: Path) -> dict[str, dict[str, Any]]:
    """Stopped cells of the matrix run in ``out`` by id, as ``stops.jsonl`` records them
    (empty without the file)."""
    path = out / STOPS_FILE
    if not path.exists():
        return {}
    return {str(r["cell"]): r for r in read_jsonl(path) if isinstance(r, dict) and "cell" in r}


PREDICTIONS_FILE = "predictions.jsonl"
"""A matrix run's probe-and-predict decisions (crossbench.runner.probe): one line per cell of
an n-sweep that the probes did not measure, written once by the driver."""


def read_predictions(out: Path) -> dict[str, dict[str, Any]]:
    """Probe-and-predict decisions of the matrix run in ``out`` by cell id (empty without the
    file)."""
    path = out / PREDICTIONS_FILE
    if not path.exists():
        return {}
    return {str(r["cell"]): r for r in read_jsonl(path) if isinstance(r, dict) and "cell" in r}
