"""The package's import graph points one way: each top-level part of ``crossbench`` imports
only parts in lower layers (or its own), and no module reaches itself through its imports.
Lazily imported modules (imports inside functions) and ``TYPE_CHECKING`` imports count as
imports. The layers are the README's ("Layout"); the package root (``__version__`` and the
public facade ``crossbench.open_run``) is the only module outside them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "crossbench"

LAYERS: list[set[str]] = [
    {"errors", "paths", "textfile", "host", "telemetry", "store"},  # no crossbench parts
    {"load"},                              # the load client and workloads
    {"engines", "models", "fixtures"},     # engine adapters (and their confound rules)
    {"confounds"},                         # provenance and the shared confound rules
    {"analysis"},                          # statistics over a run directory
    {"importers", "report"},               # other tools' results in; reports out
    {"archive", "frames"},                 # archives; pandas frames (of runs and archives)
    {"runner"},                            # runs and matrices
    {"cli", "__main__"},                   # the command line
]
"""Lowest first: a part may import its own layer's parts and those below."""

ROOT = "crossbench"
"""The package root: ``__version__`` (imported from everywhere) and the public facade (which
imports upward, lazily); left out of both checks."""


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a.b import c`` names module
    ``a.b.c`` when there is one, else ``a.b``), the root left out."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules if m != ROOT}
    for m in graph:
        for node in ast.walk(ast.parse(modules[m].read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name not in (m, ROOT):
                    graph[m].add(name)
    return graph


def _part(module: str) -> str:
    return module.split(".")[1]


def _layer(part: str) -> int:
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"crossbench.{part} is in no layer: add it to LAYERS")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_part_imports_a_higher_layer() -> None:
    upward = [f"{src} imports {dst}" for src, dsts in _graph().items() for dst in sorted(dsts)
              if _layer(_part(dst)) > _layer(_part(src))]
    assert not upward, "\n".join(sorted(upward))


def test_no_module_imports_itself_through_others() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_part_has_a_layer() -> None:
    for module in _graph():
        _layer(_part(module))
