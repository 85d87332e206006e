"""``crossbench archive verify PATH``: is this archive what it says it is?

PATH is the zip or the folder ``crossbench archive`` wrote. Five checks (docs/report.md
"Verify"): checksums, side archives, schema versions, re-derivation of every number from the
raw records, secrets; each failure a :class:`Problem` naming the file (relative to the
archive's folder) and, where there is one, the line.

A zip is untrusted input: :func:`zip_entries` refuses one over its :class:`Limits` or holding
anything but safe, distinct plain files before anything is written, and :func:`_write_entry`
writes each entry as a plain file, never following a link nor writing more bytes than
declared. Side archives are read under the same rules, never unpacked.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.summary import summarize_run_dir
from crossbench.archive.build import (
    ARCHIVE_KIND,
    ARCHIVE_SCHEMA,
    DATA,
    MANIFEST,
    SUMS,
)
from crossbench.archive.secrets import (
    declared_in,
    environment_secrets,
    scan_lines,
    scan_tree,
)
from crossbench.errors import UserError
from crossbench.store import rundir
from crossbench.store.atomic import sha256_file
from crossbench.store.rundir import (
    ANALYSIS_SCHEMA,
    IMPORT_SCHEMA,
    MANIFEST_SCHEMA,
    PROVENANCE_SCHEMA,
    STATE_SCHEMA,
    SUMMARY_SCHEMA,
)

ANALYSIS_REDEFINED = rundir.FORMATS["analysis"].redefined
SUMMARY_REDEFINED = rundir.FORMATS["summary"].redefined

MAX_ENTRIES = 100_000
"""Most entries a zip may hold. crossbench's own archives hold tens to hundreds (those of
examples/ 67 to 274); a study of 1 000 cells x 10 trials would hold about 45 000."""
MAX_BYTES = 8 * 1024**3
"""Most uncompressed bytes a zip may declare in all (8 GiB). The archives of examples/
declare 2.0 to 7.2 MB; server logs, the bulk of a large study, can go to a side archive
(``--split-logs-over``), which is checked against the same limit on its own."""
MAX_MEMBER_BYTES = 1024**3
"""Most uncompressed bytes one member of a zip may declare (1 GiB, what the run reader reads of
one file): the largest member of examples/ declares 0.96 MB."""
MAX_DEPTH = 32
"""Most parts a member's path may have (the archives of examples/ go 6 deep). A deeper path is
no run directory; a 2 000-deep one also outran Python's recursion in removing the temporary
folder, which was left behind."""
MAX_NAME_BYTES = 1024
"""Longest member name in UTF-8 bytes (examples/: 129), well under the 4 096 of a path on
Linux with the temporary folder in front."""
MAX_PART_BYTES = 255
"""Longest part of a member name (a file or folder name; Linux's NAME_MAX; examples/: 52)."""
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate",
           zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
"""Compression methods an entry may use: those Python's zipfile reads (``crossbench archive``
writes deflate)."""
_COPY_BLOCK = 1 << 20
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
_SCALAR = re.compile(_STRING.pattern + r"|true|false|null|NaN|-?Infinity"
                     r"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?", re.DOTALL)
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
        m = _SCALAR.match(text, pos)
        if not m:
            raise ValueError(f"unexpected {text[pos]!r} at line {out[path]}")
        return m.end()

    parse(0, ())
    return out


def _lines(text: str) -> dict[Path_, int]:
    """:func:`value_lines`, or no lines where the text does not parse."""
    try:
        return value_lines(text)
    except (ValueError, IndexError):
        return {}


def line_of(lines: Mapping[Path_, int], path: Path_) -> int | None:
    """The line of ``path``, else of its nearest recorded ancestor."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


# -- comparing a recorded object with its re-derivation -------------------------------------

def not_compared(version: Any, current: int, redefined: Mapping[int, tuple[str, ...]]
                 ) -> Callable[[Path_, Any], bool]:
    """What a file of ``version`` is not compared on: fields added since (absent from it) and
    fields redefined in a later version (``redefined``: version -> glob patterns with ``*``
    for list items). A file of the current version is compared on everything."""
    if not isinstance(version, int) or version >= current:
        return lambda path, recorded: False
    patterns = [p for v, ps in redefined.items() if v > version for p in ps]

    def skip(path: Path_, recorded: Any) -> bool:
        name = ".".join("*" if isinstance(k, int) else str(k) for k in path)
        return recorded == "<missing>" or name == "schema_version" or any(
            name == p or fnmatchcase(name, p) or name.startswith(p + ".") for p in patterns)

    return skip


def differences(recorded: Any, derived: Any, path: Path_ = (),
                skip: Callable[[Path_, Any], bool] | None = None
                ) -> Iterator[tuple[Path_, Any, Any]]:
    """(path, recorded, re-derived) of every leaf that differs (``skip``: paths an older
    format does not define as this crossbench does, see :func:`not_compared`)."""
    if path in IGNORED or (skip is not None and path and skip(path, recorded)):
        return
    if isinstance(recorded, dict) and isinstance(derived, dict):
        for k in sorted(set(recorded) | set(derived),
                        key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), str(k))):
            yield from differences(recorded.get(k, "<missing>"), derived.get(k, "<missing>"),
                                   (*path, k), skip)
    elif isinstance(recorded, list) and isinstance(derived, list):
        if len(recorded) != len(derived):
            yield path, f"{len(recorded)} items", f"{len(derived)} items"
            return
        for i, (a, b) in enumerate(zip(recorded, derived, strict=True)):
            yield from differences(a, b, (*path, i), skip)
    elif isinstance(recorded, int | float) and isinstance(derived, int | float) and \
            not isinstance(recorded, bool) and not isinstance(derived, bool):
        a, b = float(recorded), float(derived)
        if not (math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)
                or (math.isnan(a) and math.isnan(b))):
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


def compare_json(rel: str, text: str, derived: Any, current: int,
                 redefined: Mapping[int, tuple[str, ...]]) -> list[Problem]:
    """Problems for every value of a JSON file (its text) that its re-derivation changes; a
    file of an older format version than ``current`` is compared on what it defines alike."""
    recorded = json.loads(text)
    skip = not_compared(recorded.get("schema_version"), current, redefined) \
        if isinstance(recorded, dict) else None
    diffs = list(differences(recorded, derived, skip=skip))
    lines = _lines(text) if diffs else {}
    out = [Problem(rel, line_of(lines, p), f"{dotted(recorded, p)} is {_short(a)} but the raw "
                   f"records give {_short(b)}") for p, a, b in diffs[:MAX_LISTED]]
    if len(diffs) > MAX_LISTED:
        out.append(Problem(rel, None, f"... and {len(diffs) - MAX_LISTED} more differences"))
    return out


# -- the checks -----------------------------------------------------------------------------

def check_checksums(root: Path) -> Check:
    """Check 1: every file matches ``SHA256SUMS`` and ``MANIFEST.json``."""
    check = Check("checksums")
    listed: dict[str, tuple[str, int]] = {}  # path -> (sha256, line)
    if not (root / SUMS).exists():
        check.problems.append(Problem(SUMS, None, "missing: the archive has no checksums"))
    else:
        for i, text in enumerate((root / SUMS).read_text(encoding="utf-8").splitlines(), 1):
            m = re.fullmatch(r"([0-9a-f]{64}) [ *](.+)", text)
            if m:
                listed[m.group(2)] = (m.group(1), i)
            else:
                check.problems.append(Problem(SUMS, i, "not a '<sha256>  <path>' line"))
    found = sorted(root.rglob("*"))
    for link in (p for p in found if p.is_symlink()):  # a folder given to verify
        check.problems.append(Problem(link.relative_to(root).as_posix(), None,
                                      "is a symbolic link (an archive holds plain files "
                                      "only); not followed"))
    actual = {p.relative_to(root).as_posix(): sha256_file(p)
              for p in found if p.is_file() and not p.is_symlink()}
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
    return check


def check_side_archives(root: Path, beside: Path, notes: list[str], limits: Limits) -> Check:
    """Check 2: side archives found beside the archive (read, never unpacked, under the same
    ``limits`` and entry rules as the archive itself)."""
    check = Check("side archives")
    manifest = _json_or_none(root / MANIFEST) or {}
    sides = manifest.get("side_archives") or []
    if not sides:
        check.skipped, check.detail = True, "none"
        return check
    secrets, declared = environment_secrets(), declared_in(root)
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
        try:
            zf = zipfile.ZipFile(path)
            infos = zip_entries(zf, path.name, replace(limits, member=limits.bytes))
        except (OSError, zipfile.BadZipFile, UserError) as e:
            why = e.message if isinstance(e, UserError) else f"not a readable zip: {e}"
            check.problems.append(Problem(path.name, None, why.removeprefix(path.name + " ")))
            continue
        with zf:
            for info in infos:
                if info.is_dir():
                    continue
                rel = info.filename.split("/", 1)[-1]
                if rel not in wanted:
                    check.problems.append(Problem(f"{path.name}:{info.filename}", None,
                                                  f"not listed in {MANIFEST}"))
                    continue
                expected = wanted.pop(rel)
                h = hashlib.sha256()
                try:
                    with zf.open(info) as fh:
                        for block in iter(lambda: fh.read(_COPY_BLOCK), b""):
                            h.update(block)
                except _DAMAGED as e:
                    check.problems.append(Problem(f"{path.name}:{rel}", None,
                                                  f"damaged data ({_why(e)})"))
                    continue
                if h.hexdigest() != expected:
                    check.problems.append(Problem(f"{path.name}:{rel}", None,
                                                  f"sha256 differs from {MANIFEST}"))
                with zf.open(info) as fh:
                    for f in scan_lines(f"{path.name}:{rel}", fh, secrets, declared):
                        check.problems.append(Problem(f.path, f.line, f.what))
            for rel in wanted:
                check.problems.append(Problem(f"{path.name}:{rel}", None, "missing"))
    check.detail = f"{found} of {len(sides)} present and checked"
    return check


def _json_or_none(path: Path) -> dict[str, Any] | None:
    """The JSON object of ``path``; None, and no problem, when it is missing or no object."""
    loaded = _read_json(path.parent, path.name, Check(""))
    return loaded[1] if loaded is not None and isinstance(loaded[1], dict) else None


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
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= readable:
        return  # older versions are read, compared on what they define alike
    line = line_of(_lines(text), path)
    newer = isinstance(version, int) and version > readable
    check.problems.append(Problem(rel, line, f"{what} schema_version {version!r}; this "
                                  f"crossbench reads {readable}"
                                  + (" (upgrade crossbench)" if newer else "")))


def check_schemas(root: Path) -> Check:
    """Check 3: every versioned file is a version this crossbench reads."""
    check = Check("schema versions")
    data = root / DATA
    targets = [(MANIFEST, ARCHIVE_SCHEMA, "archive"),
               (f"{DATA}/{rundir.ANALYSIS}", ANALYSIS_SCHEMA, "analysis")]
    state = _json_or_none(data / rundir.STATE)
    if state is not None:
        readable = IMPORT_SCHEMA if state.get("kind") == rundir.IMPORT_KIND else STATE_SCHEMA
        targets.append((f"{DATA}/{rundir.STATE}", readable, "state"))
    targets += [(p.relative_to(root).as_posix(), MANIFEST_SCHEMA, "run manifest")
                for p in sorted(data.rglob(rundir.MANIFEST))]
    counted = 0
    for rel, readable, what in targets:
        loaded = _read_json(root, rel, check)
        if loaded is None:
            continue
        text, obj = loaded
        _schema(check, rel, text, ("schema_version",), readable, what)
        counted += 1
        if what == "archive" and _child(obj, "kind") != ARCHIVE_KIND:
            check.problems.append(Problem(MANIFEST, None, f"kind is not {ARCHIVE_KIND}"))
        trials = _child(obj, "trials") if what == "run manifest" else None
        for i, entry in enumerate(trials if isinstance(trials, list) else []):
            if isinstance(_child(entry, "provenance"), dict):
                _schema(check, rel, text, ("trials", i, "provenance", "schema_version"),
                        PROVENANCE_SCHEMA, "provenance")
    check.detail = f"{counted} versioned files readable"
    return check


def _not_analysed(data: Path) -> Callable[[str, list[str]], list[str]]:
    """Files the re-derivation leaves out: the recorded analysis, server logs (large, and
    never read by the analysis) and symbolic links (never followed)."""
    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == data
        return [n for n in names if n.endswith(".log")
                or (top and n in (rundir.ANALYSIS, rundir.ANALYSIS_DIR))
                or os.path.islink(os.path.join(folder, n))]
    return ignore


def check_rederivation(root: Path) -> Check:
    """Check 4: the analysis and every cell summary re-derive from the raw files."""
    check = Check("analysis re-derives")
    rel = f"{DATA}/{rundir.ANALYSIS}"
    loaded = _read_json(root, rel, check)
    if loaded is None or not isinstance(loaded[1], dict):
        if loaded is not None:
            check.problems.append(Problem(rel, 1, "not a JSON object"))
        return check
    text, recorded = loaded
    try:
        opts = StatsOptions.from_record(recorded.get("options") or {})
    except (AttributeError, TypeError, ValueError):
        check.problems.append(Problem(rel, line_of(_lines(text), ("options",)),
                                      "options are not the analysis options"))
        return check
    with tempfile.TemporaryDirectory(prefix="crossbench-verify-") as tmp:
        work = Path(tmp) / "data"
        shutil.copytree(root / DATA, work, ignore=_not_analysed(root / DATA))
        try:
            derived = json.loads(json.dumps(analyze(work, opts)))
            for path in sorted(work.rglob(rundir.SUMMARY)):
                if not rundir.is_run(path.parent):
                    continue
                srel = f"{DATA}/{path.relative_to(work).as_posix()}"
                fresh = json.loads(json.dumps(summarize_run_dir(path.parent)))
                check.problems += compare_json(srel, (root / srel).read_text(), fresh,
                                               SUMMARY_SCHEMA, SUMMARY_REDEFINED)
        except (UserError, KeyError, TypeError, ValueError) as e:
            check.problems.append(Problem(DATA, None, f"the raw files do not analyse: "
                                          f"{type(e).__name__}: {e}"))
            return check
        check.problems[:0] = compare_json(rel, text, derived, ANALYSIS_SCHEMA,
                                          ANALYSIS_REDEFINED)
    if recorded.get("crossbench_version") != derived.get("crossbench_version"):
        check.detail = (f"(recorded by crossbench {recorded.get('crossbench_version')}, "
                        f"re-derived by {derived.get('crossbench_version')}) ")
    counts = ", ".join(_count(len(recorded.get(k, [])), k[:-1]) for k in
                       ("pairs", "cells", "sweeps"))
    check.detail += (f"{counts} ({opts.resamples} resamples, seed {opts.seed}), every number "
                     f"within {REL_TOL:g} relative")
    return check


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check_secrets(root: Path) -> Check:
    """Check 5: no secret-looking value in any file."""
    check = Check("no secrets")
    check.problems = [Problem(f.path, f.line, f.what) for f in scan_tree(root)]
    check.detail = ("no token pattern, no secret flag's value, no secret variable's value of "
                    "this environment, no key a run declared")
    return check


# -- opening an archive ---------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What a zip may declare before anything of it is written: entries and uncompressed
    bytes in all (``crossbench archive verify --max-entries/--max-size``)."""

    entries: int = MAX_ENTRIES
    bytes: int = MAX_BYTES
    member: int = MAX_MEMBER_BYTES
    """Most uncompressed bytes one member may declare."""


def _entry_kind(info: zipfile.ZipInfo) -> str | None:
    """What a non-regular entry is ("a symbolic link", ...), None for a file or a folder.
    The Unix mode sits in the upper 16 bits of the external attributes (zips made on Unix;
    others carry none, and their entries are plain files)."""
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if not mode or kind in (0, stat.S_IFREG, stat.S_IFDIR):
        return None
    return {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device", stat.S_IFIFO: "a named pipe",
            stat.S_IFSOCK: "a socket"}.get(kind, f"of file type {oct(kind)}")


def _unsafe_name(name: str) -> bool:
    parts = name.split("/")
    return (not name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) is not None
            or ".." in parts or "\\" in name or "\0" in name
            or all(p in ("", ".") for p in parts))


