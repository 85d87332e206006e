"""SGLang's simulated acceptance (``SGLANG_SIMULATE_ACC_LEN``, a mean accepted length per
verification step) through ``spec.synth_len``: the config, the server's environment and
record, the matrix's ``synth_alpha``, and the stand-in's recovered mean (stand-in, not
SGLang: no GPU has run it)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from standins.sglang import Simulated, simulated_from_env, write_launcher

from crossbench.cli.main import cli
from crossbench.engines import registry
from crossbench.errors import UserError
from crossbench.runner.matrix import expand, parse_matrix
from crossbench.runner.matrix_run import run_matrix

EAGLE3 = {"type": "EAGLE3", "n": 4, "draft_model": "a/b"}


def _server(**cfg: Any) -> Any:
    return registry.create("sglang", {"model": "Qwen/Qwen3-8B", **cfg}, Path("/dev/null"))


@pytest.mark.parametrize(("spec", "tokens"), [
    (EAGLE3, "real-draft-token"),
    ({"type": "DFLASH", "n": 4, "draft_model": "/fx/df"}, "real-draft-token"),
    ({"type": "STANDALONE", "n": 4, "draft_model": "/fx/d", "synth_tokens": "fixed"}, "fixed"),
    ({"type": "NGRAM", "n": 4}, "fixed"),
])
def test_synth_len_sets_sglangs_environment_and_no_flag(spec: dict[str, Any],
                                                        tokens: str) -> None:
    real = _server(spec={k: v for k, v in spec.items() if k != "synth_tokens"})
    srv = _server(spec={**spec, "synth_len": 3.5})
    assert srv.argv(srv.profile, "python3") == real.argv(real.profile, "python3")
    env = srv.base_environment()
    assert {k: env[k] for k in env if k.startswith("SGLANG_SIMULATE_ACC_")} == {
        "SGLANG_SIMULATE_ACC_LEN": "3.5", "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": tokens}
    assert not any(k.startswith("SGLANG_SIMULATE_ACC_") for k in real.base_environment())


def test_inherited_simulation_variables_are_dropped_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_LEN", "2.0")
    srv = _server(spec=EAGLE3)
    assert "SGLANG_SIMULATE_ACC_LEN" not in srv.base_environment()
    assert srv.warnings() == ["SGLANG_SIMULATE_ACC_LEN in crossbench's environment is not "
                              "passed to SGLang (set spec.synth_len for simulated acceptance)"]
    srv = _server(spec={**EAGLE3, "synth_len": 4.0951})
    assert srv.base_environment()["SGLANG_SIMULATE_ACC_LEN"] == "4.0951"


@pytest.mark.parametrize(("cfg", "message"), [
    ({"spec": {**EAGLE3, "synth_rates": [0.9, 0.81, 0.729, 0.6561]}},
     "spec: synth_rates: SGLang has no per-position synthetic acceptance "
     "(SGLANG_SIMULATE_ACC_LEN sets a mean accepted length per step); set synth_len: 4.0951 "
     "instead (1 + the sum of the rates, the same mean), or synth_alpha on a matrix arm"),
    ({"spec": {**EAGLE3, "synth_len": 5.5}},
     "spec: synth_len 5.5 exceeds n + 1 = 5 (a step commits at most its n drafts plus one; "
     "SGLang would clamp it silently); set synth_len <= 5"),
    ({"spec": {"type": "NGRAM", "n": 4, "synth_len": 2.0, "synth_tokens": "draft"}},
     "spec: synth_tokens draft: SGLang 0.5.17 forces real draft tokens only on a chain "
     "(speculative_eagle_topk 1), and NGRAM verifies a tree; set synth_tokens: fixed or drop "
     "it"),
    ({"spec": {**EAGLE3, "synth_tokens": "fixed"}},
     "spec: synth_tokens needs synth_len (the simulated mean accepted length); set synth_len "
     "or drop synth_tokens"),
    ({"spec": {"synth_len": 2.0}},
     "spec: n, draft_model and synth_len need a speculative method; set type (DFLASH, EAGLE, "
     "EAGLE3, NEXTN, NGRAM or STANDALONE) or drop them"),
    ({"spec": {**EAGLE3, "synth_len": 0.5}},
     "spec.synth_len: Input should be greater than or equal to 1"),
    ({"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}},
     "env: SGLANG_SIMULATE_ACC_LEN is set by crossbench from spec.synth_len (so that a run "
     "records its simulated acceptance); drop it from env and set spec.synth_len"),
])
def test_refusals_name_the_field_and_the_fix(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as e:
        _server(**cfg)
    assert e.value.message == message


def test_synth_alpha_gives_sglang_the_mean_length_and_the_others_rates() -> None:
    text = yaml.safe_dump({
        "schema_version": 1, "study": {"name": "s"},
        "engines": {"s": {"kind": "sglang"}, "v": {"kind": "vllm"}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "NGRAM", "n": "2,4", "synth_alpha": 0.9,
                  "engines": ["s"]},
                 {"name": "synth", "method": "ngram", "n": "2,4", "synth_alpha": 0.9,
                  "engines": ["v"]}],
        "axes": {"engine": ["s", "v"], "target": ["m"], "workload": ["builtin:code"]}})
    cells = {c.id: c.engine_config["spec"] for c in expand(parse_matrix(text, Path("m.yaml")))}
    assert cells["s/m/synth/n2/builtin-code/c1"] == {"type": "NGRAM", "n": 2, "synth_len": 2.71}
    assert cells["s/m/synth/n4/builtin-code/c1"]["synth_len"] == 4.0951  # 1+.9+.81+.729+.6561
    assert cells["v/m/synth/n4/builtin-code/c1"]["synth_rates"] == [0.9, 0.81, 0.729, 0.6561]
    assert "synth_len" not in cells["v/m/synth/n4/builtin-code/c1"]


def test_the_standins_draw_is_sglangs_match_expected() -> None:
    """Floor or floor + 1 with the mean L, clamped to [1, n+1]; multinomial is a rounded
    normal, whose mean drifts from L near the bounds (why crossbench pins match-expected)."""
    rng = random.Random(1)
    draws = [Simulated(3.25).draw(rng, 5) for _ in range(20000)]
    assert set(draws) == {3, 4}
    assert abs(sum(draws) / len(draws) - 3.25) < 0.02
    assert {Simulated(9.0).draw(rng, 5) for _ in range(50)} == {5}
    assert {Simulated(1.0).draw(rng, 5) for _ in range(50)} == {1}
    normal = [Simulated(4.8, "multinomial").draw(rng, 5) for _ in range(20000)]
    assert min(normal) >= 1 and max(normal) == 5 and sum(normal) / len(normal) < 4.6


@pytest.mark.parametrize(("env", "algorithm", "expected"), [
    ({}, "EAGLE3", None),
    ({"SGLANG_SIMULATE_ACC_LEN": "-1"}, "EAGLE3", None),
    ({"SGLANG_SIMULATE_ACC_LEN": "3"}, None, None),
    ({"SGLANG_SIMULATE_ACC_LEN": "3"}, "NGRAM", Simulated(3.0)),
    ({"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"},
     "DFLASH", Simulated(3.0, token_mode="real-draft-token")),
])
def test_the_standin_reads_sglangs_variables(env: dict[str, str], algorithm: str | None,
                                             expected: Simulated | None) -> None:
    assert simulated_from_env(env, algorithm) == expected


@pytest.mark.parametrize(("env", "message"), [
    ({"SGLANG_SIMULATE_ACC_METHOD": "uniform"}, "Invalid simulate_acc_method: uniform"),
    ({"SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"},
     "SGLANG_SIMULATE_ACC_LEN with real draft tokens currently requires "
     "speculative_eagle_topk=1."),
])
def test_the_standin_refuses_what_sglang_refuses(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as e:
        simulated_from_env({"SGLANG_SIMULATE_ACC_LEN": "3", **env}, "NGRAM")
    assert str(e.value) == message


def _run(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0",
                        "--standin-accept", "0.3")  # real acceptance far from the scripted
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, [
        "run", "--engine", "sglang", "--binary", str(py), "--model", "Qwen/Qwen3-8B",
        "--requests", "8", "--trials", "1", "--seed", "1", "--json", "--out", str(out),
        *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), json.loads((out / "manifest.json").read_text())


def test_a_whole_synth_len_is_recovered_exactly(tmp_path: Path) -> None:
    """synth_len 4 at n=4: every step commits 4 tokens, so 1 + 4 x 12 tokens take 12 steps
    and the mean acceptance length from /metrics is exactly 4."""
    summary, man = _run(tmp_path, "--spec", "NGRAM", "--n", "4", "--synth-len", "4",
                        "--max-tokens", "49")
    assert summary["acceptance"]["mean_acceptance_length"] == pytest.approx(4.0)
    assert summary["integrity"]["passed"] is True
    trial = man["trials"][0]
    assert man["config"]["engine_config"]["spec"]["synth_len"] == 4.0
    assert trial["server_props"]["startup"]["speculative_config"] == (
        "simulated acceptance: mean accepted length 4.0 per verification step, not "
        "per-position rates (SGLANG_SIMULATE_ACC_LEN=4.0, SGLANG_SIMULATE_ACC_METHOD="
        "match-expected, SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed)")


def test_a_fractional_synth_len_is_recovered_on_average(tmp_path: Path) -> None:
    """alpha 0.9 at n=4 as the matrix gives it: synth_len 4.0951; the stand-in's two-point
    draws keep the recovered mean close (the last step of a request is cut at max_tokens)."""
    summary, _ = _run(tmp_path, "--spec", "EAGLE3", "--draft", "a/b", "--n", "4",
                      "--synth-len", "4.0951", "--max-tokens", "400")
    assert abs(summary["acceptance"]["mean_acceptance_length"] - 4.0951) < 0.1


def test_a_matrix_arm_with_synth_alpha_on_the_standin(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0",
                        "--standin-accept", "0.3")
    matrix = {
        "schema_version": 1,
        "study": {"name": "sglang-synthetic", "notes": "stand-in, not SGLang"},
        "engines": {"s": {"kind": "sglang", "binary": str(py)}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 6, "warmup": 1, "max_tokens": 300},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "NGRAM", "n": 3, "synth_alpha": 0.8}],
        "axes": {"engine": ["s"], "target": ["m"], "workload": ["builtin:code"]},
        "trials": 1,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    s = run_matrix(path, tmp_path / "out")
    assert s["totals"] == {"done": 2, "failed": 0, "missing": 0}
    folder = tmp_path / "out" / "cells" / "s__m__synth__n3__builtin-code__c1"
    summary = json.loads((folder / "summary.json").read_text())
    # 1 + 0.8 + 0.64 + 0.512 = 2.952: the mean of the rates llama-server and vLLM would get
    assert abs(summary["acceptance"]["mean_acceptance_length"] - 2.952) < 0.1
    spec = json.loads((folder / "manifest.json").read_text())["config"]["engine_config"]["spec"]
    assert spec["synth_len"] == 2.952 and "synth_rates" not in spec
