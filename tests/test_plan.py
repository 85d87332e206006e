"""`crossbench plan`: each design's GPU time from recorded phases, checked by hand.

Expected values are computed here from the manifests themselves (the round 1 archive read
with zipfile and json, or numbers written into a small run directory), never by the planner's
own functions."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from crossbench.cli.main import cli
from crossbench.runner.matrix import expand, load_matrix
from crossbench.runner.plan import PlanOptions, hms, make_plan, probe_selection, read_recorded

ROOT = Path(__file__).resolve().parent.parent
ROUND1 = ROOT / "examples" / "h200-cross" / "round1" / "h200-cross-round1.zip"

# one recorded llama-server trial, by hand: 2 + 1 + 0.5 + 0.5 + 4 = 8 named, total 10: other 2
PHASES = {"startup": 2.0, "stop": 1.0, "warmup": 0.5, "scrape_write": 0.5, "measured": 4.0,
          "total": 10.0}
LOAD = {"requests": 2, "max_tokens": 100, "warmup": 1, "warmup_max_tokens": 10,
        "concurrency": 1}  # 200 tokens in 4 s: 50 tok/s

MATRIX: dict[str, Any] = {
    "schema_version": 1,
    "study": {"name": "p"},
    "engines": {"llama": {"kind": "llama-server"}},
    "models": {"tgt": {"path": "fixture:target", "quant": "F16", "role": "target"},
               "dft": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
    "load": {k: v for k, v in LOAD.items() if k != "concurrency"},
    "arms": [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": "1-8"}],
    "axes": {"engine": ["llama"], "target": ["tgt"], "concurrency": 1},
    "trials": 3,
}


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["plan", *args], catch_exceptions=False)


def write_matrix(tmp_path: Path, data: dict[str, Any], name: str = "m.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def write_run(tmp_path: Path, phases: list[dict[str, Any] | None],
              engine: str = "llama-server", status: str = "ok") -> Path:
    """A single run directory whose trials carry ``phases`` (None: no phase_s)."""
    d = tmp_path / "run"
    d.mkdir()
    trials = [{"trial": i, "status": status, **({"phase_s": p} if p is not None else {})}
              for i, p in enumerate(phases)]
    (d / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "kind": "crossbench.run",
        "config": {"engine": engine, "load": LOAD, "trials": len(trials),
                   "engine_config": {"model": "m.gguf", "spec": {"type": "none"}}},
        "trials": trials}))
    return d


def plan_json(*args: str) -> dict[str, Any]:
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def row(plan: dict[str, Any], design: str, engine: str = "total") -> dict[str, Any]:
    return next(r for r in plan["designs"] if (r["design"], r["engine"]) == (design, engine))


# -- a run directory written by hand ------------------------------------------------------------

def test_every_design_by_hand(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, MATRIX)  # 1 baseline + 8 n = 9 cells x 3 trials
    plan = plan_json(str(m), "--from", str(run))
    # per start: start-up 2 + stop 1 + other 2 = 5 s; per trial: warm-up 0.5 + scrapes 0.5 +
    # 200 tokens at 50 tok/s = 5 s
    assert row(plan, "naive")["gpu_s"] == pytest.approx(27 * 10)
    assert row(plan, "naive")["server_starts"] == 27
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(9 * 5 + 27 * 5)
    assert row(plan, "reuse")["server_starts"] == 9
    # 2 of 3 trials, each on its own start (the runner refuses sequential with reuse)
    assert row(plan, "sequential")["gpu_s"] == pytest.approx(18 * 5 + 18 * 5)
    assert (row(plan, "sequential")["trials"], row(plan, "sequential")["server_starts"]) == \
        (18, 18)
    # the sweep n=1..8: probes n=1, 5, 8 (positions 0, 3.5 rounded up, 7), 2 follow-ups,
    # 3 n predicted: 6 cells measured of 9, on top of reuse (180 s, as cheap as sequential)
    probe = row(plan, "probe-and-predict")
    assert probe["cells"] == 6
    assert probe["gpu_s"] == pytest.approx(6 * (5 + 3 * 5))
    assert probe["ratio_to_naive"] == pytest.approx(120 / 270)
    assert any("on top of reuse, the cheaper of reuse and sequential" in a
               for a in plan["assumptions"])
    t = plan["timings"]["llama-server"]
    assert [t[k]["value"] for k in ("startup_s", "stop_s", "other_s", "warmup_s",
                                    "scrapes_s")] == pytest.approx([2, 1, 2, 0.5, 0.5])
    assert t["decode_tok_s"]["1"]["value"] == pytest.approx(50)
    assert all(t[k]["measured"] for k in ("startup_s", "stop_s", "other_s", "warmup_s"))


def test_block_and_expected_trials(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, {**MATRIX, "trials": 4})
    plan = plan_json(str(m), "--from", str(run), "--block", "3",
                     "--expected-trials-fraction", "0.75", "--follow-ups", "0")
    assert row(plan, "reuse")["server_starts"] == 9 * 2  # 4 trials in blocks of 3
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(18 * 5 + 36 * 5)
    # 2 blocks of 3 give min_trials = 2 server starts: the rule looks once per start, so a
    # cell runs whole blocks, here both (nothing to save over reuse)
    assert (row(plan, "sequential")["trials"], row(plan, "sequential")["server_starts"]) == \
        (36, 18)
    assert row(plan, "sequential")["gpu_s"] == pytest.approx(18 * 5 + 36 * 5)
    fresh = plan_json(str(m), "--from", str(run), "--block", "1",
                      "--expected-trials-fraction", "0.75")
    assert row(fresh, "sequential")["trials"] == 27  # 3 of 4 expected, one start each
    assert row(fresh, "sequential")["gpu_s"] == pytest.approx(27 * 5 + 27 * 5)
    assert row(plan, "probe-and-predict")["cells"] == 4  # baseline + n=1, 5, 8


def test_decode_time_scales_with_the_requested_tokens(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES])
    m = write_matrix(tmp_path, {**MATRIX, "load": {**MATRIX["load"], "max_tokens": 300}})
    plan = plan_json(str(m), "--from", str(run))
    # 2 x 300 tokens at 50 tok/s: 12 s measured instead of 4
    assert row(plan, "naive")["gpu_s"] == pytest.approx(27 * (10 + 8))


def test_median_statistic(tmp_path: Path) -> None:
    slow = {**PHASES, "startup": 32.0, "total": 40.0}
    run = write_run(tmp_path, [PHASES, PHASES, slow])
    m = write_matrix(tmp_path, MATRIX)
    assert row(plan_json(str(m), "--from", str(run)), "naive")["gpu_s"] == \
        pytest.approx(27 * 20)  # mean start-up 12 s
    median = plan_json(str(m), "--from", str(run), "--statistic", "median")
    assert row(median, "naive")["gpu_s"] == pytest.approx(27 * 10)


def test_probe_selection_keeps_baselines_and_small_sweeps(tmp_path: Path) -> None:
    data = {**MATRIX, "arms": [{"method": "none"},
                               {"name": "a", "method": "draft-simple", "draft": "dft",
                                "n": "1-6"},
                               {"name": "b", "method": "draft-simple", "draft": "dft",
                                "n": [2, 4]},
                               {"name": "c", "method": "ngram-mod"}],
            "axes": {**MATRIX["axes"], "concurrency": [1, 4]}}
    path = write_matrix(tmp_path, data)
    cells = expand(load_matrix(path), path)
    measured, probes, follow = probe_selection(cells, probes=3, follow_ups=1)
    assert (probes, follow) == (6, 2)  # sweep a at c1 and c4: n=1, 4, 6 (+ one follow-up)
    assert len(cells) - len(measured) == 4  # of n=2, 3, 5 one is a follow-up, per sweep
    for c in cells:
        if c.coords["arm"] != "a" or c.coords["n"] in (1, 4, 6):
            assert c.id in measured  # baselines, the small sweep b, ngram-mod and the probes


# -- the recorded round 1 on an H200 ----------------------------------------------------------

ROUND1_MATRIX: dict[str, Any] = {
    "schema_version": 1,
    "study": {"name": "round1"},
    "engines": {"llama": {"kind": "llama-server"}, "vllm": {"kind": "vllm"}},
    "models": {"t8b-f16": {"path": "fixture:qwen3-8b/target", "quant": "F16", "role": "target",
                           "engines": ["llama"]},
               "t8b-hf": {"path": "fixture:qwen3-8b/target@hf", "quant": "F16",
                          "role": "target", "engines": ["vllm"]},
               "d06b-f16": {"path": "fixture:qwen3-8b/draft", "quant": "F16", "role": "draft",
                            "engines": ["llama"]},
               "d06b-hf": {"path": "fixture:qwen3-8b/draft@hf", "quant": "F16",
                           "role": "draft", "engines": ["vllm"]}},
    "load": {"requests": 3, "warmup": 1, "warmup_max_tokens": 32, "max_tokens": 512},
    "arms": [{"method": "none"},
             {"name": "synth-a0.9", "method": "draft-simple", "draft": "d06b-f16",
              "n": [2, 4], "synth_alpha": 0.9, "engines": ["llama"]},
             {"name": "synth-a0.9", "method": "draft_model", "draft": "d06b-hf", "n": [2, 4],
              "synth_alpha": 0.9, "engines": ["vllm"]}],
    "axes": {"engine": ["llama", "vllm"], "target": ["t8b-f16", "t8b-hf"], "concurrency": 1},
    "trials": 3,
}
"""The cells round 1 ran: both engines' baselines and alpha 0.9 at n=2 and 4, 3 trials."""


def round1_phases() -> dict[str, list[dict[str, float]]]:
    """Every trial's phase_s by engine id, read straight from the archive's manifests."""
    out: dict[str, list[dict[str, float]]] = {"llama": [], "vllm": []}
    with zipfile.ZipFile(ROUND1) as z:
        for name in z.namelist():
            if name.endswith("/manifest.json") and "/cells/" in name:
                manifest = json.loads(z.read(name))
                engine = name.split("/cells/")[1].split("__")[0]
                out[engine] += [t["phase_s"] for t in manifest["trials"]
                                if t["status"] == "ok"]
    return out


@pytest.fixture(scope="module")
def round1_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    m = write_matrix(tmp_path_factory.mktemp("r1"), ROUND1_MATRIX)
    return plan_json(str(m), "--from", str(ROUND1))


def test_round1_naive_is_the_recorded_total(round1_plan: dict[str, Any]) -> None:
    phases = round1_phases()
    assert [len(v) for v in phases.values()] == [9, 9]
    for engine, trials in phases.items():
        assert row(round1_plan, "naive", engine)["gpu_s"] == \
            pytest.approx(sum(t["total"] for t in trials), rel=1e-9)
    assert row(round1_plan, "naive")["gpu_s"] == pytest.approx(
        sum(t["total"] for v in phases.values() for t in v), rel=1e-9)
    assert row(round1_plan, "naive")["server_starts"] == 18
    assert not [n for n in round1_plan["notes"] if "was not measured" in n]  # same targets


