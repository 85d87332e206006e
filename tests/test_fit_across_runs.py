"""`crossbench fit`: one method's cost model over several runs, each n paired with its own
run's baseline, checked on runs whose true d and v are known (simulated on "machines" of
different baseline rates) and on the round-4 vLLM archive."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from standins.study import Arm, study
from test_analysis_sweep import CURVE, D, V, _acceptance, true_speedup

from crossbench.analysis.fit import Source, fit_across
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.frames import open_run

ROUND4_VLLM = (Path(__file__).resolve().parents[1]
               / "examples/h200-methods/round4/h200-methods-round4-vllm.zip")
OPTS = StatsOptions(resamples=1000)
PROMPTS = [(f"p{i}", "code" if i % 2 else "math") for i in range(8)]


def _run(root: Path, ns: list[int], base_rate: float, seed: int | None = None,
         arm: str = "dft", **kwargs: object) -> Path:
    """A run of the baseline and ``arm`` at each n on a machine whose baseline decodes at
    ``base_rate``; with ``seed``, each request's rate has prompt and request noise."""
    rng = np.random.default_rng(seed)
    prompt_effect = {p: rng.normal(0, 0.05) if seed is not None else 0.0 for p, _ in PROMPTS}
    noise: dict[tuple[object, ...], float] = {}

    def rate(a: Arm, pid: str, trial: int, occ: int) -> float:
        key = (a.n, pid, trial, occ)
        noise.setdefault(key, rng.normal(0, 0.03) if seed is not None else 0.0)
        s = 1.0 if a.n is None else true_speedup(a.n)
        return base_rate * s * float(np.exp(prompt_effect[pid] + noise[key]))

    arms = [Arm("none")] + [Arm(arm, "draft-simple", n, acceptance=_acceptance(n)) for n in ns]
    study(root, PROMPTS, arms, rate, trials=3, **kwargs)  # type: ignore[arg-type]
    return root


def _source(root: Path) -> Source:
    run = load_run(root)
    from crossbench.analysis.analyze import analyze_run

    return Source(str(root), analyze_run(run, OPTS), {c.id: c for c in run.cells}, OPTS)


def _on_machine(root: Path, gpu_uuid: str, boot_id: str) -> None:
    """Record in every trial of the run the host and GPU it ran on (as a crossbench run's
    provenance does)."""
    for path in root.glob("cells/*/manifest.json"):
        m = json.loads(path.read_text())
        for entry in m["trials"]:
            entry["provenance"] = {
                "host": {"cpu": "Test CPU", "boot_id": boot_id},
                "gpu": {"gpus": [{"index": 0, "name": "Test GPU", "uuid": gpu_uuid}]}}
        path.write_text(json.dumps(m))


def test_a_line_over_three_machines_recovers_d_and_v(tmp_path):
    """Three runs of one method, each on a machine of its own baseline rate (100, 60 and 150
    tok/s) and its own n (run 2 a single n, runs 1 and 3 sharing n = 2): the fit over all
    five points recovers the true d and v, and its intervals hold them."""
    sources = [_source(_run(tmp_path / "a", [1, 2], 100.0, seed=1)),
               _source(_run(tmp_path / "b", [4], 60.0, seed=2)),
               _source(_run(tmp_path / "c", [2, 6], 150.0, seed=3))]
    r = fit_across(sources, "dft")
    f = r["fit"]
    assert f["points"] == 5 and f["distinct_n"] == 4
    assert [(p["source"], p["n"]) for p in r["points"]] == [(1, 1), (1, 2), (2, 4), (3, 2),
                                                            (3, 6)]
    assert f["d"] == pytest.approx(D, abs=0.08) and f["v"] == pytest.approx(V, abs=0.02)
    assert f["d_ci95"][0] <= D <= f["d_ci95"][1] and f["v_ci95"][0] <= V <= f["v_ci95"][1]
    assert f["r2"] is not None and f["r2"] > 0.9
    assert [s["seed"] for s in r["sources"]] == [0, 1, 2]  # independent bootstrap streams
    assert [s["baseline_tok_s"] for s in r["sources"]] == pytest.approx([100, 60, 150],
                                                                        rel=0.05)
    for p in r["points"]:
        assert p["step_cost"] == pytest.approx(p["tau"] / p["speedup"])
        assert p["baseline_ms_per_token"] == pytest.approx(1e3 / p["baseline_tok_s"])
    assert r["warnings"] == []


