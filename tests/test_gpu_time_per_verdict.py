"""benchmarks/gpu_time_per_verdict.py re-derives its published figures from the archived H200
runs (benchmarks/results/gpu-time-per-verdict/h200-runs.tgz and round 1's archive), and its
verdict classes are what the issue defines (a flip is faster <-> slower; a lost verdict is
allowed only inside the equivalence band)."""

from __future__ import annotations

import importlib.util
import json
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_time_per_verdict", ROOT / "benchmarks" / "gpu_time_per_verdict.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("naive", "ours", "band", "want"), [
    ("faster", "faster", 0.05, "same"),
    ("faster", "slower", 0.05, "flipped"),
    ("slower", "faster", 0.05, "flipped"),
    ("indistinguishable", "slower", 0.05, "bolder"),
    ("too few samples", "indistinguishable", 0.05, "same"),
])
def test_verdict_classes(naive: str, ours: str, band: float, want: str) -> None:
    bench = _bench()
    assert bench.classify({"verdict": naive, "speedup": 1.2}, {"verdict": ours}, band) == want


def test_a_lost_verdict_is_allowed_only_inside_the_band() -> None:
    bench = _bench()
    undecided = {"verdict": "indistinguishable"}
    assert bench.classify({"verdict": "faster", "speedup": 1.04}, undecided, 0.05) == \
        "conservative"
    assert bench.classify({"verdict": "faster", "speedup": 1.2}, undecided, 0.05) == "lost"
    assert bench.classify({"verdict": "slower", "speedup": 0.97}, undecided, 0.05) == \
        "conservative"


def test_the_published_figures_are_rederived_from_the_archived_runs(tmp_path: Path) -> None:
    bench = _bench()
    with tarfile.open(RESULTS / "gpu-time-per-verdict" / "h200-runs.tgz") as t:
        t.extractall(tmp_path, filter="data")
    with zipfile.ZipFile(ROOT / "examples" / "h200-cross" / "round1" /
                         "h200-cross-round1.zip") as z:
        z.extractall(tmp_path / "round1")
    runs = tmp_path / "h200-cross-roundverdict"
    out = tmp_path / "got.json"
    assert bench.main(["compute", "--study", "llama", str(runs / "llama-naive"),
                       str(runs / "llama-crossbench"), "--study", "vllm",
                       str(tmp_path / "round1" / "h200-cross-round1" / "data"),
                       str(runs / "vllm-crossbench"), "--out", str(out)]) == 0
    got = json.loads(out.read_text())["studies"]
    published = json.loads((RESULTS / "gpu-time-per-verdict.json").read_text())["studies"]
    for engine in ("llama", "vllm"):
        for key in ("naive_gpu_s", "crossbench_gpu_s", "ratio", "verdicts_total",
                    "verdicts_same", "verdicts_flipped", "verdicts_bolder"):
            assert got[engine][key] == published[engine][key], (engine, key)
        assert got[engine]["verdicts_flipped"] == 0
    # the GPU seconds are the sum of the trials' named phases, and the trial counts add up
    assert got["llama"]["naive"]["trials"] == 39 and got["llama"]["naive"]["starts"] == 39
    assert got["llama"]["crossbench"]["starts"] == 11
    assert got["vllm"]["crossbench"]["starts"] == 3
    checks = got["llama"]["prediction_checks"]
    assert checks["holdouts"] == 2 and checks["holdouts_inside"] == 1


def test_the_planners_best_case_for_the_llama_study_stays_above_the_bar(tmp_path: Path) -> None:
    """benchmarks/README.md quotes `crossbench plan` on the naive llama.cpp study's recorded
    timings: even its best case (every cell settling at 2 of 3 trials) needs 0.56 of the naive
    GPU time, above the issue's 0.3 (the measured crossbench design used 0.544)."""
    from click.testing import CliRunner

    from crossbench.cli.main import cli

    with tarfile.open(RESULTS / "gpu-time-per-verdict" / "h200-runs.tgz") as t:
        t.extractall(tmp_path, filter="data")
    r = CliRunner().invoke(cli, ["plan", str(ROOT / "matrices" / "h200-verdict.yaml"), "--from",
                                 str(tmp_path / "h200-cross-roundverdict" / "llama-naive")])
    assert r.exit_code == 0, r.output
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()
            if len(ln.split()) == 7 and ln.split()[1] == "total"}
    assert {d: rows[d][3] for d in rows} == {
        "naive": "1.00", "reuse": "0.66", "sequential": "0.67", "probe-and-predict": "0.56"}
