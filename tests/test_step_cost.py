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
