"""Regenerate an SGLang profile (``engines/sglang/X.Y.Z.yaml``) from an sglang wheel, never
installing it.

The wheel is a zip of Python sources; this reads them with :mod:`ast` (nothing is imported, so
neither SGLang nor its torch is needed):

- ``python -m sglang.launch_server`` flags: every ``ServerArgs`` field declared as
  ``A[T, "help"]`` or ``A[T, Arg(...)]`` (``sglang/srt/server_args.py``, and from 0.5.18 or
  so the namespaces of ``sglang/srt/arg_groups/fields/``), named as SGLang's
  ``add_cli_args_from_dataclass`` names them (``--field-name``, ``Arg(cli_name=...)``, its
  ``aliases``; ``no_cli`` fields skipped; ``bool`` fields are switches), plus every literal
  ``parser.add_argument("--...")`` of ``server_args.py``;
- the speculative algorithms: ``SpeculativeAlgorithm``'s members
  (``sglang/srt/speculative/spec_info.py``) and the aliases the registry reserves
  (``_RESERVED_ALIASES`` of ``spec_registry.py``: NEXTN);
- the Prometheus families named ``sglang:*`` (name, type, help) of
  ``sglang/srt/observability/metrics_collector.py``;
- the HTTP routes of ``sglang/srt/entrypoints/http_server.py`` (which server-info path the
  release serves);
- the wheel's torch pin (``Requires-Dist: torch==``) and ``Requires-Python``.

Usage::

    pip download sglang==0.5.17 --no-deps -d /tmp/sgl
    python -m crossbench.engines.sglang.tools.profile_gen /tmp/sgl/sglang-0.5.17-*.whl \\
        > engines/sglang/0.5.17.yaml

An unpacked wheel (a folder holding ``sglang/``) works too.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import sys
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines.wheel_files import WheelFiles

_ARGS_FILES = ("sglang/srt/server_args.py",)
_FIELDS_DIR = "sglang/srt/arg_groups/fields/"
_SPEC_INFO = "sglang/srt/speculative/spec_info.py"
_SPEC_REGISTRY = "sglang/srt/speculative/spec_registry.py"
_METRICS = "sglang/srt/observability/metrics_collector.py"
_HTTP = "sglang/srt/entrypoints/http_server.py"
_KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram"}


def _const_list(node: ast.expr | None) -> list[Any] | None:
    if isinstance(node, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant)
                                                     for e in node.elts):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return None


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _annotated_flags(node: ast.AnnAssign) -> dict[str, dict[str, Any]]:
    """The flags of one ``A[T, ...]`` field (empty when it has no CLI surface)."""
    ann = node.annotation
    if not (isinstance(node.target, ast.Name) and isinstance(ann, ast.Subscript)
            and isinstance(ann.value, ast.Name) and ann.value.id in ("A", "Annotated")
            and isinstance(ann.slice, ast.Tuple) and ann.slice.elts):
        return {}
    inner, *meta = ann.slice.elts
    arg: ast.Call | None = None
    has_help = False
    for m in meta:
        if (isinstance(m, ast.Constant) and isinstance(m.value, str)) or \
                isinstance(m, ast.JoinedStr | ast.BinOp):
            has_help = True
        if isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id == "Arg":
            arg = m
    if arg is None and not has_help:
        return {}
    if arg is not None:
        no_cli = _kw(arg, "no_cli")
        if isinstance(no_cli, ast.Constant) and no_cli.value is True:
            return {}
    name = node.target.id
    cli = _kw(arg, "cli_name") if arg is not None else None
    flag = cli.value if isinstance(cli, ast.Constant) else "--" + name.replace("_", "-")
    aliases = (_const_list(_kw(arg, "aliases")) or []) if arg is not None else []
    text = ast.unparse(inner)
    info: dict[str, Any] = {"field": name, "type": text}
    if text in ("bool", "Optional[bool]", "bool | None") and (
            arg is None or _kw(arg, "action") is None):
        info["switch"] = True
    choices = _const_list(_kw(arg, "choices")) if arg is not None else None
    if choices is None and "Literal[" in text:
        lit = next((n for n in ast.walk(inner) if isinstance(n, ast.Subscript)
                    and isinstance(n.value, ast.Name) and n.value.id == "Literal"), None)
        if lit is not None:
            choices = _const_list(lit.slice) if isinstance(lit.slice, ast.Tuple) else (
                [lit.slice.value] if isinstance(lit.slice, ast.Constant) else None)
    if choices is not None:
        info["choices"] = [str(c) for c in choices]
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value,
                                                         str | int | float | bool | None):
        info["default"] = node.value.value
    out: dict[str, dict[str, Any]] = {str(flag): info}
    for alias in aliases:
        out[str(alias)] = {**info, "alias_of": flag}
    return out


def server_flags(src: WheelFiles) -> dict[str, dict[str, Any]]:
    """Every flag of ``launch_server``: dataclass fields and literal ``add_argument`` calls."""
    rels = [*_ARGS_FILES, *(n for n in src.names if n.startswith(_FIELDS_DIR)
                            and n.endswith(".py"))]
    flags: dict[str, dict[str, Any]] = {}
    for rel in rels:
        tree = src.tree(rel)
        if tree is None:
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign):
                    flags.update(_annotated_flags(stmt))
        if rel not in _ARGS_FILES:
            continue
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
                continue
            names = [a.value for a in call.args if isinstance(a, ast.Constant)
                     and isinstance(a.value, str) and a.value.startswith("--")]
            for i, name in enumerate(names):
                entry: dict[str, Any] = {"manual": True}
                action = _kw(call, "action")
                if action is not None:
                    entry["action"] = ast.unparse(action)
                    if "Deprecat" in entry["action"]:
                        entry["deprecated"] = True
                choices = _const_list(_kw(call, "choices"))
                if choices is not None:
                    entry["choices"] = [str(c) for c in choices]
                if i:
                    entry["alias_of"] = names[0]
                flags.setdefault(name, entry)
    return dict(sorted(flags.items()))


def speculative_algorithms(src: WheelFiles) -> list[str]:
    """``SpeculativeAlgorithm`` members (NONE left out) and the registry's reserved aliases."""
    out: list[str] = []
    tree = src.tree(_SPEC_INFO)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)) if tree else ():
        if cls.name != "SpeculativeAlgorithm":
            continue
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if name.isupper() and name != "NONE":
                    out.append(name)
    reg = src.tree(_SPEC_REGISTRY)
    for node in ast.walk(reg) if reg else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and
                                                t.id == "_RESERVED_ALIASES"
                                                for t in node.targets):
            for const in ast.walk(node.value):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    out.append(const.value)
    return list(dict.fromkeys(out))


