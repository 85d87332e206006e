"""The Qwen3.5-MoE target and its dense twin (issue 34 item 1): HF folders shaped like the
published Qwen3.5/3.6 MoE checkpoints, converted by llama.cpp's own converter, checked tensor by
tensor (the per-expert tensors against the converter's stacked ones), and both served by the
real CPU llama-server with ``--spec-type draft-mtp`` and synthetic acceptance recovered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from crossbench.errors import UserError
from crossbench.fixtures.mtp import (
    DENSE_TWIN_SHAPES,
    LAYER_CUTS,
    MOE_SHAPES,
    compare,
    mtp_spec,
    sizes,
)

VOCAB = 151936


@pytest.fixture(scope="module")
def moe_target() -> tuple[Path, Path]:
    """The tiny MoE target, made (or reused) in the cache."""
    from crossbench.fixtures.resolve import ensure_mtp_target

    return ensure_mtp_target("tiny", 0, "moe-target")


@pytest.fixture(scope="module")
def dense_twin() -> tuple[Path, Path]:
    """The tiny MoE target's dense twin, made (or reused) in the cache."""
    from crossbench.fixtures.resolve import ensure_mtp_target

    return ensure_mtp_target("tiny", 0, "dense-twin")


def _field(gguf: Path, key: str) -> int | str:
    from gguf import GGUFReader

    part = GGUFReader(str(gguf)).fields[key].parts[-1]
    return bytes(part).decode() if part.dtype == np.uint8 else int(part[0])


def test_every_moe_tensor_equals_its_hf_tensors(moe_target: tuple[Path, Path]) -> None:
    hf_dir, gguf = moe_target
    checks = compare(mtp_spec("tiny", "moe-target"), hf_dir, gguf)
    assert checks and all(c.equal for c in checks), [c for c in checks if not c.equal]
    by_hf = {c.hf_name: c for c in checks}
    lm = "model.language_model.layers.0.mlp."
    assert by_hf[lm + "experts.*.gate_proj.weight"].gguf_name == "blk.0.ffn_gate_exps.weight"
    assert "8 experts stacked" in by_hf[lm + "experts.*.down_proj.weight"].change
    assert by_hf[lm + "gate.weight"].gguf_name == "blk.0.ffn_gate_inp.weight"
    assert by_hf[lm + "shared_expert_gate.weight"].gguf_name == "blk.0.ffn_gate_inp_shexp.weight"
    # the MTP layer has its own experts, after the 4 main layers
    mtp = by_hf["mtp.layers.0.mlp.experts.*.up_proj.weight"]
    assert mtp.gguf_name == "blk.4.ffn_up_exps.weight"
    # per layer: 3 dense-MLP tensors become router + 3 stacked + 3 shared + shared gate = 8
    assert len(checks) == 71 + 5 * (8 - 3)
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5MoeForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5_moe"
    text = config["text_config"]
    assert text["model_type"] == "qwen3_5_moe_text"
    assert (text["num_experts"], text["num_experts_per_tok"]) == (8, 2)
    assert (text["moe_intermediate_size"], text["shared_expert_intermediate_size"]) == (64, 64)
    assert "intermediate_size" not in text and text["mtp_num_hidden_layers"] == 1
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert _field(gguf, "general.architecture") == "qwen35moe"
    assert _field(gguf, "qwen35moe.expert_count") == 8
    assert _field(gguf, "qwen35moe.expert_used_count") == 2
    assert _field(gguf, "qwen35moe.nextn_predict_layers") == 1


def test_dense_twin_has_the_same_attention_and_the_active_mlp_width(
        moe_target: tuple[Path, Path], dense_twin: tuple[Path, Path]) -> None:
    hf_dir, gguf = dense_twin
    checks = compare(mtp_spec("tiny", "dense-twin"), hf_dir, gguf)
    assert len(checks) == 71 and all(c.equal for c in checks)
    from safetensors import safe_open

    with safe_open(str(moe_target[0] / "model.safetensors"), framework="np") as a, \
            safe_open(str(hf_dir / "model.safetensors"), framework="np") as b:
        attn = [n for n in a.keys() if "attn" in n]  # noqa: SIM118 (safe_open has no __iter__)
        assert attn and all(a.get_slice(n).get_shape() == b.get_slice(n).get_shape()
                            for n in attn)
        assert b.get_slice("model.language_model.layers.0.mlp.up_proj.weight").get_shape() == [
            2 * 64 + 64, 64]
    assert _field(gguf, "general.architecture") == "qwen35"


