"""``crossbench archive verify PATH``: is this archive what it says it is?

PATH is the zip or the folder ``crossbench archive`` wrote. Five checks, each failure a
:class:`Problem` naming the file (relative to the archive's folder) and, where there is one,
the line:

1. checksums: every file matches ``SHA256SUMS``, none is missing or unlisted, and
   ``MANIFEST.json`` agrees;
2. side archives (server logs split off): when the side zip lies beside PATH, its sha256 and
   every member's match ``MANIFEST.json`` (absent: a note, not a failure);
3. schema versions: the archive manifest, ``analysis.json``, ``state.json``, every cell's
   ``manifest.json`` and provenance record are versions this crossbench reads;
4. re-derivation: the raw files are copied to a temporary folder and analysed again with the
   options recorded in ``analysis.json`` (resamples, seed, level, min samples); every number
   of the recorded analysis, and every cell's ``summary.json``, must come out the same;
5. secrets: no secret-looking value anywhere (``crossbench.archive.secrets``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.analysis.analyze import ANALYSIS_SCHEMA, analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.summary import summarize_run_dir
from crossbench.archive.build import (
    ARCHIVE_KIND,
    ARCHIVE_SCHEMA,
    DATA,
    MANIFEST,
    SUMS,
)
from crossbench.archive.secrets import environment_secrets, scan_stream, scan_tree
from crossbench.confounds.provenance import SCHEMA_VERSION as PROVENANCE_SCHEMA
from crossbench.errors import UserError
from crossbench.importers.records import IMPORT_SCHEMA
from crossbench.runner.matrix_run import STATE_SCHEMA
from crossbench.runner.single import MANIFEST_SCHEMA
from crossbench.store.atomic import sha256_file

REL_TOL = 1e-9
"""Relative tolerance of a re-derived number (the analysis is deterministic; this only
absorbs the last bits of floating-point summation order)."""
MAX_LISTED = 20
"""Most differences listed per file."""
IGNORED = {("run", "dir"), ("crossbench_version",)}
"""Fields of analysis.json that name where and by what it was made, not what it found."""
FIRST = ("pairs", "sweeps", "cells", "verdict", "statistical_verdict", "speedup",
         "speedup_e2e", "acceptance", "geomean", "ci95")
"""Keys whose differences are listed first (the headline numbers)."""


def _order(key: Any) -> tuple[int, str]:
    return (FIRST.index(key) if key in FIRST else len(FIRST), str(key))


@dataclass(frozen=True)
class Problem:
    """A failed check: file (relative to the archive folder), line when known, message."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


@dataclass
class Check:
    """One check's outcome: name, problems found, and a one-line summary when it passed."""

    name: str
    detail: str = ""
    problems: list[Problem] = field(default_factory=list)
    skipped: bool = False

    @property
    def ok(self) -> bool:
        """Whether the check found nothing wrong."""
        return not self.problems


@dataclass
class Verification:
    """Every check of one archive."""

    archive: str
    checks: list[Check]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[Problem]:
        """Every problem of every check."""
        return [p for c in self.checks for p in c.problems]


# -- JSON with line numbers -----------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
Path_ = tuple[str | int, ...]


def value_lines(text: str) -> dict[Path_, int]:
    """The 1-based line where each value of a JSON document starts, by its key path."""
    breaks = [i for i, ch in enumerate(text) if ch == "\n"]
    out: dict[Path_, int] = {}

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    def parse(pos: int, path: Path_) -> int:
        pos = skip(pos)
        out[path] = bisect.bisect_left(breaks, pos) + 1
        ch = text[pos]
        if ch in "{[":
            close, pos, index = ("}" if ch == "{" else "]"), skip(pos + 1), 0
            if text[pos] == close:
                return pos + 1
            while True:
                key: str | int = index
                if ch == "{":
                    s = _STRING.match(text, skip(pos))
                    if not s:
                        raise ValueError(f"expected a key at line {out[path]}")
                    key, pos = json.loads(s.group()), skip(s.end()) + 1  # past the colon
                pos = skip(parse(pos, (*path, key)))
                index += 1
                if text[pos] == close:
                    return pos + 1
                pos += 1  # the comma
        if ch == '"':
            s = _STRING.match(text, pos)
            if not s:
                raise ValueError(f"unterminated string at line {out[path]}")
            return s.end()
        for lit in _LITERALS:
            if text.startswith(lit, pos):
                return pos + len(lit)
        m = _NUMBER.match(text, pos)
        if not m:
            raise ValueError(f"unexpected {text[pos]!r} at line {out[path]}")
        return m.end()

    parse(0, ())
    return out


