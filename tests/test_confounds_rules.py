"""Known-interaction rules: one handcrafted pair per rule (firing and not), plus the seeds."""

from __future__ import annotations

import json
from pathlib import Path

from crossbench.confounds.normalize import View, normalize_trial
from crossbench.confounds.rules import RULES, Finding, check_pair, check_trial, rule

DATA = Path(__file__).parent / "data" / "confounds"


def vllm(**over: object) -> View:
    v: View = {"engine.kind": "vllm", "engine.version": "0.19.1", "spec.method": "mtp",
               "server.enable_prefix_caching": False, "server.gpu_memory_utilization": 0.9,
               "server.max_num_seqs": 8, "load.temperature": 0.0, "load.endpoint": "chat"}
    return _apply(v, over)


def llama(**over: object) -> View:
    v: View = {"engine.kind": "llama-server", "engine.build_number": 11434,
               "engine.commit": "515e855", "engine.sha256.llama-server": "1" * 64,
               "spec.type": "draft-mtp", "spec.n": 2, "server.parallel": 1,
               "load.temperature": 0.0, "load.endpoint": "completions"}
    return _apply(v, over)


def _apply(v: View, over: dict[str, object]) -> View:
    out = dict(v)
    for k, val in over.items():
        key = k.replace("__", ".")
        if val is None:
            out.pop(key, None)
        else:
            out[key] = val  # type: ignore[assignment]
    return out


def base(v: View) -> View:
    """The baseline arm of a speculative view: no speculative settings."""
    return {k: x for k, x in v.items() if not k.startswith("spec.")}


def ids(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.rule, f.severity) for f in findings]


def test_every_rule_has_an_id_explanation_and_source() -> None:
    assert len({r.id for r in RULES}) == len(RULES) == 12
    for r in RULES:
        assert r.explanation and r.title
        assert r.source.startswith("https://")
    assert rule("llama-parallel-slots-mtp").source == \
        "https://github.com/ggml-org/llama.cpp/issues/27572"
    assert rule("vllm-prefix-caching-mtp").source == \
        "https://github.com/vllm-project/vllm/issues/38182"


def test_clean_pairs_raise_nothing() -> None:
    assert check_pair(vllm(), base(vllm())) == []
    assert check_pair(llama(), base(llama())) == []


def test_seed_prefix_caching_on_with_mtp_on_vllm() -> None:
    mtp = vllm(server__enable_prefix_caching=True)
    got = check_pair(mtp, base(mtp), labels=("mtp", "baseline"))
    assert ids(got) == [("vllm-prefix-caching-mtp", "confounding")]
    assert got[0].message.startswith("mtp: vLLM with MTP and prefix caching (on)")
    assert "enable_prefix_caching: false" in got[0].action
    # unset means vLLM's default, which is on
    unset = vllm(server__enable_prefix_caching=None)
    assert "vLLM enables it by default" in check_trial(unset)[0].message
    # the same setting without MTP is not this rule's business
    assert check_pair(base(mtp), base(mtp)) == []


def test_seed_serve_flags_080_2_vs_090_8() -> None:
    got = check_pair(vllm(server__gpu_memory_utilization=0.8, server__max_num_seqs=2),
                     base(vllm()), labels=("mtp", "baseline"))
    assert ids(got) == [("serve-memory-or-seqs-differ", "confounding")]
    assert got[0].message.startswith("serve settings differ (mtp/baseline: "
                                     "gpu_memory_utilization 0.8/0.9, max_num_seqs 2/8)")


def test_max_num_batched_tokens_on_one_arm_only() -> None:
    got = check_pair(vllm(server__max_num_batched_tokens=8192), base(vllm()),
                     labels=("mtp", "baseline"))
    assert ids(got) == [("max-num-batched-tokens-one-arm", "confounding")]
    assert "set on mtp only (8192 vs unset)" in got[0].message
    both = check_pair(vllm(server__max_num_batched_tokens=8192),
                      vllm(server__max_num_batched_tokens=2048))
    assert "differs (A 8192, B 2048)" in both[0].message


