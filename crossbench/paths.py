"""Where crossbench keeps its caches: ``~/.cache/crossbench`` unless ``CROSSBENCH_CACHE`` is set."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of crossbench's cache (engine builds, source archives, fixture models)."""
    env = os.environ.get("CROSSBENCH_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "crossbench"
    return root.expanduser()


def repo_root() -> Path:
    """The checkout that holds this package (profiles in ``engines/`` live there)."""
    return Path(__file__).resolve().parent.parent
