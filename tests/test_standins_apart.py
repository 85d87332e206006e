"""Test doubles and developer tools stay out of the product.

Stand-ins live in ``tests/standins/`` (the package ``standins``, outside ``crossbench``) and
each engine's developer tools (profile generators) in
``crossbench/engines/<engine>/tools/``. No product module
imports either when it is imported; a command that exists to run one (``crossbench engines
profile`` runs the llama.cpp profile generator) may import it inside the command, and is listed
here by name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "crossbench"
STANDINS = Path(__file__).resolve().parent / "standins"

#: product modules allowed to import a stand-in or a tool inside a function, and which ones
LAZY_ALLOWED: dict[str, set[str]] = {
    "crossbench/cli/engines_cmd.py": {"crossbench.engines.llamacpp.tools.profile_gen"},
}


def _apart(module: str) -> bool:
    """Whether a dotted name is in a stand-in or a developer tool (or is one of them)."""
    parts = module.split(".")
    return parts[0] == "standins" or parts[:2] == ["crossbench", "standins"] or (
        parts[:2] == ["crossbench", "engines"] and len(parts) > 3 and parts[3] == "tools")


def _module_name(rel: str) -> str:
    """``crossbench/a/b.py`` -> ``crossbench.a.b`` (a package's ``__init__`` is the package)."""
    name = rel.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _product_files() -> list[str]:
    root = PACKAGE.parent
    rels = sorted(p.relative_to(root).as_posix() for p in PACKAGE.rglob("*.py"))
    return [r for r in rels if not _apart(_module_name(r))]


def _imports(rel: str) -> list[tuple[str, bool]]:
    """Every module a file imports, as ``(absolute name, at module level)``."""
    tree = ast.parse((PACKAGE.parent / rel).read_text(), rel)
    package = _module_name(rel)
    if not rel.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    top_level: set[int] = set()

    def mark(node: ast.AST) -> None:
        # what runs at import time: statements outside functions (if/try/with/class bodies too)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        top_level.add(id(node))
        for child in ast.iter_child_nodes(node):
            mark(child)

    mark(tree)
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from crossbench import standins`` names the package through ``names``
            out += [(f"{base}.{a.name}", id(node) in top_level) for a in node.names]
    return out


def test_the_check_sees_every_import_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The AST walk catches absolute, relative and lazy imports (else the next test proves
    nothing)."""
    fake = tmp_path / "crossbench"
    (fake / "engines" / "vllm").mkdir(parents=True)
    (fake / "engines" / "vllm" / "server.py").write_text(
        "from ...standins import vllm\n"
        "import standins.zenodo\n"
        "try:\n    import crossbench.engines.vllm.tools.profile_gen\nexcept ImportError:\n    pass\n"
        "class C:\n    from crossbench.standins import load\n"
        "def f():\n    from crossbench.standins.nvml import ScriptedNvml\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    got = [(m, top) for m, top in _imports("crossbench/engines/vllm/server.py") if _apart(m)]
    assert got == [("crossbench.standins.vllm", True),
                   ("standins.zenodo", True),
                   ("crossbench.engines.vllm.tools.profile_gen", True),
                   ("crossbench.standins.load", True),
                   ("crossbench.standins.nvml.ScriptedNvml", False)]


def test_product_modules_import_no_standin_and_no_tool() -> None:
    """No product module imports a stand-in or a developer tool when it is imported; inside a
    function only the commands of :data:`LAZY_ALLOWED` do, and only what is listed."""
    bad = []
    for rel in _product_files():
        for module, top in _imports(rel):
            if not _apart(module):
                continue
            allowed = LAZY_ALLOWED.get(rel, set())
            if top or not any(module == a or module.startswith(a + ".") for a in allowed):
                bad.append(f"{rel}: {module}" + (" (at import time)" if top else ""))
    assert bad == []


def test_importing_the_product_loads_no_standin() -> None:
    """The same, at run time: import every product module, then look at ``sys.modules``."""
    names = [_module_name(r) for r in _product_files() if not r.endswith("__main__.py")]
    code = ("import importlib, sys\n"
            f"for n in {names!r}:\n    importlib.import_module(n)\n"
            "print('\\n'.join(m for m in sys.modules\n"
            "                if m.startswith(('crossbench.', 'standins'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PACKAGE.parent)
    loaded = out.stdout.split()
    assert "crossbench.cli.main" in loaded
    assert [m for m in loaded if _apart(m)] == []


def test_standins_and_tools_are_where_the_docs_say() -> None:
    """Each stand-in and tool has its module; the package holds no stand-in."""
    for name in ("load.py", "vllm.py", "sglang.py", "zenodo.py", "nvml.py", "cli.py"):
        assert (STANDINS / name).is_file(), name
    assert not (PACKAGE / "standins").exists()
    for rel in ("engines/llamacpp/tools/profile_gen.py", "engines/vllm/tools/profile_gen.py",
                "engines/sglang/tools/profile_gen.py"):
        assert (PACKAGE / rel).is_file(), rel
    left = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                  if p.name in ("standin.py", "profile_gen.py", "golden.py")
                  and not _apart(_module_name(p.relative_to(PACKAGE.parent).as_posix())))
    assert left == []
