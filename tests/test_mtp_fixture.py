"""The Qwen3.5 target with an MTP layer: written as an HF folder, converted by llama.cpp's own
``convert_hf_to_gguf.py``, checked tensor by tensor, and served by the real CPU llama-server
with ``--spec-type draft-mtp`` and synthetic acceptance recovered per position."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from crossbench.errors import UserError
from crossbench.fixtures.mtp import (
    MTP_SHAPES,
    _tiled,
    compare,
    expected_gguf,
    make_mtp_target,
    mtp_spec,
    sizes,
)


@pytest.fixture(scope="module")
def mtp_target() -> tuple[Path, Path]:
    """The tiny MTP target, made (or reused) in the cache by the command's library layer."""
    from crossbench.fixtures.resolve import ensure_mtp_target

    return ensure_mtp_target("tiny")


def test_v_heads_go_from_grouped_to_tiled_order():
    # 2 key heads, 4 value heads of 1: grouped [K0v0 K0v1 K1v0 K1v1] -> tiled [K0v0 K1v0 K0v1 K1v1]
    spec = mtp_spec("tiny")
    assert (spec.lin_k_heads, spec.lin_v_heads) == (2, 4)
    x = np.arange(4, dtype=np.float16)
    assert _tiled(x, 0, spec, 1).tolist() == [0, 2, 1, 3]
    cols = np.arange(8, dtype=np.float16).reshape(1, 8)  # out_proj columns, head_dim 2
    assert _tiled(cols, 1, spec, 2)[0].tolist() == [0, 1, 4, 5, 2, 3, 6, 7]


def test_every_converted_tensor_equals_its_hf_tensor(mtp_target):
    hf_dir, gguf = mtp_target
    spec = mtp_spec("tiny")
    checks = compare(spec, hf_dir, gguf)
    assert checks and all(c.equal for c in checks), [c for c in checks if not c.equal]
    by_hf = {c.hf_name: c for c in checks}
    # the MTP layer became llama.cpp's nextn layer after the 4 main layers
    assert by_hf["mtp.fc.weight"].gguf_name == "blk.4.nextn.eh_proj.weight"
    assert by_hf["mtp.pre_fc_norm_embedding.weight"].gguf_name == "blk.4.nextn.enorm.weight"
    assert by_hf["mtp.layers.0.self_attn.q_proj.weight"].gguf_name == "blk.4.attn_q.weight"
    assert "+1" in by_hf["mtp.norm.weight"].change
    assert "-exp" in by_hf["model.language_model.layers.0.linear_attn.A_log"].change
    assert "tiled" in by_hf["model.language_model.layers.0.linear_attn.in_proj_qkv.weight"].change
    assert "+1" not in by_hf["model.language_model.layers.0.linear_attn.norm.weight"].change
    assert len(checks) == 71  # 3 linear layers x 14 + 2 full layers x 12 + 5 global/nextn
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5"  # what vLLM's qwen3_5_mtp override looks for
    text = config["text_config"]
    assert text["mtp_num_hidden_layers"] == 1
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen35"
    assert int(fields["qwen35.nextn_predict_layers"].parts[-1][0]) == 1
    assert int(fields["qwen35.block_count"].parts[-1][0]) == 5


def test_a_changed_tensor_is_found(mtp_target, tmp_path):
    """The check can fail: one value of the nextn eh_proj changed in a copy of the GGUF."""
    from gguf import GGUFReader

    hf_dir, gguf = mtp_target
    bad = tmp_path / "mtp.gguf"
    shutil.copy(gguf, bad)
    t = next(t for t in GGUFReader(str(bad)).tensors if t.name == "blk.4.nextn.eh_proj.weight")
    with bad.open("r+b") as f:
        f.seek(int(t.data_offset))
        b = f.read(2)
        f.seek(int(t.data_offset))
        f.write(bytes([b[0] ^ 1, b[1]]))
    checks = {c.gguf_name: c.equal for c in compare(mtp_spec("tiny"), hf_dir, bad)}
    assert checks["blk.4.nextn.eh_proj.weight"] is False
    assert sum(not ok for ok in checks.values()) == 1


