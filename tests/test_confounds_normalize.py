"""Normalized views: flattening, defaults completed, start-up facts, secrets, provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossbench.confounds.diff import AXES, diff
from crossbench.confounds.normalize import (
    flatten,
    mask_port,
    normalize_run_dir,
    normalize_trial,
)
from crossbench.errors import UserError

DATA = Path(__file__).parent / "data" / "confounds"


def baseline() -> dict:  # type: ignore[type-arg]
    return json.loads((DATA / "llama_baseline.manifest.json").read_text())


def test_flatten_rules() -> None:
    got = flatten("x", {"a": None, "b": [1, 2], "c": [{"d": 1}, {"d": 2}], "e": {"f": True},
                        "g": Path("/p")}, {})
    assert got == {"x.b": "[1,2]", "x.c.0.d": 1, "x.c.1.d": 2, "x.e.f": True, "x.g": "/p"}
    assert mask_port(["srv", "--port", "8080", "--x", "1"]) == "srv --port <port> --x 1"
    assert mask_port(["srv", "--port=8080"]) == "srv --port=<port>"


def test_real_manifest_view() -> None:
    v = normalize_trial(baseline())
    assert (v["engine.kind"], v["engine.build_number"], v["spec.type"]) == (
        "llama-server", 11312, "none")
    assert v["server.parallel"] == 1  # a default, filled in
    assert v["workload.digest"].startswith("639a7e4b")
    assert v["server_props.total_slots"] == 1
    assert "--port <port>" in str(v["engine.argv"])
    assert v["trial.index"] == 0
    assert normalize_trial(baseline(), trial=1)["trial.index"] == 1


def test_a_default_left_out_is_no_difference() -> None:
    m = baseline()
    explicit = json.loads(json.dumps(m))
    explicit["config"]["engine_config"].update(parallel=1, ctx_size=2048)
    explicit["config"]["load"].pop("warmup")  # back to its default of 1
    assert diff(normalize_trial(m), normalize_trial(explicit)).differences == ()


def test_vllm_startup_facts_and_server_env() -> None:
    m = baseline()
    m["config"]["engine"] = "vllm-like"  # unknown to the registry: taken as given
    m["config"]["engine_config"]["env"] = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
                                           "VLLM_USE_V2_MODEL_RUNNER": "1"}
    two = json.loads(json.dumps(m))
    for mm, pid, fallback in ((m, 11, None), (two, 22, "Model Runner V2 requires Triton; using "
                                                        "the V1 model runner instead.")):
        mm["trials"][0]["server_props"] = {
            "served_models": ["qwen"], "standin": False,
            "startup": {"model_runner": "V1" if fallback else "V2",
                        "model_runner_fallback": fallback, "kv_cache_tokens": 1000 + pid,
                        "graph_capture_s": pid / 10, "profile_run_s": pid * 4.0,
                        "lines": {"model_runner": f"(EngineCore pid={pid}) INFO ..."}}}
    a, b = normalize_trial(m), normalize_trial(two)
    assert a["server.env.HF_TOKEN"] == "<redacted>"
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in json.dumps(a)
    assert not any(k.startswith("server_props.startup") for k in a)
    assert a["engine.startup.model_runner"] == "V2"
    assert "engine.startup.model_runner_fallback" not in a  # unset: left out
    d = diff(a, b, AXES["spec"])
    assert {x.field: str(x.kind) for x in d.differences} == {
        "engine.startup.model_runner": "confounding",
        "engine.startup.model_runner_fallback": "confounding",
        "engine.startup.kv_cache_tokens": "intended",  # the draft's memory: the spec's cost
        "engine.startup.graph_capture_s": "benign",
        "engine.startup.profile_run_s": "benign",  # a duration (round 4 read it confounding)
        "engine.startup.lines.model_runner": "benign",
    }


def test_sglang_speculative_server_info_is_the_intended_difference() -> None:
    """SGLang's server info names the speculative settings it started with; against the
    baseline (which reports none) they are the speculative axis, not a confound."""
    m = baseline()
    m["config"]["engine"] = "sglang-like"
    spec = json.loads(json.dumps(m))
    spec["trials"][0]["server_props"] = {"startup": {
        "speculative_algorithm": "EAGLE3", "speculative_num_steps": 4,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 5,
        "max_total_num_tokens": 199358}}  # the drafter's memory shrinks the KV pool
    m["trials"][0]["server_props"] = {"startup": {"tp_size": 1, "max_total_num_tokens": 362905}}
    spec["trials"][0]["server_props"]["startup"]["tp_size"] = 1
    d = diff(normalize_trial(m), normalize_trial(spec), AXES["spec"])
    assert {x.field: str(x.kind) for x in d.differences} == {
        **{f"server_props.startup.speculative.{k}": "intended"
           for k in ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens")},
        "engine.startup.max_total_num_tokens": "intended"}
    # two runs of one configuration: a KV pool of another size is a confound there
    spec_again = json.loads(json.dumps(spec))
    spec_again["trials"][0]["server_props"]["startup"]["max_total_num_tokens"] = 150000
    d = diff(normalize_trial(spec), normalize_trial(spec_again), AXES["none"])
    assert {x.field: str(x.kind) for x in d.differences} == {
        "engine.startup.max_total_num_tokens": "confounding"}


def test_provenance_in_the_trial_entry_is_merged() -> None:
    m = baseline()
    m["trials"][0]["provenance"] = {"engine": {"kind": "llama-server"},
                                    "host": {"ram_bytes": 8 << 30},
                                    "gpu": {"available": False, "reason": "none", "count": 0,
                                            "gpus": []}}
    v = normalize_trial(m)
    assert (v["host.ram_bytes"], v["gpu.available"], v["gpu.count"]) == (8 << 30, False, 0)
    assert v["host.cpu"] == "AMD EPYC"  # the manifest's facts stay


def test_run_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="holds no run"):
        normalize_run_dir(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(baseline()))
    with pytest.raises(UserError, match=r"no trial 7 in this run \(fix: trials recorded: "
                                        r"\[0, 1\]\)"):
        normalize_run_dir(tmp_path, trial=7)
