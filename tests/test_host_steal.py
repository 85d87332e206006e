"""benchmarks/host_steal.py: a trial's measured window placed from its manifest entry, and the
archived H200 run with the host sampler beside it (hypervisor steal about zero)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
from bench_loader import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "benchmarks" / "results" / "gpu-time-per-verdict" / "h200-runs-hoststart.tgz"


def _mod(name: str) -> ModuleType:
    return load_benchmark(f"{name}.py")


def test_the_window_ends_before_the_stop_and_lasts_the_measured_phase() -> None:
    steal = _mod("host_steal")
    a, b = steal.window({"ended_utc": "2026-12-02T18:13:10Z",
                         "phase_s": {"measured": 6.0, "stop": 0.5, "scrape_write": 1.0}})
    assert b - a == pytest.approx(6.0)
    assert b == pytest.approx(1796235190.0 + 0.5 - 1.5)


def test_the_sampler_reads_the_eight_cpu_counters_and_times_the_probe() -> None:
    sampler = _mod("host_sampler")
    assert len(sampler.cpu_jiffies()) == len(sampler.FIELDS)
    assert sampler.probe_ms(20_000) > 0


def test_on_the_h200_the_host_time_moved_with_no_steal(tmp_path: Path) -> None:
    steal = _mod("host_steal")
    with tarfile.open(ARCHIVE) as t:
        t.extractall(tmp_path, filter="data")
    root = tmp_path / "h200-cross-roundhoststart"
    out = tmp_path / "got.json"
    assert steal.main([str(root / "vllm-naive-c1"), str(root / "vllm-twostart-c1"),
                       "--csv", str(root / "host-cpu.csv"),
                       "--csv", str(root / "host-cpu-twostart.csv"), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert len(got["trials"]) == 12 and all(r["sampler_rows"] >= 5 for r in got["trials"])
    assert got["steal_share_all"] < 1e-3
    assert all(r["cpu_steal_share"] < 1e-3 for r in got["trials"])
    spec = [r for r in got["trials"] if "synth" in r["cell"]]
    host = [r["host_ms_per_token"] for r in spec]
    assert max(host) / min(host) > 1.8  # 1.92-3.90 ms on one machine, steal ~0
    published = json.loads((ROOT / "benchmarks" / "results" / "host-cpu-h200.json").read_text())
    assert published["trials"] == got["trials"]  # the published file is re-derived
