"""crossbench.analysis.step_cost, the per-start pieces the step-cost benchmarks share, against
hand-made analyses whose answers are known."""

from __future__ import annotations

import math
import re

import pytest

from crossbench.analysis import step_cost
from crossbench.errors import UserError

CELLS = [
    {"cell": "llama/t/none/w/c1", "arm": "none", "n": None, "concurrency": 1,
     "engine": "llama", "baseline_cell": None, "per_trial_pooled_tok_s": {"0": 100.0}},
    {"cell": "llama/t/a/n4/w/c1", "arm": "a", "n": 4, "concurrency": 1, "engine": "llama",
     "baseline_cell": "llama/t/none/w/c1", "acceptance": {"mean_acceptance_length": 3.5},
     "per_trial_pooled_tok_s": {"1": 200.0, "0": 180.0}},
    {"cell": "vllm/t/a/n4/w/c1", "arm": "a", "n": 4, "concurrency": 1, "engine": "vllm",
     "baseline_cell": "vllm/t/none/w/c1", "acceptance": {},
     "per_trial_pooled_tok_s": {"0": 300.0, "1": 310.0}},
]


def test_find_cell_picks_one_or_says_which_exist() -> None:
    analysis = {"cells": CELLS}
    assert step_cost.find_cell(analysis, "a", engine="vllm")["cell"] == "vllm/t/a/n4/w/c1"
    with pytest.raises(UserError, match=re.escape(
            "run A: --arm a: 2 cells at c=1, n=4 match (cells of that arm: llama/t/a/n4/w/c1, "
            "vllm/t/a/n4/w/c1)")):
        step_cost.find_cell(analysis, "a", n=4, where="run A: ")
    with pytest.raises(UserError, match="0 cells at c=16, engine llama match"):
        step_cost.find_cell(analysis, "a", engine="llama", concurrency=16)


def test_each_piece_refuses_what_it_cannot_give() -> None:
    analysis = {"cells": CELLS}
    with pytest.raises(UserError, match="has no baseline cell in this run"):
        step_cost.baseline_of(analysis, CELLS[2])  # vllm's baseline is not in the run
    assert step_cost.baseline_of(analysis, CELLS[1]) is CELLS[0]
    with pytest.raises(UserError, match=re.escape("llama/t/none/w/c1: 1 trial(s)")):
        step_cost.trial_rates(CELLS[0])
    with pytest.raises(UserError, match="no mean accepted length"):
        step_cost.mean_accepted_length(CELLS[2])
    assert step_cost.mean_accepted_length(CELLS[1]) == 3.5


def test_over_starts_orders_by_trial_and_takes_each_start_as_a_sample() -> None:
    out = step_cost.over_starts(step_cost.trial_rates(CELLS[1]), 0.95)
    assert out["per_start"] == [180.0, 200.0] and out["starts"] == 2
    assert out["geomean"] == pytest.approx(math.sqrt(180.0 * 200.0))
    half = 12.706204736174698 * abs(math.log(200 / 180)) / 2  # t(0.975, 1) x sd / sqrt(2)
    assert out["ci"] == pytest.approx([out["geomean"] * math.exp(-half),
                                       out["geomean"] * math.exp(half)])
    assert step_cost.over_starts({"0": 5.0}, 0.95)["ci"] is None
    assert step_cost.fmt({"geomean": 1.23456, "ci": [1.1, 1.4]}) == "1.235 [1.100, 1.400]"
    assert step_cost.fmt({"ratio": 0.5, "ci": None}, "ratio") == "0.500"