def test_the_intervals_cover_the_truth_over_many_studies(tmp_path):
    """20 studies of the three machines above, each with its own noise: d's and v's intervals
    hold the truth in most (nominal 95 %; each in 19 of 20 when this test was written)."""
    hits_d = hits_v = 0
    for k in range(20):
        sources = [_source(_run(tmp_path / f"{k}a", [1, 2], 100.0, seed=10 * k + 1)),
                   _source(_run(tmp_path / f"{k}b", [4], 60.0, seed=10 * k + 2)),
                   _source(_run(tmp_path / f"{k}c", [2, 6], 150.0, seed=10 * k + 3))]
        f = fit_across(sources, "dft")["fit"]
        hits_d += f["d_ci95"][0] <= D <= f["d_ci95"][1]
        hits_v += f["v_ci95"][0] <= V <= f["v_ci95"][1]
    print("studies whose d and v intervals hold the truth, of 20:", hits_d, hits_v)
    assert hits_d >= 16 and hits_v >= 16, (hits_d, hits_v)


def test_without_noise_the_fit_is_exact_and_shared_n_both_count(tmp_path):
    """Noiseless runs on two machines that both measured n = 4: both points count, and the
    line is the true one, whatever the machines' baseline rates."""
    sources = [_source(_run(tmp_path / "a", [1, 4], 100.0)),
               _source(_run(tmp_path / "b", [4, 6], 40.0))]
    r = fit_across(sources, "dft")
    assert [p["n"] for p in r["points"]] == [1, 4, 4, 6] and r["fit"]["points"] == 4
    assert (r["fit"]["d"], r["fit"]["v"]) == pytest.approx((D, V), abs=1e-6)
    assert r["fit"]["d_ci95"] == pytest.approx([D, D], abs=1e-6)
    assert [p["tau"] for p in r["points"]] == pytest.approx(
        [1 + sum(CURVE[:n]) for n in (1, 4, 4, 6)])


def test_one_source_gives_the_per_run_cost_model(tmp_path):
    root = _run(tmp_path / "a", [1, 2, 4], 100.0, seed=5)
    src = _source(root)
    (sweep,) = src.analysis["sweeps"]
    cm = sweep["cost_model"]
    f = fit_across([src], "dft")["fit"]
    assert (f["d"], f["v"], f["r2"]) == (cm["d"], cm["v"], cm["r2"])
    assert (f["d_ci95"], f["v_ci95"]) == (cm["d_ci95"], cm["v_ci95"])  # same seed, same draws


def test_an_arm_missing_from_a_source_is_refused_first(tmp_path):
    a = _run(tmp_path / "a", [1, 2], 100.0)
    b = _run(tmp_path / "b", [4], 60.0, arm="other")
    with pytest.raises(UserError) as e:
        fit_across([_source(a), _source(b)], "dft")
    assert str(b) in e.value.message and "arm 'dft' has no paired cell" in e.value.message
    assert "synthetic/synthetic-model/other (c=1)" in (e.value.hint or "")
    r = CliRunner().invoke(cli, ["fit", str(a), str(b), "--arm", "dft"])
    assert r.exit_code == 2 and r.stdout == ""
    assert f"error: {b}: arm 'dft' has no paired cell with an n at concurrency 1" in r.stderr


def test_one_n_over_all_sources_is_refused(tmp_path):
    sources = [_source(_run(tmp_path / "a", [4], 100.0)),
               _source(_run(tmp_path / "b", [4], 60.0))]
    with pytest.raises(UserError, match="one n \\(4\\) over 2 source\\(s\\)"):
        fit_across(sources, "dft")


