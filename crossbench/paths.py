"""Where crossbench keeps its caches (``~/.cache/crossbench`` unless ``CROSSBENCH_CACHE`` is
set) and finds its data (``engines/``, ``zenodo/``, ``matrices/``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of crossbench's cache (engine builds, source archives, fixture models)."""
    env = os.environ.get("CROSSBENCH_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "crossbench"
    return root.expanduser()


def repo_root() -> Path:
    """The folder above this package: the checkout, in a source tree or an editable install."""
    return Path(__file__).resolve().parent.parent


def data_root() -> Path:
    """The folder that holds ``engines/`` (profiles), ``zenodo/`` (archive templates) and
    ``matrices/``: the checkout's top level, or in an installed wheel the copy it carries
    in ``crossbench/_data/`` (``setup.py`` puts it there at build time)."""
    root = repo_root()
    if (root / "engines").is_dir():
        return root
    return Path(__file__).resolve().parent / "_data"


def engines_dir() -> Path:
    """The folder of engine facts: one subfolder per engine (``llama.cpp/``, ``vllm/``,
    ``sglang/``: profiles, pack facts) and ``hosts/`` (hosts' package lists).
    ``CROSSBENCH_ENGINES_DIR`` overrides ``<data_root>/engines``."""
    base = os.environ.get("CROSSBENCH_ENGINES_DIR")
    return Path(base) if base else data_root() / "engines"
