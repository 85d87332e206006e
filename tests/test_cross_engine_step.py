"""benchmarks/cross_engine_step.py against analyses whose step costs are known by
construction: each engine's arm rate per start is built from a chosen step in ms and MAL,
each baseline's from a chosen plain step, so every figure and ratio has a true value."""

from __future__ import annotations

import json
import math
import re
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
from bench_loader import load_benchmark

from crossbench.analysis.stats import welch_interval
from crossbench.errors import UserError


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_benchmark("cross_engine_step.py")


def _analysis(engine: str, plain_ms: list[float], step_ms: list[float], mal: float,
              arm: str = "eagle3-a0.9") -> dict[str, Any]:
    """A run whose baseline start k takes ``plain_ms[k]`` a token and whose arm's start k
    takes ``step_ms[k]`` a step of ``mal`` tokens."""
    base = f"{engine}/t/none/w/c1"
    return {"cells": [
        {"cell": base, "arm": "none", "n": None, "concurrency": 1, "engine": engine,
         "baseline_cell": None, "acceptance": {},
         "per_trial_pooled_tok_s": {str(k): 1000.0 / v for k, v in enumerate(plain_ms)}},
        {"cell": f"{engine}/t/{arm}/n4/w/c1", "arm": arm, "n": 4, "concurrency": 1,
         "engine": engine, "baseline_cell": base, "acceptance": {"mean_acceptance_length": mal},
         "per_trial_pooled_tok_s": {str(k): 1000.0 * mal / v for k, v in enumerate(step_ms)}},
    ]}