def test_a_changed_expert_is_found(moe_target: tuple[Path, Path], tmp_path: Path) -> None:
    """One value of expert 5's down projection in layer 2, flipped in a copy of the GGUF."""
    from gguf import GGUFReader

    hf_dir, gguf = moe_target
    bad = tmp_path / "moe.gguf"
    shutil.copy(gguf, bad)
    t = next(t for t in GGUFReader(str(bad)).tensors if t.name == "blk.2.ffn_down_exps.weight")
    at = int(t.data_offset) + 5 * 64 * 64 * 2  # expert 5's first value (F16)
    with bad.open("r+b") as f:
        f.seek(at)
        b = f.read(2)
        f.seek(at)
        f.write(bytes([b[0] ^ 1, b[1]]))
    checks = {c.gguf_name: c.equal for c in compare(mtp_spec("tiny", "moe-target"), hf_dir, bad)}
    assert checks["blk.2.ffn_down_exps.weight"] is False
    assert sum(not ok for ok in checks.values()) == 1


def test_h200_shapes_fit_the_disk_with_the_layer_cut() -> None:
    """Qwen3.5-35B-A3B's text shape cut from 40 to 8 layers: MoE 8.2 G parameters (16.4 GB F16
    per format), dense twin 1.17 G (2.3 GB): both formats of both, 37.5 GB of the 64 GB disk;
    12 layers would need 51.9 GB."""
    moe, dense = MOE_SHAPES["qwen3-8b"], DENSE_TWIN_SHAPES["qwen3-8b"]
    assert (moe.n_layer, moe.n_embd, moe.n_expert, moe.n_expert_used) == (8, 2048, 256, 8)
    assert moe.layer_types.count("full_attention") == 2
    assert dense.n_ff == 8 * 512 + 512 and dense.layer_types == moe.layer_types
    a, b = sizes(moe, VOCAB)["hf_bytes"], sizes(dense, VOCAB)["hf_bytes"]
    assert 2 * (a + b) < 0.6 * 64e9
    from dataclasses import replace

    bigger = replace(moe, n_layer=12)
    assert 2 * (sizes(bigger, VOCAB)["hf_bytes"] + b) > 0.75 * 64e9


def test_layer_cut_shapes_change_only_the_layer_count() -> None:
    """The layer-cut check's shapes (qwen3-8b-lN) are qwen3-8b but for n_layer, keep the 3:1
    linear/full mix, and fit the H200 host's 64 GB disk per part: the MoE target at 4 and 8
    layers (52.1 GB in both formats), the dense twin at 4, 8, 16 and 32 (25.5 GB)."""
    from dataclasses import replace

    base = MOE_SHAPES["qwen3-8b"]
    for n in LAYER_CUTS:
        for shapes in (MOE_SHAPES, DENSE_TWIN_SHAPES):
            spec = shapes[f"qwen3-8b-l{n}"]
            assert spec == replace(shapes["qwen3-8b"], n_layer=n)
            assert spec.layer_types.count("full_attention") * 4 == n
    both = 2 * sum(sizes(MOE_SHAPES[s], VOCAB)["hf_bytes"] for s in ("qwen3-8b-l4", "qwen3-8b"))
    assert 50e9 < both < 0.85 * 64e9
    dense = 2 * sum(sizes(DENSE_TWIN_SHAPES[s], VOCAB)["hf_bytes"]
                    for s in ("qwen3-8b-l4", "qwen3-8b", "qwen3-8b-l16", "qwen3-8b-l32"))
    assert dense < 0.45 * 64e9
    assert base.n_layer == 8  # the cut the check is about


