"""Sample the host CPU once a second beside a GPU run: /proc/stat's time shares and a fixed
single-thread probe, so that a trial's host time per token (``crossbench.analysis.host_time``)
can be set beside what the CPU was doing (``host_steal.py`` aligns the two).

Each CSV row: ``t_ns`` (time.time_ns), the aggregate ``cpu`` line's jiffies since the previous
row (``user``, ``nice``, ``system``, ``idle``, ``iowait``, ``irq``, ``softirq``, ``steal``) and
``probe_ms``: the wall time of 200,000 iterations of a pure-Python loop (about 10 ms on an
idle core), a reading of how fast one thread of this VM ran just then. The probe takes about
1 % of one core. Runs until killed.

Usage: python benchmarks/host_sampler.py OUT.csv [--every 1.0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_jiffies() -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat: the first eight counters, in jiffies."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return [int(x) for x in parts[1:1 + len(FIELDS)]]


def probe_ms(n: int = 200_000) -> float:
    """Wall milliseconds of ``n`` iterations of a fixed pure-Python loop."""
    t = time.perf_counter()
    acc = 0
    for i in range(n):
        acc += i & 7
    return (time.perf_counter() - t) * 1e3


def main(argv: list[str] | None = None) -> int:
    """Write rows to the CSV until killed (flushed every row, so a kill loses nothing)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--every", type=float, default=1.0)
    args = ap.parse_args(argv)
    prev = cpu_jiffies()
    with args.out.open("a") as f:
        if f.tell() == 0:
            f.write(",".join(("t_ns", *FIELDS, "probe_ms")) + "\n")
        while True:
            time.sleep(args.every)
            probe = probe_ms()
            now = cpu_jiffies()
            delta = [b - a for a, b in zip(prev, now, strict=True)]
            prev = now
            f.write(",".join((str(time.time_ns()), *map(str, delta), f"{probe:.3f}")) + "\n")
            f.flush()


if __name__ == "__main__":
    raise SystemExit(main())
