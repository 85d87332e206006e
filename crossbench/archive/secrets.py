"""Secret-looking values in files: what must never be archived or deposited.

Two kinds of evidence, each reported as file and line, never with the value itself:

- token patterns: Hugging Face (``hf_`` + 30 or more letters and digits), GitHub
  (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36 or more, ``github_pat_...``), and bearer or
  access tokens as Zenodo and other OAuth services take them (``access_token=...``,
  ``Bearer ...``, ``ZENODO_TOKEN=...`` followed by 30 or more letters and digits);
- the values of the environment's token variables (any name ending in ``TOKEN``, such as
  ``HF_TOKEN``, ``ZENODO_TOKEN``, ``GITHUB_TOKEN``) of :data:`MIN_SECRET_LEN` characters or
  more, wherever they appear.

Files are read line by line as bytes, so logs of any size and binary files are covered.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PATTERNS: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    ("a Hugging Face token", re.compile(rb"hf_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(rb"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{36,}"
                                  rb"|github_pat_[A-Za-z0-9_]{22,})")),
    ("a bearer or access token (Zenodo-like)",
     re.compile(rb"(?i)(?:access_token=|bearer\s+|zenodo[_-]?token[\"'\s:=]{1,4})"
                rb"[A-Za-z0-9]{30,}")),
)
MIN_SECRET_LEN = 6
"""Shorter environment values are not searched for (they would match by chance)."""


@dataclass(frozen=True)
class SecretFinding:
    """Where a secret-looking value is: file (as given), 1-based line, and what it looks like."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[tuple[str, bytes]]:
    """(variable name, value) of every ``*TOKEN`` variable long enough to search for."""
    env = os.environ if environ is None else environ
    return sorted((k, v.encode()) for k, v in env.items()
                  if k.upper().endswith("TOKEN") and len(v) >= MIN_SECRET_LEN)


def scan_lines(name: str, lines: Iterable[bytes],
               secrets: list[tuple[str, bytes]]) -> Iterator[SecretFinding]:
    """Findings in a sequence of lines (bytes) of the file called ``name``."""
    for i, line in enumerate(lines, 1):
        for what, pattern in PATTERNS:
            if pattern.search(line):
                yield SecretFinding(name, i, f"{what} pattern")
        for var, value in secrets:
            if value in line:
                yield SecretFinding(name, i, f"the value of ${var}")


def scan_stream(name: str, fh: Iterable[bytes],
                secrets: list[tuple[str, bytes]]) -> list[SecretFinding]:
    """Findings in an open binary file (any iterable of byte lines)."""
    return list(scan_lines(name, fh, secrets))


def scan_files(root: Path, files: Iterable[Path],
               environ: Mapping[str, str] | None = None) -> list[SecretFinding]:
    """Findings in the given files (paths relative to ``root``, reported as such)."""
    secrets = environment_secrets(environ)
    found: list[SecretFinding] = []
    for rel in files:
        with (root / rel).open("rb") as fh:
            found += scan_stream(Path(rel).as_posix(), fh, secrets)
    return found


def scan_tree(root: Path, environ: Mapping[str, str] | None = None) -> list[SecretFinding]:
    """Findings in every regular file under ``root`` (paths relative to it), in path order."""
    files = sorted(p.relative_to(root) for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink())
    return scan_files(root, files, environ)