def test_unknown_kind_and_matrix_refs() -> None:
    with pytest.raises(UserError) as e:
        mtp_spec("tiny", "moe")
    assert "moe-target" in e.value.hint
    from crossbench.runner.matrix import parse_fixture_ref

    assert parse_fixture_ref("fixture:qwen3-8b/moe-target@hf", "m") == (
        "qwen3-8b", "moe-target", "hf")
    assert parse_fixture_ref("fixture:dense-twin", "m") == ("tiny", "dense-twin", None)
    assert parse_fixture_ref("fixture:qwen3-8b-l4/moe-target", "m") == (
        "qwen3-8b-l4", "moe-target", None)
    with pytest.raises(UserError) as e:  # a layer cut exists for the Qwen3.5 targets only
        parse_fixture_ref("fixture:qwen3-8b-l4/target", "models.t.path")
    assert e.value.message == "models.t.path: unknown fixture 'fixture:qwen3-8b-l4/target'"
    assert "(moe-target and dense-twin also qwen3-8b-l4, qwen3-8b-l16, qwen3-8b-l32)" in (
        e.value.hint or "")


def test_commands_make_and_verify_both(moe_target: tuple[Path, Path],
                                       dense_twin: tuple[Path, Path]) -> None:
    from crossbench.cli.main import cli as main

    for flag, made, n in (("--moe", moe_target, 96), ("--dense-twin", dense_twin, 71)):
        out = CliRunner().invoke(main, ["fixtures", "make", flag])
        assert out.exit_code == 0, out.output
        assert out.stdout.splitlines()[-2:] == [str(made[0]), str(made[1])]
        out = CliRunner().invoke(main, ["fixtures", "verify-hf", flag])
        assert out.exit_code == 0, out.output
        role = flag.removeprefix("--").replace("moe", "moe-target")
        assert f"{role}: {n} tensors, {n} equal (" in out.stdout
    out = CliRunner().invoke(main, ["fixtures", "path", "moe-target", "--format", "hf"])
    assert out.stdout.strip() == str(moe_target[0])


RATES = [0.9, 0.7, 0.5, 0.2]


