"""Shared server starts (``share_servers``): cells that differ only in request-level settings
(workload, concurrency) run a round's trials on one server start; each records the start as
its own and who started it; the engines' cache reset runs between; the analysis still draws
each cell's own starts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossbench.errors import UserError
from crossbench.runner.matrix import expand, load_matrix, schedule, server_groups

Make = Callable[..., dict[str, Any]]


def _doc(make: Make, **extra: Any) -> dict[str, Any]:
    """A baseline and an n-gram arm at concurrency 1 and 2 on the vLLM stand-in: two server
    groups of two cells each, sharing starts."""
    return make("shared", [1, 2], **{"trials": 2, "share_servers": True, **extra})


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _manifests(out: Path) -> dict[str, dict[str, Any]]:
    return {d.name: json.loads((d / "manifest.json").read_text())
            for d in (out / "cells").iterdir()}


def test_groups_follow_the_server_not_the_load(tmp_path: Path,
                                               vllm_standin_matrix: Make) -> None:
    m = _write(tmp_path, _doc(vllm_standin_matrix))
    cells = expand(load_matrix(m), m)
    groups = server_groups(cells)
    by_group: dict[int, set[tuple[str, int]]] = {}
    for c in cells:
        by_group.setdefault(groups[c.id], set()).add((c.coords["method"],
                                                      c.coords["concurrency"]))
    assert sorted(by_group.values(), key=sorted) == [{("ngram", 1), ("ngram", 2)},
                                                      {("none", 1), ("none", 2)}]


@pytest.mark.parametrize("block", [1, 2])
def test_a_groups_cells_are_adjacent_in_every_round(tmp_path: Path, block: int,
                                                    vllm_standin_matrix: Make) -> None:
    m = _write(tmp_path, _doc(vllm_standin_matrix, trials=4))
    cells = expand(load_matrix(m), m)
    groups = server_groups(cells)
    order = schedule(cells, 4, "interleaved", 3, block, share=True)
    assert sorted(order) == sorted((c.id, t) for c in cells for t in range(4))
    per_round = 4 * block  # four cells, a block of trials each
    for r in range(4 // block):
        rnd = order[r * per_round:(r + 1) * per_round]
        assert {t // block for _, t in rnd} == {r}
        seq = [groups[c] for c, _ in rnd]
        # each group forms one run: it never comes back once another has started
        runs = [g for i, g in enumerate(seq) if i == 0 or seq[i - 1] != g]
        assert len(runs) == len(set(runs)) == 2
        for cid in {c for c, _ in rnd}:  # a cell's block is contiguous
            idx = [i for i, (c, _) in enumerate(rnd) if c == cid]
            assert idx == list(range(idx[0], idx[0] + block))
    # without sharing the schedule is what it always was
    assert schedule(cells, 4, "interleaved", 3, block) == \
        schedule(cells, 4, "interleaved", 3, block, share=False)


def test_sequential_order_is_refused_and_a_useless_share_is_noted(
        tmp_path: Path, vllm_standin_matrix: Make) -> None:
    from crossbench.runner.matrix import validate_cells

    m = _write(tmp_path, _doc(vllm_standin_matrix, schedule={"order": "sequential"}))
    mat = load_matrix(m)
    with pytest.raises(UserError) as e:
        validate_cells(mat, expand(mat, m), m)
    assert "share_servers" in e.value.message and "interleaved" in (e.value.hint or "")
    doc = _doc(vllm_standin_matrix)
    doc["axes"]["concurrency"] = [1]
    m = _write(tmp_path, doc)
    mat = load_matrix(m)
    notes = validate_cells(mat, expand(mat, m), m)
    assert any("no two cells have the same server" in n for n in notes), notes


def test_the_ray_executor_is_refused_before_anything_runs(
        tmp_path: Path, vllm_standin_matrix: Make) -> None:
    from crossbench.runner.matrix_run import run_matrix

    class Lanes:  # any executor but the local one
        closed = False

        def connect(self, progress: Any) -> None:
            raise AssertionError("connected")

        def execute(self, job: Any, journal: Any) -> dict[str, dict[str, Any]]:
            raise AssertionError("executed")

        def close(self) -> None:
            Lanes.closed = True

    m = _write(tmp_path, _doc(vllm_standin_matrix))
    with pytest.raises(UserError) as e:
        run_matrix(m, tmp_path / "run", executor=Lanes())
    assert "share_servers" in e.value.message and "--executor local" in (e.value.hint or "")
    assert Lanes.closed and not (tmp_path / "run").exists()


@pytest.mark.parametrize("trials_per_start", [1, 2])
def test_a_matrix_shares_one_start_per_group_and_round(tmp_path: Path, trials_per_start: int,
                                                       vllm_standin_matrix: Make) -> None:
    """Four cells in two groups, two trials each: one start per group and round (four with
    a fresh server per trial, two with blocks of two), the other cell's trials recorded as
    started by the first, their prefix cache reset, no start-up phase of their own."""
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions
    from crossbench.runner.matrix_run import run_matrix

    m = _write(tmp_path, _doc(vllm_standin_matrix, trials_per_start=trials_per_start))
    out = tmp_path / "run"
    summary = run_matrix(m, out)
    assert summary["totals"] == {"done": 8, "failed": 0, "missing": 0}
    mans = _manifests(out)
    entries = [(name, e) for name, man in mans.items() for e in man["trials"]]
    started = [(n, e) for n, e in entries if "startup" in e["phase_s"]]
    assert len(started) == 4 // trials_per_start  # 2 groups x rounds, not 8 starts
    logs = sum(len(re.findall(r"===== crossbench trial \d+: ",
                              (out / "cells" / n / "server.log").read_text())) for n in mans)
    assert logs == len(started)  # each start's log lines sit in the starting cell's folder
    for name, e in entries:
        reuse = e["reuse"]
        if "startup" in e["phase_s"]:
            assert "started_by" not in reuse and "cache_reset" not in reuse
            continue
        assert reuse["cache_reset"] == {"method": "reset_prefix_cache", "ok": True}
        by = reuse.get("started_by")
        if by is not None:  # another cell's start: same server, other load
            other = json.loads((out / "cells" / by["cell"].replace("/", "__")
                                / "manifest.json").read_text())
            first = next(x for x in other["trials"] if x["trial"] == by["trial"])
            assert "startup" in first["phase_s"] and first["argv"] == e["argv"]
            assert name != by["cell"].replace("/", "__")
            log = (out / "cells" / name / "server.log").read_text()
            assert f"trial {e['trial']} ran on a shared server start: trial {by['trial']} " \
                f"of cell {by['cell']} started it" in log
        # the start is this cell's own unit: its first trial on it
        assert reuse["server_start"] == e["trial"] - e["trial"] % trials_per_start
    a = analyze(out, StatsOptions(resamples=300))
    assert len(a["pairs"]) == 2
    for pair in a["pairs"]:
        sp = pair["speedup"]
        assert sp["n_samples"] == 4 and sp["geomean"] > 0
        if trials_per_start == 2:  # two trials on one start: one unit, not two
            assert (sp["n_trials"], sp["n_server_starts"]) == (2, 1)
        else:  # every trial of a cell on a start of its own: plain trials
            assert "n_server_starts" not in sp


@pytest.mark.server
def test_llama_server_serves_two_workloads_per_start(llama_server: Path,
                                                     fixture_models: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    """The real llama-server, baseline and a synthetic-acceptance arm over two workloads,
    two trials: four starts instead of eight; the second workload's trials run after a slot
    erase that found the first workload's prompt cached; synthetic acceptance (0.8, then 0.5
    of those, per position) measures alike on a cell's own start and on a shared one."""
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions
    from crossbench.runner.matrix_run import run_matrix

    doc = {
        "schema_version": 1, "study": {"name": "shared-llama"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(llama_server)}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                   "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
        "server": {"ctx_size": 1024},
        "load": {"requests": 2, "warmup": 1, "max_tokens": 16, "cache_prompt": True},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "draft-simple", "draft": "d", "n": 2,
                  "synth_rates": [0.8, 0.5]}],
        "axes": {"engine": ["llama"], "target": ["t"],
                 "workload": ["builtin:code", "builtin:math"]},
        "trials": 2, "telemetry_hz": 0, "share_servers": True,
    }
    out = tmp_path / "run"
    summary = run_matrix(_write(tmp_path, doc), out)
    assert summary["totals"] == {"done": 8, "failed": 0, "missing": 0}
    entries = [e for man in _manifests(out).values() for e in man["trials"]]
    assert sum(1 for e in entries if "startup" in e["phase_s"]) == 4
    on_shared = [e for e in entries if "started_by" in e["reuse"]]
    assert len(on_shared) == 4
    for e in on_shared:  # the other workload's last prompt was in a slot: erased
        reset = e["reuse"]["cache_reset"]
        assert reset["method"] == "slot-erase" and reset["ok"] and reset["tokens_erased"] > 0
        assert "--slot-save-path" in e["argv"]
    a = analyze(out, StatsOptions(resamples=300))
    assert len(a["pairs"]) == 2
    # synthetic acceptance draws the same way on a start of the cell's own and on one another
    # workload's requests used first: both workloads measure the same per-position figures
    first, second = (p["acceptance"] for p in a["pairs"])
    assert first["synthetic"] and first["source"] == "metrics"
    assert first["per_position"] == second["per_position"]
    assert first["draft_acceptance_rate"] == second["draft_acceptance_rate"]
    p1, p2 = first["per_position"]
    assert 0 < p2 < p1 < 1  # truth 0.8 then 0.8 x 0.5: accepted less often at position 2


@pytest.mark.parametrize(("share", "block", "starts"), [(True, 1, 4), (True, 2, 2),
                                                         (False, 1, 8), (False, 2, 4)])
def test_validate_counts_the_server_starts(tmp_path: Path, share: bool, block: int,
                                           starts: int, vllm_standin_matrix: Make) -> None:
    from click.testing import CliRunner

    from crossbench.cli.main import cli

    m = _write(tmp_path, _doc(vllm_standin_matrix, share_servers=share,
                              trials_per_start=block))
    r = CliRunner().invoke(cli, ["validate", str(m), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["server_starts"] == starts
    r = CliRunner().invoke(cli, ["validate", str(m)], catch_exceptions=False)
    assert f"server starts: {starts} (" in r.output
