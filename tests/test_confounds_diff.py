"""Config diff: handcrafted pairs with known differences, and a real CPU pair (spec vs baseline).

The two manifests in tests/data/confounds/ were recorded by `crossbench demo`
(matrices/cpu-smoke.yaml) on the 2-core CPU host and trimmed to two trials.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crossbench.confounds.diff import AXES, UNKNOWN_NOTE, Kind, classify, diff
from crossbench.confounds.normalize import View, normalize_run_dir, normalize_trial

DATA = Path(__file__).parent / "data" / "confounds"


def vllm_view(**over: object) -> View:
    """A vLLM MTP trial on one H200, as the normalizer would give it."""
    v: View = {
        "engine.kind": "vllm", "engine.version": "0.19.1", "engine.sha256.vllm": "aa" * 32,
        "model.path": "hf://Qwen/Qwen3.5-35B-A3B@abc", "model.sha256": "m" * 64,
        "model.gguf.quantization": "Q4_K_M",
        "server.gpu_memory_utilization": 0.9, "server.max_num_seqs": 8,
        "server.tensor_parallel_size": 1, "server.enable_prefix_caching": False,
        "server.port": 8000,
        "spec.method": "mtp", "spec.num_speculative_tokens": 1,
        "load.temperature": 0.0, "load.max_tokens": 256, "load.workload": "builtin:mixed",
        "workload.digest": "d" * 64, "gpu.count": 1, "gpus.0.name": "NVIDIA H200",
        "trial.started_utc": "2026-04-25T10:00:00Z", "crossbench.version": "0.1.0",
    }
    for k, val in over.items():
        key = k.replace("__", ".")
        if val is None:
            v.pop(key, None)
        else:
            v[key] = val  # type: ignore[assignment]
    return v


def kinds(d) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {x.field: str(x.kind) for x in d.differences}


def test_seed_serve_flags_080_2_vs_090_8_are_confounding() -> None:
    mtp = vllm_view(server__gpu_memory_utilization=0.80, server__max_num_seqs=2)
    base = vllm_view(spec__method=None, spec__num_speculative_tokens=None)
    d = diff(mtp, base, AXES["spec"])
    assert kinds(d) == {"server.gpu_memory_utilization": "confounding",
                        "server.max_num_seqs": "confounding",
                        "spec.method": "intended", "spec.num_speculative_tokens": "intended"}
    assert d.confounded
    assert [(x.a, x.b) for x in d.confounding] == [(0.80, 0.9), (2, 8)]
    assert d.render(("mtp", "baseline")).splitlines()[:3] == [
        "2 confounding, 2 intended, 0 benign differences (mtp -> baseline)",
        "  confounding server.gpu_memory_utilization: 0.8 -> 0.9  "
        "(memory for weights and KV cache)",
        "  confounding server.max_num_seqs: 2 -> 8  (most sequences scheduled together)",
    ]


def test_seed_prefix_caching_on_vs_off_is_confounding() -> None:
    d = diff(vllm_view(server__enable_prefix_caching=True), vllm_view(), AXES["spec"])
    assert kinds(d) == {"server.enable_prefix_caching": "confounding"}
    assert d.confounding[0].reason == "prefix caching"


def test_seed_one_vs_two_gpus_with_other_quantization() -> None:
    two = vllm_view(**{"gpu__count": 2, "server__tensor_parallel_size": 2,
                       "gpus__1__name": "NVIDIA H200", "model__gguf__quantization": "Q8_0",
                       "model__sha256": "n" * 64,
                       "model__path": "hf://Qwen/Qwen3.5-35B-A3B-Q8@abc"})
    d = diff(vllm_view(), two, AXES["spec"])
    assert kinds(d) == {"gpu.count": "confounding", "gpus.1.name": "confounding",
                        "model.gguf.quantization": "confounding",
                        "model.path": "confounding", "model.sha256": "confounding",
                        "server.tensor_parallel_size": "confounding"}
    by = {x.field: x for x in d.differences}
    assert by["model.gguf.quantization"].reason == "quantization"
    assert by["model.path"].reason == "different files (model.sha256 differs or is unknown)"


def test_same_path_is_no_difference_but_same_file_elsewhere_is_benign() -> None:
    a = vllm_view(model__path="/a/m.gguf")
    b = vllm_view(model__path="/b/m.gguf", server__port=9000,
                  trial__started_utc="2026-05-25T10:00:00Z")
    d = diff(a, b)
    assert kinds(d) == {"model.path": "benign", "server.port": "benign",
                        "trial.started_utc": "benign"}
    assert d.benign[0].reason == "path of identical files (model.sha256 equal)"
    assert not d.confounded


def test_identical_engine_binaries_at_other_paths_are_benign() -> None:
    a = {"engine.binary": "/x/llama-server", "engine.sha256.llama-server": "1",
         "engine.sha256.libllama.so": "2"}
    b = {**a, "engine.binary": "/y/llama-server"}
    assert kinds(diff(a, b)) == {"engine.binary": "benign"}
    c = {**b, "engine.sha256.libllama.so": "3"}
    assert kinds(diff(a, c)) == {"engine.binary": "confounding",
                                 "engine.sha256.libllama.so": "confounding"}


def test_unknown_fields_are_confounding_with_a_note() -> None:
    d = diff({"weird.knob": 1}, {"weird.knob": 2})
    assert [(x.kind, x.reason) for x in d.differences] == [(Kind.CONFOUNDING, UNKNOWN_NOTE)]


def test_one_and_one_point_zero_are_equal_but_a_flag_is_not_a_count() -> None:
    assert diff({"server.ctx_size": 1}, {"server.ctx_size": 1.0}).differences == ()
    assert len(diff({"server.enforce_eager": True}, {"server.enforce_eager": 1}).differences) == 1


@pytest.mark.parametrize(("field", "kind"), [
    ("engine.commit", Kind.CONFOUNDING), ("engine.sha256.libggml.so", Kind.CONFOUNDING),
    ("server.max_num_batched_tokens", Kind.CONFOUNDING), ("server.enforce_eager",
                                                          Kind.CONFOUNDING),
    ("server.cache_type_k", Kind.CONFOUNDING), ("server.flash_attn", Kind.CONFOUNDING),
    ("server.enable_chunked_prefill", Kind.CONFOUNDING), ("load.thinking", Kind.CONFOUNDING),
    ("load.top_p", Kind.CONFOUNDING), ("load.seed", Kind.CONFOUNDING),
    ("load.ignore_eos", Kind.CONFOUNDING), ("workload.digest", Kind.CONFOUNDING),
    ("crossbench.version", Kind.CONFOUNDING), ("gpus.0.power_limit_w", Kind.CONFOUNDING),
    ("gpus.0.app_clock_sm_mhz", Kind.CONFOUNDING), ("env.CUDA_VISIBLE_DEVICES",
                                                    Kind.CONFOUNDING),
    ("trial.ended_utc", Kind.BENIGN), ("engine.argv", Kind.BENIGN), ("run.trials", Kind.BENIGN),
    ("server.ready_timeout_s", Kind.BENIGN), ("gpus.0.pcie_link_gen_current", Kind.BENIGN),
    ("engine.startup.pid", Kind.BENIGN),
])
def test_field_classes(field: str, kind: Kind) -> None:
    assert classify(field, {field: 1}, {field: 2})[0] is kind


def test_intended_axis_wins_over_every_class() -> None:
    assert classify("load.concurrency", {}, {}, ["load.concurrency"])[0] is Kind.INTENDED
    assert classify("load.concurrency", {}, {})[0] is Kind.CONFOUNDING


def test_real_cpu_pair_spec_vs_baseline_differs_only_on_its_axis() -> None:
    spec = normalize_trial(json.loads((DATA / "llama_synthetic_n4.manifest.json").read_text()))
    base = normalize_trial(json.loads((DATA / "llama_baseline.manifest.json").read_text()))
    d = diff(spec, base, AXES["spec"])
    assert not d.confounded
    assert [x.field for x in d.intended] == ["draft.ref", "spec.draft_model", "spec.n",
                                             "spec.synth_rates", "spec.type"]
    assert [x.field for x in d.benign] == ["engine.argv", "run.created_utc", "trial.ended_utc",
                                           "trial.started_utc"]
    # without an axis, the speculative settings are confounding differences
    assert {x.field for x in diff(spec, base).confounding} == {
        "draft.ref", "spec.draft_model", "spec.n", "spec.synth_rates", "spec.type"}


def test_today_vs_last_month_finds_the_changed_build(tmp_path: Path) -> None:
    m = json.loads((DATA / "llama_baseline.manifest.json").read_text())
    (tmp_path / "then").mkdir()
    (tmp_path / "then" / "manifest.json").write_text(json.dumps(m))
    m["engine"]["build_number"] = 11434
    m["engine"]["sha256"]["libllama.so.0.5.0"] = "0" * 64
    m["config"]["load"]["max_tokens"] = 128
    (tmp_path / "now").mkdir()
    (tmp_path / "now" / "manifest.json").write_text(json.dumps(m))
    d = diff(normalize_run_dir(tmp_path / "then"), normalize_run_dir(tmp_path / "now"),
             AXES["none"])
    assert kinds(d) == {"engine.build_number": "confounding",
                        "engine.sha256.libllama.so.0.5.0": "confounding",
                        "load.max_tokens": "confounding"}
    assert d.to_dict()["counts"] == {"intended": 0, "confounding": 3, "benign": 0}