def _gm(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


LLAMA = dict(plain_ms=[6.8, 6.7, 6.9], step_ms=[14.8, 15.0, 14.6], mal=3.97)
VLLM = dict(plain_ms=[8.1, 8.2], step_ms=[10.4, 10.2], mal=4.01)


def test_recovers_each_engines_steps_and_the_ratios(mod: ModuleType) -> None:
    out = mod.compare(_analysis("llama", **LLAMA), _analysis("vllm", **VLLM), "eagle3-a0.9")
    a, b = out["a"], out["b"]
    assert a["step_ms"]["per_start"] == pytest.approx(LLAMA["step_ms"])
    assert b["plain_ms"]["per_start"] == pytest.approx(VLLM["plain_ms"])
    assert a["cost"]["per_start"] == pytest.approx(
        [s / p for s, p in zip(LLAMA["step_ms"], LLAMA["plain_ms"], strict=True)])
    assert (a["tok_s"]["starts"], b["tok_s"]["starts"]) == (3, 2)
    step = out["ratios"]["step_ms"]
    assert step["ratio"] == pytest.approx(_gm(VLLM["step_ms"]) / _gm(LLAMA["step_ms"]))
    # Welch over the two engines' independent starts, on the logs
    expect = welch_interval([math.log(v) for v in VLLM["step_ms"]],
                            [math.log(v) for v in LLAMA["step_ms"]], 0.95)
    assert step["ci"] == pytest.approx(list(expect))
    assert step["ci"][1] < 1.0  # vLLM's step is the cheaper here, and the interval says so
    rate = out["ratios"]["tok_s"]
    assert rate["ratio"] == pytest.approx(
        (4.01 / _gm(VLLM["step_ms"])) / (3.97 / _gm(LLAMA["step_ms"])))
    assert out["mal_ratio"] == pytest.approx(4.01 / 3.97)
    assert out["ratios"]["cost"]["ratio"] == pytest.approx(
        b["cost"]["geomean"] / a["cost"]["geomean"])


def test_equal_engines_give_intervals_around_one(mod: ModuleType) -> None:
    one = dict(plain_ms=[7.0, 7.1, 6.9], step_ms=[12.0, 12.3, 11.8], mal=4.0)
    out = mod.compare(_analysis("llama", **one), _analysis("vllm", **one), "eagle3-a0.9")
    for key in ("tok_s", "step_ms", "plain_ms", "cost"):
        lo, hi = out["ratios"][key]["ci"]
        assert lo < 1.0 < hi, key


@pytest.mark.parametrize(("change", "says"), [
    ("one_trial", "run B: cell vllm/t/eagle3-a0.9/n4/w/c1: 1 trial(s)"),
    ("other_trials", "run B: trial indices differ"),
    ("no_mal", "run B: cell vllm/t/eagle3-a0.9/n4/w/c1: no mean accepted length"),
    ("no_arm", "run B: --arm eagle3-a0.9: 0 cells at c=1, n=4 match"),
])
def test_refuses_what_it_cannot_compare(mod: ModuleType, change: str, says: str) -> None:
    b = _analysis("vllm", **VLLM)
    arm = b["cells"][1]
    if change == "one_trial":
        arm["per_trial_pooled_tok_s"] = {"0": 400.0}
    elif change == "other_trials":
        arm["per_trial_pooled_tok_s"] = {"0": 400.0, "7": 390.0}
    elif change == "no_mal":
        arm["acceptance"] = {}
    else:
        arm["arm"] = "dflash-a0.9"
    with pytest.raises(UserError, match=re.escape(says)):
        mod.compare(_analysis("llama", **LLAMA), b, "eagle3-a0.9")


def _trials(cells: list[str], gpu: str, share: float) -> pd.DataFrame:
    return pd.DataFrame([{"cell": c, "gpus": gpu, "boot_id": "boot", "gpu_busy_share": share}
                         for c in cells for _ in range(2)])


def _fake_runs(monkeypatch: pytest.MonkeyPatch, gpu_b: str) -> None:
    import contextlib

    import crossbench.frames

    runs = {"A": (_analysis("llama", **LLAMA), "GPU-1", 0.6),
            "B": (_analysis("vllm", **VLLM), gpu_b, 0.75)}

    @contextlib.contextmanager
    def fake_open(path: Any) -> Any:
        analysis, gpu, share = runs[str(path)]
        cells = [c["cell"] for c in analysis["cells"]]
        yield type("F", (), {"analysis": analysis, "trials": _trials(cells, gpu, share)})()

    monkeypatch.setattr(crossbench.frames, "open_run", fake_open)


def test_main_splits_each_step_by_its_busy_share(mod: ModuleType, tmp_path: Any,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_runs(monkeypatch, "GPU-1")
    out = tmp_path / "r.json"
    assert mod.main(["A", "B", "--arm", "eagle3-a0.9", "--json", str(out)]) == 0
    said = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["same_gpu"] and data["same_boot"]
    split = data["b"]["split"]
    step = _gm(VLLM["step_ms"])
    assert split["gpu_busy_ms"] == pytest.approx(0.75 * step)
    assert split["host_ms"] == pytest.approx(0.25 * step)
    assert data["a"]["plain_split"]["gpu_busy_ms"] == pytest.approx(0.6 * _gm(LLAMA["plain_ms"]))
    r = data["ratios"]["step_ms"]
    assert f"B / A step ms: {r['ratio']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" in said
    assert "one GPU, one boot" in said


def test_main_refuses_two_machines_unless_asked(mod: ModuleType,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_runs(monkeypatch, "GPU-2")
    assert mod.main(["A", "B", "--arm", "eagle3-a0.9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cross_engine_step: the runs come from different GPUs (GPU-1, "
                          "GPU-2)") and "(fix: compare runs of one machine" in err
    assert mod.main(["A", "B", "--arm", "eagle3-a0.9", "--other-machines"]) == 0
    assert "DIFFERENT GPUs" in capsys.readouterr().out
    assert mod.main(["A", "B", "--arm", "nope"]) == 2  # bad input: one line, no traceback
    assert capsys.readouterr().err.startswith("cross_engine_step: run A: --arm nope: 0 cells")


def test_one_run_of_both_engines_is_split_by_engine(mod: ModuleType) -> None:
    """A run holding both engines (the same arm name in each) is A and B at once, each side
    picked by its engine; without the engines the cell is ambiguous and the error says how."""
    both = {"cells": _analysis("llama", **LLAMA)["cells"] + _analysis("vllm", **VLLM)["cells"]}
    with pytest.raises(UserError, match="run A: --arm eagle3-a0.9: 2 cells at c=1 match") as e:
        mod.compare(both, both, "eagle3-a0.9")
    assert "--engine-a/-b" in (e.value.hint or "")
    out = mod.compare(both, both, "eagle3-a0.9", engines=("llama", "vllm"))
    assert (out["a"]["engine"], out["b"]["engine"]) == ("llama", "vllm")
    assert out["b"]["step_ms"]["per_start"] == pytest.approx(VLLM["step_ms"])
