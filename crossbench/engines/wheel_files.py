"""Read-only access to the files of a wheel (``.whl``) or of an unpacked one (a folder), for
the developer tools that read an engine release's sources (the profile generators under
``crossbench/engines/<engine>/tools/``)."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path


class WheelFiles:
    """The file names of a wheel or unpacked wheel, sorted, and their text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None
        names = (self._zip.namelist() if self._zip is not None else
                 [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()])
        self.names = sorted(names)

    def read(self, rel: str) -> str | None:
        """Text of a file of the wheel, or None when absent."""
        if rel not in self.names:
            return None
        if self._zip is not None:
            return self._zip.read(rel).decode("utf-8", "replace")
        return (self.path / rel).read_text(errors="replace")

    def tree(self, rel: str) -> ast.Module | None:
        """A source file of the wheel, parsed (None when absent)."""
        text = self.read(rel)
        return ast.parse(text) if text is not None else None

    def metadata(self, keys: tuple[str, ...]) -> dict[str, list[str]]:
        """The wheel's ``METADATA`` headers named in ``keys`` (each name maps to all its
        values). Every line is scanned: sglang's multi-line ``License`` header holds blank
        lines."""
        meta = next((n for n in self.names if n.endswith(".dist-info/METADATA")), None)
        out: dict[str, list[str]] = {}
        for line in (self.read(meta) or "").splitlines() if meta else []:
            key, sep, value = line.partition(": ")
            if sep and key in keys:
                out.setdefault(key, []).append(value)
        return out
