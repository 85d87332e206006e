"""Looks inside a trial (``sequential.look_every``) on the vLLM stand-in (named as one: it
serves no model; its start spread is a hand-made file, the test's figures, not an engine's):
a clear cell stops part-way into its first trial, a start that no more requests could settle
is ended for the next one, the baseline runs first in every round and in full, the analysis
does not count the requests never sent as unpaired, and settings the looks cannot work with
are refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from seq_helpers import spread_file, stand_in_matrix

from crossbench.analysis.start_spread import effective_starts
from crossbench.errors import UserError
from crossbench.runner.matrix import Cell, schedule
from crossbench.runner.matrix_run import read_journal, run_matrix
from crossbench.runner.stopping import read_stops

SPEC, BASE = "v/m/synth/n2/builtin-mixed/c1", "v/m/none/builtin-mixed/c1"
SPEC_DIR = "v__m__synth__n2__builtin-mixed__c1"


def _looking(tmp_path: Path, sigma: float, **over: Any) -> Path:
    spread_file(tmp_path / "spread.json", sigma=sigma)
    fields: dict[str, Any] = {
        "trials": 3, "start_spread": "spread.json",
        "load": {"requests": 16, "warmup": 1, "max_tokens": 32},
        "sequential": {"min_trials": 1, "min_samples": 8, "look_every": 4,
                       "spending": "pocock"}}
    return stand_in_matrix(tmp_path, **{**fields, **over})


def _trials(out: Path, cell_dir: str) -> list[dict[str, Any]]:
    return json.loads((out / "cells" / cell_dir / "manifest.json").read_text())["trials"]


def test_a_clear_cell_stops_part_way_into_its_first_trial(tmp_path: Path) -> None:
    """Spread 2 %, speedup about 2.8: the first look with min_samples (8 pairs, the second
    look of 4 requests) stops the cell; its trial ends there, the baseline's ran in full."""
    out = tmp_path / "run"
    said: list[str] = []
    run_matrix(_looking(tmp_path, 0.02), out, progress=said.append)
    rec = read_stops(out)[SPEC]
    assert rec["action"] == "faster", rec
    assert rec["look"] == 2 and rec["rule"]["max_trials"] == 12  # 3 trials x 4 looks
    assert rec["trials"] == [0] and rec["last_trial_requests"] == 8
    assert rec["ci"][0] > 1.0 and rec["start_prior"]["spec_starts"] == 1
    assert read_stops(out)[BASE]["action"] == "partners_stopped"
    assert list(read_journal(out)) == [(BASE, 0), (SPEC, 0)]  # the baseline first
    (trial,) = _trials(out, SPEC_DIR)
    assert trial["ended_early"]["after_requests"] == 8 and trial["ended_early"]["of"] == 16
    assert trial["ended_early"]["reason"].startswith("stopped: look 2 of 12")
    assert trial["load"]["ok"] == 8 and trial["status"] == "ok"
    assert [t["load"]["ok"] for t in _trials(out, "v__m__none__builtin-mixed__c1")] == [16]
    assert any("stopped after 1 trial (8 requests into the last)" in x for x in said)
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    (pair,) = analyze(out, StatsOptions(resamples=300, min_samples=8))["pairs"]
    assert pair["pairing"]["paired"] == 8 and pair["pairing"]["ended_early"] == 8
    assert "unpaired_requests" not in {w["kind"] for w in pair["warnings"]}
    assert pair["verdict"] == "faster"
    # a stop decided inside a trial is recorded only once that trial is journaled ok: one
    # whose trial then failed (or was killed before its journal line) leaves no stop behind
    from crossbench.runner.matrix import expand, load_matrix
    from crossbench.runner.stopping import StopController

    m = load_matrix(out / "matrix.yaml")
    cells = {c.id: c for c in expand(m, out / "matrix.yaml")}
    (out / "stops.jsonl").unlink()
    ctl = StopController(m, out, cells, {cid: out / "cells" / cid.replace("/", "__")
                                         for cid in cells})
    ctl.pending[(SPEC, 0)] = ([0], rec, 8)
    ctl.after_trial(SPEC, {(BASE, 0): {"status": "ok"}, (SPEC, 0): {"status": "failed"}},
                    said.append)
    assert SPEC not in read_stops(out) and not ctl.pending


def test_a_start_that_cannot_settle_the_cell_is_ended_for_the_next(tmp_path: Path) -> None:
    """Spread 50 % a start: no number of requests on one start can settle even a 2.8x
    speedup, so each trial ends at its first look past min_samples and the next trial's fresh
    start follows; the looks left out spend nothing, and no stop is recorded before the
    cell has had the starts that could settle it."""
    out = tmp_path / "run"
    said: list[str] = []
    run_matrix(_looking(tmp_path, 0.5), out, progress=said.append)
    trials = _trials(out, SPEC_DIR)
    assert [t["trial"] for t in trials] == [0, 1, 2]
    first = trials[0]["ended_early"]
    assert first["after_requests"] == 8  # min_samples first: no cut before 8 pairs
    assert "no more requests on this server start could settle" in first["reason"]
    assert all(t.get("ended_early") for t in trials[:2])
    assert sum(t["load"]["ok"] for t in trials) < 3 * 16
    stop = read_stops(out).get(SPEC)
    assert stop is None or stop["trials"] == [0, 1, 2]  # settled, if at all, on 3 starts
    assert [t["load"]["ok"] for t in _trials(out, "v__m__none__builtin-mixed__c1")] == [16] * 3
    assert any("going on to the next start" in x for x in said)


@pytest.mark.parametrize(("over", "msg"), [
    ({"start_spread": None, "sequential": {"min_trials": 2, "look_every": 4}},
     "sequential.look_every: 4 needs a start_spread file"),
    ({"trials_per_start": 3}, "ends a trial to go on to a fresh server start"),
    ({"axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:mixed"],
               "concurrency": [1, 2]}}, "sends 2 requests at once"),
])
def test_settings_the_looks_cannot_work_with_are_refused(tmp_path: Path, over: dict[str, Any],
                                                         msg: str) -> None:
    m = _looking(tmp_path, 0.02)
    import yaml

    doc = yaml.safe_load(m.read_text())
    for k, v in over.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    m.write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=msg):
        run_matrix(m, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_the_looks_need_the_local_executor(tmp_path: Path) -> None:
    from crossbench.runner.ray_exec import RayExecutor

    with pytest.raises(UserError, match="run the matrix with --executor local"):
        run_matrix(_looking(tmp_path, 0.02), tmp_path / "run", executor=RayExecutor())


def _cell(cid: str, baseline: str | None) -> Cell:
    return Cell(id=cid, coords={}, engine_kind="vllm", engine_config={}, load={},
                baseline=baseline)


def test_baselines_run_first_in_every_round_and_the_rest_keeps_its_shuffle() -> None:
    cells = [_cell("s1", "b"), _cell("b", None), _cell("s2", "b"), _cell("s3", "b")]
    plain = schedule(cells, 3, "interleaved", 5)
    first = schedule(cells, 3, "interleaved", 5, baselines_first=True)
    assert sorted(plain) == sorted(first)
    for r in range(3):
        rnd = [c for c, t in first if t == r]
        assert rnd[0] == "b"
        assert rnd[1:] == [c for c, t in plain if t == r and c != "b"]


def test_effective_starts_count_unequal_shares_as_fewer() -> None:
    assert effective_starts([0] * 12 + [1] * 12 + [2] * 12) == 3
    assert effective_starts([0] * 48 + [1] * 12) == pytest.approx(60 ** 2 / (48 ** 2 + 12 ** 2))
    assert effective_starts([7] * 5) == 1 and effective_starts([]) == 0


def test_looks_no_trial_is_long_enough_for_are_noted(tmp_path: Path) -> None:
    from crossbench.runner.matrix import expand, load_matrix, validate_cells

    path = _looking(tmp_path, 0.02, load={"requests": 4, "warmup": 1, "max_tokens": 32})
    m = load_matrix(path)
    notes = validate_cells(m, expand(m, path), path)
    assert any("look_every: 4 is not below the 4 measured requests" in n for n in notes)
