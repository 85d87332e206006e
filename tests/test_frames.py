"""crossbench.open_run and crossbench export, against studies with known figures.

The frames must hold exactly the documented columns and the same numbers the analysis holds;
the exports must carry the units; the vLLM bench export must read back through crossbench's
own vLLM bench importer with the same per-request timing and acceptance counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study
from standins.vllm import write_launcher

import crossbench
from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import CellData, load_run
from crossbench.analysis.summary import request_metrics
from crossbench.cli.main import cli
from crossbench.frames.columns import FRAMES, markdown
from crossbench.importers.vllm_bench import import_vllm_bench
from crossbench.runner.config import RunConfig
from crossbench.runner.single import run

PROMPTS = [(f"p{i}", ("code", "math")[i % 2]) for i in range(10)]
EXAMPLES = Path(__file__).parent.parent / "examples"


def _rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 100.0 * (1.0 + 0.1 * arm.n)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    acc = {"drafts": 400, "draft_tokens": 800, "accepted": 600, "per_position": [350, 250]}
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=acc),
                                    Arm("d", "draft-simple", 4, acceptance={
                                        **acc, "draft_tokens": 1600,
                                        "per_position": [350, 250, 0, 0]})],
          _rate, trials=2)
    return tmp_path / "s"


def test_frames_hold_the_documented_columns_and_the_analysis_numbers(sweep: Path) -> None:
    opts = StatsOptions(resamples=300)
    frames = crossbench.open_run(sweep, opts)
    for name, cols in FRAMES.items():
        df = getattr(frames, name)
        assert list(df.columns) == [c.name for c in cols], name
        key = {"sweeps": "engine", "engines": "arm"}.get(name, "cell")
        assert df.attrs["columns"][key]["unit"] == ""
    req = frames.requests
    assert len(req) == 3 * 10 * 2  # cells x prompts x trials, one send each
    speeds = req.groupby("n", dropna=False)["decode_tok_s"].mean()
    assert speeds[2] == pytest.approx(120.0) and speeds[4] == pytest.approx(140.0)
    assert req["decode_tok_s"].isna().sum() == 0
    assert str(req["trial"].dtype) == "Int64"
    want = analyze(sweep, opts)
    pairs = frames.pairs.set_index("n")
    for p in want["pairs"]:
        row = pairs.loc[p["n"]]
        assert row["speedup"] == pytest.approx(p["speedup"]["geomean"])
        assert [row["speedup_ci_low"], row["speedup_ci_high"]] == pytest.approx(
            p["speedup"]["ci95"])
        assert row["verdict"] == p["verdict"] == "faster"
    assert frames.analysis == want  # the same dict as `analyze --json`
    sw = frames.sweeps
    assert list(sw["n"]) == [2, 4] and sw["best"].tolist() == [False, True]
    trials = frames.trials
    assert len(trials) == 3 * 2 and set(trials["status"]) == {"ok"}
    assert frames.cells.set_index("n").loc[2, "pooled_tok_s"] == pytest.approx(120.0)
    assert frames.engines.empty  # one engine: nothing across engines


def test_the_engines_frame_is_the_reports_across_engines_figures() -> None:
    """A run of two engines (the 2026-12-01 draft-model study): one row per arm and n, each
    ratio and its Welch interval as crossbench.analysis.step_cost gives them."""
    from crossbench.analysis.step_cost import across_engines

    with crossbench.open_run(EXAMPLES / "h200-cross" / "round1" / "h200-cross-round1.zip") as f:
        df, groups = f.engines, across_engines(f.analysis, f.opts.level)
    assert list(df["n"]) == [2, 4] and set(df["engine_b"]) == {"vllm"}
    assert bool(df["own_starts"].all()) and list(df["trials_a"]) == [3, 3]
    for (_, row), g in zip(df.iterrows(), groups, strict=True):
        (r,) = g["ratios"]
        fig = r["figures"]["step_ms"]
        assert row["step_ms_ratio"] == pytest.approx(fig["ratio"])
        assert [row["step_ms_ratio_ci_low"], row["step_ms_ratio_ci_high"]] == pytest.approx(
            fig["ci"])
        assert row["step_ms_b"] / row["step_ms_a"] == pytest.approx(fig["ratio"])


def test_open_run_reads_a_published_archive_and_cleans_up() -> None:
    zpath = EXAMPLES / "h200-synthetic" / "gpu0" / "h200-synthetic-gpu0.zip"
    with crossbench.open_run(zpath) as frames:
        root = frames.root
        assert root.exists()
        assert len(frames.pairs) == 12  # 2 alpha sweeps x 6 n
        assert set(frames.sweeps["arm"]) == {"synth-a0.6", "synth-a0.8"}
        assert frames.requests["warmup"].sum() > 0  # warm-ups are rows, flagged
        assert frames.trials["gpus"].str.startswith("GPU-").all()  # where each trial ran
        assert frames.trials["boot_id"].isna().all()  # recorded only since 2026-12-01
    assert not root.exists()  # the unpacked copy is gone


def test_parquet_and_csv_exports_carry_units(sweep: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    r = CliRunner().invoke(cli, ["export", str(sweep), "--format", "parquet", "--out",
                                 str(tmp_path / "pq")])
    assert r.exit_code == 0, r.output
    table = pq.read_table(tmp_path / "pq" / "requests.parquet")
    field = table.schema.field("decode_tok_s")
    assert field.metadata == {b"unit": b"tokens/s",
                              b"description": b"(output tokens - 1) / decode time"}
    assert table.schema.metadata[b"frame"] == b"requests"
    assert table.num_rows == 60
    back = table.to_pandas()
    assert back["decode_tok_s"].mean() == pytest.approx(
        crossbench.open_run(sweep).requests["decode_tok_s"].mean())
    r = CliRunner().invoke(cli, ["export", str(sweep), "--format", "csv", "--out",
                                 str(tmp_path / "csv")])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "csv").iterdir())
    assert names == [".crossbench-output.json", "cells.csv", "columns.csv", "engines.csv",
                     "pairs.csv", "requests.csv", "sweeps.csv", "trials.csv"]
    header = (tmp_path / "csv" / "columns.csv").read_text().splitlines()
    assert header[0] == "frame,column,unit,description"
    assert 'requests,ttft_ms,ms,"first chunk arrival - send time"' in header


def test_vllm_bench_export_reads_back_through_the_importer(tmp_path: Path) -> None:
    """A real run (the vLLM stand-in, synthetic acceptance, 2 trials) exported as vLLM bench
    JSON and imported again: every request's TTFT, end-to-end latency, token count and
    decode rate, and the acceptance counts, come back."""
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "1",
                            "--standin-prefill-ms", "2")
    cfg = RunConfig.model_validate({
        "engine": "vllm", "trials": 2, "load": {"requests": 4, "max_tokens": 32, "warmup": 1},
        "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B",
                          "spec": {"type": "ngram", "n": 3, "synth_rates": [0.9, 0.6, 0.3]}}})
    run(cfg, tmp_path / "run")
    r = CliRunner().invoke(cli, ["export", str(tmp_path / "run"), "--format", "vllm-bench",
                                 "--out", str(tmp_path / "vb")])
    assert r.exit_code == 0, r.output
    (path,) = (p for p in (tmp_path / "vb").iterdir() if not p.name.startswith("."))
    results = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["trial"] for x in results] == [0, 1]
    assert all(x["completed"] == 4 and len(x["ttfts"]) == 4 for x in results)
    assert 0 < results[0]["spec_decode_acceptance_rate"] <= 100  # a percentage, as vLLM's
    import_vllm_bench([path], tmp_path / "imp")
    (cell,) = load_run(tmp_path / "imp").cells

    def measured(c: CellData) -> list[dict[str, object]]:
        recs = [r for r in c.records if not r.get("warmup")]
        return [request_metrics(r) for r in sorted(recs, key=lambda r: (r["trial"],
                                                                         r["t_sent_ns"]))]

    orig, back = measured(load_run(tmp_path / "run").cells[0]), measured(cell)
    assert len(back) == len(orig) == 8
    for f, g in zip(back, orig, strict=True):
        assert f["tokens"] == g["tokens"]
        for key in ("ttft_ms", "e2e_ms", "decode_ms"):
            assert f[key] == pytest.approx(g[key], abs=1e-3), key
        assert f["rate_tok_s"] == pytest.approx(g["rate_tok_s"], rel=1e-5)
    acc = cell.acceptance
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["acceptance"]
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (
        summary["drafts"], summary["draft_tokens"], summary["accepted_tokens"])


def test_export_errors_are_one_line(tmp_path: Path, sweep: Path) -> None:
    (tmp_path / "f").write_text("x")
    r = CliRunner().invoke(cli, ["export", str(sweep), "--format", "csv", "--out",
                                 str(tmp_path / "f")])
    assert r.exit_code == 2
    assert "--out" in r.output and "is a file" in r.output
    r = CliRunner().invoke(cli, ["export", str(tmp_path), "--format", "csv", "--out",
                                 str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_the_column_reference_in_the_docs_is_current() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "python-api.md").read_text()
    assert markdown() in doc, "regenerate: python -m crossbench.frames.columns"