def test_machines_and_setups_that_differ_are_said(tmp_path):
    a = _run(tmp_path / "a", [1, 2], 100.0)
    b = _run(tmp_path / "b", [4], 60.0, load={"max_tokens": 32})
    _on_machine(a, "GPU-aaaaaaaa-1111", "boot-a")
    _on_machine(b, "GPU-bbbbbbbb-2222", "boot-b")
    r = fit_across([_source(a), _source(b)], "dft")
    assert r["sources"][1]["machines"] == [
        {"cpu": "Test CPU", "boot_id": "boot-b",
         "gpus": [{"name": "Test GPU", "uuid": "GPU-bbbbbbbb-2222"}]}]
    (machine_note,) = [n for n in r["notes"] if "machines" in n]
    assert machine_note.startswith("the points come from 2 machines (source 1: Test GPU "
                                   "GPU-aaaaaaaa, Test CPU, boot boot-a; source 2:")
    assert "is not in the interval" in machine_note
    (w,) = r["warnings"]
    assert w["field"] == "load.max_tokens" and w["values"] == {1: 64, 2: 32}


def test_cli_prints_the_points_and_writes_the_json(tmp_path):
    a = _run(tmp_path / "a", [1, 4], 100.0)
    b = _run(tmp_path / "b", [6], 40.0)
    out = tmp_path / "fit.json"
    r = CliRunner().invoke(cli, ["fit", str(a), str(b), "--arm", "dft", "--json", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == ("cost model of dft (synthetic, c=1) over 2 source(s), 3 points, "
                        "n = 1, 4, 6")
    assert lines[1].startswith(f"C(n) = d + v n: d {D:.3f} [{D:.3f}, {D:.3f}], v {V:.4f}")
    assert lines[3].split() == ["src", "n", "tau", "speedup", "C(n)", "base", "tok/s",
                                "ms/tok", "cell"]
    assert lines[6].split()[:2] == ["2", "6"] and lines[6].endswith(
        "synthetic/synthetic-model/dft/n6/synthetic/c1")
    assert lines[6].split()[5:7] == ["40.0", "25.00"]  # the source's baseline rate, ms/token
    assert f"source 2: {b} (n = 6; no host/GPU recorded)" in lines
    data = json.loads(out.read_text())
    assert data["kind"] == "crossbench.fit" and data["fit"]["d"] == pytest.approx(D, abs=1e-6)
    assert len(data["points"]) == 3 and data["sources"][1]["path"] == str(b)
    again = CliRunner().invoke(cli, ["fit", str(a), "--arm", "dft", "--json", str(out)])
    assert again.exit_code == 2 and f"--json {out} already exists" in again.stderr


def test_the_round4_archive_gives_its_own_analysis(tmp_path):
    """vLLM EAGLE-3 at n = 4 and 8 (round 4): the fit over the archive alone is the archive's
    own cost model, d 0.885 and v 0.105 (docs/cross-engine.md)."""
    with open_run(ROUND4_VLLM) as frames:
        cm = next(s for s in frames.analysis["sweeps"] if s["arm"] == "eagle3-a0.9"
                  and s["concurrency"] == 1)["cost_model"]
    out = tmp_path / "fit.json"
    r = CliRunner().invoke(cli, ["fit", str(ROUND4_VLLM), "--arm", "eagle3-a0.9", "--engine",
                                 "vllm", "--json", str(out)])
    assert r.exit_code == 0, r.output
    f = json.loads(out.read_text())["fit"]
    assert (f["d"], f["v"]) == (cm["d"], cm["v"])
    assert (round(f["d"], 3), round(f["v"], 3)) == (0.885, 0.105)
    assert f["r2"] is None  # two n: no R^2
    assert "d 0.885 [0.751, 1.021], v 0.1054 [0.0774, 0.1345]" in r.stdout
    assert "NVIDIA H200 GPU-d0ebe58c" in r.stdout


CROSS_ROUND1 = (Path(__file__).resolve().parents[1]
                / "examples/h200-cross/round1/h200-cross-round1.zip")


def test_an_arm_on_two_engines_needs_engine(tmp_path):
    """The cross-engine round 1 archive holds synth-a0.9 at n = 2, 4 on llama.cpp and vLLM:
    without --engine the fit refuses and names both; with it, each engine's line stands."""
    r = CliRunner().invoke(cli, ["fit", str(CROSS_ROUND1), "--arm", "synth-a0.9",
                                 "--resamples", "200"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "arm 'synth-a0.9' ran on 2 engines (llama, vllm)" in r.stderr
    assert "name one with --engine" in r.stderr
    out = tmp_path / "llama.json"
    r = CliRunner().invoke(cli, ["fit", str(CROSS_ROUND1), "--arm", "synth-a0.9", "--engine",
                                 "llama", "--resamples", "200", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["engine"] == "llama" and [p["n"] for p in data["points"]] == [2, 4]
    assert {p["cell"].split("/")[0] for p in data["points"]} == {"llama"}


def test_statistics_options_reach_every_source(tmp_path):
    """--resamples, --seed and --start-spread are those of `crossbench analyze`: the same
    seed gives the same interval, another seed another; a named start spread is used by
    every source and widens the interval; a bad option is refused before any run is read."""
    from seq_helpers import spread_file

    a = _run(tmp_path / "a", [1, 4], 100.0, seed=1)
    b = _run(tmp_path / "b", [6], 40.0, seed=2)

    def fit_json(name: str, *extra: str) -> dict:
        out = tmp_path / f"{name}.json"
        r = CliRunner().invoke(cli, ["fit", str(a), str(b), "--arm", "dft", "--resamples",
                                     "400", "--json", str(out), *extra])
        assert r.exit_code == 0, r.output
        return json.loads(out.read_text())

    s0, s0again, s7 = fit_json("s0"), fit_json("s0again"), fit_json("s7", "--seed", "7")
    assert s0["resamples"] == 400 and [s["seed"] for s in s7["sources"]] == [7, 8]
    assert s0["fit"]["d_ci95"] == s0again["fit"]["d_ci95"] != s7["fit"]["d_ci95"]
    assert s0["fit"]["d"] == s7["fit"]["d"]  # the point estimate does not resample
    wide = fit_json("wide", "--start-spread",
                    str(spread_file(tmp_path / "spread.json", engine="synthetic", sigma=0.3)))
    assert [s["start_spread"] for s in wide["sources"]] == [True, True]
    lo, hi = wide["fit"]["d_ci95"]
    assert hi - lo > s0["fit"]["d_ci95"][1] - s0["fit"]["d_ci95"][0]
    r = CliRunner().invoke(cli, ["fit", str(tmp_path / "missing"), "--arm", "dft",
                                 "--resamples", "10"])
    assert r.exit_code == 2 and "--resamples 10 is too few" in r.stderr


def test_the_order_of_the_sources_changes_nothing(tmp_path):
    """vLLM DFlash over rounds 2 and 4 either way round: the same line, the same intervals,
    each source on the seed of its rank by when its first trial started (round 2, the
    earlier, keeps the analysis's seed)."""
    round2 = ROUND4_VLLM.parent.parent / "round2" / "h200-methods-round2.zip"
    fits = []
    for order in ((round2, ROUND4_VLLM), (ROUND4_VLLM, round2)):
        out = tmp_path / f"fit-{len(fits)}.json"
        r = CliRunner().invoke(cli, ["fit", *map(str, order), "--arm", "dflash-a0.9",
                                     "--engine", "vllm", "--resamples", "500", "--json",
                                     str(out)])
        assert r.exit_code == 0, r.output
        fits.append(json.loads(out.read_text()))
    a, b = fits
    for key in ("d", "v", "r2", "d_ci95", "v_ci95"):  # the points' order moves the last bits
        assert a["fit"][key] == pytest.approx(b["fit"][key], rel=1e-12), key
    assert {s["path"]: s["seed"] for s in a["sources"]} == \
        {s["path"]: s["seed"] for s in b["sources"]} == {str(round2): 0, str(ROUND4_VLLM): 1}


def _cut_short(root: Path, n: int) -> None:
    """Make the run look cut short before the arm's cell at ``n`` ran: its cell folder holds
    no trial and no request."""
    (cell,) = [p for p in root.glob("cells/*") if f"__n{n}__" in p.name]
    m = json.loads((cell / "manifest.json").read_text())
    m["trials"] = []
    (cell / "manifest.json").write_text(json.dumps(m))
    (cell / "requests.jsonl").write_text("")


def test_a_cell_a_cut_run_never_ran_is_left_out_and_named(tmp_path):
    whole = _run(tmp_path / "a", [1, 2], 100.0, seed=3)
    cut = _run(tmp_path / "b", [4, 8], 60.0, seed=4)
    _cut_short(cut, 8)
    result = fit_across([_source(whole), _source(cut)], "dft")
    assert [p["n"] for p in result["points"]] == [1, 2, 4]
    f = result["fit"]
    assert f["d_ci95"] is not None and f["d_ci95"][0] < D < f["d_ci95"][1]
    assert f["v_ci95"] is not None and f["v_ci95"][0] < V < f["v_ci95"][1]
    assert any("left out 1 cell(s) with no measured trial (source 2 n=8)" in note
               for note in result["notes"])
    _cut_short(cut, 4)  # nothing of the arm measured in that run: refused, naming it
    with pytest.raises(UserError, match="has a measured trial") as e:
        fit_across([_source(whole), _source(cut)], "dft")
    assert str(cut) in e.value.message


def test_an_n_on_several_machines_says_how_far_apart_they_are(tmp_path):
    """The size of the machine difference the interval leaves out, where the runs measured an
    n on more than one machine: each machine's C(n) and their spread; an n on one machine, or
    a run that records no machine, says nothing."""
    a = _run(tmp_path / "a", [1, 4], 100.0)
    b = _run(tmp_path / "b", [4, 8], 60.0)
    c = _run(tmp_path / "c", [4], 80.0)  # no machine recorded: not counted
    _on_machine(a, "GPU-aaaaaaaa-1111", "boot-a")
    _on_machine(b, "GPU-bbbbbbbb-2222", "boot-b")
    r = fit_across([_source(a), _source(b), _source(c)], "dft")
    cost = {(p["source"], p["n"]): p["step_cost"] for p in r["points"]}
    (note,) = [n for n in r["notes"] if n.startswith("n = ")]
    assert note == (f"n = 4 ran on 2 machines: C(n) {cost[1, 4]:.3f} (source 1), "
                    f"{cost[2, 4]:.3f} (source 2) plain steps, 0.0% apart: a machine "
                    "difference of that size is in no interval")
    same = fit_across([_source(a), _source(_run(tmp_path / "d", [2], 90.0))], "dft")
    assert not [n for n in same["notes"] if n.startswith("n = ")]


def test_a_run_of_two_targets_gives_each_its_own_line_by_target(tmp_path):
    """One run holding the arm on two targets (a MoE target and its dense twin, each with its
    own baseline, as matrices/h200-moe.yaml runs them), noiseless, of known lines: without
    --target the fit is refused with the targets named; with it each target's points give
    exactly its own d and v, paired with its own baseline."""
    lines = {"moe": (1.6, 0.30), "dense": (D, V)}
    base = {"moe": 70.0, "dense": 100.0}

    def rate(a: Arm, pid: str, trial: int, occ: int) -> float:
        assert a.model is not None
        if a.n is None:
            return base[a.model]
        d, v = lines[a.model]
        return base[a.model] * (1 + sum(CURVE[:a.n])) / (d + v * a.n)

    arms = [Arm("none", model=m) for m in lines] + [
        Arm("dft", "draft-simple", n, acceptance=_acceptance(n), model=m)
        for m in lines for n in (1, 2, 4)]
    root = tmp_path / "two"
    study(root, PROMPTS, arms, rate)
    src = _source(root)
    with pytest.raises(UserError) as e:
        fit_across([src], "dft")
    assert "ran with 2 target/method/workload" in e.value.message
    assert e.value.hint == "name one target with --target (dense, moe)"
    for model, (d, v) in lines.items():
        r = fit_across([src], "dft", target=model)
        assert (r["fit"]["d"], r["fit"]["v"]) == pytest.approx((d, v), abs=1e-6)
        assert r["target"] == model and {p["n"] for p in r["points"]} == {1, 2, 4}
        assert r["sources"][0]["baseline_tok_s"] == pytest.approx(base[model], rel=1e-3)
    with pytest.raises(UserError) as e:
        fit_across([src], "dft", target="moe-f16")
    assert "of target moe-f16" in e.value.message
    assert "synthetic/moe/dft (c=1)" in (e.value.hint or "")
    out = CliRunner().invoke(cli, ["fit", str(root), "--arm", "dft", "--target", "moe",
                                   "--resamples", "200"])
    assert out.exit_code == 0, out.stderr
    assert out.stdout.startswith("cost model of dft (synthetic, target moe, c=1) over 1 "
                                 "source(s), 3 points")
    assert "d 1.600 [1.600, 1.600], v 0.3000 [0.3000, 0.3000]" in out.stdout