def test_round1_reuse_and_sequential(round1_plan: dict[str, Any]) -> None:
    for engine, trials in round1_phases().items():
        per_trial = [t["warmup"] + t["scrape_write"] + t["measured"] for t in trials]
        per_start = [t["total"] - p for t, p in zip(trials, per_trial, strict=True)]
        # 3 cells: reuse starts 3 servers for 9 trials, sequential 6 servers for 6 trials
        mean_start, mean_trial = sum(per_start) / 9, sum(per_trial) / 9
        assert row(round1_plan, "reuse", engine)["gpu_s"] == \
            pytest.approx(3 * mean_start + 9 * mean_trial, rel=1e-9)
        assert row(round1_plan, "sequential", engine)["gpu_s"] == \
            pytest.approx(6 * mean_start + 6 * mean_trial, rel=1e-9)
    # sweeps of two n are measured whole: nothing to predict; on top of the cheaper design
    # for the whole matrix
    cheaper = min(("reuse", "sequential"), key=lambda d: row(round1_plan, d)["gpu_s"])
    for engine in [*round1_phases(), "total"]:
        assert row(round1_plan, "probe-and-predict", engine)["gpu_s"] == \
            row(round1_plan, cheaper, engine)["gpu_s"]
    vllm = round1_plan["timings"]["vllm"]
    assert vllm["startup_s"]["value"] == pytest.approx(
        sum(t["startup"] for t in round1_phases()["vllm"]) / 9)
    assert vllm["startup_s"]["source"] == f"measured: mean of 9 trials in {ROUND1}"


# -- fallbacks and refusals -------------------------------------------------------------------

