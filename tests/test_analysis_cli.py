"""`crossbench analyze` and `crossbench compare`: the JSON contract, the files written, exact
user-facing texts, and real H200 run directories from the repository."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study

from crossbench.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "benchmarks" / "results" / "h200-smoke-20261129" / "runs.tar.gz"
PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(9)]
ACC = {"drafts": 900, "draft_tokens": 1800, "accepted": 1200, "per_position": [700, 500]}


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rate(arm, pid, trial, occ):
    return 100.0 if arm.n is None else 100.0 + 10 * arm.n + int(pid[1:])


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC),
                         Arm("dft", "draft-simple", 3, acceptance=ACC)], rate, trials=2)
    return out


def test_analyze_json_contract(sweep_dir):
    r = invoke("analyze", str(sweep_dir), "--json", "--resamples", "500")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj == json.loads((sweep_dir / "analysis.json").read_text())
    assert obj["schema_version"] == 16
    assert {"pairs", "sweeps", "stability", "cells"} <= set(obj)
    assert len(obj["pairs"]) == 2
    pair = obj["pairs"][0]
    assert {"model", "engine", "method", "n", "arm", "workload", "concurrency", "cell",
            "baseline_cell", "baseline_tok_s", "spec_tok_s", "speedup", "speedup_e2e",
            "verdict", "acceptance", "per_category", "parity", "warnings"} <= set(pair)
    for key in ("speedup", "speedup_e2e"):
        assert {"geomean", "median", "ci95", "net_loss_share", "n_samples"} <= set(pair[key])
        assert len(pair[key]["ci95"]) == 2
    assert pair["verdict"] in {"faster", "slower", "indistinguishable", "too few samples"}
    assert {"draft_acceptance_rate", "mean_acceptance_length", "per_position"} <= set(
        pair["acceptance"])
    assert pair["acceptance"]["draft_acceptance_rate"] == pytest.approx(1200 / 1800)
    assert pair["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + 1200 / 900)
    assert set(pair["per_category"]) == {"code", "math", "poem"}
    (sw,) = obj["sweeps"]
    assert {"points", "best", "cost_model"} <= set(sw)
    assert {"n", "ci95", "distinguishable", "neighbours"} <= set(sw["best"])
    assert {"d", "v", "r2", "predicted"} <= set(sw["cost_model"])
    for w in obj["stability"]:
        assert {"kind", "message", "action"} <= set(w)


def test_analyze_writes_tables_and_prints_the_verdict_table(sweep_dir):
    r = invoke("analyze", str(sweep_dir), "--resamples", "500")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    # no engine-reported rates in a synthetic study: those columns are left out
    assert lines[0].split() == ["cell", "baseline", "tok/s", "spec", "tok/s", "speedup", "ci",
                                "verdict", "e2e", "speedup", "e2e", "ci", "samples",
                                "acceptance", "MAL", "parity"]
    assert lines[1].split()[0] == "synthetic/synthetic-model/dft/n2/synthetic/c1"
    assert lines[1].split()[3] == "1.240"
    assert "faster" in lines[1]
    names = sorted(p.name for p in (sweep_dir / "analysis").iterdir())
    assert names == sorted(f"{t}.{ext}" for t in ("verdicts", "cells", "per_category",
                                                  "sweeps", "warnings")
                           for ext in ("md", "csv"))
    csv_head = (sweep_dir / "analysis" / "verdicts.csv").read_text().splitlines()[0]
    assert csv_head.startswith("cell,model,method,n,baseline tok/s,spec tok/s,"
                               "baseline tok/s (engine),spec tok/s (engine),speedup,ci,")
    assert r.stderr == (f"crossbench: wrote {sweep_dir / 'analysis.json'} and tables in "
                        f"{sweep_dir / 'analysis'}\n")


def test_single_run_dir_gives_cell_figures_without_pairs(sweep_dir, tmp_path):
    cell = next((sweep_dir / "cells").glob("*none*"))
    single = tmp_path / "single"
    shutil.copytree(cell, single)
    r = invoke("analyze", str(single), "--json")
    obj = json.loads(r.stdout)
    assert obj["pairs"] == [] and obj["sweeps"] == []
    assert obj["run"]["kind"] == "run"
    assert obj["cells"][0]["throughput"]["pooled_tok_s"] == pytest.approx(100.0)


def test_user_errors_are_one_line(tmp_path):
    r = invoke("analyze", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {tmp_path} is not a run directory (no state.json "
                        "or manifest.json) (fix: point RUN_DIR at the --out of `crossbench "
                        "matrix`, `crossbench run` or `crossbench import`)\n")
    r = invoke("analyze", str(tmp_path), "--level", "95")
    assert r.stderr == ("crossbench: error: --level 95.0 is not a confidence level (fix: give "
                        "a fraction such as 0.95 (not a percentage))\n")
    r = invoke("compare", str(tmp_path), str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"crossbench: error: {tmp_path} is not a run directory or "
                               "DIR:CELL_ID (fix: ")


def test_compare_labels_what_differs(sweep_dir, tmp_path):
    a = f"{sweep_dir}:synthetic/synthetic-model/dft/n2/synthetic/c1"
    b = f"{sweep_dir}:synthetic/synthetic-model/dft/n3/synthetic/c1"
    r = invoke("compare", a, b, "--resamples", "500")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[2:5] == ["comparison: single-variable (spec settings only)",
                          "differing settings (A -> B), each with its class:",
                          "  [intended] spec.n: 2 -> 3"]
    # another study that also changes max_tokens: multi-variable
    other = tmp_path / "other"
    study(other, PROMPTS, [Arm("none")], rate, trials=2, load={"max_tokens": 32})
    r = invoke("compare", f"{sweep_dir}:synthetic/synthetic-model/none/synthetic/c1",
               f"{other}:synthetic/synthetic-model/none/synthetic/c1", "--json")
    obj = json.loads(r.stdout)
    assert obj["label"] == "multi-variable"
    assert obj["verdict"] == "confounded" and obj["statistical_verdict"] != "confounded"
    assert [(d["field"], d["kind"]) for d in obj["differences"]] == [
        ("load.max_tokens", "confounding")]
    assert obj["differences"][0]["spec"] is False
    r = invoke("compare", str(sweep_dir), a)
    assert r.stderr == (f"crossbench: error: {sweep_dir} holds several cells (fix: name one "
                        f"as {sweep_dir}:CELL_ID (see its state.json or `crossbench status`))\n")


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("h200")
    with tarfile.open(H200) as tar:
        tar.extractall(out, filter="data")
    return out / "runs"


def test_real_h200_runs_compare_and_analyze(h200):
    r = invoke("compare", str(h200 / "base"), str(h200 / "draft"), "--json")
    obj = json.loads(r.stdout)
    assert obj["label"] == "single-variable (spec settings only)"
    assert {d["field"]: d["kind"] for d in obj["differences"]} == {
        "spec.type": "intended", "spec.n": "intended", "spec.draft_model": "intended",
        **{k: "intended" for k in (d["field"] for d in obj["differences"])
           if k.startswith("draft.")}}
    assert obj["speedup"]["n_samples"] == 48 and obj["speedup"]["n_prompts"] == 16
    # the fixture draft is 64 % accepted yet slower on the H200 (benchmarks/results)
    assert obj["verdict"] == "slower"
    assert obj["speedup"]["ci95"][1] < 1.0
    base = json.loads(invoke("analyze", str(h200 / "base"), "--json").stdout)
    summary = json.loads((h200 / "base" / "summary.json").read_text())
    assert base["cells"][0]["throughput"]["pooled_tok_s"] == pytest.approx(
        summary["throughput"]["pooled_tok_s"])
    draft = json.loads(invoke("analyze", str(h200 / "draft"), "--json").stdout)
    acc, stored = draft["cells"][0]["acceptance"], json.loads(
        (h200 / "draft" / "summary.json").read_text())["acceptance"]
    for key in ("draft_acceptance_rate", "mean_acceptance_length", "per_position"):
        assert acc[key] == pytest.approx(stored[key])


def test_analyze_prints_the_engines_side_by_side_for_a_run_of_two(tmp_path: Path) -> None:
    """The 2026-12-01 draft-model study holds one arm in llama.cpp and vLLM at n = 2 and 4:
    `analyze` ends its table with one line each, the step and plain-step ratios with
    Welch's interval (crossbench.analysis.step_cost); a run of one engine prints no such
    block."""
    import zipfile

    from crossbench.analysis.step_cost import across_engines

    with zipfile.ZipFile(REPO / "examples/h200-cross/round1/h200-cross-round1.zip") as z:
        z.extractall(tmp_path)
    run = tmp_path / "h200-cross-round1" / "data"
    r = invoke("analyze", str(run), "--resamples", "300")
    assert r.exit_code == 0, r.output
    block = r.output[r.output.index("across engines (multi-variable"):]
    obj = json.loads((run / "analysis.json").read_text())
    groups = across_engines(obj, 0.95)
    assert len(groups) == 2
    for g in groups:
        (ratio,) = g["ratios"]
        step = ratio["figures"]["step_ms"]
        assert (f"  synth-a0.9 n={g['n']} c=1: vllm / llama step {step['ratio']:.3f} "
                f"[{step['ci'][0]:.3f}, {step['ci'][1]:.3f}]") in block
    one = tmp_path / "one"
    study(one, PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)], rate)
    assert "across engines" not in invoke("analyze", str(one)).output
