"""Atomic file writes (write to a temporary file, fsync, rename), durable JSONL appends,
atomic in-place replacement of strings in a file, and file hashing."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO


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


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


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
    tmp = temp_name(path)
    try:
        with path.open("rb") as src, tmp.open("wb") as dst:
            for line in src:
                for o in wanted:
                    if o in line:
                        count += line.count(o)
                        line = line.replace(o, new)
                dst.write(line)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return count


def write_json_atomic(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented, key-sorted JSON."""
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


class JsonlAppender:
    """Append one JSON object per line, flushed and fsynced per record.

    A kill at any moment leaves every record written before it intact; at most a partial last
    line, which :func:`read_jsonl` skips.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read every complete record of a JSONL file (a torn last line is ignored)."""
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            out.append(json.loads(line))
    return out
