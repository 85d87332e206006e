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

from crossbench.errors import UserError
from crossbench.runner.matrix_run import matrix_status, read_journal, run_matrix
from crossbench.runner.stopping import read_stops
from crossbench.standins.vllm import write_launcher


def _matrix(tmp_path: Path, **over: Any) -> Path:
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "3",
                            "--standin-prefill-ms", "1")
    doc: dict[str, Any] = {
        "schema_version": 1, "study": {"name": "seq", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2, "enable_prefix_caching": False}}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 3, "warmup": 1, "max_tokens": 48},
        # acceptance 0.95, 0.9: about 2.85 tokens per step against 1: far from a tie
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "ngram", "n": 2, "synth_rates": [0.95, 0.9]}],
        "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:mixed"]},
        "trials": 8, "telemetry_hz": 0,
        "sequential": {"min_trials": 3},
        **over,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_settled_cell_stops_early_and_stays_stopped(tmp_path: Path) -> None:
    m = _matrix(tmp_path)
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
        run_matrix(_matrix(tmp_path, **over), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything started



def test_with_server_reuse_the_rule_looks_once_per_server_start(tmp_path: Path) -> None:
    """trials 8 in blocks of 2: 4 server starts per cell, a look after each completed start
    (min_trials 3 counts starts), each prompt's log ratio averaged over the start's trials."""
    m = _matrix(tmp_path, trials_per_start=2)
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
