"""Sequential stopping in a running matrix, on the vLLM stand-in (named as one: it serves no
model): a clearly faster cell stops at its first look, its baseline with it; what stopped is
recorded, counted as stopped (not missing), and a resume runs nothing more. With server
reuse the rule looks once per server start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from seq_helpers import spread_file, stand_in_matrix

from crossbench.errors import UserError
from crossbench.runner.matrix_run import matrix_status, read_journal, run_matrix
from crossbench.runner.stopping import read_stops


def test_a_settled_cell_stops_early_and_stays_stopped(tmp_path: Path) -> None:
    m = stand_in_matrix(tmp_path)
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(m, out, progress=said.append)
    stops = read_stops(out)
    spec, base = "v/m/synth/n2/builtin-mixed/c1", "v/m/none/builtin-mixed/c1"
    assert stops[spec]["action"] == "faster", stops[spec]
    look = stops[spec]["look"]
    assert 3 <= look < 8  # at or after min_trials, before the planned 8
    assert stops[spec]["ci"][0] > 1.0 and stops[spec]["rule"]["max_trials"] == 8
    assert stops[base]["action"] == "partners_stopped"
    journal = read_journal(out)
    ran = {c: sorted(t for (cc, t) in journal if cc == c) for c in (spec, base)}
    assert ran[spec] == list(range(look)) and len(ran[base]) <= look + 1
    assert s["totals"]["missing"] == 0
    assert s["totals"]["stopped"] == (8 - len(ran[spec])) + (8 - len(ran[base]))
    rows = {r["id"]: r for r in s["cells"]}
    assert rows[spec]["stop"]["action"] == "faster"
    assert any("stopped after" in line for line in said)
    from crossbench.cli.matrix_cmd import format_status

    table = format_status(s)
    assert f"{s['totals']['stopped']} not needed (sequential stops)" in table
    assert f"stopped: {spec}: look {look} of 8: interval" in table
    again = run_matrix(m, out, resume=True)  # nothing left to run
    assert read_journal(out).keys() == journal.keys()
    assert again["totals"] == s["totals"] == matrix_status(out)["totals"]
    # the analysis reads the trials that ran, and its verdict is its own bootstrap's
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    (pair,) = analyze(out, StatsOptions(resamples=500, min_samples=4))["pairs"]
    assert pair["speedup"]["geomean"] > 1.5
    assert json.loads((out / "state.json").read_text())["trials"] == 8


@pytest.mark.parametrize(("over", "msg"), [
    ({"schedule": {"order": "sequential"}}, "set schedule.order: interleaved"),
    ({"trials_per_start": 4}, "give 2 start\\(s\\), fewer than sequential.min_trials"),
    ({"fresh_server": False}, "give 1 start\\(s\\), fewer than sequential.min_trials"),
    ({"trials": 2}, "fewer than sequential.min_trials"),
])
def test_settings_the_rule_cannot_work_with_are_refused(tmp_path: Path, over: dict[str, Any],
                                                        msg: str) -> None:
    with pytest.raises(UserError, match=msg):
        run_matrix(stand_in_matrix(tmp_path, **over), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything started



def test_with_server_reuse_the_rule_looks_once_per_server_start(tmp_path: Path) -> None:
    """trials 8 in blocks of 2: 4 server starts per cell, a look after each completed start
    (min_trials 3 counts starts), each prompt's log ratio averaged over the start's trials."""
    m = stand_in_matrix(tmp_path, trials_per_start=2)
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(m, out, progress=said.append)
    stops = read_stops(out)
    spec = "v/m/synth/n2/builtin-mixed/c1"
    rec = stops[spec]
    assert rec["action"] == "faster", rec
    assert rec["rule"]["max_trials"] == 4 and rec["rule"]["min_trials"] == 3  # starts
    assert rec["look"] == rec["server_starts"] == 3  # settled at the first look it may take
    assert rec["trials"] == list(range(6))  # three whole blocks of 2
    journal = read_journal(out)
    ran = sorted(t for (c, t) in journal if c == spec)
    assert ran == list(range(6))  # the fourth start never ran
    reuse = [json.loads((out / "cells" / d / "manifest.json").read_text())["trials"]
             for d in sorted(p.name for p in (out / "cells").iterdir())]
    positions = {t["reuse"]["position"] for trials in reuse for t in trials if t.get("reuse")}
    assert positions == {0, 1}  # the trials really shared server starts, two each
    assert any("stopped after 6 trials on 3 server starts" in line for line in said)
    assert s["totals"]["missing"] == 0


def test_with_a_known_start_spread_a_clear_cell_stops_on_one_start(tmp_path: Path) -> None:
    """trials 6 in blocks of 3 (two starts), 5 prompts a trial, min_trials 1: the rule looks
    after every trial, and the first with min_samples (10) pairs settles the cell on its first
    start; the run keeps the spread it decided with, and its analysis uses it."""
    spread_file(tmp_path / "spread.json")
    m = stand_in_matrix(tmp_path, trials=6, trials_per_start=3, start_spread="spread.json",
                load={"requests": 5, "warmup": 1, "max_tokens": 48},
                sequential={"min_trials": 1})
    out = tmp_path / "run"
    said: list[str] = []
    run_matrix(m, out, progress=said.append)
    spec = "v/m/synth/n2/builtin-mixed/c1"
    rec = read_stops(out)[spec]
    assert rec["action"] == "faster", rec
    assert rec["look"] == 2 and rec["trials"] == [0, 1]  # 10 pairs after two trials
    assert rec["server_starts"] == 1 and rec["start_prior"]["spec_starts"] == 1
    assert rec["rule"]["method"].startswith("known start spread")
    from crossbench.analysis.sequential import spent

    # the first look that may decide gets all the error rate spent by then (2 of 6 trials)
    assert rec["level"] == pytest.approx(1 - spent(2 / 6, 0.05, "obrien-fleming"))
    assert rec["ci"][0] > 1.0
    assert any("stopped after 2 trials on 1 server start:" in line for line in said)
    assert sorted(t for (c, t) in read_journal(out) if c == spec) == [0, 1]
    assert json.loads((out / "start-spread.json").read_text())["spreads"][0]["sigma_log"] \
        == 0.02
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    (pair,) = analyze(out, StatsOptions(resamples=500))["pairs"]
    prior = pair["speedup"]["start_prior"]
    assert prior is not None and prior["spec_starts"] == 1
    assert pair["speedup"]["design"].endswith("joined with the known start spread")
    # the pandas API (and decompose --from, which reads through it) analyses with it too
    from crossbench.frames import open_run

    frames = open_run(out, StatsOptions(resamples=500))
    (fpair,) = frames.analysis["pairs"]
    assert fpair["speedup"]["start_prior"] == prior
    assert fpair["speedup"]["ci95"] == pair["speedup"]["ci95"]
    assert frames.analysis["options"]["start_spread"]["spreads"][0]["sigma_log"] == 0.02
    # a spread the caller names wins over the recorded one, as in analyze
    from crossbench.analysis.start_spread import StartSpread

    wide = StartSpread.load(spread_file(tmp_path / "wide.json", sigma=0.5))
    mine = open_run(out, StatsOptions(resamples=500, start_spread=wide)).analysis
    assert mine["options"]["start_spread"]["spreads"][0]["sigma_log"] == 0.5
    assert analyze(out, StatsOptions(resamples=500, start_spread=wide))["pairs"][0][
        "speedup"]["ci95"] == mine["pairs"][0]["speedup"]["ci95"] != fpair["speedup"]["ci95"]


@pytest.mark.parametrize(("over", "msg"), [
    ({"sequential": {"min_trials": 1}},
     "sequential.min_trials: 1 trial cannot give a spread of its own"),
    ({"start_spread": "missing.json"}, "start_spread: .*missing.json: cannot be read"),
    ({"start_spread": "other.json"},
     "start_spread: other.json: cell v/m/synth/n2/builtin-mixed/c1: the start-spread file "
     "has no spread \\(ngram and baseline on engine vllm\\)"),
])
def test_a_start_spread_the_run_cannot_use_is_refused(tmp_path: Path, over: dict[str, Any],
                                                      msg: str) -> None:
    spread_file(tmp_path / "other.json", engine="llama-server")
    with pytest.raises(UserError, match=msg):
        run_matrix(stand_in_matrix(tmp_path, **over), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.server
def test_calibrate_on_the_real_server_then_stop_on_one_start(llama_server, fixture_models,  # type: ignore[no-untyped-def]
                                                             tmp_path: Path) -> None:
    """The whole path on the real CPU llama-server: a naive run of three fresh starts per
    cell, `crossbench start-spread` on it, then a matrix with that spread whose draft cell
    (n = 8, every draft rejected: far slower on the tiny fixtures) stops on its first start
    once min_samples pairs are in, though six trials on two starts were planned."""
    from click.testing import CliRunner

    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions
    from crossbench.cli.main import cli

    def matrix(d: Path, **over: Any) -> Path:
        d.mkdir()
        doc = {"schema_version": 1, "study": {"name": "spread-cpu"},
               "engines": {"llama": {"kind": "llama-server", "binary": str(llama_server)}},
               "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                          "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
               "server": {"ctx_size": 1024},
               "load": {"requests": 4, "warmup": 1, "max_tokens": 32},
               "arms": [{"method": "none"},
                        {"name": "reject", "method": "draft-simple", "draft": "d", "n": 8,
                         "synth_rates": [0.0] * 8}],
               "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:code"]},
               "trials": 3, "telemetry_hz": 0, **over}
        (d / "m.yaml").write_text(yaml.safe_dump(doc))
        return d / "m.yaml"

    run_matrix(matrix(tmp_path / "cal"), tmp_path / "cal" / "run")
    r = CliRunner().invoke(cli, ["start-spread", str(tmp_path / "cal" / "run"),
                                 "-o", str(tmp_path / "spread.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "spread.json").read_text())
    assert {s["role"]: s["starts"] for s in doc["spreads"]} == {"baseline": 3,
                                                                 "draft-simple": 3}
    m = matrix(tmp_path / "go", trials=6, trials_per_start=3,
               start_spread=str(tmp_path / "spread.json"),
               load={"requests": 5, "warmup": 1, "max_tokens": 32},
               sequential={"min_trials": 1, "spending": "pocock"})
    out = tmp_path / "go" / "run"
    run_matrix(m, out)
    spec = "llama/t/reject/n8/builtin-code/c1"
    rec = read_stops(out)[spec]
    ran = sorted(t for (c, t) in read_journal(out) if c == spec)
    print("spreads:", doc["spreads"], "decision:", rec["reason"])
    if rec["action"] == "slower":  # the usual case: 10 pairs after 2 trials settle it; a
        # calibrated spread a little wider (CI, 2026-12-05: sigma 0.050) needs the third trial
        # of the same start, still before the second start
        assert rec["look"] in (2, 3) and rec["ci"][1] < 1.0, rec
        assert rec["server_starts"] == 1 and rec["start_prior"]["baseline_starts"] == 1
        assert ran == list(range(rec["look"]))  # the second start never ran
    else:  # a loaded machine (CI under a parallel build) can calibrate a spread too wide
        # to settle even a 0.13x cell: then the rule must have run every planned trial on
        # both starts, and its last interval still holds 1
        assert rec["action"] == "undecided" and rec["look"] == 6, rec
        assert rec["ci"][0] <= 1.0 <= rec["ci"][1] and ran == list(range(6))
        assert rec["start_prior"]["spec_starts"] == 2
    (pair,) = analyze(out, StatsOptions(resamples=500))["pairs"]
    assert pair["verdict"] in ("slower", "indistinguishable")
    assert pair["speedup"]["start_prior"]["sigma_spec_log"] == pytest.approx(
        next(s["sigma_log"] for s in doc["spreads"] if s["role"] == "draft-simple"))