def _shown(name: str) -> str:
    """An entry's name for a message: quoted, its middle cut when it is long."""
    return repr(name) if len(name) <= 80 else f"{name[:40]!r}...{name[-30:]!r}"


_FIX = "only verify archives made by `crossbench archive`"


def _key(name: str) -> str:
    """The path a name unpacks to (``a//b``, ``a/./b`` and ``a/b/`` are all ``a/b``)."""
    return "/".join(p for p in name.split("/") if p not in ("", "."))


def zip_entries(zf: zipfile.ZipFile, label: str, limits: Limits) -> list[zipfile.ZipInfo]:
    """The entries of an untrusted zip, after every check that needs nothing written: count
    and declared size within ``limits``, only regular files and folders, safe relative
    names of bounded depth and length, none twice in any spelling, no encryption, a known
    compression method. Raises UserError naming the entry (``label`` names the zip)."""
    infos = zf.infolist()
    if len(infos) > limits.entries:
        raise UserError(f"{label} holds {len(infos)} entries, more than the limit of "
                        f"{limits.entries}", f"{_FIX}, or raise --max-entries if it is one")
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        if _unsafe_name(name):
            raise UserError(f"{label} holds an unsafe path {_shown(name)}", _FIX)
        key = _key(name)
        parts = key.split("/")
        if len(parts) > MAX_DEPTH:
            raise UserError(f"{label} holds a path {len(parts)} parts deep ({_shown(name)}), "
                            f"deeper than {MAX_DEPTH}", _FIX)
        longest = max(len(p.encode()) for p in parts)
        if len(name.encode()) > MAX_NAME_BYTES or longest > MAX_PART_BYTES:
            raise UserError(f"{label} holds a name too long to unpack ({_shown(name)}: "
                            f"{len(name.encode())} bytes, a part of {longest}; at most "
                            f"{MAX_NAME_BYTES} and {MAX_PART_BYTES})", _FIX)
        kind = _entry_kind(info)
        if kind is not None:
            raise UserError(f"{label} entry {_shown(name)} is {kind}, not a regular file", _FIX)
        if info.flag_bits & 0x1:
            raise UserError(f"{label} entry {_shown(name)} is encrypted (an archive holds "
                            "plain files)", _FIX)
        if info.compress_type not in METHODS:
            raise UserError(f"{label} entry {_shown(name)} uses compression method "
                            f"{info.compress_type}, not one of {', '.join(METHODS.values())}",
                            _FIX)
        if key in seen:
            twice = repr(key) if key == name.rstrip("/") else f"{_shown(name)} (as {key!r})"
            raise UserError(f"{label} holds {twice} twice (which copy counts depends on the "
                            "tool that unpacks it)", _FIX)
        seen.add(key)
        if info.file_size > limits.member:
            raise UserError(f"{label} entry {_shown(name)} declares {info.file_size} bytes, "
                            f"more than the limit of {limits.member} for one file",
                            f"{_FIX} (no run file is that large)")
        total += info.file_size
    if total > limits.bytes:
        raise UserError(f"{label} declares {total} bytes uncompressed, more than the limit of "
                        f"{limits.bytes} (a decompression bomb?)",
                        f"{_FIX}, or raise --max-size if it is one")
    return infos


