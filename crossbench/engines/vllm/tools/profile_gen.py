"""Regenerate a vLLM profile (``engines/vllm/X.Y.Z.yaml``) from a vLLM wheel, never installing it.

The wheel is a zip of Python sources; this reads them with :mod:`ast` (nothing is imported, so
neither vLLM nor its torch is needed):

- ``vllm serve`` flags: every ``add_argument(...)`` of ``vllm/engine/arg_utils.py`` and of the
  frontend's ``cli_args.py`` (``vllm/entrypoints/common/`` in 0.33, ``.../openai/`` in 0.10),
  including the ``--no-*`` forms argparse's ``BooleanOptionalAction`` adds for bool fields
  (vLLM's ``get_kwargs`` gives every ``bool`` config field that action);
- ``SpeculativeConfig``: its user-settable fields, the ``method`` names (``SpeculativeMethod``
  with every alias it names resolved) and the choices of every ``Literal``-typed field;
- methods a release refuses despite naming them (0.10's V1 engine: ``draft_model``);
- the Prometheus families (name, type, help, label names, buckets when static) of
  ``vllm/v1/metrics/loggers.py`` and ``vllm/v1/spec_decode/metrics.py``;
- the format strings of the startup-log messages crossbench parses (see ``LOG_ANCHORS``);
- the per-request speculative metrics (``SpeculativeDecodingMetrics`` fields), when present.

Usage::

    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-wheel
    python -m crossbench.engines.vllm.tools.profile_gen /tmp/vllm-wheel/vllm-0.33.0-*.whl \\
        > engines/vllm/0.33.0.yaml

An unpacked wheel (a folder holding ``vllm/``) works too.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines.wheel_files import WheelFiles

#: startup-log facts and the substrings that find their format strings in the sources
LOG_ANCHORS: dict[str, tuple[str, ...]] = {
    "version": ("server version %s",),
    "version_logo": ("version ${w}%s${r}",),
    "engine_config": ("LLM engine (v%s) with config: %s",),
    "kv_cache_tokens": ("KV cache size: %s tokens",),
    "kv_cache_memory": ("Available KV cache memory:",),
    "attention_backend": ("attention backend out of potential backends",
                          "backend on V1 engine.", "Using %s backend."),
    "model_runner": ("Using V2 Model Runner", "using the V1 model runner instead"),
    "max_num_scheduled_tokens": ("max_num_scheduled_tokens is set to",),
    "graph_capture": ("Graph capturing finished in",),
    "async_scheduling": ("Asynchronous scheduling is %s.", "Async scheduling is disabled",
                         "Async scheduling not supported with",
                         "Async scheduling will be disabled"),
    "engine_init": ("init engine (profile, create kv cache, warmup model) took",),
    "compile_cache": ("for vLLM's torch.compile", "Directly load the compiled graph",
                      "Compiling a graph for"),
}

_METRIC_FILES = ("vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py")
_FRONTEND_FILES = ("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/openai/cli_args.py")
_SPEC_FILES = ("vllm/config/speculative.py", "vllm/config/__init__.py")
_METRIC_KINDS = {"counter": "counter", "gauge": "gauge", "histogram": "histogram"}


def _py_files(src: WheelFiles) -> Iterator[str]:
    """Every Python source of the ``vllm`` package."""
    return (n for n in src.names if n.startswith("vllm/") and n.endswith(".py"))


def _union_members(node: ast.expr) -> list[ast.expr]:
    """Top-level members of ``A | B``, ``Optional[A]`` and ``Union[A, B]``, with
    ``Annotated[A, ...]`` and pydantic's ``SkipValidation[A]`` unwrapped (as vLLM's
    ``get_type_hints`` does)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        if node.value.id in ("Annotated", "SkipValidation"):
            inner = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
            return _union_members(inner)
        if node.value.id == "Optional":
            return [*_union_members(node.slice), ast.Constant(None)]
        if node.value.id == "Union":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return [m for e in elts for m in _union_members(e)]
    return [node]


def _negatable(annotation: ast.expr) -> bool:
    """Whether vLLM's ``get_kwargs`` makes this field a ``BooleanOptionalAction`` flag."""
    names = {ast.unparse(m) for m in _union_members(annotation)}
    return "bool" in names and "str" not in names  # bool | str | None takes an optional value


# -- classes and fields --------------------------------------------------------------------------


