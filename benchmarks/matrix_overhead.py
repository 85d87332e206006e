"""Harness overhead of a matrix run: where each trial's wall time went (run by hand).

Runs a matrix (default: matrices/cpu-smoke.yaml) into a temporary directory, then splits every
trial's wall time using the phases the runner records (`phase_s` in each cell manifest) and
the raw request records:

- engine start-up (spawn, model load, readiness polling) -- the price of a fresh server;
- requests: the sum of send-to-last-chunk times of all requests (the engine working);
- client gaps: measured phase minus requests (between one request's end and the next send);
- warm-up requests; scrape + atomic writes of /metrics snapshots; server stop.

Usage::

    python benchmarks/matrix_overhead.py [--matrix FILE] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from crossbench.paths import repo_root
from crossbench.runner.matrix_run import run_matrix
from crossbench.store.atomic import read_jsonl


def split(run_dir: Path) -> dict[str, float]:
    """Seconds per phase, summed over every trial of every cell of a matrix run."""
    tot: dict[str, float] = {}
    for manifest_path in sorted((run_dir / "cells").glob("*/manifest.json")):
        man = json.loads(manifest_path.read_text())
        recs = read_jsonl(manifest_path.parent / "requests.jsonl")
        for entry in man["trials"]:
            ph = entry.get("phase_s", {})
            for k, v in ph.items():
                tot[k] = tot.get(k, 0.0) + v
            busy = sum((r["t_done_ns"] - r["t_sent_ns"]) / 1e9 for r in recs
                       if r["trial"] == entry["trial"] and not r["warmup"])
            tot["requests"] = tot.get("requests", 0.0) + busy
    tot["client_gaps"] = tot.get("measured", 0.0) - tot.get("requests", 0.0)
    return tot


def main() -> int:
    """Run the matrix, print the split, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--matrix", type=Path, default=repo_root() / "matrices" / "cpu-smoke.yaml")
    ap.add_argument("--out", type=Path, default=Path("matrix_overhead.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cb-overhead-") as tmp:
        run_matrix(a.matrix, Path(tmp) / "run")
        tot = split(Path(tmp) / "run")
    total = tot["total"]
    rows = ["startup", "warmup", "requests", "client_gaps", "scrape_write", "stop"]
    result: dict[str, Any] = {"matrix": str(a.matrix), "total_s": total,
                              "seconds": {k: tot.get(k, 0.0) for k in rows},
                              "share": {k: tot.get(k, 0.0) / total for k in rows}}
    print(f"{'phase':<14} {'seconds':>9} {'share':>7}")
    for k in rows:
        print(f"{k:<14} {tot.get(k, 0.0):>9.2f} {tot.get(k, 0.0) / total:>7.1%}")
    outside = sum(tot.get(k, 0.0) for k in ("client_gaps", "scrape_write", "stop"))
    result["outside_engine_share"] = outside / total
    print(f"outside the engine (client gaps, scrape + write, stop): {outside / total:.2%}; "
          f"with start-up: {(outside + tot.get('startup', 0.0)) / total:.2%}")
    a.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