def _archive_root(zpath: Path, into: Path, limits: Limits) -> Path:
    """The archive's folder: a zip unpacked into ``into`` with every check of an untrusted
    zip, else the folder given (or the one archive folder inside it)."""
    if not zpath.is_file():
        if (zpath / SUMS).exists() or (zpath / MANIFEST).exists():
            return zpath
        inner = [p for p in zpath.iterdir() if p.is_dir() and (p / MANIFEST).exists()] \
            if zpath.is_dir() else []
        if len(inner) == 1:
            return inner[0]
        raise UserError(f"{zpath} is not an archive folder (no {SUMS} or {MANIFEST})",
                        "give the folder or the .zip that `crossbench archive` wrote")
    try:
        zf = zipfile.ZipFile(zpath)
    except (OSError, zipfile.BadZipFile) as e:
        raise UserError(f"{zpath} is not a readable zip: {e}",
                        "give the .zip or the folder `crossbench archive` wrote") from None
    with zf:
        infos = zip_entries(zf, str(zpath), limits)
        tops = {info.filename.split("/")[0] for info in infos}
        if len(tops) != 1:
            raise UserError(f"{zpath} does not hold one folder (found {len(tops)})",
                            "give the .zip `crossbench archive` wrote")
        need = sum(i.file_size for i in infos)
        free = shutil.disk_usage(into).free
        if need > free:
            raise UserError(f"{zpath} unpacks to {need} bytes but {into} has {free} free",
                            "free space there, or point TMPDIR at a larger disk")
        for info in infos:
            _write_entry(zf, info, into, str(zpath))
    return into / tops.pop()