@pytest.mark.server
@pytest.mark.parametrize("role", ["moe-target", "dense-twin"])
def test_synthetic_acceptance_holds_with_draft_mtp(llama_server: Path, role: str,
                                                   tmp_path: Path) -> None:
    """Both targets serve on the CPU llama-server with their own MTP layer as the drafter, and
    --spec-synth-rates is recovered per position (as tests/test_mtp_fixture.py checks it)."""
    from crossbench.fixtures.resolve import ensure_mtp_target
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    _, gguf = ensure_mtp_target("tiny", 0, role)
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(gguf), "ctx_size": 2048,
                          "spec": {"type": "draft-mtp", "n": 4, "synth_rates": RATES}},
        "trials": 1, "load": {"requests": 8, "warmup": 1, "max_tokens": 320}})
    s = run(cfg, tmp_path / role)
    acc = s["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] >= 500, "too few drafts for a tight check"
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, acc["per_position"]
    assert abs(acc["mean_acceptance_length"] - (1 + sum(RATES))) <= 0.1
    assert s["integrity"]["passed"], s["integrity"]
    log = (tmp_path / role / "server.log").read_text(errors="replace")
    assert "creating MTP draft context against the target model" in log


@pytest.mark.server
def test_a_layer_cut_shape_is_made_checked_and_served(llama_server: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """A shape that is another's layer count (as qwen3-8b-l4 is qwen3-8b's) goes the whole
    way: made, converted and checked tensor by tensor, named in a matrix, served with its MTP
    layer. At the tiny width (``tiny-l8``, added for the test; the qwen3-8b cuts are GBs)."""
    from dataclasses import replace

    from crossbench.fixtures.resolve import ensure_mtp_target
    from crossbench.runner.config import RunConfig
    from crossbench.runner.matrix import parse_fixture_ref
    from crossbench.runner.single import run

    monkeypatch.setitem(MOE_SHAPES, "tiny-l8", replace(MOE_SHAPES["tiny"], n_layer=8))
    assert parse_fixture_ref("fixture:tiny-l8/moe-target", "m") == ("tiny-l8", "moe-target",
                                                                     None)
    hf_dir, gguf = ensure_mtp_target("tiny-l8", 0, "moe-target")
    try:
        import gguf as gguf_py

        fields = gguf_py.GGUFReader(str(gguf)).fields
        block = fields["qwen35moe.block_count"]
        assert int(block.parts[block.data[0]][0]) == 8 + 1  # 8 layers and the MTP layer
        assert json.loads((hf_dir / "config.json").read_text())["text_config"][
            "num_hidden_layers"] == 8
        cfg = RunConfig.model_validate({
            "engine_config": {"binary": str(llama_server), "model": str(gguf),
                              "ctx_size": 1024,
                              "spec": {"type": "draft-mtp", "n": 2, "synth_rates": [0.9, 0.5]}},
            "trials": 1, "load": {"requests": 2, "warmup": 1, "max_tokens": 64}})
        s = run(cfg, tmp_path / "cut")
        assert s["integrity"]["passed"], s["integrity"]
        assert s["acceptance"]["drafts"] > 0
        log = (tmp_path / "cut" / "server.log").read_text(errors="replace")
        assert "creating MTP draft context against the target model" in log
    finally:
        shutil.rmtree(gguf.parent.parent, ignore_errors=True)  # the test's own shape only


@pytest.mark.server
def test_the_quantized_targets_keep_their_mtp_layer_and_serve(llama_server: Path,
                                                               tmp_path: Path) -> None:
    """Issue 34 item 4's llama.cpp axis on the CPU: ``fixture:tiny/ROLE@Q8_0`` and ``@Q4_K_M``
    resolve through the matrix runner to the pinned llama-quantize's output; the experts are
    quantized, the router and the MTP (nextn) layer are kept, and the Q8_0 MoE target serves
    ``draft-mtp`` with its synthetic acceptance recovered (the quantized parts' arm)."""
    from gguf import GGMLQuantizationType, GGUFReader

    from crossbench.runner.config import RunConfig
    from crossbench.runner.matrix_run import _resolve
    from crossbench.runner.single import run

    f16 = {role: Path(_resolve(f"fixture:tiny/{role}")) for role in ("moe-target", "dense-twin")}
    for role in f16:
        types = {}
        for quant in ("Q8_0", "Q4_K_M"):
            path = Path(_resolve(f"fixture:tiny/{role}@{quant}"))
            assert path != f16[role] and path.stat().st_size < f16[role].stat().st_size
            types[quant] = {t.name: t.tensor_type for t in GGUFReader(str(path)).tensors}
        f16_names = {t.name for t in GGUFReader(str(f16[role])).tensors}
        for quant, by_name in types.items():
            assert set(by_name) == f16_names, quant  # nothing dropped: the MTP layer stays
            assert any(n.startswith("blk.4.nextn.") for n in by_name), quant
        if role == "moe-target":
            q8 = types["Q8_0"]
            assert q8["blk.0.ffn_down_exps.weight"] == GGMLQuantizationType.Q8_0
            assert q8["blk.0.ffn_gate_inp.weight"] == GGMLQuantizationType.F32  # the router
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server),
                          "model": _resolve("fixture:tiny/moe-target@Q8_0"), "ctx_size": 2048,
                          "spec": {"type": "draft-mtp", "n": 4, "synth_rates": RATES}},
        "trials": 1, "load": {"requests": 8, "warmup": 1, "max_tokens": 320}})
    s = run(cfg, tmp_path / "q8")
    acc = s["acceptance"]
    assert acc["drafts"] >= 500, "too few drafts for a tight check"
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, acc["per_position"]
    assert s["integrity"]["passed"], s["integrity"]
    assert "creating MTP draft context against the target model" in \
        (tmp_path / "q8" / "server.log").read_text(errors="replace")