def line_of(lines: Mapping[Path_, int], path: Path_) -> int | None:
    """The line of ``path``, else of its nearest recorded ancestor."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


# -- comparing a recorded object with its re-derivation -------------------------------------

def _same_number(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def differences(recorded: Any, derived: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any, Any]]:
    """(path, recorded, re-derived) of every leaf that differs."""
    if path in IGNORED:
        return
    if isinstance(recorded, dict) and isinstance(derived, dict):
        for k in sorted(set(recorded) | set(derived), key=_order):
            yield from differences(recorded.get(k, "<missing>"), derived.get(k, "<missing>"),
                                   (*path, k))
    elif isinstance(recorded, list) and isinstance(derived, list):
        if len(recorded) != len(derived):
            yield path, f"{len(recorded)} items", f"{len(derived)} items"
            return
        for i, (a, b) in enumerate(zip(recorded, derived, strict=True)):
            yield from differences(a, b, (*path, i))
    elif isinstance(recorded, int | float) and isinstance(derived, int | float) and \
            not isinstance(recorded, bool) and not isinstance(derived, bool):
        if not _same_number(float(recorded), float(derived)):
            yield path, recorded, derived
    elif recorded != derived:
        yield path, recorded, derived


def dotted(obj: Any, path: Path_) -> str:
    """``pairs[<cell id>].speedup.geomean``: list items named by their ``cell`` when they
    have one."""
    parts: list[str] = []
    node = obj
    for key in path:
        node = _child(node, key)
        if isinstance(key, int):
            name = node.get("cell") if isinstance(node, dict) else None
            parts.append(f"[{name or key}]")
        else:
            parts.append(("." if parts else "") + key)
    return "".join(parts)


def _child(node: Any, key: str | int) -> Any:
    """``node[key]``, or None where there is no such item."""
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def _short(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= 60 else s[:57] + "..."


def compare_json(rel: str, text: str, derived: Any) -> list[Problem]:
    """Problems for every value of a JSON file (its text) that its re-derivation changes."""
    recorded = json.loads(text)
    diffs = list(differences(recorded, derived))
    if not diffs:
        return []
    try:
        lines = value_lines(text)
    except (ValueError, IndexError):
        lines = {}
    out = [Problem(rel, line_of(lines, p), f"{dotted(recorded, p)} is {_short(a)} but the raw "
                   f"records give {_short(b)}") for p, a, b in diffs[:MAX_LISTED]]
    if len(diffs) > MAX_LISTED:
        out.append(Problem(rel, None, f"... and {len(diffs) - MAX_LISTED} more differences"))
    return out


# -- the checks -----------------------------------------------------------------------------

def _read_sums(root: Path, check: Check) -> dict[str, tuple[str, int]]:
    """``SHA256SUMS`` as path -> (sha256, line)."""
    listed: dict[str, tuple[str, int]] = {}
    path = root / SUMS
    if not path.exists():
        check.problems.append(Problem(SUMS, None, "missing: the archive has no checksums"))
        return listed
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", line)
        if not m:
            check.problems.append(Problem(SUMS, i, "not a '<sha256>  <path>' line"))
            continue
        listed[m.group(2)] = (m.group(1), i)
    return listed


def check_checksums(root: Path) -> tuple[Check, dict[str, str]]:
    """Check 1; also returns the actual sha256 of every file."""
    check = Check("checksums")
    listed = _read_sums(root, check)
    actual = {p.relative_to(root).as_posix(): sha256_file(p)
              for p in sorted(root.rglob("*")) if p.is_file()}
    for rel, (sha, line) in listed.items():
        if rel not in actual:
            check.problems.append(Problem(rel, None, f"listed in {SUMS} (line {line}) but "
                                          "missing"))
        elif actual[rel] != sha:
            check.problems.append(Problem(rel, None, f"sha256 differs from {SUMS} line {line}: "
                                          "the file changed after the archive was built"))
    for rel in actual:
        if rel != SUMS and rel not in listed:
            check.problems.append(Problem(rel, None, f"not listed in {SUMS}"))
    manifest = _json_or_none(root / MANIFEST)
    for f in (manifest or {}).get("files", []):
        if f.get("path") in actual and f.get("sha256") != actual[f["path"]]:
            check.problems.append(Problem(f["path"], None, f"sha256 differs from {MANIFEST}"))
    check.detail = f"{len(actual)} files match {SUMS}"
    return check, actual


def check_side_archives(root: Path, beside: Path, notes: list[str]) -> Check:
    """Check 2: side archives found beside the archive."""
    check = Check("side archives")
    manifest = _json_or_none(root / MANIFEST) or {}
    sides = manifest.get("side_archives") or []
    if not sides:
        check.skipped, check.detail = True, "none"
        return check
    secrets = environment_secrets()
    found = 0
    for side in sides:
        path = beside / str(side.get("name"))
        if not path.exists():
            notes.append(f"side archive {side.get('name')} is not beside the archive: its "
                         f"{len(side.get('files', []))} files were not checked")
            continue
        found += 1
        if sha256_file(path) != side.get("sha256"):
            check.problems.append(Problem(path.name, None, f"sha256 differs from {MANIFEST}"))
        wanted = {f["path"]: f["sha256"] for f in side.get("files", [])}
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                rel = info.filename.split("/", 1)[-1]
                if rel not in wanted:
                    check.problems.append(Problem(f"{path.name}:{info.filename}", None,
                                                  f"not listed in {MANIFEST}"))
                    continue
                h = hashlib.sha256()
                with zf.open(info) as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                if h.hexdigest() != wanted.pop(rel):
                    check.problems.append(Problem(f"{path.name}:{rel}", None,
                                                  f"sha256 differs from {MANIFEST}"))
                with zf.open(info) as fh:
                    for f in scan_stream(f"{path.name}:{rel}", fh, secrets):
                        check.problems.append(Problem(f.path, f.line, f.what))
            for rel in wanted:
                check.problems.append(Problem(f"{path.name}:{rel}", None, "missing"))
    check.detail = f"{found} of {len(sides)} present and checked"
    return check


def _json_or_none(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_json(root: Path, rel: str, check: Check) -> tuple[str, Any] | None:
    """(text, object) of a JSON file of the archive; a problem when it is missing or broken."""
    try:
        text = (root / rel).read_text(encoding="utf-8")
        return text, json.loads(text)
    except FileNotFoundError:
        check.problems.append(Problem(rel, None, "missing"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        check.problems.append(Problem(rel, getattr(e, "lineno", None), f"not JSON: {e}"))
    return None


def _schema(check: Check, rel: str, text: str, path: Path_, readable: int,
            what: str) -> None:
    version: Any = json.loads(text)
    for key in path:
        version = _child(version, key)
    if version == readable:
        return
    try:
        line = line_of(value_lines(text), path)
    except (ValueError, IndexError):
        line = None
    newer = isinstance(version, int) and version > readable
    check.problems.append(Problem(rel, line, f"{what} schema_version {version!r}; this "
                                  f"crossbench reads {readable}"
                                  + (" (upgrade crossbench)" if newer else "")))


def check_schemas(root: Path) -> Check:
    """Check 3: every versioned file is a version this crossbench reads."""
    check = Check("schema versions")
    counted = 0
    loaded = _read_json(root, MANIFEST, check)
    if loaded is not None:
        _schema(check, MANIFEST, loaded[0], ("schema_version",), ARCHIVE_SCHEMA, "archive")
        if _child(loaded[1], "kind") != ARCHIVE_KIND:
            check.problems.append(Problem(MANIFEST, None, f"kind is not {ARCHIVE_KIND}"))
        counted += 1
    data = root / DATA
    targets = [(f"{DATA}/analysis.json", ANALYSIS_SCHEMA, "analysis")]
    state = _json_or_none(data / "state.json")
    if state is not None:
        readable = IMPORT_SCHEMA if state.get("kind") == "crossbench.import" else STATE_SCHEMA
        targets.append((f"{DATA}/state.json", readable, "state"))
    for rel, readable, what in targets:
        loaded = _read_json(root, rel, check)
        if loaded is not None:
            _schema(check, rel, loaded[0], ("schema_version",), readable, what)
            counted += 1
    for path in sorted(data.rglob("manifest.json")):
        rel = path.relative_to(root).as_posix()
        loaded = _read_json(root, rel, check)
        if loaded is None:
            continue
        text, obj = loaded
        _schema(check, rel, text, ("schema_version",), MANIFEST_SCHEMA, "run manifest")
        counted += 1
        trials = _child(obj, "trials")
        for i, entry in enumerate(trials if isinstance(trials, list) else []):
            if isinstance(_child(entry, "provenance"), dict):
                _schema(check, rel, text, ("trials", i, "provenance", "schema_version"),
                        PROVENANCE_SCHEMA, "provenance")
    check.detail = f"{counted} versioned files readable"
    return check


def _not_analysed(data: Path) -> Callable[[str, list[str]], list[str]]:
    """Files the re-derivation leaves out: the recorded analysis, and server logs (large,
    and never read by the analysis)."""
    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == data
        return [n for n in names if n.endswith(".log")
                or (top and n in ("analysis.json", "analysis"))]
    return ignore


def check_rederivation(root: Path) -> Check:
    """Check 4: the analysis and every cell summary re-derive from the raw files."""
    check = Check("analysis re-derives")
    rel = f"{DATA}/analysis.json"
    loaded = _read_json(root, rel, check)
    if loaded is None or not isinstance(loaded[1], dict):
        if loaded is not None:
            check.problems.append(Problem(rel, 1, "not a JSON object"))
        return check
    text, recorded = loaded
    o = recorded.get("options") or {}
    try:
        opts = StatsOptions(resamples=int(o.get("resamples", 10_000)),
                            seed=int(o.get("seed", 0)), level=float(o.get("level", 0.95)),
                            min_samples=int(o.get("min_samples", 10)))
    except (AttributeError, TypeError, ValueError):
        line = line_of(value_lines(text), ("options",))
        check.problems.append(Problem(rel, line, "options are not the analysis options"))
        return check
    with tempfile.TemporaryDirectory(prefix="crossbench-verify-") as tmp:
        work = Path(tmp) / "data"
        shutil.copytree(root / DATA, work, ignore=_not_analysed(root / DATA))
        try:
            derived = json.loads(json.dumps(analyze(work, opts)))
            for path in sorted(work.rglob("summary.json")):
                if not (path.parent / "manifest.json").exists():
                    continue
                srel = f"{DATA}/{path.relative_to(work).as_posix()}"
                fresh = json.loads(json.dumps(summarize_run_dir(path.parent)))
                check.problems += compare_json(srel, (root / srel).read_text(), fresh)
        except (UserError, KeyError, TypeError, ValueError) as e:
            check.problems.append(Problem(DATA, None, f"the raw files do not analyse: "
                                          f"{type(e).__name__}: {e}"))
            return check
        check.problems[:0] = compare_json(rel, text, derived)
    if recorded.get("crossbench_version") != derived.get("crossbench_version"):
        check.detail = (f"(recorded by crossbench {recorded.get('crossbench_version')}, "
                        f"re-derived by {derived.get('crossbench_version')}) ")
    counts = ", ".join(_count(len(recorded.get(k, [])), k[:-1]) for k in
                       ("pairs", "cells", "sweeps"))
    check.detail += f"{counts} ({opts.resamples} resamples, seed {opts.seed})"
    return check


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check_secrets(root: Path) -> Check:
    """Check 5: no secret-looking value in any file."""
    check = Check("no secrets")
    check.problems = [Problem(f.path, f.line, f.what) for f in scan_tree(root)]
    check.detail = "no token pattern, no *TOKEN value of this environment"
    return check


# -- opening an archive ---------------------------------------------------------------------

def _archive_folder(path: Path) -> Path:
    if (path / SUMS).exists() or (path / MANIFEST).exists():
        return path
    inner = [p for p in path.iterdir() if p.is_dir() and (p / MANIFEST).exists()] \
        if path.is_dir() else []
    if len(inner) == 1:
        return inner[0]
    raise UserError(f"{path} is not an archive folder (no {SUMS} or {MANIFEST})",
                    "give the folder or the .zip that `crossbench archive` wrote")


def _extract(zpath: Path, into: Path) -> Path:
    try:
        zf = zipfile.ZipFile(zpath)
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{zpath} is not a readable zip: {e}",
                        "give the .zip or the folder `crossbench archive` wrote") from None
    with zf:
        tops = set()
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if info.filename.startswith("/") or ".." in parts or not parts:
                raise UserError(f"{zpath} holds an unsafe path {info.filename!r}",
                                "only verify archives made by `crossbench archive`")
            tops.add(parts[0])
        if len(tops) != 1:
            raise UserError(f"{zpath} does not hold one folder (found {len(tops)})",
                            "give the .zip `crossbench archive` wrote")
        zf.extractall(into)
    return into / tops.pop()


def verify(path: Path, rederive: bool = True) -> Verification:
    """Every check of the archive at ``path`` (a zip or a folder)."""
    if not path.exists():
        raise UserError(f"{path} does not exist", "give the .zip or the folder to verify")
    with tempfile.TemporaryDirectory(prefix="crossbench-archive-") as tmp:
        root = _extract(path, Path(tmp)) if path.is_file() else _archive_folder(path)
        beside = path.parent if path.is_file() else root.parent
        notes: list[str] = []
        checks = [check_checksums(root)[0], check_side_archives(root, beside, notes),
                  check_schemas(root)]
        if rederive:
            checks.append(check_rederivation(root))
        else:
            notes.append("re-derivation skipped (--no-reanalysis)")
        checks.append(check_secrets(root))
        return Verification(str(path), checks, notes)