def test_a_missing_transform_is_found():
    """Without the +1 of Qwen3.5's zero-centred norms the expected value would differ."""
    spec = mtp_spec("tiny")
    w = np.full(4, 1 / 256, dtype=np.float16)
    name, change, want = expected_gguf(spec, "mtp.pre_fc_norm_hidden.weight", w)
    assert name == "blk.4.nextn.hnorm.weight" and want.dtype == np.float32
    assert change.startswith("+1")
    assert want.tolist() == [1 + 1 / 256] * 4


def test_same_seed_same_bytes_other_seed_other_bytes(mtp_target, tmp_path):
    from crossbench.engines.llamacpp.build import source_tree
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
    from crossbench.fixtures.resolve import ensure_hf_fixture, vocab_path
    from crossbench.fixtures.vocab import read_tokenizer

    hf_dir, gguf = mtp_target
    never = tuple(read_tokenizer(vocab_path()).never_predicted)
    tree = source_tree(get_pin(DEFAULT_PIN))
    tok = ensure_hf_fixture("tiny", "target")
    again = make_mtp_target("tiny", tok, tmp_path / "again", tree, never, seed=0)

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    st = "model.safetensors"
    assert sha(again.hf_dir / st) == sha(hf_dir / st)
    assert sha(again.gguf) == sha(gguf)
    mtime = again.gguf.stat().st_mtime_ns  # reuse: the manifest matches, nothing is written
    make_mtp_target("tiny", tok, tmp_path / "again", tree, never, seed=0)
    assert again.gguf.stat().st_mtime_ns == mtime
    from crossbench.fixtures.mtp import _value

    spec = mtp_spec("tiny")
    a = _value("mtp.fc.weight", (64, 128), "F16", "in", spec, never, 0)
    b = _value("mtp.fc.weight", (64, 128), "F16", "in", spec, never, 1)
    assert not np.array_equal(a, b)


def test_the_hf_folder_alone_is_the_same_folder_and_a_later_conversion_reuses_it(
        mtp_target, tmp_path):
    """``convert=False`` (what SGLang's rounds ask for) writes the folder the converting path
    writes, byte for byte, with its own manifest and no GGUF; converting later reuses it."""
    from crossbench.engines.llamacpp.build import source_tree
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
    from crossbench.fixtures.mtp import HF_MANIFEST_NAME, MANIFEST_NAME
    from crossbench.fixtures.resolve import ensure_hf_fixture, vocab_path
    from crossbench.fixtures.vocab import read_tokenizer

    hf_dir, gguf = mtp_target
    never = tuple(read_tokenizer(vocab_path()).never_predicted)
    tree = source_tree(get_pin(DEFAULT_PIN))
    tok = ensure_hf_fixture("tiny", "target")
    out = tmp_path / "alone"
    alone = make_mtp_target("tiny", tok, out, tree, never, seed=0, convert=False)
    assert not alone.gguf.exists() and not (out / MANIFEST_NAME).exists()
    names = sorted(p.name for p in hf_dir.iterdir())
    assert sorted(p.name for p in alone.hf_dir.iterdir()) == names
    for name in names:
        assert (alone.hf_dir / name).read_bytes() == (hf_dir / name).read_bytes(), name
    recorded = json.loads((out / HF_MANIFEST_NAME).read_text())["files"]
    st = alone.hf_dir / "model.safetensors"
    assert recorded["hf/model.safetensors"]["sha256"] == hashlib.sha256(
        st.read_bytes()).hexdigest()
    mtime = st.stat().st_mtime_ns
    again = make_mtp_target("tiny", tok, out, tree, never, seed=0, convert=False)
    assert again.manifest == alone.manifest and st.stat().st_mtime_ns == mtime
    full = make_mtp_target("tiny", tok, out, tree, never, seed=0)
    assert st.stat().st_mtime_ns == mtime  # the folder reused, not written again
    assert full.gguf.read_bytes() == gguf.read_bytes()
    st.write_bytes(st.read_bytes()[:-1])  # a folder cut short is written again
    make_mtp_target("tiny", tok, tmp_path / "alone", tree, never, seed=0, convert=False)
    assert st.read_bytes() == (hf_dir / "model.safetensors").read_bytes()