def test_engine_missing_from_the_run_falls_back_with_a_note(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES])
    data = {**MATRIX, "engines": {"llama": {"kind": "llama-server"}, "vllm": {"kind": "vllm"}},
            "arms": [{"method": "none"}], "axes": {**MATRIX["axes"],
                                                  "engine": ["llama", "vllm"]},
            "estimate_tok_s": 100}
    m = write_matrix(tmp_path, data)
    plan = plan_json(str(m), "--from", str(run))
    # vllm: 120 s registered start-up; 10 warm-up tokens + 200 tokens at 100 tok/s
    assert row(plan, "naive", "vllm")["gpu_s"] == pytest.approx(3 * (120 + 0.1 + 2))
    assert row(plan, "naive", "llama")["gpu_s"] == pytest.approx(3 * 10)
    v = plan["timings"]["vllm"]
    assert not any(v[k]["measured"] for k in ("startup_s", "stop_s", "warmup_s"))
    assert v["startup_s"]["source"] == ("assumed: vllm's registered start-up figure (120 s), "
                                        "not a measurement")
    assert f"engine vllm: no trial of it in {run}; its figures are assumed (registered " \
           "start-up, estimate_tok_s)" in plan["notes"]
    text = invoke(str(m), "--from", str(run)).stdout
    assert "  vllm: per server start: start-up 120.0 s A + stop 0.0 s A + other 0.0 s A; " \
           "per trial: warm-up 0.1 s A + scrapes 0.0 s A + decode (100 tok/s A " \
           "(estimate_tok_s))" in text
    assert "  - vllm: start-up, stop, other, warm-up, scrapes, decode rate assumed, not " \
           "measured (see timings)" in text


def test_without_a_run_every_figure_is_assumed(tmp_path: Path) -> None:
    m = write_matrix(tmp_path, {**MATRIX, "estimate_tok_s": 50})
    r = invoke(str(m), "--startup", "llama-server=7")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:3] == [
        f"plan for {m} (study p): 9 cells x 3 trials",
        "design             engine         GPU time vs naive  starts  trials  cells",
        "naive              llama           0:05:02     1.00      27      27      9"]
    # 7 s start-up + 10 warm-up tokens and 200 tokens at 50 tok/s = 11.2 s a trial
    assert row(plan_json(str(m), "--startup", "llama-server=7"), "naive")["gpu_s"] == \
        pytest.approx(27 * 11.2)
    assert " M" not in r.stdout.split("timings per engine kind")[1].split("assumptions:")[0]
    assert "assumed: --startup llama-server=7" in r.stdout


def test_run_without_phases_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path, [None, None])
    m = write_matrix(tmp_path, MATRIX)
    r = invoke(str(m), "--from", str(run))
    assert r.exit_code == 2
    assert r.stderr.splitlines()[-1] == (
        f"crossbench: error: {run} records no per-trial phases (phase_s) in a finished "
        "trial: nothing in it measures start-up or decode time (fix: pass a run or archive "
        "made by `crossbench matrix` or `crossbench run` (imports record no phases), or leave "
        "out --from to plan from the matrix's estimate_tok_s (assumed figures))")


def test_failed_trials_are_left_out_with_a_note(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES])
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["trials"].append({"trial": 1, "status": "failed", "phase_s": {"startup": 900.0}})
    (run / "manifest.json").write_text(json.dumps(manifest))
    plan = plan_json(str(write_matrix(tmp_path, MATRIX)), "--from", str(run))
    assert row(plan, "naive")["gpu_s"] == pytest.approx(270)
    assert "1 failed or unfinished trial(s) in the runs left out" in plan["notes"]


def test_no_estimate_and_no_run_names_the_field(tmp_path: Path) -> None:
    r = invoke(str(write_matrix(tmp_path, MATRIX)))
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: nothing measured engine llama-server and the "
                        "matrix has no estimate_tok_s (fix: pass --from RUN with trials of "
                        "llama-server (a run or archive of `crossbench matrix`), or set "
                        "estimate_tok_s in the matrix)\n")


