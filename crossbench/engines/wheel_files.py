"""Read-only access to the files of a wheel (``.whl``) or of an unpacked one (a folder), for
the developer tools that read an engine release's sources (the profile generators under
``crossbench/engines/<engine>/tools/``)."""

from __future__ import annotations

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
