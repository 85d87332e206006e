"""Secret-looking values in files: what must never be archived or deposited.

Four kinds of evidence (docs/report.md "Verify", check 5), each reported as file and line,
never with the value itself: token patterns (:data:`PATTERNS`); a secret flag or API key
setting with its value in clear (:data:`FLAG_VALUES`, any flag
:func:`crossbench.confounds.provenance.is_secret` calls secret; redacted values and
placeholders are not findings); the values of the environment's secret variables of
:data:`MIN_SECRET_LEN` characters or more; and the secrets a run declared as salted hashes in
its manifest (:data:`SECRET_HASHES`, :class:`DeclaredSecrets`), found by hashing every token
of every line. Files are read line by line as bytes, so logs of any size and binary files are
covered.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets as _random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from crossbench.confounds.provenance import MIN_SCRUB_LEN, REDACTED, is_secret
from crossbench.store.rundir import MANIFEST

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

_VALUE = rb"(?P<value>[^\s\"'`,;\]\)}]+)"
FLAG_VALUES: tuple[tuple[str, re.Pattern[bytes], bool], ...] = (
    # (what, pattern with groups name and value, whether the value must look random); the
    # lookaheads let matches overlap (["llama-server", "--api-key", "VALUE"])
    ("a secret flag's value (--flag=VALUE)",
     re.compile(rb"(?<![\w-])(?=--(?P<name>[A-Za-z][\w-]*)=[\"']?" + _VALUE + rb")"), False),
    ("a secret flag's value (\"--flag\", \"VALUE\")",
     re.compile(rb"(?=[\"']--(?P<name>[A-Za-z][\w-]*)[\"']\s*,\s*[\"']" + _VALUE + rb")"),
     False),
    ("a secret flag's value (--flag VALUE)",
     re.compile(rb"(?<![\w-])(?=--(?P<name>[A-Za-z][\w-]*)[ \t]+[\"']?" + _VALUE + rb")"),
     True),
    ("an API key setting (api_key: VALUE)",
     re.compile(rb"(?i)(?<![a-z0-9])(?P<name>api[_-]?key)[\"']?[ \t]*[:=][ \t]*\[?[ \t]*[\"']?"
                + _VALUE), False),
)
"""Secret flags and settings written with their value on the same line."""
_LIST_FLAG = re.compile(rb"^\s*(?:-\s+)?[\"']?--(?P<name>[A-Za-z][\w-]*)[\"']?\s*,?\s*$")
"""A line that is a list item holding only a flag: its value is the next item (next line)."""
_LIST_VALUE = re.compile(rb"^\s*(?:-\s+)?[\"']?" + _VALUE)
_PLACEHOLDER = re.compile(rb"^(?:<[^>]*>?|\$.*|%.*|\{.*|\.\.\.+|\*+|x+|X+|[A-Z][A-Z0-9_]*"
                          rb"|null|None|true|false|~)$")


def placeholder(value: bytes) -> bool:
    """Whether a flag's value is not a secret: redacted, a variable (``$KEY``), a
    placeholder (``<key>``, ``...``, ``KEY``, ``YOUR_KEY``), null, or empty."""
    return not value or value.startswith(REDACTED.encode()) or bool(_PLACEHOLDER.match(value))


_ENTITIES = ((b"&#x27;", b"'"), (b"&#39;", b"'"), (b"&quot;", b'"'), (b"&#34;", b'"'),
             (b"&lt;", b"<"), (b"&gt;", b">"), (b"&amp;", b"&"))


def _unescape(line: bytes) -> bytes:
    """``line`` with HTML's character references for quotes and brackets resolved (a command
    shown in an HTML report reads ``--api-key &#x27;&lt;redacted&gt;&#x27;``)."""
    if b"&" in line:
        for entity, char in _ENTITIES:
            line = line.replace(entity, char)
    return line


def _looks_random(value: bytes) -> bool:
    return len(value) >= 16 or any(48 <= b <= 57 for b in value)


def _secret_value(name: bytes, value: bytes, random_only: bool) -> bool:
    if placeholder(value) or value.startswith(b"-"):
        return False
    if random_only and not _looks_random(value):
        return False
    return is_secret(name.decode("ascii", "replace"))


SECRET_HASHES = "secret_hashes"
"""Key of a run manifest's declared secrets: ``{"salt": HEX, "sha256": [HEX, ...]}``, each the
SHA-256 of the salt's bytes followed by one secret's UTF-8 bytes."""
DECLARED = f"a key the run declared (its hash is in {MANIFEST})"
"""The finding of a declared secret."""
_TOKENS = (re.compile(rb"[^\s\"'`]+"), re.compile(rb"[^\s\"'`,;:=<>\[\](){}]+"))
_MAX_TOKEN = 4096


