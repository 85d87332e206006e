"""The matrix runner's memory over a long study: thousands of trials against a stand-in.

What it measures is crossbench's own process (runner, sessions, journal, client), not an
engine: every trial talks to one **stand-in server** (``standins.load``, not an
engine; it streams placeholder tokens on a fixed schedule). The stand-in is attached through
an adapter registered here, the way a third party registers an engine, whose start and stop
do nothing, so thousands of trials take minutes. The resident set size (``VmRSS``) is sampled
after every trial; "flat" means the growth from the first tenth of the run to its end stays
small and does not scale with the number of trials.

Usage (by hand; a few minutes)::

    python benchmarks/matrix_memory.py [--cells 51] [--trials 60] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from crossbench.engines import registry
from crossbench.engines.base import EngineIdentity, EngineServer, MetricsSnapshot
from crossbench.runner.matrix_run import Tick, run_matrix

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stand-ins
from standins import pythonpath


class AttachedConfig(BaseModel):
    """An already running stand-in: its URL; spec and model are accepted and ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Root URL of the running stand-in.")
    model: str = Field(description="Ignored (the stand-in has no model).")
    spec: dict[str, Any] = Field(default_factory=dict, description="Ignored.")


class AttachedStandin(EngineServer):
    """Adapter for a stand-in started once by this benchmark (start/stop do nothing)."""

    kind = "standin-attached"

    def __init__(self, cfg: AttachedConfig, log_path: Path) -> None:
        self.cfg, self._log = cfg, log_path

    def validate(self) -> None:
        """Nothing to check."""

    def validate_static(self) -> None:
        """Nothing to check."""

    def command(self) -> list[str]:
        """No process is spawned; the argv names the attachment."""
        return ["(attached stand-in)", self.cfg.url]

    def start(self) -> None:
        """Already running."""

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """The benchmark waited for it once."""

    @property
    def base_url(self) -> str:
        """The stand-in's URL."""
        return self.cfg.url

    def scrape(self) -> MetricsSnapshot:
        """The stand-in has no metrics page: an empty snapshot."""
        return MetricsSnapshot(time.monotonic_ns(), "", {})

    def identity(self) -> EngineIdentity:
        """Says what it is: a stand-in."""
        return EngineIdentity("standin-attached", "crossbench-standin", None, None,
                              "standins.load", {}, {"standin": True})

    def stop(self) -> None:
        """Left running for the next trial."""

    @property
    def log_path(self) -> Path:
        """Unused log file."""
        return self._log


registry.register("standin-attached", f"{__name__}:AttachedStandin",
                  f"{__name__}:AttachedConfig")


def rss_mib() -> float:
    """This process's resident set size."""
    text = Path("/proc/self/status").read_text()
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(m.group(1)) / 1024 if m else float("nan")


def main() -> int:
    """Run the long stand-in matrix, sample RSS per trial, print and write the result."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cells", type=int, default=51, help="cells (1 baseline + n arms)")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tracemalloc", action="store_true",
                    help="also print the 8 allocation sites that grew most after 10%% of the run")
    args = ap.parse_args()
    if args.tracemalloc:
        tracemalloc.start(8)
    early: list[tracemalloc.Snapshot] = []
    proc = subprocess.Popen([sys.executable, "-m", "standins.load", "--port", "0",
                             "--ttft-ms", "1", "--gap-ms", "0.2", "--max-tokens", "8"],
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=pythonpath()))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        urllib.request.urlopen(url + "/health", timeout=10).read()
        with tempfile.TemporaryDirectory() as tmp:
            model = Path(tmp) / "no-model"
            model.write_text("the stand-in has no model\n")
            matrix = {
                "schema_version": 1,
                "study": {"name": "runner-memory",
                          "notes": "stand-in server, not an engine: runner memory only"},
                "engines": {"s": {"kind": "standin-attached", "server": {"url": url}}},
                "models": {"m": {"path": str(model), "quant": "none", "role": "target"}},
                "load": {"requests": 2, "warmup": 0, "max_tokens": 8},
                "arms": [{"method": "none"},
                         {"method": "fake", "n": f"1-{args.cells - 1}"}],
                "axes": {"engine": ["s"], "target": ["m"], "workload": ["builtin:code"]},
                "trials": args.trials,
            }
            path = Path(tmp) / "m.yaml"
            path.write_text(yaml.safe_dump(matrix))
            samples: list[tuple[int, float]] = []

            def tick(t: Tick) -> None:
                if t.ended:
                    samples.append((t.index + 1, rss_mib()))
                    if args.tracemalloc and t.index + 1 == t.total // 10:
                        early.append(tracemalloc.take_snapshot())
                    if (t.index + 1) % 500 == 0:
                        print(f"{t.index + 1}/{t.total} trials, RSS {samples[-1][1]:.1f} MiB",
                              file=sys.stderr)

            t0 = time.monotonic()
            summary = run_matrix(path, Path(tmp) / "run", on_tick=tick)
            wall = time.monotonic() - t0
            if early:
                growth = tracemalloc.take_snapshot().compare_to(early[0], "traceback")
                for stat in growth[:8]:
                    print(f"{stat.size_diff / 1024:+.0f} KiB", *stat.traceback.format()[-4:],
                          sep="\n  ", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(10)
    n = len(samples)
    tenth = samples[max(n // 10 - 1, 0)][1]
    result = {
        "trials": n, "done": summary["totals"]["done"], "failed": summary["totals"]["failed"],
        "wall_s": round(wall, 1), "rss_mib_first": round(samples[0][1], 1),
        "rss_mib_at_10pct": round(tenth, 1), "rss_mib_end": round(samples[-1][1], 1),
        "rss_mib_max": round(max(r for _, r in samples), 1),
        "growth_10pct_to_end_mib": round(samples[-1][1] - tenth, 2),
        "growth_per_1000_trials_mib": round((samples[-1][1] - tenth) / (n - n // 10) * 1000, 3),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps({"result": result, "rss": samples}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
