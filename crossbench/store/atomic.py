"""Atomic file writes (write to a temporary file, fsync, rename), durable JSONL appends and
the one JSONL reader, atomic in-place replacement of strings in a file, and file hashing.

JSONL files (``requests.jsonl``, ``journal.jsonl``) are committed line by line: a record
exists once its newline is on disk. A crash (``kill -9``, power loss) during an append can
only leave an incomplete *last* line, with no newline: the **torn tail**. Readers skip it
(:func:`scan_jsonl` reports it); :class:`JsonlAppender` refuses to append after it (the new
record would be glued onto the torn bytes into one damaged line), so the writer that owns the
file decides what to do with it (the matrix runner cuts it with :func:`cut_torn_tail` and
records that it did; a resumed run directory rewrites its records). Anything wrong *before*
the last line (bytes that are not UTF-8, a line that is not JSON, JSON that is not an object)
is damage a crash cannot cause: readers refuse it with a :class:`~crossbench.errors.UserError`
naming the file and the line, and never skip it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import orjson

from crossbench.errors import UserError
from crossbench.textfile import open_regular


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``sha256``, ``md5``...), read in 1 MiB blocks."""
    h = hashlib.new(algorithm)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    return file_digest(path, "sha256")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (made, with its folder, when missing) among the
    processes of this machine, held for the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def temp_name(path: Path) -> Path:
    """The hidden temporary name a file is written under before its atomic rename."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def fsync_dir(path: Path) -> None:
    """Persist a directory entry (a rename into it), where the platform allows."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """A temporary file to write ``path``'s new content into: fsynced and renamed over
    ``path`` when the block ends, removed when it raises."""
    tmp = temp_name(path)
    try:
        with tmp.open("wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(path) as f:
        f.write(data)


def replace_in_file(path: Path, old: Sequence[bytes], new: bytes) -> int:
    """Replace every occurrence of each of ``old`` (strings without a newline) in the file
    ``path`` by ``new``, line by line so that a log of any size fits; the file is rewritten
    atomically, and only when something was found. Returns the number of replacements (0 for
    a missing file)."""
    wanted = [o for o in old if o]
    if not wanted or not path.exists():
        return 0
    with path.open("rb") as fh:
        if not any(o in line for line in fh for o in wanted):
            return 0
    count = 0
    with path.open("rb") as src, _replacing(path) as dst:
        for line in src:
            for o in wanted:
                if o in line:
                    count += line.count(o)
                    line = line.replace(o, new)
            dst.write(line)
    return count


def write_json_atomic(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented, key-sorted JSON."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


class JsonlAppender:
    """Append one JSON object per line, flushed and fsynced per record; a file that already
    ends in a torn line is refused (module docstring): its owner cuts the tail first
    (:func:`cut_torn_tail`), recording that it did."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torn = torn_tail(path)
        if torn:
            raise UserError(f"{path} ends in an incomplete line ({len(torn)} bytes without a "
                            "newline, left by a crash during a write); crossbench never "
                            "appends to it",
                            "resume the run (a matrix --resume removes the incomplete line "
                            "and records that it did), or remove that last line yourself")
        self.path = path
        self._fh: TextIO = path.open("a", encoding="utf-8")
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        """Append and persist one record."""
        self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.count += 1

    def close(self) -> None:
        """Close the file; safe to call twice."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


TAIL_BLOCK = 1 << 16
"""Bytes read at a time, backwards from the end, looking for a file's last newline."""


def torn_tail(path: Path) -> bytes:
    """The bytes after the last newline of a file (its torn tail); ``b""`` when the file ends
    in a newline, is empty or does not exist. Reads from the end, so a large file costs little.
    """
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return b""
    with f:
        end = f.seek(0, os.SEEK_END)
        pos, tail = end, b""
        while pos > 0:
            step = min(TAIL_BLOCK, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
            cut = tail.rfind(b"\n")
            if cut >= 0:
                return tail[cut + 1:]
        return tail


def cut_torn_tail(path: Path) -> bytes:
    """Remove a file's torn tail (see :func:`torn_tail`) in place, durably; returns the bytes
    removed (``b""``: nothing to remove). Complete lines are never touched."""
    tail = torn_tail(path)
    if tail:
        with path.open("r+b") as f:
            f.truncate(f.seek(0, os.SEEK_END) - len(tail))
            f.flush()
            os.fsync(f.fileno())
    return tail


@dataclass
class JsonlScan:
    """What a JSONL file holds: its complete records, the line number of each, and its torn
    tail (``b""`` when none)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn: bytes = b""


DAMAGED_FIX = ("a crash only ever tears the last line, so this one was changed or damaged "
               "afterwards: restore the file from a copy or an archive of the run (crossbench "
               "never skips a damaged line)")


def parse_jsonl_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    """One complete line of a JSONL file as a JSON object; a :class:`UserError` names the
    file and the line (1-based) when it is not UTF-8, not JSON, or not an object."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise UserError(f"{path} line {number} is not UTF-8 text (byte {e.start + 1})",
                            DAMAGED_FIX) from None
        try:  # what orjson refuses and Python's json reads (NaN, integers over 64 bits)
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            why = (f"{json_error(e)} at column {e.colno}" if isinstance(e, json.JSONDecodeError)
                   else "nested too deeply" if isinstance(e, RecursionError)
                   else " ".join(str(e).split()))
            raise UserError(f"{path} line {number} is not valid JSON ({why})",
                            DAMAGED_FIX) from None
    if not isinstance(value, dict):
        raise UserError(f"{path} line {number} is a JSON {json_type(value)}, not an object",
                        DAMAGED_FIX)
    return value


def json_error(e: json.JSONDecodeError) -> str:
    """What a JSON decoder found wrong, to be followed by " at" and where ("Unterminated
    string starting at" loses its dangling "at")."""
    return e.msg.removesuffix(" at")


def json_type(value: Any) -> str:
    """The JSON name of a value's type (``array``, ``string``...), for messages."""
    for kind, name in ((dict, "object"), (list, "array"), (str, "string"), (bool, "boolean")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else "number"


def scan_jsonl(path: Path) -> JsonlScan:
    """Every complete record of a JSONL file, with line numbers, and its torn tail (module
    docstring); a damaged complete line is a :class:`UserError` naming the file and line."""
    scan = JsonlScan()
    records, lines, loads = scan.records, scan.lines, orjson.loads
    if not path.exists():  # the caller's FileNotFoundError, as before
        raise FileNotFoundError(2, "No such file or directory", str(path))
    with open_regular(path, "run file") as f:  # a link to /dev/zero or a FIFO: one line
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                scan.torn = line
                break
            try:  # the common case inline (large analyses read millions of lines)
                value = loads(line)
            except orjson.JSONDecodeError:
                value = None
            if type(value) is not dict:
                value = parse_jsonl_line(path, number, line)
            records.append(value)
            lines.append(number)
    return scan


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a JSONL file (a torn last line is skipped; a damaged line
    before it is a :class:`UserError` naming the file and line)."""
    return scan_jsonl(path).records
