"""Matrices for the sequential-stopping tests: a two-cell matrix on the vLLM stand-in (named
as one: it serves no model) and a start-spread file made by hand for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from standins.vllm import write_launcher


def stand_in_matrix(tmp_path: Path, **over: Any) -> Path:
    """A baseline and one clearly faster synthetic-acceptance cell on the stand-in, 8 trials,
    sequential stopping; ``over`` replaces top-level fields."""
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "3",
                            "--standin-prefill-ms", "1")
    doc: dict[str, Any] = {
        "schema_version": 1, "study": {"name": "seq", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2, "enable_prefix_caching": False}}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 3, "warmup": 1, "max_tokens": 48},
        # acceptance 0.95, 0.9: about 2.85 tokens per step against 1: far from a tie
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "ngram", "n": 2, "synth_rates": [0.95, 0.9]}],
        "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:mixed"]},
        "trials": 8, "telemetry_hz": 0,
        "sequential": {"min_trials": 3},
        **over,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def spread_file(path: Path, engine: str = "vllm", sigma: float = 0.02) -> Path:
    """A start-spread file made by hand for the stand-in (it has no start spread of its own:
    the figures are the test's, not an engine's)."""
    from crossbench.analysis.start_spread import Spread, StartSpread

    StartSpread((Spread(engine, "baseline", sigma, 10, 2, 12),
                 Spread(engine, "ngram", sigma, 10, 2, 12)),
                ({"dir": "hand-made", "gpu": None},)).save(path)
    return path
