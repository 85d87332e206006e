"""Regenerate the vLLM adapter's golden files and format fixtures (never edit them by hand).

``tests/data/vllm/`` holds:

- ``golden/<case>.json``: for each case of :data:`CASES` (every speculative method, the
  baseline, synthetic acceptance, all server settings), the config and the exact argv the
  adapter builds from it;
- ``metrics-0.33.0-before.prom`` / ``metrics-0.33.0-after.prom``: ``/metrics`` text of two
  data-parallel engines, built with prometheus_client from the families the 0.33.0 profile
  read from the wheel (counter values are :data:`BEFORE` / :data:`AFTER`; ``_created``
  timestamps are fixed so the files are reproducible; process collectors are left out);
- ``startup-<release>.log``: startup lines rendered from each profile's format strings.

It lives with the tests it feeds (test data, not part of the package). Usage (from the
repository root)::

    python tests/vllm_golden.py            # rewrite tests/data/vllm
    python tests/vllm_golden.py --check    # exit 1 if anything would change
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from standins import vllm_formats
from standins.vllm_formats import VllmMetrics

from crossbench.engines.vllm.config import VllmServerConfig
from crossbench.engines.vllm.metrics import SPEC_PREFIX
from crossbench.engines.vllm.profile import known_profiles, profile_for
from crossbench.engines.vllm.server import VllmServer

REV = "0123456789abcdef0123456789abcdef01234567"
"""A placeholder commit hash: the golden files test argv building, not real revisions."""

_TARGET = f"hf://Qwen/Qwen3-8B@{REV}"
_SERVER = {"model": _TARGET, "port": 8000, "max_model_len": 4096, "seed": 0}

CASES: dict[str, dict[str, Any]] = {
    "baseline": {**_SERVER, "spec": {"type": "none"}},
    "ngram": {**_SERVER, "spec": {"type": "ngram", "n": 4, "prompt_lookup_min": 2,
                                  "prompt_lookup_max": 5}},
    "draft_model": {**_SERVER, "spec": {
        "type": "draft_model", "n": 4, "draft_model": f"hf://Qwen/Qwen3-0.6B@{REV}",
        "draft_tensor_parallel_size": 1, "draft_sample_method": "probabilistic"}},
    "eagle": {**_SERVER, "model": f"hf://meta-llama/Llama-3.1-8B-Instruct@{REV}",
              "spec": {"type": "eagle", "n": 3,
                       "draft_model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}},
    "eagle3": {**_SERVER, "spec": {"type": "eagle3", "n": 3,
                                   "draft_model": "AngelSlim/Qwen3-8B_eagle3"}},
    "mtp": {**_SERVER, "model": f"hf://Qwen/Qwen3-Next-80B-A3B-Instruct@{REV}",
            "tensor_parallel_size": 4, "spec": {"type": "mtp", "n": 2}},
    "qwen3_next_mtp": {**_SERVER, "model": f"hf://Qwen/Qwen3-Next-80B-A3B-Instruct@{REV}",
                       "tensor_parallel_size": 4, "spec": {"type": "qwen3_next_mtp", "n": 2}},
    "dflash": {**_SERVER, "spec": {"type": "dflash", "n": 15,
                                   "draft_model": "z-lab/Qwen3-8B-DFlash-b16"}},
    "dspark": {**_SERVER, "spec": {"type": "dspark", "n": 7,
                                   "draft_model": "deepseek-ai/dspark_qwen3_8b_block7"}},
    "suffix": {**_SERVER, "spec": {"type": "suffix", "suffix_decoding_max_tree_depth": 32}},
    "medusa-0.10.2": {**_SERVER, "version": "0.10.2",
                      "model": f"hf://lmsys/vicuna-7b-v1.3@{REV}",
                      "spec": {"type": "medusa", "n": 5,
                               "draft_model": "FasterDecoding/medusa-vicuna-7b-v1.3"}},
    "synthetic-rates": {**_SERVER, "spec": {
        "type": "draft_model", "draft_model": f"hf://Qwen/Qwen3-0.6B@{REV}",
        "synth_rates": [0.9, 0.7, 0.5, 0.2]}},
    "synthetic-length": {**_SERVER, "spec": {"type": "ngram", "n": 4, "synth_len": 2.5}},
    "all-server-settings": {
        "model": _TARGET, "port": 8000, "served_model_name": "qwen3-8b",
        "tokenizer": "Qwen/Qwen3-8B", "dtype": "bfloat16",
        "quantization": "fp8", "seed": 1, "tensor_parallel_size": 2, "data_parallel_size": 2,
        "gpu_memory_utilization": 0.85, "max_model_len": 8192, "max_num_seqs": 64,
        "max_num_batched_tokens": 8192, "enable_prefix_caching": False,
        "enable_chunked_prefill": True, "enforce_eager": True,
        "per_request_spec_decode_metrics": "summary",
        "extra_args": ["--trust-remote-code"],
        "spec": {"type": "eagle3", "n": 3, "draft_model": "AngelSlim/Qwen3-8B_eagle3"}},
}

MODEL_NAME = "Qwen/Qwen3-8B"
#: counter values per engine of the before/after metrics fixtures
BEFORE: dict[int, dict[str, Any]] = {
    0: {"drafts": 100, "draft_tokens": 400, "accepted": 220, "per_pos": [90, 70, 40, 20],
        "prefix_queries": 5000, "prefix_hits": 1600, "preemptions": 1},
    1: {"drafts": 50, "draft_tokens": 200, "accepted": 110, "per_pos": [45, 35, 20, 10],
        "prefix_queries": 2500, "prefix_hits": 800, "preemptions": 0},
}
AFTER: dict[int, dict[str, Any]] = {
    0: {"drafts": 1100, "draft_tokens": 4400, "accepted": 2420, "per_pos": [990, 770, 440, 220],
        "prefix_queries": 15000, "prefix_hits": 6600, "preemptions": 3},
    1: {"drafts": 550, "draft_tokens": 2200, "accepted": 1210, "per_pos": [495, 385, 220, 110],
        "prefix_queries": 7500, "prefix_hits": 3300, "preemptions": 1},
}
_CREATED = "1.7643e+09"
_T = 1_764_300_000.0  # the time stamp of the fixture logs


def golden_argv(config: dict[str, Any]) -> list[str]:
    """The argv the adapter builds for a case (``vllm`` on PATH, port as configured)."""
    cfg = VllmServerConfig.model_validate(config)
    server = VllmServer(cfg, Path("/dev/null"))
    return server.argv(server.profile, "vllm")


def metrics_text(values: dict[int, dict[str, Any]]) -> str:
    """``/metrics`` of two engines of vLLM 0.33.0 holding ``values``."""
    n = len(values[0]["per_pos"])
    m = VllmMetrics(profile_for("0.33.0"), MODEL_NAME, engines=len(values), num_spec_tokens=n,
                    process_collectors=False)
    for e, v in values.items():
        m.child(SPEC_PREFIX + "num_drafts", e).inc(v["drafts"])
        m.child(SPEC_PREFIX + "num_draft_tokens", e).inc(v["draft_tokens"])
        m.child(SPEC_PREFIX + "num_accepted_tokens", e).inc(v["accepted"])
        for pos, c in enumerate(v["per_pos"]):
            m.child(SPEC_PREFIX + "num_accepted_tokens_per_pos", e, str(pos)).inc(c)
        m.child("vllm:prefix_cache_queries", e).inc(v["prefix_queries"])
        m.child("vllm:prefix_cache_hits", e).inc(v["prefix_hits"])
        m.child("vllm:num_preemptions", e).inc(v["preemptions"])
        m.child("vllm:iteration_tokens_total", e).observe(3)
        m.child("vllm:request_success", e, "length").inc(10)
    return re.sub(r"^([^#\s]\S*_created(?:\{[^}]*\})?) \S+$", rf"\1 {_CREATED}", m.text(),
                  flags=re.M)


def startup_text(version: str) -> str:
    """Startup lines of one release, from its profile's format strings."""
    prof = profile_for(version)
    lines = vllm_formats.render_startup(
        prof.log_formats, 4242, version=version, model=MODEL_NAME,
        spec_repr="SpeculativeConfig(method='eagle3', model='AngelSlim/Qwen3-8B_eagle3', "
        "num_spec_tokens=3)", capture_sizes=[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64],
        kv_tokens=412_160, kv_gib=56.6, max_model_len=4096, attention="FLASH_ATTN",
        max_scheduled=2048, t=_T)
    return "\n".join(lines) + "\n"


def files() -> dict[str, str]:
    """Relative path -> content of every generated file."""
    out = {f"golden/{name}.json": json.dumps({"config": cfg, "argv": golden_argv(cfg)},
                                             indent=1) + "\n"
           for name, cfg in CASES.items()}
    out["metrics-0.33.0-before.prom"] = metrics_text(BEFORE)
    out["metrics-0.33.0-after.prom"] = metrics_text(AFTER)
    for prof in known_profiles():
        out[f"startup-{prof.version}.log"] = startup_text(prof.version)
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or ``--check``) the generated test data."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dir", nargs="?", type=Path, default=Path(__file__).resolve().parent / "data/vllm")
    ap.add_argument("--check", action="store_true", help="report differences, write nothing")
    a = ap.parse_args(argv)
    stale = []
    for rel, text in files().items():
        path = a.dir / rel
        if path.exists() and path.read_text() == text:
            continue
        stale.append(rel)
        if not a.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    verb = "differ" if a.check else "written"
    print(f"{len(stale)} file(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
