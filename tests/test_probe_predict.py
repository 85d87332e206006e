"""Probe-and-predict sweeps: the prediction arithmetic against a known cost line, the decision
rule, and a matrix on the vLLM stand-in (named as one: it serves no model). The stand-in's
steps take the same time at every n, so its cost line is flat (d = 1, v = 0) and its speedup at
n is tau(n): the truth the predictions are checked against."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from standins.vllm import write_launcher

from crossbench.analysis.sweep import predict_speedups, predicted_tau
from crossbench.runner.matrix import Cell, ProbePredict
from crossbench.runner.matrix_run import matrix_status, read_journal, run_matrix
from crossbench.runner.probe import ProbeController, probe_split, sweeps
from crossbench.store.rundir import read_predictions


def _cell(n: int | None, arm: str = "a") -> Cell:
    coords = {"engine": "e", "target": "t", "arm": arm if n is not None else "none",
              "method": "draft" if n is not None else "none", "n": n, "workload": "w",
              "concurrency": 1}
    return Cell(f"e/t/{coords['arm']}/n{n}", coords, "vllm", {}, {},
                None if n is None else "e/t/none/nNone")


def test_probes_are_the_ends_and_evenly_spaced_n() -> None:
    cells = [_cell(None), *[_cell(n) for n in (1, 2, 3, 4, 6, 8)], _cell(2, "b"), _cell(4, "b")]
    (long, short) = sorted(sweeps(cells), key=len, reverse=True)
    probes, rest = probe_split(long, 3)
    assert [c.coords["n"] for c in probes] == [1, 4, 8]
    assert [c.coords["n"] for c in rest] == [2, 3, 6]
    assert probe_split(short, 3) == (short, [])  # two n: all measured
    assert [c.coords["n"] for c in probe_split(long, 2)[0]] == [1, 8]


def test_predictions_recover_a_known_cost_line() -> None:
    d, v = 1.6, 0.25
    curve = [0.9 ** (k + 1) for k in range(8)]
    points = [{"n": n, "mean_acceptance_length": predicted_tau(curve, n),
               "speedup": predicted_tau(curve, n) / (d + v * n)} for n in (1, 4, 8)]
    rng = np.random.default_rng(0)  # draws of each point's log speedup around the truth
    draws = {p["n"]: np.log(p["speedup"]) + rng.normal(0, 0.01, 2000) for p in points}
    got = predict_speedups(points, curve, draws, [2, 3, 6, 9], 0.95)
    for n in (2, 3, 6):
        truth = predicted_tau(curve, n) / (d + v * n)
        assert got[n]["speedup"] == pytest.approx(truth, rel=1e-9)
        lo, hi = got[n]["ci95"]
        assert lo < truth < hi and hi - lo < 0.1 * truth
    assert got[9]["speedup"] is None and "positions 1-8" in got[9]["reason"]


def test_a_cost_that_may_reach_zero_gives_an_unbounded_interval() -> None:
    curve = [0.9, 0.8, 0.7]  # the line falls from cost 1 at n=1 to 0.3 at n=2: below 0 at 3
    points = [{"n": 1, "mean_acceptance_length": 1.9, "speedup": 1.9},
              {"n": 2, "mean_acceptance_length": 2.7, "speedup": 2.7 / 0.3}]
    rng = np.random.default_rng(1)
    draws = {1: np.log(1.9) + rng.normal(0, 0.5, 500),
             2: np.log(2.7 / 0.3) + rng.normal(0, 0.5, 500)}
    got = predict_speedups(points, curve, draws, [3], 0.95)[3]
    assert got["draws_unbounded"] > 0.025 * 500 and got["ci95"][1] is None


@pytest.mark.parametrize(("ci", "best", "action"), [
    ([0.9, 1.2], (1.5, [1.3, 1.7]), "measure"),   # straddles 1
    ([1.35, 1.45], (1.5, [1.3, 1.7]), "measure"),  # may be the best n
    ([1.05, 1.2], (1.5, [1.3, 1.7]), "predict"),   # clearly faster, clearly not the best
    ([0.7, 0.9], (1.5, [1.3, 1.7]), "predict"),    # clearly slower
    ([1.1, None], (1.5, [1.3, 1.7]), "measure"),   # unbounded above: may be the best
    ([0.6, 0.66], (0.64, [0.62, 0.66]), "predict"),  # near the best, but every n is slower
])
def test_the_rule_measures_only_what_is_unclear(ci: list[Any], best: Any, action: str) -> None:
    got, reason, verdict = ProbeController._rule(
        {"speedup": 1.0 if ci[1] is None else (ci[0] + ci[1]) / 2, "ci95": ci}, best)
    assert got == action, reason
    if action == "predict":
        assert verdict == ("faster" if ci[0] > 1 else "slower")


@pytest.mark.parametrize("ci", [[0.99, 0.999], [1.001, 1.015], [0.985, 1.01]])
def test_a_prediction_within_the_equivalence_band_is_indistinguishable(ci: list[float]) -> None:
    """As the analysis decides (stats.verdict): an interval wholly within +-2 % reads
    indistinguishable, so a holdout measured there agrees with its prediction."""
    got, reason, verdict = ProbeController._rule(
        {"speedup": (ci[0] + ci[1]) / 2, "ci95": ci}, (1.5, [1.3, 1.7]))
    assert (got, verdict) == ("predict", "indistinguishable"), reason
    assert "equivalence band" in reason


def _matrix(tmp_path: Path, **over: Any) -> Path:
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "4",
                            "--standin-prefill-ms", "1", "--standin-accept", "0.8")
    doc: dict[str, Any] = {
        "schema_version": 1, "study": {"name": "probe", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2, "enable_prefix_caching": False}}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 4, "warmup": 1, "max_tokens": 48, "ignore_eos": True},
        "arms": [{"method": "none"}, {"name": "ng", "method": "ngram", "n": "1-4,6,8"}],
        "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:mixed"]},
        "trials": 3, "telemetry_hz": 0,
        "probe_predict": {"probes": 3, "holdout": 1, "seed": 0},
        **over,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_sweep_runs_its_probes_then_only_what_the_prediction_leaves_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the holdout gate is tested below; here the predictions stand whatever the holdout
    # measured (on so few requests the stand-in's own acceptance draws can move a holdout
    # outside an interval that carries only the speed's sampling error: the gate then fires)
    monkeypatch.setattr(ProbeController, "check_holdouts", lambda self, progress: set())
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(_matrix(tmp_path), out, progress=said.append)
    decided = read_predictions(out)
    cell = {n: f"v/m/ng/n{n}/builtin-mixed/c1" for n in (1, 2, 3, 4, 6, 8)}
    assert set(decided) == {cell[2], cell[3], cell[6]}  # the probes n=1, 4, 8 are not decided
    actions = {n: decided[cell[n]]["action"] for n in (2, 3, 6)}
    # the stand-in's speedup is tau(n) = 1 + 0.8 + ... + 0.8^n: n=6 (3.95) is within reach of
    # the best (n=8, 4.33); n=2 (2.44) and n=3 (2.95) are clearly faster and clearly not best
    assert sorted([actions[2], actions[3]]) == ["holdout", "predict"], decided
    if actions[6] == "measure":  # its interval reached the best's lower end (the usual case)
        assert "may be the best n" in decided[cell[6]]["reason"]
    else:  # a quiet host can narrow the intervals enough to tell n=6 from n=8
        assert actions[6] == "predict" and decided[cell[6]]["predicted"]["verdict"] == "faster"
    journal = read_journal(out)
    ran = {c for c, _ in journal}
    predicted = next(cell[n] for n in (2, 3) if actions[n] == "predict")
    assert predicted not in ran and cell[1] in ran and cell[8] in ran
    assert (cell[6] in ran) == (actions[6] == "measure")
    from crossbench.analysis.analyze import analyze, tables
    from crossbench.analysis.paired import StatsOptions

    result = analyze(out, StatsOptions(resamples=400))
    curve = next(p for p in result["pairs"] if p["cell"] == cell[8])["acceptance"]["per_position"]
    for n in (2, 3):
        p = decided[cell[n]]["predicted"]
        assert p["tau"] == pytest.approx(predicted_tau(curve, n))  # the n=8 probe's curve
        # ... which estimates the stand-in's alpha^(k+1) from a few hundred verifications
        assert abs(p["tau"] - predicted_tau([0.8 ** (k + 1) for k in range(8)], n)) < 0.3
        assert p["verdict"] == "faster" and p["ci95"][0] > 1.0
    rows = {r["id"]: r for r in s["cells"]}
    assert rows[predicted]["predicted"] == 3 and rows[predicted]["missing"] == 0
    assert s["totals"]["predicted"] == 3 * list(actions.values()).count("predict")
    assert s["totals"]["missing"] == 0
    assert any("phase 2" in line for line in said)
    from crossbench.cli.matrix_cmd import format_status

    assert f"predicted: {predicted}: faster, speedup" in format_status(s)
    # the analysis lists every decision and checks the holdout against its measurement
    checks = result["predictions"]
    assert checks["counts"] == {a: list(actions.values()).count(a)
                                for a in ("measure", "holdout", "predict")}
    held = next(r for r in checks["cells"] if r["action"] == "holdout")
    assert held["measured"]["verdict"] == "faster" and held["verdict_agrees"] is True
    assert checks["holdouts"]["measured"] == 1
    assert "predictions" in tables(result)
    # a resume runs nothing and decides nothing again
    lines = (out / "predictions.jsonl").read_text()
    again = run_matrix(_matrix(tmp_path), out, resume=True)
    assert (out / "predictions.jsonl").read_text() == lines
    assert read_journal(out).keys() == journal.keys()
    assert again["totals"] == s["totals"] == matrix_status(out)["totals"]
    assert json.loads(lines.splitlines()[0])["model"]["probes"] == [1, 4, 8]


def test_a_matrix_without_a_long_sweep_says_probe_predict_changes_nothing(
        tmp_path: Path) -> None:
    from crossbench.runner.matrix import expand, load_matrix, validate_cells

    path = _matrix(tmp_path, arms=[{"method": "none"},
                                   {"name": "ng", "method": "ngram", "n": "2,4"}])
    m = load_matrix(path)
    notes = validate_cells(m, expand(m, path), path)
    assert any("no n-sweep has more than 3 n" in n for n in notes)
    assert ProbePredict().probes == 3


def _missed(monkeypatch: pytest.MonkeyPatch, factor: float, verdict: str | None = None
            ) -> None:
    """Make every measured holdout read as outside its interval, measured at ``factor``
    times its predicted speedup (and with ``verdict``, when given): the stand-in's flat
    cost line is predicted too well to miss on its own."""
    from crossbench.analysis import sweep as sw

    real = sw.prediction_checks

    def missed(decisions: dict[str, Any], pairs: list[dict[str, Any]]) -> dict[str, Any]:
        out = real(decisions, pairs)
        for r in out["cells"]:
            if r["action"] == "holdout" and r["measured"] is not None:
                r["inside"] = False
                r["measured"]["speedup"] = r["predicted"]["speedup"] * factor
                if verdict is not None:
                    r["measured"]["verdict"] = verdict
                    r["verdict_agrees"] = verdict == r["predicted"]["verdict"]
        return out

    monkeypatch.setattr(sw, "prediction_checks", missed)


def test_a_holdout_with_the_wrong_verdict_rejects_the_model_and_the_rest_is_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holdout gate: a holdout outside its interval whose verdict is not the predicted
    one rejects the model, so the sweep's predicted cell runs in a third phase, and nothing
    is left predicted."""
    _missed(monkeypatch, 0.5, verdict="slower")  # the stand-in's holdout is predicted faster
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(_matrix(tmp_path), out, progress=said.append)
    decided = read_predictions(out)
    assert not [r for r in decided.values() if r["action"] == "predict"], decided
    again, *_ = [r for r in decided.values() if r.get("replaces") == "predict"] or [decided]
    assert again["action"] == "measure" and "the cost model is rejected" in again["reason"]
    assert any("phase 3" in line for line in said)
    ran = {c for c, _ in read_journal(out)}
    assert again["cell"] in ran and s["totals"].get("predicted", 0) == 0
    assert s["totals"]["missing"] == 0