_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError)
"""What zipfile raises for data it cannot read back: a checksum or header that does not
match, a stream that does not inflate, data cut short, a method or encryption it lacks."""


def _why(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _write_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, into: Path, label: str) -> None:
    """Write one checked entry as a plain file (or folder) under ``into``: no link is
    followed (an existing path that is not a plain folder is an error), and no more bytes
    are written than the entry declares. zipfile is let read one byte more and the checksum
    is checked here, so data longer or shorter than declared is told from a wrong
    checksum."""
    target = into
    parts = _key(info.filename).split("/")
    for part in parts[:-1] if not info.is_dir() else parts:
        target = target / part
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise UserError(f"{info.filename!r} passes through {part!r}, which is not a folder",
                            _FIX)
        target.mkdir(exist_ok=True)
    if info.is_dir():
        return
    path = target / parts[-1]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    one_more = copy.copy(info)
    one_more.file_size += 1
    del one_more.CRC  # zipfile checks no checksum then: it is checked below
    written, crc = 0, 0
    entry = f"{label} entry {_shown(info.filename)}"
    try:
        with os.fdopen(fd, "wb") as out, zf.open(one_more) as src:
            for block in iter(lambda: src.read(_COPY_BLOCK), b""):
                written += len(block)
                if written > info.file_size:
                    raise UserError(f"{entry} holds more than its declared {info.file_size} "
                                    "bytes", _FIX)
                crc = zlib.crc32(block, crc)
                out.write(block)
    except _DAMAGED as e:
        raise UserError(f"{entry} is damaged ({_why(e)})", _FIX) from None
    if written < info.file_size:
        raise UserError(f"{entry} holds {written} bytes, fewer than its declared "
                        f"{info.file_size}", _FIX)
    if crc != info.CRC:
        raise UserError(f"{entry} does not match its CRC-32 checksum (damaged)", _FIX)


