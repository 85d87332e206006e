"""How long `crossbench.open_run` takes to give the frames of a 100,800-request run, and how
much memory.

Writes the synthetic study of ``analysis_scale.py`` (40 prompts x 20 cells x 3 trials x 42
sends = 100,800 records with known timing), then, in a fresh process, opens it and builds
each frame (``requests`` first: one row per record; then the analysis and the cell, pair and
sweep frames), reporting wall time per frame and the process's peak resident memory.
Target (issue 17): the requests frame within a few seconds.

    python benchmarks/frames_scale.py            # the figures in benchmarks/README.md
    python benchmarks/frames_scale.py --quick    # 1/10 of the records
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from analysis_scale import make  # the same study, one definition

CHILD = r"""
import json, resource, sys, time
import crossbench
from crossbench.analysis.paired import StatsOptions
t = {}
t0 = time.perf_counter()
run = crossbench.open_run(sys.argv[1], StatsOptions(resamples=int(sys.argv[2])))
t["open_s"] = time.perf_counter() - t0
for name in ("requests", "trials", "analysis", "cells", "pairs", "sweeps"):
    t1 = time.perf_counter()
    obj = getattr(run, name)
    t[name + "_s"] = time.perf_counter() - t1
    if name == "requests":
        t["requests_rows"] = len(obj)
        t["requests_frame_mib"] = obj.memory_usage(deep=True).sum() / 2**20
t["total_s"] = time.perf_counter() - t0
t["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(t))
"""


def main() -> None:
    """Write the study, open it in a child process, print and save the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a tenth of the records")
    ap.add_argument("--resamples", type=int, default=2000,
                    help="bootstrap resamples of the analysis frame (analyze's default: 10000)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/frames-scale.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "study"
        records = make(root, prompts=40, occurrences=4 if args.quick else 42, tokens=65,
                       chunk_tokens=1)
        out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(args.resamples)],
                             capture_output=True, text=True, check=True)
        figures = {"records": records, **json.loads(out.stdout.splitlines()[-1])}
    for k, v in figures.items():
        print(f"{k:22s} {v:.2f}" if isinstance(v, float) else f"{k:22s} {v}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