@pytest.mark.parametrize("factor", [1 / 1.03, 3.0])
def test_a_holdout_with_the_right_verdict_widens_the_predictions_by_its_miss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """A holdout outside its interval with the right verdict calibrates the model's error:
    every predicted interval of its sweep is widened by twice its relative miss. A 3 % miss
    leaves the stand-in's clearly faster predictions (about 2-3x: its cost line is flat)
    standing, with the wider interval; a threefold miss widens them past 1, so they are
    measured."""
    from crossbench.runner.probe import MODEL_ERROR_MARGIN

    _missed(monkeypatch, factor)
    out = tmp_path / "run"
    said: list[str] = []
    s = run_matrix(_matrix(tmp_path), out, progress=said.append)
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    first = {r["cell"]: r for r in lines if "replaces" not in r}
    redone = [r for r in lines if r.get("replaces") == "predict"]
    assert redone and {r["cell"] for r in redone} == \
        {c for c, r in first.items() if r["action"] == "predict"}
    widen = math.exp(MODEL_ERROR_MARGIN * abs(math.log(factor)))
    for r in redone:
        old = first[r["cell"]]["predicted"]["ci95"]
        if factor == 3.0:
            assert r["action"] == "measure" and "straddles 1" in r["reason"]
            continue
        assert r["action"] == "predict" and "the predicted verdict stands" in r["reason"]
        assert r["predicted"]["ci95"] == pytest.approx([old[0] / widen, old[1] * widen])
        assert r["predicted"]["widened_by"] == pytest.approx(widen)
        assert r["predicted"]["verdict"] == "faster" and r["predicted"]["ci95"][0] > 1
    left = [c for c, r in read_predictions(out).items() if r["action"] == "predict"]
    assert s["totals"].get("predicted", 0) == (0 if factor == 3.0 else 3 * len(left))
    assert any("phase 3" in line for line in said) == (factor == 3.0)
    assert s["totals"]["missing"] == 0
