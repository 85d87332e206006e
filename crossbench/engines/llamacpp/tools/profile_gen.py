"""Regenerate a llama.cpp engine profile (``engines/llama.cpp/bNNNNN.yaml``) from a source tree.

The profile is read from the code that defines the flags, not from the README (which lags:
b11434's README lacks ``--spec-draft-sampling``):

- ``common/arg.cpp``: every ``common_arg`` whose examples include the server (or ``COMMON``,
  which every tool inherits) and that the server does not exclude; flags whose handler calls
  ``arg_removed(...)`` are recorded with that message, which names the replacement;
- ``common/speculative.cpp``: the ``--spec-type`` names;
- ``tools/server/server-task.cpp``: the Prometheus metric names of ``/metrics``.

Usage::

    python -m crossbench.engines.llamacpp.tools.profile_gen SOURCE_TREE --build 11312 \
        --commit 0c1e570 --source llama-cpp-python==0.3.36 > engines/llama.cpp/b11312.yaml

or ``crossbench engines profile --pin llama-cpp-python==0.3.36`` which does the same for a pin.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

_OPT_START = re.compile(r"add_opt\(\s*common_arg\(")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _leading_flag_groups(seg: str) -> list[str]:
    """Flag spellings in the brace groups that open a ``common_arg(...)`` call."""
    flags: list[str] = []
    pos = 0
    while True:
        m = re.match(r"\s*\{([^{}]*)\}\s*,", seg[pos:])
        if not m:
            break
        names = [s for s in _STRING.findall(m.group(1)) if s.startswith("-")]
        if not names:
            break
        flags += names
        pos += m.end()
    return flags


def _example_list(seg: str, method: str) -> list[str] | None:
    m = re.search(rf"\.{method}\(\s*\{{([^}}]*)\}}", seg)
    if not m:
        return None
    return [x.strip() for x in m.group(1).split(",") if x.strip()]


def parse_server_flags(arg_cpp: str) -> tuple[list[str], dict[str, str]]:
    """(all flag spellings the server accepts, {removed flag: message naming the replacement})."""
    starts = [m.end() for m in _OPT_START.finditer(arg_cpp)]
    flags: set[str] = set()
    removed: dict[str, str] = {}
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(arg_cpp)
        seg = arg_cpp[start:end]
        names = _leading_flag_groups(seg)
        if not names:
            continue
        examples = _example_list(seg, "set_examples") or ["LLAMA_EXAMPLE_COMMON"]
        excludes = _example_list(seg, "set_excludes") or []
        in_server = "LLAMA_EXAMPLE_SERVER" in examples or "LLAMA_EXAMPLE_COMMON" in examples
        if not in_server or "LLAMA_EXAMPLE_SERVER" in excludes:
            continue
        rm = re.search(r'arg_removed\(\s*"((?:[^"\\]|\\.)*)"', seg)
        for n in names:
            if rm:
                removed[n] = rm.group(1)
            else:
                flags.add(n)
    return sorted(flags), dict(sorted(removed.items()))


def parse_spec_types(spec_cpp: str) -> list[str]:
    """``--spec-type`` names, in the order the source declares them."""
    names = re.findall(r'case COMMON_SPECULATIVE_TYPE_\w+:\s*return "([a-z0-9-]+)";', spec_cpp)
    return list(dict.fromkeys(names))


def parse_metrics(task_cpp: str) -> list[str]:
    """Metric names (with the ``llamacpp:`` prefix) that ``/metrics`` can expose."""
    names = set(re.findall(r'\{\s*"([a-z_]+)",\s*"[^"]*",', task_cpp))
    names |= set(re.findall(r"llamacpp:([a-z_]+)", task_cpp))
    return sorted(f"llamacpp:{n}" for n in names)


def generate(tree: Path, build: int, commit: str, source: str) -> dict[str, Any]:
    """The profile dict of one llama.cpp source tree."""
    arg_cpp = (tree / "common" / "arg.cpp").read_text(errors="replace")
    flags, removed = parse_server_flags(arg_cpp)
    return {
        "engine": "llama.cpp",
        "build_number": build,
        "commit": commit,
        "source": source,
        "spec_types": parse_spec_types(
            (tree / "common" / "speculative.cpp").read_text(errors="replace")),
        "metrics": parse_metrics(
            (tree / "tools" / "server" / "server-task.cpp").read_text(errors="replace")),
        "server_flags": flags,
        "removed_flags": removed,
    }


def render(profile: dict[str, Any]) -> str:
    """YAML text of a profile, with the header that says how it was made."""
    head = (
        "# llama.cpp engine profile, generated from the source tree; do not edit by hand.\n"
        f"# Regenerate: crossbench engines profile --pin {profile['source']}\n"
    )
    return head + yaml.safe_dump(profile, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: print the profile YAML of a source tree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("--build", type=int, required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args(argv)
    sys.stdout.write(render(generate(a.tree, a.build, a.commit, a.source)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