def test_bad_matrix_names_the_field(tmp_path: Path) -> None:
    m = write_matrix(tmp_path, {**MATRIX, "trials": 0})
    r = invoke(str(m))
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {m}: trials: Input should be greater than or "
                        "equal to 1 (fix: fix `trials`)\n")
    m = write_matrix(tmp_path, {**MATRIX, "load": {"requests": 0}}, "load.yaml")
    r = invoke(str(m), "--startup", "llama-server=1")
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: load.requests: Input should be greater than or "
                        "equal to 1 (fix: fix `load.requests`)\n")


def test_bad_startup_option(tmp_path: Path) -> None:
    r = invoke(str(write_matrix(tmp_path, MATRIX)), "--startup", "vllm")
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --startup 'vllm' is not KIND=SECONDS (fix: write "
                        "e.g. --startup vllm=90 (seconds from launch until ready))\n")


def test_hms() -> None:
    assert [hms(x) for x in (0, 59.5, 3725.4, 36000)] == ["0:00:00", "0:01:00", "1:02:05",
                                                           "10:00:00"]


def test_read_recorded_pools_runs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_run(tmp_path / "a", [PHASES])
    b = write_run(tmp_path / "b", [{**PHASES, "startup": 4.0, "total": 12.0}])
    rec = read_recorded([a, b])
    assert [t.startup_s for t in rec.trials["llama-server"]] == [2.0, 4.0]
    path = write_matrix(tmp_path, MATRIX)
    m = load_matrix(path)
    plan = make_plan(m, expand(m, path), rec, PlanOptions())
    assert plan.timings["llama-server"].startup.value == pytest.approx(3.0)


def test_damaged_phases_are_left_out(tmp_path: Path) -> None:
    bad = [{**PHASES, "measured": float("nan")}, {**PHASES, "total": -1},
           {**PHASES, "warmup": "0.5"}, {**PHASES, "measured": 0}]
    run = write_run(tmp_path, [PHASES, *bad])
    plan = plan_json(str(write_matrix(tmp_path, MATRIX)), "--from", str(run))
    assert row(plan, "naive")["gpu_s"] == pytest.approx(270)  # the one good trial alone
    assert "4 finished trial(s) without phases left out" in plan["notes"]


def test_unmeasured_concurrency_takes_the_rate_below_with_a_note(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES])
    m = write_matrix(tmp_path, {**MATRIX, "arms": [{"method": "none"}],
                                "axes": {**MATRIX["axes"], "concurrency": [1, 4]}})
    plan = plan_json(str(m), "--from", str(run))
    assert row(plan, "naive")["gpu_s"] == pytest.approx(2 * 3 * 10)
    assert plan["notes"][0] == (
        "llama-server at concurrency 4: assumed the rate measured at concurrency 1 (no trial "
        "at 4); more requests in flight usually decode faster, so this over-counts")


def test_sequential_on_reused_servers_counts_whole_starts(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, {**MATRIX, "trials": 6})
    plan = plan_json(str(m), "--from", str(run), "--block", "2")
    # 3 starts of 2 trials per cell; best case: settled after min_trials = 2 starts
    seq = row(plan, "sequential")
    assert (seq["trials"], seq["server_starts"]) == (9 * 4, 9 * 2)
    assert seq["gpu_s"] == pytest.approx(18 * 5 + 36 * 5)
    assert any("server starts of 2 trials (the rule looks once per start)" in a
               for a in plan["assumptions"])


def test_defaults_come_from_the_matrix_reuse_and_sequential_sections(tmp_path: Path) -> None:
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, {**MATRIX, "trials": 8, "trials_per_start": 2,
                                "sequential": {"min_trials": 3}})
    plan = plan_json(str(m), "--from", str(run))
    assert row(plan, "reuse")["server_starts"] == 9 * 4  # the matrix's blocks of 2
    seq = row(plan, "sequential")
    assert (seq["server_starts"], seq["trials"]) == (9 * 3, 9 * 6)  # min_trials 3 starts