def test_the_8b_class_shape_fits_the_h200_disk():
    """Qwen3.5-9B's text shape with the fixtures' vocabulary: 8.41 G parameters, 16.8 GB in
    each format, so HF + GGUF (33.6 GB) fit the H200 host's 64 GB disk."""
    spec = MTP_SHAPES["qwen3-8b"]
    assert (spec.n_layer, spec.n_embd, spec.n_ff) == (32, 4096, 12288)
    assert spec.layer_types.count("full_attention") == 8
    s = sizes(spec, 151936)
    assert 8.3e9 < s["parameters"] < 8.5e9
    assert 2 * s["hf_bytes"] < 64e9 * 0.6


def test_unknown_shape_and_matrix_ref():
    with pytest.raises(UserError) as e:
        mtp_spec("qwen3-0.6b")
    assert "tiny" in e.value.hint
    from crossbench.runner.matrix import parse_fixture_ref

    assert parse_fixture_ref("fixture:qwen3-8b/mtp-target@hf", "m") == (
        "qwen3-8b", "mtp-target", "hf")
    assert parse_fixture_ref("fixture:mtp-target", "m") == ("tiny", "mtp-target", None)


def test_command_prints_both_paths_and_verifies(mtp_target):
    from crossbench.cli.main import cli as main

    hf_dir, gguf = mtp_target
    out = CliRunner().invoke(main, ["fixtures", "make", "--mtp"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[-2:] == [str(hf_dir), str(gguf)]
    out = CliRunner().invoke(main, ["fixtures", "path", "mtp-target", "--format", "hf"])
    assert out.stdout.strip() == str(hf_dir)
    out = CliRunner().invoke(main, ["fixtures", "verify-hf", "--mtp"])
    assert out.exit_code == 0, out.output
    assert "mtp-target: 71 tensors, 71 equal (" in out.stdout


RATES = [0.9, 0.7, 0.5, 0.2]


@pytest.mark.server
def test_synthetic_acceptance_holds_with_draft_mtp(llama_server, mtp_target, tmp_path):
    """llama-server runs the converted target's own MTP layer as the drafter (no -md) and
    applies --spec-synth-rates in its verification step: the suite recovers the configured
    per-position rates, with the tolerance of the other draft types (tests/test_drafters.py)."""
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    _, gguf = mtp_target
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(gguf), "ctx_size": 2048,
                          "spec": {"type": "draft-mtp", "n": 4, "synth_rates": RATES}},
        "trials": 1, "load": {"requests": 8, "warmup": 1, "max_tokens": 320}})
    s = run(cfg, tmp_path / "mtp")
    acc = s["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] >= 500, "too few drafts for a tight check"
    assert len(acc["per_position"]) == 4
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, acc["per_position"]
    assert abs(acc["mean_acceptance_length"] - (1 + sum(RATES))) <= 0.1
    assert s["integrity"]["passed"], s["integrity"]
    log = (tmp_path / "mtp" / "server.log").read_text(errors="replace")
    assert "creating MTP draft context against the target model" in log


def test_the_folder_carries_the_image_processor_sglang_loads(mtp_target):
    """SGLang serves a Qwen3.5 folder as the multimodal class, whose tokenizer manager loads
    the image processor: the folder names Qwen3.5's (patch 16, merge 2, mean and std 0.5),
    and transformers builds it from the folder alone (the video half of the full processor
    needs torchvision, which the GPU image has and this host may not)."""
    from transformers import AutoImageProcessor

    hf_dir, _ = mtp_target
    assert json.loads((hf_dir / "preprocessor_config.json").read_text())["patch_size"] == 16
    proc = AutoImageProcessor.from_pretrained(hf_dir, backend="pil")
    assert (proc.patch_size, proc.temporal_patch_size, proc.merge_size) == (16, 2, 2)
    assert list(proc.image_mean) == list(proc.image_std) == [0.5, 0.5, 0.5]
