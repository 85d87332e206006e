"""The package's import graph points one way: each top-level part of ``crossbench`` imports
only parts in lower layers (or its own), lazily imported modules included. The layers are
the README's ("Layout"); the one exception is named with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "crossbench"

LAYERS: list[set[str]] = [
    {"errors", "paths", "textfile", "host", "telemetry", "store"},  # no crossbench parts
    {"load"},                              # the load client and workloads
    {"engines", "models", "fixtures"},     # engine adapters, model files, fixture models
    {"confounds"},                         # provenance and the confound rules
    {"analysis"},                          # statistics over a run directory
    {"importers", "report"},               # other tools' results in; reports out
    {"archive", "frames"},                 # archives; pandas frames (of runs and archives)
    {"runner"},                            # runs and matrices
    {"cli", "__main__"},                   # the command line
    {"standins"},                          # test doubles: above all, so no product part imports
]
"""Lowest first: a part may import its own layer's parts and those below."""

EXCEPTIONS = {
    ("engines", "confounds"): "an engine's own confound rules (crossbench/engines/*/rules.py) "
                              "extend the rule framework of crossbench.confounds.rules; the "
                              "registry loads them by name, so nothing below imports them",
}
"""(importer, imported) pairs allowed upward, with why."""

RULE_PLUGINS = {"rules.py"}
"""The files of an engine folder that the engines -> confounds exception covers."""


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "crossbench":
        return None
    return parts[1] if len(parts) > 1 else ""  # "": the package root (__version__, facade)


def _edges() -> list[tuple[str, str, str]]:
    out = []
    for f in PACKAGE.rglob("*.py"):
        rel = f.relative_to(PACKAGE)
        src = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or \
            rel.name != "__init__.py" else ""
        for node in ast.walk(ast.parse(f.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                dst = _part(name)
                if dst is not None and dst != src:
                    out.append((str(rel), src, dst))
    return out


def _layer(part: str) -> int:
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"crossbench.{part} is in no layer: add it to LAYERS")


def test_no_part_imports_a_higher_layer() -> None:
    upward = []
    for path, src, dst in _edges():
        if src == "" or dst == "":  # the root: __version__ down, the public facade up
            continue
        if _layer(dst) <= _layer(src):
            continue
        if (src, dst) in EXCEPTIONS and Path(path).name in RULE_PLUGINS:
            continue
        upward.append(f"{path}: crossbench.{src} imports crossbench.{dst}")
    assert not upward, "\n".join(sorted(upward))


def test_every_part_has_a_layer_and_the_exception_is_used() -> None:
    parts = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists())
             or (p.suffix == ".py" and p.name not in ("__init__.py",))}
    for part in parts:
        _layer(part)
    assert any(src == "engines" and dst == "confounds" for _, src, dst in _edges())