def test_shared_servers_pay_one_start_per_group(tmp_path: Path) -> None:
    """Concurrency 1 and 2 of the same 9 servers: 18 cells, 9 server groups. Naive still
    starts every trial; reuse with shared servers starts each group once (not each cell);
    sequential starts each group once per trial; the matrix's share_servers is the default
    and --no-share-servers turns it off."""
    run = write_run(tmp_path, [PHASES] * 3)  # measured at c1 only: c2 takes c1's rate (noted)
    data = {**MATRIX, "axes": {**MATRIX["axes"], "concurrency": [1, 2]},
            "share_servers": True}
    m = write_matrix(tmp_path, data)
    plan = plan_json(str(m), "--from", str(run))
    # per start 5 s, per trial 5 s (module constants above)
    assert row(plan, "naive")["server_starts"] == 54
    assert row(plan, "naive")["gpu_s"] == pytest.approx(54 * 10)
    assert row(plan, "reuse")["server_starts"] == 9
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(9 * 5 + 54 * 5)
    assert row(plan, "sequential")["server_starts"] == 9 * 2
    assert row(plan, "sequential")["gpu_s"] == pytest.approx(18 * 5 + 36 * 5)
    # probe-and-predict: 6 servers of 9 measured (baseline, 3 probes, 2 follow-ups), both
    # concurrency levels on each start, on top of sequential (270 s, cheaper than reuse's
    # 315 s): 2 starts per group, 2 trials per cell
    probe = row(plan, "probe-and-predict")
    assert (probe["cells"], probe["server_starts"], probe["trials"]) == (12, 12, 24)
    assert probe["gpu_s"] == pytest.approx(12 * 5 + 24 * 5)
    assert any("18 cells form 9 server group(s)" in a for a in plan["assumptions"])
    # what `crossbench matrix` runs: the groups share a start in each of the 3 rounds (the
    # matrix keeps one trial a start), 27 starts, not reuse's 9
    assert plan["matrix_design"] == {
        "design": "reuse at 1 trial(s) a start", "engine": "total",
        "gpu_s": pytest.approx(27 * 5 + 54 * 5), "ratio_to_naive": pytest.approx(405 / 540),
        "server_starts": 27, "trials": 54, "cells": 18}
    apart = plan_json(str(m), "--from", str(run), "--no-share-servers")
    assert row(apart, "reuse")["server_starts"] == 18
    assert row(apart, "reuse")["gpu_s"] == pytest.approx(18 * 5 + 54 * 5)
    assert not any("server group" in a for a in apart["assumptions"])
    assert apart["matrix_design"] is None  # planned otherwise than the matrix runs
    text = CliRunner().invoke(cli, ["plan", str(m), "--from", str(run)]).output
    assert ("crossbench matrix runs it as reuse at 1 trial(s) a start: 0:06:45 of GPU time, 27 "
            "server starts (machine setup, builds and transfers not counted)") in text


def test_the_matrix_design_is_the_row_it_runs(tmp_path: Path) -> None:
    """A fresh start per trial is naive; trials_per_start 2 of 4 is reuse at its block; a
    sequential matrix is the sequential row."""
    run = write_run(tmp_path, [PHASES] * 3)
    naive = plan_json(str(write_matrix(tmp_path, {**MATRIX, "trials": 4})), "--from", str(run))
    assert naive["matrix_design"] == row(naive, "naive")
    two = plan_json(str(write_matrix(tmp_path, {**MATRIX, "trials": 4, "trials_per_start": 2})),
                    "--from", str(run))
    assert two["matrix_design"] == row(two, "reuse") and row(two, "reuse")["server_starts"] \
        == 2 * row(two, "reuse")["cells"]


def test_a_reuse_design_of_one_start_per_cell_says_its_verdicts_are_marked(
        tmp_path: Path) -> None:
    """The default reuse block is all of a cell's trials: one start per cell, whose verdicts
    the analysis marks single_start; the note names the block that gives several starts,
    and a block that gives several raises no such note."""
    run = write_run(tmp_path, [PHASES] * 3)
    m = str(write_matrix(tmp_path, {**MATRIX, "trials": 4}))
    plan = plan_json(m, "--from", str(run))
    assert ("reuse keeps one server start per cell (4 of 4 trials per start): its verdicts "
            "carry the analysis's single_start warning, since an interval over one start "
            "leaves out start-to-start variation; --block 2 costs a design of 2 starts per "
            "cell; or analyse with a known start spread (`crossbench analyze RUN "
            "--start-spread FILE`), whose interval covers the starts") in plan["notes"]
    assert not [n for n in plan_json(m, "--from", str(run), "--block", "2")["notes"]
                if "single_start" in n]


