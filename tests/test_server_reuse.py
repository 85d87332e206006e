"""Server reuse in a matrix: blocks of a cell's trials share one server start, interleaved
between cells; the engines' cache reset between them; the analysis draws server starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crossbench.runner.matrix import schedule


def _cells(*ids: str) -> list:  # type: ignore[type-arg]
    return [SimpleNamespace(id=i) for i in ids]


def test_blocks_run_back_to_back_and_rounds_stay_interleaved() -> None:
    cells = _cells("a", "b", "c")
    order = schedule(cells, trials=6, order="interleaved", seed=0, block=3)  # type: ignore[arg-type]
    assert sorted(order) == sorted((c, t) for c in "abc" for t in range(6))
    # every block of three trials of a cell is contiguous, and round 0 precedes round 1
    for k in range(0, 18, 3):
        cid = order[k][0]
        assert [t for c, t in order[k:k + 3]] == [t for t in range(3 * (k // 9),
                                                                  3 * (k // 9) + 3)]
        assert all(c == cid for c, _ in order[k:k + 3])
    assert all(t < 3 for _, t in order[:9]) and all(t >= 3 for _, t in order[9:])


def test_block_one_is_the_plain_interleaving() -> None:
    cells = _cells("a", "b", "c", "d")
    plain = schedule(cells, 3, "interleaved", 7)  # type: ignore[arg-type]
    assert schedule(cells, 3, "interleaved", 7, block=1) == plain  # type: ignore[arg-type]
    assert [t for _, t in plain] == [0] * 4 + [1] * 4 + [2] * 4


def test_a_last_block_may_be_short() -> None:
    order = schedule(_cells("a", "b"), trials=5, order="interleaved", seed=1, block=2)  # type: ignore[arg-type]
    assert [t for c, t in order if c == "a"] == [0, 1, 2, 3, 4]
    assert len(order) == 10 and [t for _, t in order[8:]] == [4, 4]


def test_a_run_reuses_its_server_in_blocks(llama_server, fixture_models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Four trials, two per server start, on the real llama-server: two starts, a slot erase
    before each reused trial, every record tagged with its start, per-trial warm-ups kept."""
    import json

    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run
    from crossbench.store.atomic import read_jsonl

    target, _ = fixture_models
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(target), "ctx_size": 2048},
        "trials": 4, "trials_per_start": 2,
        "load": {"requests": 3, "warmup": 1, "max_tokens": 24, "cache_prompt": True}})
    out = tmp_path / "run"
    summary = run(cfg, out)
    man = json.loads((out / "manifest.json").read_text())
    trials = {e["trial"]: e for e in man["trials"]}
    assert [trials[t]["reuse"]["server_start"] for t in range(4)] == [0, 0, 2, 2]
    assert [trials[t]["reuse"]["position"] for t in range(4)] == [0, 1, 0, 1]
    for t in (1, 3):  # reused: the slots were erased, with the prompt the last request cached
        reset = trials[t]["reuse"]["cache_reset"]
        assert reset["method"] == "slot-erase" and reset["ok"], reset
        assert reset["tokens_erased"] > 0
        assert "startup" not in trials[t]["phase_s"]
    assert all("startup" in trials[t]["phase_s"] for t in (0, 2))
    assert "--slot-save-path" in man["trials"][0]["argv"]
    log = (out / "server.log").read_text()
    assert log.count("===== crossbench trial") == 2  # two starts, not four
    records = read_jsonl(out / "requests.jsonl")
    assert {(r["trial"], r["server_start"]) for r in records} == {(0, 0), (1, 0), (2, 2), (3, 2)}
    assert sum(1 for r in records if r.get("warmup")) == 4  # a warm-up per trial
    assert summary["requests"]["ok"] == 12


def test_a_matrix_reuses_servers_in_interleaved_blocks(tmp_path, vllm_standin_matrix) -> None:  # type: ignore[no-untyped-def]
    """A matrix on the vLLM stand-in (named as one: it serves no model) with
    ``trials_per_start: 2``: each cell's blocks run back to back, one start per block."""
    import json

    import yaml

    from crossbench.runner.matrix_run import run_matrix

    doc = vllm_standin_matrix("reuse", [1], trials=4, trials_per_start=2)
    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump(doc))
    out = tmp_path / "run"
    run_matrix(m, out)
    order = [tuple(x) for x in json.loads((out / "state.json").read_text())["order"]]
    cells = sorted({c for c, _ in order})
    for c in cells:  # blocks of two, back to back
        idx = [i for i, (cc, _) in enumerate(order) if cc == c]
        assert idx[1] == idx[0] + 1 and idx[3] == idx[2] + 1
    for cell_dir in (out / "cells").iterdir():
        man = json.loads((cell_dir / "manifest.json").read_text())
        starts = [e["reuse"]["server_start"] for e in sorted(man["trials"],
                                                               key=lambda e: e["trial"])]
        assert starts == [0, 0, 2, 2]
        reused = [e for e in man["trials"] if e["reuse"]["position"] == 1]
        assert reused and all(e["reuse"]["cache_reset"] == {"method": "reset_prefix_cache",
                                                            "ok": True} for e in reused)
        assert (cell_dir / "server.log").read_text().count("===== crossbench trial") == 2
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    a = analyze(out, StatsOptions(resamples=500))
    (pair,) = a["pairs"]
    sp = pair["speedup"]
    statuses = {c.name: [(e["trial"], e["status"], e.get("error")) for e in json.loads(
        (c / "manifest.json").read_text())["trials"]] for c in (out / "cells").iterdir()}
    assert sp["design"].startswith("prompts x server starts"), (sp, statuses)
    assert (sp["n_trials"], sp["n_server_starts"]) == (4, 2)
    assert pair["confounds"]["confounded"] is False, pair["confounds"]  # both reused alike


@pytest.mark.parametrize(("extra", "want"), [
    ({"trials": 3, "trials_per_start": 3},
     "trials_per_start 3 with trials: 3: every cell runs all its trials on one server start, "
     "so its verdict leaves out start-to-start variation and carries the single_start warning "
     "(set trials_per_start: 1 for 3 starts per cell)"),
    ({"trials": 4, "fresh_server": False},
     "fresh_server: false: every cell runs all its trials on one server start, so its verdict "
     "leaves out start-to-start variation and carries the single_start warning (set "
     "fresh_server: true and trials_per_start: 2 for 2 starts per cell)"),
])
def test_validate_notes_a_design_of_one_start_per_cell(tmp_path, vllm_standin_matrix, extra,
                                                      want) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from crossbench.runner.matrix import expand, load_matrix, validate_cells

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(vllm_standin_matrix("one-start", [1], **extra)))
    m = load_matrix(path)
    assert want in validate_cells(m, expand(m, path), path)


def test_validate_says_nothing_of_two_starts_per_cell(tmp_path, vllm_standin_matrix) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from crossbench.runner.matrix import expand, load_matrix, validate_cells

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(vllm_standin_matrix("two-starts", [1], trials=4,
                                                       trials_per_start=2)))
    m = load_matrix(path)
    assert not [n for n in validate_cells(m, expand(m, path), path) if "single_start" in n]