def unpack(path: Path, into: Path, limits: Limits | None = None) -> Path:
    """The run directory inside an archive: a zip is unpacked into ``into`` with every check
    of an untrusted zip; a folder is used as it is. Returns its ``data/`` folder."""
    data = _archive_root(path, into, limits or Limits()) / DATA
    if not data.is_dir():
        raise UserError(f"{path} holds no {DATA}/ folder",
                        "give an archive written by `crossbench archive`")
    return data


def verify(path: Path, rederive: bool = True, limits: Limits | None = None) -> Verification:
    """Every check of the archive at ``path`` (a zip, opened as untrusted input within
    ``limits``, or a folder)."""
    lim = limits or Limits()
    if not path.exists():
        raise UserError(f"{path} does not exist", "give the .zip or the folder to verify")
    with tempfile.TemporaryDirectory(prefix="crossbench-archive-") as tmp:
        root = _archive_root(path, Path(tmp), lim)
        beside = path.parent if path.is_file() else root.parent
        notes: list[str] = []
        checks = [check_checksums(root), check_side_archives(root, beside, notes, lim),
                  check_schemas(root)]
        if rederive:
            checks.append(check_rederivation(root))
        else:
            notes.append("re-derivation skipped (--no-reanalysis)")
        checks.append(check_secrets(root))
        return Verification(str(path), checks, notes)
