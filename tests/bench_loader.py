"""Load a script under ``benchmarks/`` as a module, for the tests of the benchmarks (the
scripts are not a package, so they are loaded by path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(relpath: str, name: str | None = None) -> ModuleType:
    """The module at ``benchmarks/relpath``, executed once per ``name`` (default: the file's
    stem) and registered in ``sys.modules`` so dataclasses and pickling see it."""
    name = name or Path(relpath).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / relpath)
    assert spec is not None and spec.loader is not None, f"no benchmark at {relpath}"
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod
