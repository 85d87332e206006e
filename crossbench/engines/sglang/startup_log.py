"""Start-up facts read from SGLang's ``launch_server`` log (0.5.17's messages), and when each
phase ended.

SGLang stamps its lines ``[YYYY-MM-DD HH:MM:SS]`` (whole seconds; a rank suffix may follow
the time). The messages read here, as 0.5.17 writes them (``model_executor/model_runner.py``
and the CUDA-graph runners):

- ``Load weight end. elapsed=1.86 s, type=Qwen3ForCausalLM, ...``: once per model (the
  target, then a drafter's);
- ``KV Cache is allocated. dtype: torch.float16, #tokens: 362905, ...``: the target's pool
  first (a drafter's pool repeats its token count);
- ``Capture target prefill CUDA graph end. elapsed=61.38 s, ...``: once per captured graph
  (target prefill, decode or verify; draft prefill, decode, extend or verify);
- ``The server is fired up and ready to roll!``: ready.

The first start on a machine compiles what later starts find cached: on an H100 on
2026-12-06 the target's prefill graph took 61.4 s on the machine's first SGLang start and
8.5-8.9 s on each of the eight after it (docs/sglang.md "Where a start goes").
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\] ")
_LOAD = re.compile(r"Load weight end\. elapsed=([\d.]+) s")
_KV = re.compile(r"KV Cache is allocated\. .*?#tokens: (\d+)")
_CAPTURE = re.compile(r"Capture (.+?) CUDA graph end\. elapsed=([\d.]+) s")
_READY = "The server is fired up and ready to roll!"


@dataclass
class StartupFacts:
    """What one start's log says (None or empty: not logged). ``load_weight_s`` sums every
    model's load; ``graphs_s`` holds each CUDA graph capture by name (``target prefill``);
    ``marks_s`` the seconds from the first stamped line to the end of each phase
    (``weights``, ``kv_cache``, ``graphs``, ``ready``), at the log's whole-second stamps."""

    load_weight_s: float | None = None
    kv_cache_tokens: int | None = None
    graphs_s: dict[str, float] = field(default_factory=dict)
    marks_s: dict[str, float] = field(default_factory=dict)

    @property
    def graph_capture_s(self) -> float | None:
        """Every CUDA graph capture summed (None where none was logged)."""
        return round(sum(self.graphs_s.values()), 3) if self.graphs_s else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view, with the summed graph capture."""
        return {"load_weight_s": self.load_weight_s, "kv_cache_tokens": self.kv_cache_tokens,
                "graph_capture_s": self.graph_capture_s, "graphs_s": dict(self.graphs_s),
                "marks_s": dict(self.marks_s)}


def parse(text: str) -> StartupFacts:
    """The facts of one start's log text (everything the server wrote from its spawn)."""
    facts = StartupFacts()
    first: dt.datetime | None = None
    loads: list[float] = []

    def mark(name: str, stamp: dt.datetime | None) -> None:
        if stamp is not None and first is not None:
            facts.marks_s[name] = (stamp - first).total_seconds()

    for line in text.splitlines():
        m = _STAMP.match(line)
        stamp = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") if m else None
        if first is None and stamp is not None:
            first = stamp
        if (load := _LOAD.search(line)) is not None:
            loads.append(float(load.group(1)))
            mark("weights", stamp)
        elif (kv := _KV.search(line)) is not None:
            if facts.kv_cache_tokens is None:
                facts.kv_cache_tokens = int(kv.group(1))
            mark("kv_cache", stamp)
        elif (cap := _CAPTURE.search(line)) is not None:
            name = cap.group(1)
            facts.graphs_s[name] = facts.graphs_s.get(name, 0.0) + float(cap.group(2))
            mark("graphs", stamp)
        elif _READY in line:
            mark("ready", stamp)
            break
    if loads:
        facts.load_weight_s = round(sum(loads), 3)
    return facts


KERNEL_CACHES: dict[str, tuple[str, str]] = {
    "tvm_ffi": ("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi"),
    "triton": ("TRITON_CACHE_DIR", "~/.triton/cache"),
}
"""The caches a start fills with what it compiles, by name: the variable that moves each and
its default. SGLang 0.5.17's JIT kernels (``sglang/kernels/jit/utils/compile.py``) build one
module folder each under ``TVM_FFI_CACHE_DIR`` with nvcc; Triton keeps its compiled kernels
under ``TRITON_CACHE_DIR``."""


def kernel_cache_roots(env: dict[str, str]) -> dict[str, Path]:
    """Each kernel cache's folder for a server started with environment ``env`` (``~`` is
    ``env``'s ``HOME``, else this process's)."""
    home = env.get("HOME") or str(Path.home())
    return {name: Path(env.get(var) or default.replace("~", home, 1))
            for name, (var, default) in KERNEL_CACHES.items()}


def cache_counts(roots: dict[str, Path]) -> dict[str, int]:
    """The entries (top-level names) in each cache folder; 0 where it is missing."""
    def count(root: Path) -> int:
        try:
            return sum(1 for _ in root.iterdir())
        except OSError:
            return 0
    return {name: count(root) for name, root in roots.items()}


def start_kind(before: dict[str, int], after: dict[str, int]) -> str:
    """``warm`` where the start added nothing to any kernel cache (it found what it needed),
    ``cold`` where it added entries to caches that were empty (the machine's first start),
    ``partial`` where it added entries beside earlier ones (a configuration that compiles
    kernels an earlier start did not)."""
    grew = any(after.get(k, 0) > n for k, n in before.items())
    if not grew:
        return "warm"
    return "partial" if any(before.values()) else "cold"