def test_a_known_start_spread_lets_sequential_stop_on_the_first_start(tmp_path: Path) -> None:
    """With start_spread the rule looks after every trial: 5 prompts a trial reach
    min_samples 10 at trial 2, so the best case is 2 trials on the first of two starts."""
    from crossbench.analysis.start_spread import Spread, StartSpread

    StartSpread((Spread("llama-server", "baseline", 0.016, 7, 2, 9),
                 Spread("llama-server", "draft-simple", 0.057, 24, 6, 30)), ()).save(
        tmp_path / "spread.json")
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, {**MATRIX, "trials": 6, "trials_per_start": 3,
                                "load": {**MATRIX["load"], "requests": 5},
                                "start_spread": "spread.json",
                                "sequential": {"min_trials": 1}})
    plan = plan_json(str(m), "--from", str(run))
    # per start 5 s; per trial 0.5 + 0.5 + 500 tokens at 50 tok/s = 11 s
    seq = row(plan, "sequential")
    assert (seq["trials"], seq["server_starts"]) == (9 * 2, 9 * 1)
    assert seq["gpu_s"] == pytest.approx(9 * (5 + 2 * 11))
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(9 * (2 * 5 + 6 * 11))
    assert any(a.startswith("sequential with the matrix's known start spread: a look after "
                            "every trial; best case, every cell settles at its first look "
                            "(min_trials 1, min_samples 10): 2 of 6 trials on 1 start(s)")
               for a in plan["assumptions"])


def test_looks_inside_a_trial_cost_the_requests_a_settled_cell_sends(tmp_path: Path) -> None:
    """look_every 4 of 20 requests, min_samples 10: a settled speculative cell sends 12 of its
    first trial's 20 requests (three looks); the baseline sends all 20."""
    from crossbench.analysis.start_spread import Spread, StartSpread

    StartSpread((Spread("llama-server", "baseline", 0.016, 7, 2, 9),
                 Spread("llama-server", "draft-simple", 0.057, 24, 6, 30)), ()).save(
        tmp_path / "spread.json")
    run = write_run(tmp_path, [PHASES] * 3)
    m = write_matrix(tmp_path, {**MATRIX, "load": {**MATRIX["load"], "requests": 20},
                                "start_spread": "spread.json",
                                "sequential": {"min_trials": 1, "look_every": 4}})
    plan = plan_json(str(m), "--from", str(run))
    # per start 5 s; per trial 0.5 + 0.5 outside decode, 2000 tokens at 50 tok/s = 40 s
    seq = row(plan, "sequential")
    assert (seq["trials"], seq["server_starts"]) == (9, 9)
    assert seq["gpu_s"] == pytest.approx(9 * (5 + 1) + 8 * 40 * 12 / 20 + 40)
    assert any("sends 60% of its first trial's requests" in a for a in plan["assumptions"])


def _recorded_starts(d: Path, engine: str, starts: list[tuple[str, float]]) -> Path:
    """A recorded run of ``engine`` in ``d``, one trial per start: each start's kind
    (``startup_cut.start``) and start-up seconds, the other phases as PHASES (other 2 s)."""
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({
        "schema_version": 1, "kind": "crossbench.run",
        "config": {"engine": engine, "load": LOAD, "trials": len(starts),
                   "engine_config": {"model": "m", "spec": {"type": "none"}}},
        "trials": [{"trial": i, "status": "ok",
                    "phase_s": {**PHASES, "startup": s, "total": s + 8.0},
                    "server_props": {"startup_cut": {"start": kind}}}
                   for i, (kind, s) in enumerate(starts)]}))
    return d


def _draft_matrix(engine_id: str, kind: str) -> dict[str, Any]:
    """A baseline and a draft model at n = 2, 4 on one engine, c=1 and 16: 6 cells of 3
    server configurations."""
    return {**MATRIX, "engines": {engine_id: {"kind": kind}},
            "models": {"t": {"path": "fixture:qwen3-8b/target@hf", "quant": "F16",
                             "role": "target"},
                       "d": {"path": "fixture:qwen3-8b/draft@hf", "quant": "F16",
                             "role": "draft"}},
            "arms": [{"method": "none"},
                     {"name": "dm", "method": "draft_model", "draft": "d", "n": [2, 4]}],
            "axes": {"engine": [engine_id], "target": ["t"], "concurrency": [1, 16]}}


