"""How long `crossbench analyze` takes on 100,000 request records, and how much memory.

Writes a synthetic study (``standins.study``: records with known timing) of
40 prompts in 6 categories x 20 cells (one baseline, two speculative arms swept over n) x 3
trials x 42 sends of each prompt per trial = 100,800 records, then analyses it in a fresh
process with 10,000 bootstrap resamples per interval, and reports wall time per phase and
the analysing process's peak resident memory.

    python benchmarks/analysis_scale.py                      # the figures in README.md
    python benchmarks/analysis_scale.py --chunk-tokens 4     # vLLM-like multi-token chunks
    python benchmarks/analysis_scale.py --quick              # 1/10 of the records
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stand-ins
from standins.study import Arm, study

CATEGORIES = ("code", "math", "creative", "factual", "analysis", "howto")


def make(out: Path, prompts: int, occurrences: int, tokens: int, chunk_tokens: int) -> int:
    """Write the study; returns the number of records."""
    rng = np.random.default_rng(0)
    plist = [(f"p{i:02d}", CATEGORIES[i % len(CATEGORIES)]) for i in range(prompts)]
    difficulty = {p: float(rng.uniform(0.8, 1.2)) for p, _ in plist}
    noise = rng.lognormal(0.0, 0.03, size=100_000_000 // 1000)
    arms = [Arm("none")]
    for n in range(1, 10):
        d = 1000
        per_pos = [round(d * 0.85 ** (k + 1)) for k in range(n)]
        arms.append(Arm("draft", "draft-simple", n, acceptance={
            "drafts": d, "draft_tokens": n * d, "accepted": sum(per_pos),
            "per_position": per_pos}))
    arms += [Arm("ngram", "ngram-mod", n) for n in range(2, 12)]
    count = [0]

    def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
        count[0] += 1
        base = 100.0 * difficulty[pid]
        if arm.n is None:
            speed = 1.0
        else:
            tau = 1 + sum(0.85 ** (k + 1) for k in range(arm.n))
            speed = tau / (1.1 + 0.12 * arm.n)
        return base * speed * float(noise[count[0] % noise.size])

    study(out, plist, arms, rate, trials=3, occurrences=occurrences, tokens=tokens,
          chunk_tokens=chunk_tokens)
    return count[0]


def analyse(run_dir: str, resamples: int) -> dict[str, Any]:
    """Analyse in this process and time each phase (run in a child for a clean peak RSS)."""
    from crossbench.analysis.analyze import analyze_run, write_outputs
    from crossbench.analysis.paired import StatsOptions
    from crossbench.analysis.rundir import load_run

    t0 = time.perf_counter()
    run = load_run(Path(run_dir))
    result = analyze_run(run, StatsOptions(resamples=resamples))  # reads records cell by cell
    t1 = time.perf_counter()
    write_outputs(Path(run_dir), result)
    t2 = time.perf_counter()
    bootstraps = sum(2 + 2 * len(p["per_category"]) for p in result["pairs"])
    return {"records": sum(len(c.records) for c in run.cells), "cells": len(run.cells),
            "pairs": len(result["pairs"]), "bootstrap_intervals": bootstraps,
            "sweeps": len(result["sweeps"]), "read_and_analyse_s": t1 - t0,
            "write_s": t2 - t1, "total_s": t2 - t0, "peak_rss_mib": peak_rss_mib()}


def one_interval_ms(samples: int, prompts: int, resamples: int) -> float:
    """Mean time of one clustered, stratified bootstrap interval of a pair's samples."""
    from crossbench.analysis.stats import ratio_interval

    rng = np.random.default_rng(1)
    logs = rng.normal(0.1, 0.1, samples)
    clusters = [f"p{i % prompts}" for i in range(samples)]
    strata = [CATEGORIES[(i % prompts) % len(CATEGORIES)] for i in range(samples)]
    t0 = time.perf_counter()
    for seed in range(20):
        ratio_interval(logs, clusters, strata, resamples, seed, 0.95)
    return (time.perf_counter() - t0) / 20 * 1000


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited through
    fork and exec from the parent that wrote the study)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--occurrences", type=int, default=42, help="sends of a prompt per trial")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    ap.add_argument("--chunk-tokens", type=int, default=1, help="tokens per streamed chunk")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="1/10 of the records")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    ap.add_argument("--analyse", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analyse:
        print(json.dumps(analyse(args.analyse, args.resamples)))
        return
    occurrences = max(1, args.occurrences // 10) if args.quick else args.occurrences
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "study"
        t0 = time.perf_counter()
        records = make(run_dir, args.prompts, occurrences, args.tokens, args.chunk_tokens)
        made = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in run_dir.rglob("requests.jsonl"))
        child = subprocess.run([sys.executable, __file__, "--analyse", str(run_dir),
                                "--resamples", str(args.resamples)],
                               check=True, capture_output=True, text=True)
        fig = json.loads(child.stdout)
    per_pair = records // 20
    fig.update(one_interval_ms=one_interval_ms(per_pair, args.prompts, args.resamples),
               samples_per_pair=per_pair, generated_records=records, generate_s=made,
               requests_jsonl_mib=size / 2**20,
               resamples=args.resamples, tokens=args.tokens, chunk_tokens=args.chunk_tokens)
    width = max(len(k) for k in fig)
    for k, v in fig.items():
        print(f"{k:<{width}}  {v:.2f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    if args.out:
        args.out.write_text(json.dumps(fig, indent=2) + "\n")


if __name__ == "__main__":
    main()