def test_llama_server_parallel_slots_with_mtp() -> None:
    mtp = llama(server__parallel=4)
    got = check_pair(mtp, base(mtp))
    assert ids(got) == [("llama-parallel-slots-mtp", "confounding")]
    assert got[0].message.startswith("A: llama-server with MTP and 4 parallel slots")
    # the server's own report counts too (slots set through extra_args)
    assert ids(check_trial(llama(server_props__total_slots=2))) == [
        ("llama-parallel-slots-mtp", "confounding")]
    # parallel slots without MTP: fine
    assert check_pair(llama(spec__type="draft-simple", server__parallel=4),
                      base(llama(server__parallel=4))) == []
    # under synthetic acceptance the collapse (of acceptance) cannot show: a caveat, as the
    # H200 MTP round measured (0.891 accepted at n = 1 of the scripted 0.9, 16 slots)
    synth = llama(server__parallel=16, spec__synth_rates="[0.9]")
    got = [f for f in check_pair(synth, base(synth)) if f.rule == "llama-parallel-slots-mtp"]
    assert [f.severity for f in got] == ["caveat"]
    assert "under synthetic acceptance" in got[0].message


def test_synthetic_acceptance_is_a_caveat_on_the_real_cpu_pair() -> None:
    spec = normalize_trial(json.loads((DATA / "llama_synthetic_n4.manifest.json").read_text()))
    got = check_trial(spec, "synthetic")
    assert ids(got) == [("synthetic-acceptance", "caveat")]
    assert got[0].message.startswith("synthetic: synthetic acceptance "
                                     "(synth_rates=[0.9,0.7,0.5,0.2])")
    assert ids(check_trial(vllm(spec__rejection_sample_method="synthetic"))) == [
        ("synthetic-acceptance", "caveat")]


def test_different_engine_builds() -> None:
    old = llama(spec__type="draft-simple")
    new = llama(spec__type="draft-simple", engine__build_number=11312,
                engine__commit="0c1e570", **{"engine__sha256__llama-server": "2" * 64})
    got = check_pair(old, new)
    assert ids(got) == [("engine-builds-differ", "confounding")]
    assert "build_number, commit, sha256.llama-server differ" in got[0].message
    # an engine-vs-engine comparison is multi-variable by nature: a caveat on that axis
    cross = check_pair(base(llama()), base(vllm()), axis="engine")
    assert ids(cross) == [("engine-builds-differ", "caveat")]
    assert "multi-variable" in cross[0].message


def test_temperature_above_zero_when_greedy_parity_is_claimed() -> None:
    hot = llama(spec__type="draft-simple", load__temperature=0.7)
    assert check_pair(hot, base(hot)) == []  # no parity claimed
    got = check_pair(hot, base(hot), greedy_parity=True)
    assert ids(got) == [("greedy-parity-temperature", "confounding")]
    assert "A temperature 0.7, B temperature 0.7" in got[0].message


def test_thinking_on_in_one_arm() -> None:
    got = check_pair(vllm(load__thinking=True), base(vllm(load__thinking=False)))
    assert ids(got) == [("thinking-one-arm", "confounding")]
    # unset (the template's default) vs on is a difference too
    assert ids(check_pair(vllm(load__thinking=True), base(vllm()))) == [
        ("thinking-one-arm", "confounding")]
    # raw completions apply no template: nothing to compare
    assert check_pair(llama(load__thinking=True), base(llama())) == []


FALLBACK = ("Model Runner V2 does not yet support speculative decoding with mtp; using the V1 "
            "model runner instead.")  # the fact as the vLLM adapter records it


def test_vllm_model_runner_fallback_on_one_arm_only() -> None:
    fell = vllm(engine__startup__model_runner_fallback=FALLBACK)
    got = check_pair(fell, base(vllm()), labels=("mtp", "baseline"))
    assert ids(got) == [("vllm-model-runner-fallback", "confounding")]
    assert got[0].message.startswith("mtp fell back from vLLM's V2 model runner to V1")
    both = check_pair(fell, base(fell))
    assert ids(both) == [("vllm-model-runner-fallback", "caveat")]


def test_findings_serialize() -> None:
    f = check_pair(vllm(server__enable_prefix_caching=True), base(vllm()))[0]
    assert set(f.to_dict()) == {"rule", "severity", "message", "action", "source"}