def test_a_configurations_later_starts_are_priced_warm(tmp_path: Path) -> None:
    """vLLM's starts record cold or warm (its compile cache found); with both measured, a
    server configuration's first start is priced cold and its later ones warm (a cell at
    another concurrency shares its configuration), unless compile_cache: off."""
    d = _recorded_starts(tmp_path / "run", "vllm",
                         [("cold", 100.0), ("warm", 40.0), ("warm", 40.0)])
    data = _draft_matrix("v", "vllm")
    plan = plan_json(str(write_matrix(tmp_path, data)), "--from", str(d),
                     "--no-share-servers")
    t = plan["timings"]["vllm"]
    assert (t["startup_s"]["value"], t["startup_warm_s"]["value"]) == (100.0, 40.0)
    assert "1 cold starts" in t["startup_s"]["source"]
    assert "2 warm starts" in t["startup_warm_s"]["source"]
    # 6 cells (3 configurations x c=1, 16), 3 trials; per start cold 103 s, warm 43 s
    # (start-up + stop 1 + other 2); per trial 5 s (warm-up, scrapes, 200 tokens at 50 tok/s)
    assert row(plan, "naive")["gpu_s"] == pytest.approx(3 * 103 + 15 * 43 + 18 * 5)
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(3 * 103 + 3 * 43 + 18 * 5)
    shared = plan_json(str(write_matrix(tmp_path, data, "s.yaml")), "--from", str(d),
                       "--share-servers")
    assert row(shared, "reuse")["gpu_s"] == pytest.approx(3 * 103 + 18 * 5)
    assert any("first start costs a cold start-up (100.0 s), its later starts a warm one "
               "(40.0 s" in a for a in plan["assumptions"])
    off = {**data, "engines": {"v": {"kind": "vllm", "server": {"compile_cache": "off"}}}}
    cold = plan_json(str(write_matrix(tmp_path, off, "off.yaml")), "--from", str(d),
                     "--no-share-servers")
    assert row(cold, "naive")["gpu_s"] == pytest.approx(18 * 103 + 18 * 5)
    text = CliRunner().invoke(cli, ["plan", str(tmp_path / "m.yaml"), "--from", str(d)]).output
    assert "(a warm start: start-up 40.0 s M)" in text
    manifest = json.loads((d / "manifest.json").read_text())  # damaged labels: not counted
    for entry, props in zip(manifest["trials"], (["cold"], {"startup_cut": "warm"},
                                                 {"startup_cut": {"start": "tepid"}}),
                            strict=True):
        entry["server_props"] = props
    (d / "manifest.json").write_text(json.dumps(manifest))
    t = plan_json(str(tmp_path / "m.yaml"), "--from", str(d))["timings"]["vllm"]
    assert "startup_warm_s" not in t and t["startup_s"]["value"] == pytest.approx(60.0)


def test_sglangs_cold_start_is_the_machines_first(tmp_path: Path) -> None:
    """SGLang's starts say whether they added to its kernel caches: cold (the machine's
    first, caches empty), partial (a configuration's own kernels added) or warm. Its caches
    serve every later configuration, so only the plan's first SGLang start is priced cold
    and every other start warm, with partial starts among the warm figures (vLLM's cold is
    each configuration's first, above)."""
    d = _recorded_starts(tmp_path / "run", "sglang",
                         [("cold", 180.0), ("partial", 60.0), ("warm", 50.0), ("partial", 70.0)])
    data = _draft_matrix("s", "sglang")
    plan = plan_json(str(write_matrix(tmp_path, data)), "--from", str(d),
                     "--no-share-servers")
    t = plan["timings"]["sglang"]
    assert (t["startup_s"]["value"], t["startup_warm_s"]["value"]) == (180.0, 60.0)
    assert t["cold_per"] == "machine"
    assert "3 later starts" in t["startup_warm_s"]["source"]
    # 6 cells (3 configurations x c=1, 16), 3 trials; one cold start 183 s, every other
    # start warm 63 s (start-up + stop 1 + other 2); per trial 5 s, as above
    assert row(plan, "naive")["gpu_s"] == pytest.approx(183 + 17 * 63 + 18 * 5)
    assert row(plan, "reuse")["gpu_s"] == pytest.approx(183 + 5 * 63 + 18 * 5)
    assert any("first start of the engine costs a cold start-up (180.0 s: its kernel" in a
               for a in plan["assumptions"])
