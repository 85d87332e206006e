"""benchmarks/step_cost_by_acceptance.py against analyses whose step costs are known by
construction: each arm's rate per start is built from a chosen C(n) and MAL, so the ratio
and its interval have true values to recover."""

from __future__ import annotations

import math
import re
from types import ModuleType
from typing import Any

import pytest
from bench_loader import load_benchmark

from crossbench.errors import UserError

BASE = "llama/t/none/w/c1"


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_benchmark("step_cost_by_acceptance.py")


def _cell(arm: str, rates: dict[str, float], mal: float | None = None, n: int | None = 4,
          baseline: str | None = BASE) -> dict[str, Any]:
    cell = f"llama/t/{arm}/n{n}/w/c1" if mal is not None else BASE
    return {"cell": cell, "arm": arm, "n": n if mal is not None else None, "concurrency": 1,
            "engine": "llama", "baseline_cell": baseline if mal is not None else None,
            "per_trial_pooled_tok_s": rates,
            "acceptance": {"mean_acceptance_length": mal} if mal is not None else {}}


def _analysis(costs_a: list[float], costs_b: list[float], base: list[float],
              mal_a: float = 4.0, mal_b: float = 2.5) -> dict[str, Any]:
    """Rates such that start k of arm a costs ``costs_a[k]`` plain steps of the baseline's
    start k (rate = MAL x base / C), likewise b."""
    keys = [str(k) for k in range(len(base))]
    b0 = dict(zip(keys, base, strict=True))
    ra = {k: mal_a * b0[k] / c for k, c in zip(keys, costs_a, strict=True)}
    rb = {k: mal_b * b0[k] / c for k, c in zip(keys, costs_b, strict=True)}
    return {"cells": [_cell("none", b0), _cell("a", ra, mal_a), _cell("b", rb, mal_b)]}


def test_recovers_known_costs_and_their_ratio(mod: ModuleType) -> None:
    """Each start's C(n) comes back exactly; the ratio is the geometric mean of the per-start
    ratios, with Student's t (2 df) over their logs."""
    costs_a, costs_b = [2.10, 2.12, 2.15], [2.00, 2.01, 2.03]
    out = mod.compare(_analysis(costs_a, costs_b, [150.0, 152.0, 149.0]), "a", "b")
    assert out["arms"]["a"]["cost"]["per_start"] == pytest.approx(costs_a)
    assert out["arms"]["b"]["cost"]["per_start"] == pytest.approx(costs_b)
    logs = [math.log(x / y) for x, y in zip(costs_a, costs_b, strict=True)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
    ratio = out["ratio"]
    assert ratio["geomean"] == pytest.approx(math.exp(mean))
    assert ratio["ci"] == pytest.approx([math.exp(mean - half), math.exp(mean + half)])
    assert ratio["ci"][0] > 1.0  # a dearer step, and the interval says so
    assert out["n"] == 4 and out["engine"] == "llama" and ratio["starts"] == 3


def test_equal_costs_give_an_interval_around_one(mod: ModuleType) -> None:
    out = mod.compare(_analysis([2.0, 2.1, 1.9], [2.1, 1.9, 2.0], [150.0] * 3), "a", "b")
    lo, hi = out["ratio"]["ci"]
    assert lo < 1.0 < hi


def test_the_baseline_cancels_from_the_ratio(mod: ModuleType) -> None:
    """A slower baseline start moves each arm's C(n) but not their ratio."""
    one = mod.compare(_analysis([2.1, 2.2, 2.15], [2.0, 2.0, 2.05], [150.0] * 3), "a", "b")
    rates = {c["arm"]: c["per_trial_pooled_tok_s"]
             for c in _analysis([2.1, 2.2, 2.15], [2.0, 2.0, 2.05], [150.0] * 3)["cells"]}
    moved = {"cells": [_cell("none", {"0": 120.0, "1": 150.0, "2": 150.0}),
                       _cell("a", rates["a"], 4.0), _cell("b", rates["b"], 2.5)]}
    two = mod.compare(moved, "a", "b")
    assert two["ratio"]["per_start"] == pytest.approx(one["ratio"]["per_start"])
    assert two["arms"]["a"]["cost"]["per_start"][0] == pytest.approx(2.1 * 120 / 150)


@pytest.mark.parametrize(("change", "says"), [
    ("one_trial", "1 trial(s) with a decode rate"),
    ("other_trials", "trial indices differ"),
    ("no_mal", "no mean accepted length"),
    ("other_baseline", "do not share one baseline cell"),
    ("no_arm", "--arm c: 0 cells"),
])
def test_refuses_what_it_cannot_compare(mod: ModuleType, change: str, says: str) -> None:
    a = _analysis([2.1, 2.2], [2.0, 2.0], [150.0, 150.0])
    cells = {c["arm"]: c for c in a["cells"]}
    arm = "a"
    if change == "one_trial":
        for c in a["cells"]:
            c["per_trial_pooled_tok_s"] = {"0": c["per_trial_pooled_tok_s"]["0"]}
    elif change == "other_trials":
        cells["b"]["per_trial_pooled_tok_s"] = {"0": 100.0, "5": 100.0}
    elif change == "no_mal":
        cells["b"]["acceptance"] = {}
    elif change == "other_baseline":
        cells["b"]["baseline_cell"] = "llama/t/none/w/c16"
    else:
        arm = "c"
    with pytest.raises(UserError, match=re.escape(says)):
        mod.compare(a, arm, "b")


def test_main_prints_and_writes_json(mod: ModuleType, tmp_path: Any,
                                     capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line: one line per arm and the ratio, the JSON the same figures."""
    import contextlib
    import json

    analysis = _analysis([2.1, 2.2, 2.15], [2.0, 2.0, 2.05], [150.0, 152.0, 149.0])

    @contextlib.contextmanager
    def fake_open(_path: Any) -> Any:
        yield type("F", (), {"analysis": analysis})()

    import crossbench.frames

    monkeypatch.setattr(crossbench.frames, "open_run", fake_open)
    out = tmp_path / "r.json"
    assert mod.main(["run", "--arm", "a", "--against", "b", "--json", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()
    data = json.loads(out.read_text())
    ratio = data["ratio"]
    assert said[-1] == (f"  a / b: {ratio['geomean']:.3f} [{ratio['ci'][0]:.3f}, "
                        f"{ratio['ci'][1]:.3f}]")
    cost = data["arms"]["a"]["cost"]
    assert cost["geomean"] == pytest.approx((2.1 * 2.2 * 2.15) ** (1 / 3))
    assert said[1] == (f"  a: MAL 4.000, C(n) {cost['geomean']:.3f} [{cost['ci'][0]:.3f}, "
                       f"{cost['ci'][1]:.3f}]")


def test_main_says_what_is_wrong_in_one_line(mod: ModuleType,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    import crossbench.frames

    analysis = _analysis([2.1, 2.2], [2.0, 2.0], [150.0, 150.0])

    @contextlib.contextmanager
    def fake_open(_path: Any) -> Any:
        yield type("F", (), {"analysis": analysis})()

    monkeypatch.setattr(crossbench.frames, "open_run", fake_open)
    assert mod.main(["run", "--arm", "c", "--against", "b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("step_cost_by_acceptance: --arm c: 0 cells at c=1 match")
    assert "(fix: name one cell" in err and "Traceback" not in err
