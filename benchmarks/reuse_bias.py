"""Does reusing a server bias a trial? The same llama-server cell measured with a fresh server
per trial and with one server per block of trials (its slots erased and a warm-up before each
trial), on this machine's CPU build and the tiny fixture models.

The two designs run in alternating blocks (fresh, reused, fresh, reused, ...), so slow drift
of the host hits both alike. Each trial's pooled decode rate is one sample; the bias is the
ratio of the designs' geometric means (reused / fresh) with a 95 % percentile bootstrap
interval over trials, resampled within each design. Also reported: the wall time of each
design (what reuse saves) and the reused trials' rate by position in their block (a
warm-server effect would show as position 1+ running faster than position 0).

    python benchmarks/reuse_bias.py                 # 4 blocks of 3 trials per design
    python benchmarks/reuse_bias.py --blocks 2      # quicker

Writes benchmarks/results/reuse-bias-cpu.json. CPU only: it says nothing about GPU servers,
whose bias (CUDA graphs, allocator state, clocks) must be measured on the GPU the same way.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from crossbench.engines.llamacpp.build import install
from crossbench.fixtures.resolve import ensure_fixtures
from crossbench.runner.config import RunConfig
from crossbench.runner.single import run

OUT = Path(__file__).parent / "results" / "reuse-bias-cpu.json"


def _config(binary: Path, target: Path, trials: int, per_start: int) -> RunConfig:
    return RunConfig.model_validate({
        "engine_config": {"binary": str(binary), "model": str(target), "ctx_size": 2048,
                          "threads": 2},
        "trials": trials, "trials_per_start": per_start, "telemetry_hz": 0,
        "load": {"workload": "builtin:mixed", "requests": 6, "warmup": 1, "max_tokens": 96}})


def _trials(run_dir: Path) -> list[dict[str, object]]:
    man = json.loads((run_dir / "manifest.json").read_text())
    return [{"rate": e["load"]["pooled_tok_s"], "total_s": e["phase_s"]["total"],
             "position": (e.get("reuse") or {}).get("position", 0)}
            for e in sorted(man["trials"], key=lambda e: e["trial"]) if e["status"] == "ok"]


def _ratio_ci(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Geometric-mean ratio b/a and its 95 % bootstrap interval (trials resampled per design)."""
    la, lb = np.log(a), np.log(b)
    g = np.random.default_rng(seed)
    draws = (g.choice(lb, (10_000, lb.size)).mean(1) - g.choice(la, (10_000, la.size)).mean(1))
    lo, hi = np.quantile(draws, [0.025, 0.975])
    return float(np.exp(lb.mean() - la.mean())), float(np.exp(lo)), float(np.exp(hi))


def main() -> None:
    """Run the alternating blocks and write the result file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--blocks", type=int, default=4, help="blocks per design")
    ap.add_argument("--block-trials", type=int, default=3, help="trials per block")
    a = ap.parse_args()
    binary = install().binary()
    target, _ = ensure_fixtures("tiny", 0)
    fresh: list[dict[str, object]] = []
    reused: list[dict[str, object]] = []
    walls = {"fresh": 0.0, "reused": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.blocks):
            for name, per_start, sink in (("fresh", 1, fresh),
                                          ("reused", a.block_trials, reused)):
                t0 = time.monotonic()
                run(_config(binary, target, a.block_trials, per_start), Path(tmp) / f"{name}{k}")
                walls[name] += time.monotonic() - t0
                sink += _trials(Path(tmp) / f"{name}{k}")
    ratio, lo, hi = _ratio_ci([float(t["rate"]) for t in fresh],  # type: ignore[arg-type]
                              [float(t["rate"]) for t in reused])  # type: ignore[arg-type]
    by_pos: dict[int, list[float]] = {}
    for t in reused:
        by_pos.setdefault(int(t["position"]), []).append(float(t["rate"]))  # type: ignore[call-overload,arg-type]
    result = {
        "what": "llama-server (CPU build, tiny fixture target), fresh server per trial vs one "
                "server per block of trials with slots erased and a warm-up before each trial",
        "host": {"machine": platform.machine(), "processor": platform.processor()},
        "blocks_per_design": a.blocks, "trials_per_block": a.block_trials,
        "fresh_tok_s": [t["rate"] for t in fresh], "reused_tok_s": [t["rate"] for t in reused],
        "ratio_reused_over_fresh": ratio, "ci95": [lo, hi],
        "reused_tok_s_by_position": {str(k): float(np.exp(np.mean(np.log(v))))
                                     for k, v in sorted(by_pos.items())},
        "wall_s": walls,
    }
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("ratio_reused_over_fresh", "ci95",
                                              "reused_tok_s_by_position", "wall_s")}, indent=2))


if __name__ == "__main__":
    main()
