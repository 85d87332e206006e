"""The SGLang 0.5.17 live checks on the H200 (benchmarks/results/sglang-live-check/),
re-derived from the archived scrapes and records: the acceptance figures docs/sglang.md quotes
follow from the ``/metrics`` scrapes through crossbench's own analysis, and each run's check
lines are what the docs say. Nothing runs an engine."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from crossbench.analysis import acceptance
from crossbench.engines import registry
from crossbench.engines.prometheus import parse_samples
from crossbench.store import rundir

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "benchmarks" / "results" / "sglang-live-check" / "sglang-h200-2026-12-01.tgz"
NAME = "sglang-h200-2026-12-01"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sglang-live")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(out, filter="data")
    return out / NAME


@pytest.mark.parametrize(("run", "n", "steps", "accepted", "mal"), [
    ("default-n3", 3, 1256, 2824, 3.248),
    ("rerun-n3", 3, 1256, 2824, 3.248),
    ("fp16-n3", 3, 1256, 2824, 3.248),
    ("noradix-n3", 3, 1228, 2852, 3.322),
    ("n1", 1, 2185, 1895, 1.867),
])
def test_acceptance_follows_from_the_archived_scrapes(runs: Path, run: str, n: int, steps: int,
                                                      accepted: int, mal: float) -> None:
    folder = runs / run
    d = acceptance.counter_delta(parse_samples((folder / rundir.CHECK_BEFORE).read_text()),
                                 parse_samples((folder / rundir.CHECK_AFTER).read_text()),
                                 registry.spec_metric_prefix("sglang"))
    records = [json.loads(ln) for ln in (folder / rundir.REQUESTS).read_text().splitlines()]
    acc = acceptance.compute(d, records)
    assert (d.drafts, d.accepted) == (steps, accepted)
    assert acc.mean_acceptance_length is not None
    assert round(acc.mean_acceptance_length, 3) == mal
    # the draft is the target, greedy: every draft should be accepted; SGLang accepted
    # accepted/(steps*n) of them, well below 1 (llama.cpp on the same weights: 1.0)
    assert accepted / (steps * n) < 0.9
    line = next(ln for ln in (folder / "check.txt").read_text().splitlines()
                if ln[5:].startswith("acceptance:"))
    assert f"{steps} verification steps, {accepted} accepted drafts, MAL {mal}" in line
    assert line.startswith("ok   " if n == 1 else "FAIL ")


@pytest.mark.parametrize(("run", "failed"), [
    ("default-n3", ["acceptance"]), ("rerun-n3", ["acceptance"]), ("fp16-n3", ["acceptance"]),
    ("noradix-n3", ["acceptance"]), ("n1", []), ("fp32-n3", ["ready"]),
    ("nograph-n3", ["config"]),
])
def test_each_run_failed_only_the_lines_the_docs_name(runs: Path, run: str,
                                                      failed: list[str]) -> None:
    lines = (runs / run / "check.txt").read_text().splitlines()
    assert [ln[5:].split(":")[0] for ln in lines if ln.startswith("FAIL ")] == failed
    if run in ("default-n3", "rerun-n3", "n1"):
        assert [ln[5:].split(":")[0] for ln in lines if ln.startswith("ok   ")] == [
            "profile", "config", "ready", "server info", "streaming",
            *(["acceptance"] if run == "n1" else []), "per-request meta_info", "stop"]
        assert "STAND-IN" not in "\n".join(lines)
        assert "GPU: released" in lines[-2]


def test_the_install_record_names_the_pack_and_no_secret(runs: Path) -> None:
    rec = json.loads((runs / "install.json").read_text())
    assert (rec["engine"], rec["release"]) == ("sglang", "0.5.17")
    assert set(rec["carried_over_host"]) == {"transformers", "tokenizers"}
    assert set(rec["added_packages"]) == {"dill", "jsonschema"}
    assert "sgl-deep-gemm" in rec["skipped_packages"]  # as it was packed then (runs.txt)
    with tarfile.open(ARCHIVE) as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member)
            text = f.read().decode(errors="replace") if f else ""
            assert not re.search(r"hf_[A-Za-z0-9]{30,}|Bearer [A-Za-z0-9]", text), member.name


def test_the_rerun_used_the_corrected_pack_with_nothing_added_by_hand(runs: Path) -> None:
    pack = json.loads((runs / "rerun-n3" / "pack.json").read_text())
    assert "sgl-deep-gemm" in {w["project"] for w in pack["wheels"]}
    assert "sgl-deep-gemm" not in pack["skipped"]
    install = (runs / "rerun-n3" / "install.log").read_text()
    assert f"{len(pack['parts'])} parts match pack.json" in install
    calls = (runs / "rerun-n3" / "calls.txt").read_text()
    assert [ln.split("kept ")[1].split()[0] for ln in calls.splitlines() if "kept " in ln] == [
        "pack.json", *(p["name"] for p in pack["parts"])]