def metric_families(src: WheelFiles) -> dict[str, dict[str, str]]:
    """``sglang:*`` families: type and help text."""
    tree = src.tree(_METRICS)
    out: dict[str, dict[str, str]] = {}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)) if tree else ():
        func = call.func
        kind = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        name = _kw(call, "name")
        if kind not in _KINDS or not (isinstance(name, ast.Constant) and
                                      str(name.value).startswith("sglang:")):
            continue
        doc = _kw(call, "documentation")
        help_text = doc.value if isinstance(doc, ast.Constant) else (
            ast.unparse(doc) if doc is not None else "")
        out[str(name.value)] = {"type": _KINDS[kind], "help": str(help_text)}
    return dict(sorted(out.items()))


def http_routes(src: WheelFiles) -> list[str]:
    """Paths the HTTP server routes (``@app.get/post/api_route("/...")``)."""
    tree = src.tree(_HTTP)
    out: list[str] = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef |
                                                      ast.AsyncFunctionDef)) if tree else ():
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and \
                    dec.func.attr in ("get", "post", "put", "api_route") and dec.args and \
                    isinstance(dec.args[0], ast.Constant):
                out.append(str(dec.args[0].value))
    return sorted(set(out))


def generate(path: Path) -> dict[str, Any]:
    """The profile of one wheel, as a mapping ready for YAML."""
    src = WheelFiles(path)
    meta = src.metadata(("Version", "Requires-Python", "Requires-Dist"))
    version = (meta.get("Version") or ["unknown"])[0]
    torch = [r for r in meta.get("Requires-Dist", []) if r.replace(" ", "").startswith(
        ("torch==", "torch>", "torch<", "torch~", "torch;"))]
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    flags = server_flags(src)
    if not flags:
        raise SystemExit(f"{path}: no launch_server flags found (is it an sglang wheel?)")
    source = f"sglang=={version} ({path.name}" + (f", sha256 {digest})" if digest else ")")
    return {
        "engine": "sglang",
        "version": version,
        "source": source,
        "requires_torch": torch[0] if torch else None,
        "requires_python": next(iter(meta.get("Requires-Python") or []), None),
        "speculative_algorithms": speculative_algorithms(src),
        "speculative_flags": [f for f in flags if f.startswith("--speculative-")],
        "server_info_paths": [p for p in http_routes(src) if p.endswith("server_info")],
        "routes": http_routes(src),
        "metrics": metric_families(src),
        "flags": flags,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m crossbench.engines.sglang.tools.profile_gen WHEEL > engines/sglang/X.Y.Z.yaml``.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path, help="sglang wheel (.whl) or an unpacked one")
    args = ap.parse_args(argv)
    prof = generate(args.wheel)
    header = (f"# SGLang engine profile, generated from the wheel's sources; do not edit by "
              f"hand.\n# Regenerate: pip download sglang=={prof['version']} --no-deps -d "
              f"/tmp/sgl && \\\n#   python -m crossbench.engines.sglang.tools.profile_gen "
              f"/tmp/sgl/sglang-{prof['version']}-*.whl > engines/sglang/{prof['version']}"
              ".yaml\n")
    sys.stdout.write(header + yaml.safe_dump(prof, sort_keys=False, width=100,
                                             allow_unicode=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