def _two_engine_analysis(shared: bool = False, llama_trials: int = 3) -> dict:
    """llama's plain step 6 ms and step 15 ms (MAL 4), vllm's 8 ms and 10 ms (MAL 4), a
    little spread per start; plus an arm only llama ran (no group for it)."""
    def cells(engine: str, plain: list[float], step: list[float], arm: str = "a") -> list:
        base = f"{engine}/t/none/w/c1"
        return [
            {"cell": base, "arm": "none", "n": None, "concurrency": 1, "engine": engine,
             "baseline_cell": None,
             "per_trial_pooled_tok_s": {str(k): 1000 / v for k, v in enumerate(plain)}},
            {"cell": f"{engine}/t/{arm}/n4/w/c1", "arm": arm, "n": 4, "concurrency": 1,
             "engine": engine, "baseline_cell": base,
             "acceptance": {"mean_acceptance_length": 4.0},
             "per_trial_pooled_tok_s": {str(k): 4000 / v for k, v in enumerate(step)}}]

    speedup = {"geomean": 1.5, "ci95": [1.4, 1.6]} | ({"n_server_starts": 1} if shared else {})
    llama = cells("llama", [6.0, 6.1, 5.9][:llama_trials], [15.0, 15.3, 14.8][:llama_trials])
    vllm = cells("vllm", [8.0, 8.1], [10.0, 10.2])
    only = cells("llama", [6.0, 6.1, 5.9], [15.0, 15.3, 14.8], arm="b")[1:]
    pairs = [{"arm": c["arm"], "n": 4, "concurrency": 1, "workload": "w", "engine": c["engine"],
              "model": "t", "cell": c["cell"], "speedup": speedup}
             for c in (llama[1], vllm[1], only[0])]
    return {"cells": llama + vllm + only, "pairs": pairs}


def test_across_engines_pairs_each_arm_two_engines_ran() -> None:
    (g,) = step_cost.across_engines(_two_engine_analysis(), 0.95)  # arm b: llama only
    assert g["arm"] == "a" and [s["engine"] for s in g["sides"]] == ["llama", "vllm"]
    (r,) = g["ratios"]
    assert (r["a"], r["b"]) == (0, 1)
    step = r["figures"]["step_ms"]
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert step["ratio"] == pytest.approx(gm([10.0, 10.2]) / gm([15.0, 15.3, 14.8]))
    assert step["ci"][1] < 1  # vllm's step is the cheaper, with room to say so
    assert r["figures"]["plain_ms"]["ratio"] == pytest.approx(gm([8.0, 8.1]) / gm([6.0, 6.1, 5.9]))
    assert g["sides"][1]["step"]["cost"]["per_start"] == pytest.approx([10 / 8, 10.2 / 8.1])


def test_across_engines_gives_no_interval_without_independent_starts() -> None:
    (g,) = step_cost.across_engines(_two_engine_analysis(shared=True), 0.95)
    assert g["ratios"][0]["figures"]["step_ms"]["ci"] is None  # trials shared their starts
    assert not g["sides"][0]["own_starts"]
    (g,) = step_cost.across_engines(_two_engine_analysis(llama_trials=1), 0.95)
    fig = g["ratios"][0]["figures"]["step_ms"]
    assert fig["ci"] is None and fig["ratio"] == pytest.approx(
        math.sqrt(10.0 * 10.2) / 15.0)  # one llama start: a figure, no interval


def test_the_report_shows_the_engines_side_by_side() -> None:
    from pathlib import Path

    from crossbench.report.html import engine_tables
    from crossbench.report.study import Study

    study = Study(Path("."), "matrix", "x", None, _two_engine_analysis(shared=True) | {
        "options": None}, [], varying=("engine", "arm"))
    tables = engine_tables(study)
    assert tables is not None
    per, ratios = tables
    assert [row[1] for row in per.rows] == ["llama (t)", "vllm (t)"]
    assert per.rows[1][5].startswith("10.10 [")  # vllm's step, ms, with its starts' interval
    (row,) = ratios.rows
    assert row[1] == "vllm (t) / llama (t)" and row[-1] == "trials shared starts: no interval"
    assert row[2].endswith("n/a")  # no interval printed
    empty = Study(Path("."), "matrix", "x", None, {"pairs": [], "cells": []}, [])
    assert engine_tables(empty) is None


def test_across_engines_leaves_out_a_side_it_cannot_time() -> None:
    """A side without MAL or with a rate missing gives no step (and so no ratio), not an
    error: the report and `analyze` read whatever a run holds."""
    a = _two_engine_analysis()
    for c in a["cells"]:
        if c["cell"] == "vllm/t/a/n4/w/c1":
            c["acceptance"] = {}
    (g,) = step_cost.across_engines(a, 0.95)
    assert g["sides"][1]["step"] is None and g["ratios"] == []
    b = _two_engine_analysis()
    b["cells"][0]["per_trial_pooled_tok_s"]["0"] = None  # llama's baseline, trial 0
    (g,) = step_cost.across_engines(b, 0.95)
    assert g["sides"][0]["step"] is None and g["ratios"] == []