def _class_index(src: WheelFiles) -> dict[str, ast.ClassDef]:
    """Config classes by name, from vllm/config and the CLI argument modules."""
    index: dict[str, ast.ClassDef] = {}
    rels = [n for n in _py_files(src) if n.startswith("vllm/config/")]
    rels += ["vllm/engine/arg_utils.py", *_FRONTEND_FILES]
    for rel in rels:
        tree = src.tree(rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                index.setdefault(node.name, node)
    return index


def class_fields(index: dict[str, ast.ClassDef], name: str) -> dict[str, ast.expr]:
    """``{field: annotation}`` of a dataclass, base classes' fields first."""
    cls = index.get(name)
    if cls is None:
        return {}
    out: dict[str, ast.expr] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name):
            out.update(class_fields(index, base.id))
    for stmt in cls.body:
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and not stmt.target.id.startswith("_")
                and "ClassVar" not in ast.unparse(stmt.annotation)):
            out[stmt.target.id] = stmt.annotation
    return out


# -- flags ---------------------------------------------------------------------------------------


def _kwargs_sources(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """``{variable: (config class, field or None)}`` for ``x = get_kwargs(Cls)[...]``."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        value, field = node.value, None
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            field, value = str(value.slice.value), value.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "get_kwargs" and value.args
                and isinstance(value.args[0], ast.Name)):
            out[node.targets[0].id] = (value.args[0].id, field)
    return out


def _call_negatable(call: ast.Call, sources: dict[str, tuple[str, str | None]],
                    index: dict[str, ast.ClassDef]) -> bool:
    for kw in call.keywords:
        if kw.arg == "action" and ast.unparse(kw.value).endswith("BooleanOptionalAction"):
            return True
        if kw.arg is None and _spread_negatable(kw.value, sources, index):
            return True
    return False


def _spread_negatable(value: ast.expr, sources: dict[str, tuple[str, str | None]],
                      index: dict[str, ast.ClassDef]) -> bool:
    """Whether ``**value`` spreads the kwargs of a bool config field (``x_kwargs["f"]``,
    a variable holding them, or ``{**x_kwargs["f"], "default": None}``)."""
    if isinstance(value, ast.Dict):
        return any(k is None and _spread_negatable(v, sources, index)
                   for k, v in zip(value.keys, value.values, strict=True))
    var, field = None, None
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) \
            and isinstance(value.slice, ast.Constant):
        var, field = value.value.id, str(value.slice.value)
    elif isinstance(value, ast.Name):
        var = value.id
    if var is None or var not in sources:
        return False
    cls, pinned = sources[var]
    ann = class_fields(index, cls).get(pinned or field or "")
    return ann is not None and _negatable(ann)


def _with_negations(names: list[str]) -> list[str]:
    return names + ["--no-" + n[2:] for n in names if n.startswith("--")]


def serve_flags(src: WheelFiles, index: dict[str, ast.ClassDef]) -> list[str]:
    """Every flag ``vllm serve`` accepts (engine args and the OpenAI frontend's)."""
    flags: set[str] = set()
    for rel in ("vllm/engine/arg_utils.py", *_FRONTEND_FILES):
        tree = src.tree(rel)
        if tree is None:
            continue
        sources = _kwargs_sources(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            if any(isinstance(a, ast.JoinedStr) for a in node.args):
                # for key, value in get_kwargs(FrontendArgs).items(): add_argument(f"--{key}")
                for field, ann in class_fields(index, "FrontendArgs").items():
                    name = "--" + field.replace("_", "-")
                    flags.update(_with_negations([name]) if _negatable(ann) else [name])
                continue
            names = [a.value for a in node.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            if names:
                neg = _call_negatable(node, sources, index)
                flags.update(_with_negations(names) if neg else names)
    return sorted(flags)


# -- speculative config --------------------------------------------------------------------------


def _literal_aliases(tree: ast.Module) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            out[node.target.id] = node.value
    return out


def _literal_values(node: ast.expr, aliases: dict[str, ast.expr], depth: int = 0) -> list[str]:
    """String values of a ``Literal[...]`` (aliases and unions of literals resolved)."""
    if depth > 10:
        return []
    if isinstance(node, ast.Name) and node.id in aliases:
        return _literal_values(aliases[node.id], aliases, depth + 1)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
            and node.value.id == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        out: list[str] = []
        for e in elts:
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e.value)
            else:
                out += _literal_values(e, aliases, depth + 1)
        return out
    members = _union_members(node)
    if len(members) > 1:
        return [v for m in members for v in _literal_values(m, aliases, depth + 1)]
    return []


def speculative_config(src: WheelFiles) -> dict[str, Any]:
    """Fields, methods and field choices of ``SpeculativeConfig``."""
    for rel in _SPEC_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        cls = next((n for n in ast.walk(tree)
                    if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig"), None)
        if cls is None:
            continue
        aliases = _literal_aliases(tree)
        fields: dict[str, str] = {}
        choices: dict[str, list[str]] = {}
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            ann = ast.unparse(stmt.annotation)
            if "ModelConfig" in ann or "ParallelConfig" in ann:
                continue  # filled in by vLLM, not by users
            fields[stmt.target.id] = ann
            values = _literal_values(stmt.annotation, aliases)
            if values:
                choices[stmt.target.id] = list(dict.fromkeys(values))
        methods = choices.pop("method", [])
        return {"module": rel, "fields": fields, "methods": methods,
                "mtp_methods": [m for m in methods if m == "mtp" or m.endswith("_mtp")],
                "choices": choices}
    raise SystemExit("no SpeculativeConfig class in " + ", ".join(_SPEC_FILES))


_UNSUPPORTED_RE = re.compile(
    r"""get\(\s*["']method["']\s*\)\s*==\s*["'](\w+)["']\s*\)?\s*:\s*"""
    r"""raise\s+NotImplementedError\(\s*((?:["'][^"']*["']\s*)+)\)""")


def unsupported_methods(src: WheelFiles) -> dict[str, str]:
    """Methods the engine refuses at start-up although the config names them."""
    text = src.read("vllm/engine/arg_utils.py") or ""
    out: dict[str, str] = {}
    for m in _UNSUPPORTED_RE.finditer(text):
        out[m.group(1)] = "".join(re.findall(r"""["']([^"']*)["']""", m.group(2)))
    return out


# -- metrics -------------------------------------------------------------------------------------


def _list_value(node: ast.expr, env: dict[str, ast.expr], depth: int = 0) -> list[str] | None:
    if depth > 10:
        return None
    if isinstance(node, ast.List | ast.Tuple):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [str(v) for v in vals] if len(vals) == len(node.elts) else None
    if isinstance(node, ast.Name) and node.id in env:
        return _list_value(env[node.id], env, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _list_value(node.left, env, depth + 1), _list_value(node.right, env, depth + 1)
        return a + b if a is not None and b is not None else None
    return None


def _bucket_defaults(src: WheelFiles) -> dict[str, list[float]]:
    """Default buckets by family (``vllm/v1/metrics/buckets.py``, 0.33 and later)."""
    tree = src.tree("vllm/v1/metrics/buckets.py")
    if tree is None:
        return {}
    consts: dict[str, list[float]] = {}
    families: dict[str, list[float]] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        if isinstance(value, ast.Tuple | ast.List):
            consts[target.id] = [float(e.value) for e in value.elts
                                 if isinstance(e, ast.Constant)
                                 and isinstance(e.value, int | float)]
        elif isinstance(value, ast.Dict) and target.id == "_STATIC_FAMILY_DEFAULTS":
            for k, v in zip(value.keys, value.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Name) and v.id in consts:
                    families[str(k.value)] = consts[v.id]
    return families


def _buckets(node: ast.expr | None, env: dict[str, ast.expr],
             families: dict[str, list[float]]) -> list[float] | None:
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in env:
        node = env[node.id]
    if isinstance(node, ast.List):
        vals = [e.value for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, int | float)]
        if len(vals) == len(node.elts):
            return [float(v) for v in vals]
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "histogram_buckets" \
            and node.args and isinstance(node.args[0], ast.Constant):
        return families.get(str(node.args[0].value))
    return None


def metric_families(src: WheelFiles) -> list[dict[str, Any]]:
    """Prometheus families (name, type, help, labels, buckets) vLLM's /metrics can show."""
    families = _bucket_defaults(src)
    found: dict[str, dict[str, Any]] = {}
    env: dict[str, ast.expr] = {}  # loggers.py's `labelnames` reaches spec_decode/metrics.py
    for rel in _METRIC_FILES:
        tree = src.tree(rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                env[node.targets[0].id] = node.value
        pairs = [n for n in ast.walk(tree) if isinstance(n, ast.Tuple) and len(n.elts) == 2
                 and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                         for e in n.elts)
                 and str(n.elts[0].value).startswith("vllm:")]  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func).lower()
            kind = next((v for k, v in _METRIC_KINDS.items() if k in func.rsplit(".", 1)[-1]),
                        None)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if kind is None or "name" not in kw:
                continue
            labels = _list_value(kw["labelnames"], env) if "labelnames" in kw else []
            entries: list[tuple[str, str]] = []
            name_node, doc_node = kw["name"], kw.get("documentation")
            if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str):
                doc = doc_node.value if isinstance(doc_node, ast.Constant) else ""
                entries.append((name_node.value, str(doc)))
            elif isinstance(name_node, ast.Name):  # for name, doc in counter_specs
                entries += [(str(p.elts[0].value), str(p.elts[1].value))  # type: ignore[attr-defined]
                            for p in pairs]
            for name, doc in entries:
                if not name.startswith("vllm:") or name in found:
                    continue
                fam: dict[str, Any] = {"name": name, "type": kind, "help": doc,
                                       "labels": labels if labels is not None else None}
                if kind == "histogram":
                    fam["buckets"] = _buckets(kw.get("buckets"), env, families)
                found[name] = fam
    return sorted(found.values(), key=lambda f: str(f["name"]))


# -- startup log formats -------------------------------------------------------------------------


def _render_str(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            parts.append(v.value if isinstance(v, ast.Constant) else "{}")
        return "".join(str(p) for p in parts)
    return None


def log_formats(src: WheelFiles) -> dict[str, list[str]]:
    """``{fact: [format strings]}`` of the startup messages crossbench parses."""
    anchors = [a for group in LOG_ANCHORS.values() for a in group]
    out: dict[str, set[str]] = {k: set() for k in LOG_ANCHORS}
    for rel in _py_files(src):
        text = src.read(rel) or ""
        if not any(a in text or a.split("%s")[0] in text for a in anchors):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
                 for v in n.values}  # pieces of an f-string are not messages of their own
        for node in ast.walk(tree):
            if id(node) in parts or not isinstance(node, ast.Constant | ast.JoinedStr):
                continue
            s = _render_str(node)
            if not s:
                continue
            for fact, group in LOG_ANCHORS.items():
                if any(a in s for a in group):
                    out[fact].add(s)
    return {k: sorted(v) for k, v in out.items()}


def per_request_spec_metrics(src: WheelFiles, index: dict[str, ast.ClassDef],
                             flags: list[str]) -> dict[str, Any] | None:
    """The per-request speculative metrics of responses, when this release has them."""
    flag = "--per-request-spec-decode-metrics"
    if flag not in flags:
        return None
    choices: list[str] = []
    ann = class_fields(index, "ObservabilityConfig").get("per_request_spec_decode_metrics")
    if ann is not None:
        choices = _literal_values(ann, {})
    fields: list[str] = []
    for rel in _py_files(src):
        if not rel.startswith("vllm/entrypoints/") or not rel.endswith("protocol.py"):
            continue
        text = src.read(rel) or ""
        if "class SpeculativeDecodingMetrics" not in text:
            continue
        cls = next(n for n in ast.walk(ast.parse(text))
                   if isinstance(n, ast.ClassDef) and n.name == "SpeculativeDecodingMetrics")
        fields = [s.target.id for s in cls.body
                  if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        break
    return {"flag": flag, "choices": choices, "response_field": "metrics.speculative_decoding",
            "stream": "the final usage chunk (stream_options.include_usage: true)",
            "fields": fields}


# -- the profile ---------------------------------------------------------------------------------


def generate(path: Path) -> dict[str, Any]:
    """The profile dict of one vLLM wheel (or unpacked wheel)."""
    src = WheelFiles(path)
    meta = src.metadata(("Version", "Requires-Dist"))
    version = (meta.get("Version") or ["unknown"])[0]
    torch = [r for r in meta.get("Requires-Dist", []) if re.match(r"torch\b", r)]
    index = _class_index(src)
    flags = serve_flags(src, index)
    source = f"vllm=={version}"
    if path.is_file():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        source += f" ({path.name}, sha256 {digest})"
    return {
        "engine": "vllm",
        "version": version,
        "source": source,
        "requires_torch": torch[0] if torch else None,
        "speculative_config": speculative_config(src),
        "unsupported_methods": unsupported_methods(src),
        "per_request_spec_metrics": per_request_spec_metrics(src, index, flags),
        "metrics": metric_families(src),
        "log_formats": log_formats(src),
        "serve_flags": flags,
    }


def render(profile: dict[str, Any]) -> str:
    """YAML text of a profile, with the header that says how it was made."""
    head = (
        "# vLLM engine profile, generated from the wheel's sources; do not edit by hand.\n"
        f"# Regenerate: pip download vllm=={profile['version']} --no-deps -d /tmp/w && \\\n"
        "#   python -m crossbench.engines.vllm.tools.profile_gen /tmp/w/vllm-*.whl "
        f"> engines/vllm/{profile['version']}.yaml\n"
    )
    return head + yaml.safe_dump(profile, sort_keys=False, width=100, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: print the profile YAML of a wheel."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("wheel", type=Path, help="vllm-X.Y.Z-*.whl, or an unpacked wheel folder")
    a = ap.parse_args(argv)
    sys.stdout.write(render(generate(a.wheel)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
