"""Each trial's host time per token (``crossbench.analysis.host_time``) beside what the host
CPU did in its measured window, from ``host_sampler.py``'s once-a-second rows.

A trial's measured window is placed by its manifest entry: it ends ``stop + scrape_write``
seconds before ``ended_utc`` (whole seconds, so the window is known to about a second) and
lasts ``phase_s.measured``. Per trial: the share of CPU time that was user, system and
steal (jiffies over every vCPU) and the median and range of the probe in the window.

Usage: python benchmarks/host_steal.py --csv A.csv [--csv B.csv] RUN [RUN ...] [--out F.json]
"""

from __future__ import annotations

import argparse
import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crossbench.analysis.host_time import trial_times
from crossbench.analysis.rundir import load_run

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_rows(paths: list[Path]) -> list[dict[str, float]]:
    """The sampler's rows of every CSV, as numbers, by time."""
    rows = [{k: float(v) for k, v in r.items()} for p in paths
            for r in csv.DictReader(p.open())]
    return sorted(rows, key=lambda r: r["t_ns"])


def window(entry: dict[str, Any]) -> tuple[float, float]:
    """A trial's measured window in Unix seconds (module docstring)."""
    ph = entry["phase_s"]
    ended = datetime.strptime(entry["ended_utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    end = ended.timestamp() + 0.5 - ph.get("stop", 0.0) - ph.get("scrape_write", 0.0)
    return end - ph["measured"], end


def trial_rows(run: Path, rows: list[dict[str, float]]) -> list[dict[str, Any]]:
    """One row per trial with host-time figures: the host time and the CPU beside it."""
    out = []
    for cell in load_run(run).cells:
        times = {t.trial: t for t in trial_times(cell)}
        for entry in cell.manifest.get("trials") or []:
            t = times.get(int(entry["trial"]))
            if t is None or "measured" not in (entry.get("phase_s") or {}):
                continue
            a, b = window(entry)
            # a row covers the second before its time stamp
            w = [r for r in rows if a <= r["t_ns"] / 1e9 <= b + 1.0]
            total = sum(r[k] for r in w for k in FIELDS) or None
            probes = sorted(r["probe_ms"] for r in w)
            out.append({
                "run": run.name, "cell": cell.id, "trial": t.trial,
                "tok_s": cell.trial_rates.get(t.trial),
                "gpu_busy_share": t.gpu_busy_share, "busy_ms_per_token": t.busy_ms_per_token,
                "host_ms_per_token": t.host_ms_per_token, "sampler_rows": len(w),
                **{f"cpu_{k}_share": (sum(r[k] for r in w) / total if total else None)
                   for k in ("user", "system", "steal")},
                "probe_ms_median": probes[len(probes) // 2] if probes else None,
                "probe_ms_range": [probes[0], probes[-1]] if probes else None})
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table; write it as JSON with ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--csv", action="append", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    table = [r for run in args.runs for r in trial_rows(run, rows)]
    for r in table:
        print(f"{r['run']:18s} {r['cell'][-36:]:36s} t{r['trial']} {r['tok_s']:6.1f} tok/s "
              f"host {r['host_ms_per_token']:.2f} ms/tok  steal {r['cpu_steal_share']:.4f}  "
              f"probe {r['probe_ms_median']:.1f} ms")
    if args.out:
        probes = sorted(r["probe_ms"] for r in rows)
        args.out.write_text(json.dumps({
            "benchmark": "host-cpu-beside-host-time", "sampler_rows": len(rows),
            "steal_share_all": sum(r["steal"] for r in rows) /
            sum(r[k] for r in rows for k in FIELDS),
            "probe_ms_all": {"median": probes[len(probes) // 2], "min": probes[0],
                             "max": probes[-1]},
            "trials": table}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