def declare_secrets(values: Iterable[str],
                    record: Mapping[str, object] | None = None) -> dict[str, object]:
    """The manifest's :data:`SECRET_HASHES` record of ``values``: ``record``'s salt and hashes
    (a resumed run's) plus those of ``values``, or a new random salt."""
    old = record if isinstance(record, Mapping) else {}
    salt_hex = old.get("salt")
    salt = bytes.fromhex(salt_hex) if isinstance(salt_hex, str) and salt_hex else \
        _random.token_bytes(16)
    had = old.get("sha256")
    digests = {str(d) for d in had} if isinstance(had, list) else set()
    digests |= {hashlib.sha256(salt + v.encode()).hexdigest() for v in values}
    return {"salt": salt.hex(), "sha256": sorted(digests)}


@dataclass(frozen=True)
class DeclaredSecrets:
    """(salt, SHA-256 hex) of every secret the runs of a tree declared."""

    hashes: frozenset[tuple[bytes, str]] = frozenset()

    def found_in(self, line: bytes) -> bool:
        """Whether a token of ``line`` hashes, with its salt, to a declared secret."""
        if not self.hashes:
            return False
        tokens = {t for pattern in _TOKENS for t in pattern.findall(line)
                  if MIN_SCRUB_LEN <= len(t) <= _MAX_TOKEN}
        salts = {salt for salt, _ in self.hashes}
        return any((salt, hashlib.sha256(salt + t).hexdigest()) in self.hashes
                   for salt in salts for t in tokens)


def declared_in(root: Path) -> DeclaredSecrets:
    """The secrets declared by every ``manifest.json`` under ``root`` (unreadable or foreign
    manifests declare none)."""
    found: set[tuple[bytes, str]] = set()
    for path in root.rglob(MANIFEST):
        try:
            record = json.loads(path.read_bytes()).get(SECRET_HASHES)
            salt = bytes.fromhex(record["salt"])
            found |= {(salt, str(d)) for d in record["sha256"]}
        except (OSError, ValueError, RecursionError, AttributeError, KeyError, TypeError):
            continue
    return DeclaredSecrets(frozenset(found))


@dataclass(frozen=True)
class SecretFinding:
    """Where a secret-looking value is: file (as given), 1-based line, and what it looks like."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[tuple[str, bytes]]:
    """(variable name, value) of every secret variable (``*TOKEN``, ``*_KEY``, ``*SECRET``,
    ``*PASSWORD``: :func:`~crossbench.confounds.provenance.is_secret`) long enough to search
    for."""
    env = os.environ if environ is None else environ
    return sorted((k, v.encode()) for k, v in env.items()
                  if is_secret(k) and len(v) >= MIN_SECRET_LEN)


def scan_lines(name: str, lines: Iterable[bytes], secrets: list[tuple[str, bytes]],
               declared: DeclaredSecrets | None = None) -> Iterator[SecretFinding]:
    """Findings in a sequence of lines (bytes; an open binary file) of the file called
    ``name`` (``declared``: the secrets runs declared, :func:`declared_in`)."""
    flag_before = False  # the previous line was a list item holding a secret flag alone
    for i, line in enumerate(lines, 1):
        for what, pattern in PATTERNS:
            if pattern.search(line):
                yield SecretFinding(name, i, f"{what} pattern")
        text = _unescape(line)
        for what, pattern, random_only in FLAG_VALUES:
            if any(_secret_value(m["name"], m["value"], random_only)
                   for m in pattern.finditer(text)):
                yield SecretFinding(name, i, what)
                break
        if flag_before:
            m = _LIST_VALUE.match(text)
            if m and not placeholder(m["value"]) and not m["value"].startswith(b"-"):
                yield SecretFinding(name, i, "a secret flag's value (the list item after "
                                    "the flag)")
        flag = _LIST_FLAG.match(text)
        flag_before = flag is not None and is_secret(flag["name"].decode("ascii", "replace"))
        for var, value in secrets:
            if value in line:
                yield SecretFinding(name, i, f"the value of ${var}")
        if declared is not None and declared.found_in(line):
            yield SecretFinding(name, i, DECLARED)


def scan_files(root: Path, files: Iterable[Path],
               environ: Mapping[str, str] | None = None,
               declared: DeclaredSecrets | None = None) -> list[SecretFinding]:
    """Findings in the given files (paths relative to ``root``, reported as such)."""
    secrets = environment_secrets(environ)
    if declared is None:
        declared = declared_in(root)
    found: list[SecretFinding] = []
    for rel in files:
        with (root / rel).open("rb") as fh:
            found += scan_lines(Path(rel).as_posix(), fh, secrets, declared)
    return found


def scan_tree(root: Path, environ: Mapping[str, str] | None = None) -> list[SecretFinding]:
    """Findings in every regular file under ``root`` (paths relative to it), in path order,
    with the secrets its runs declared (:func:`declared_in`)."""
    files = sorted(p.relative_to(root) for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink())
    return scan_files(root, files, environ, declared_in(root))
