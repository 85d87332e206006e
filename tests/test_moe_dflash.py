"""The DFlash drafter of the MoE study (``dflash-moe``, issue 34): a DFlash block drafter of the
Qwen3.5-MoE target's width, written as an HF folder against the MoE target, converted by
llama.cpp's own converter and checked tensor by tensor, named beside the Qwen3-8B drafter
without changing what ``dflash`` means, and served by the real CPU llama-server with
``draft-dflash`` on both the MoE target and its dense twin (one drafter for both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from crossbench.errors import UserError
from crossbench.fixtures.drafters import (
    DRAFTERS,
    check_target_layers,
    compare,
    drafter_spec,
)
from crossbench.fixtures.mtp import mtp_spec


@pytest.fixture(scope="module")
def drafter() -> tuple[Path, Path]:
    """The tiny MoE-study DFlash drafter (HF folder, GGUF), made (or reused) in the cache."""
    from crossbench.fixtures.resolve import ensure_drafter

    return ensure_drafter("tiny", "dflash-moe")


def _field(gguf: Path, key: str) -> object:
    from gguf import GGUFReader

    return GGUFReader(str(gguf)).fields[key].contents()


def test_every_converted_tensor_equals_its_hf_tensor(drafter: tuple[Path, Path]) -> None:
    hf_dir, gguf = drafter
    checks = compare(drafter_spec("tiny", "dflash-moe"), hf_dir, gguf)
    # fc, norm, hidden_norm and 11 tensors (Q/K norms included) per layer, 2 layers
    assert len(checks) == 3 + 2 * 11 and all(c.equal for c in checks), \
        [c for c in checks if not c.equal]
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["block_size"] == 16
    assert config["dflash_config"]["target_layer_ids"] == [1, 2]
    assert config["num_target_layers"] == 4 and config["hidden_size"] == 64
    assert config["rope_theta"] == 1e7  # the target's, read from its rope_parameters
    assert "rope_scaling" not in config and "rope_parameters" not in config  # 1-D RoPE
    # the GGUF: llama.cpp's layer inputs (HF ids + 1), M-RoPE sections from the target folder
    assert _field(gguf, "general.architecture") == "dflash"
    assert _field(gguf, "dflash.target_layers") == [2, 3]
    assert _field(gguf, "dflash.rope.dimension_sections") == [16, 0, 0, 0]
    assert _field(gguf, "tokenizer.ggml.mask_token_id") == config["dflash_config"][
        "mask_token_id"]


def test_the_names_keep_dflash_for_the_qwen3_8b_target() -> None:
    """``dflash`` stays the Qwen3-8B drafter; ``dflash-moe`` is as wide as the MoE target and
    its twin, reads layers 1..5 of their 8 (the published rule, 1 to N-3, scaled), and every
    layer it reads is one llama.cpp can read (at most N-2)."""
    assert drafter_spec("qwen3-8b", "dflash").n_embd == 4096
    assert drafter_spec("qwen3-8b", "dflash").target == "target"
    moe = drafter_spec("qwen3-8b", "dflash-moe")
    assert (moe.kind, moe.target, moe.n_layer, moe.block_size) == ("dflash", "dense-twin", 5,
                                                                   16)
    for shape in ("tiny", "qwen3-8b"):
        spec = drafter_spec(shape, "dflash-moe")
        for role in ("moe-target", "dense-twin"):
            t = mtp_spec(shape, role)
            assert spec.n_embd == t.n_embd
            assert max(spec.target_layers) <= t.n_layer - 2
    assert moe.target_layers == (1, 2, 3, 4, 5)
    n = mtp_spec("qwen3-8b", "moe-target").n_layer
    published = [round(1 + i * (n - 3 - 1) / (moe.n_layer - 1)) for i in range(moe.n_layer)]
    assert list(moe.target_layers) == published
    # 36 layers, 5 draft layers: the Qwen3-8B drafter's (1, 9, 17, 25, 33) by the same rule
    assert [round(1 + i * 32 / 4) for i in range(5)] == list(
        drafter_spec("qwen3-8b", "dflash").target_layers)
    assert {k for _, k in DRAFTERS} == {"eagle3", "dflash", "dflash-moe"}


def test_unknown_names_and_unreadable_layers_are_refused() -> None:
    with pytest.raises(UserError) as e:
        drafter_spec("qwen3-8b", "dflash-dense")
    assert "qwen3-8b/dflash-moe" in e.value.hint and "qwen3-8b/dflash" in e.value.hint
    from dataclasses import replace

    last = replace(drafter_spec("qwen3-8b", "dflash-moe"), target_layers=(1, 3, 5, 7))
    with pytest.raises(UserError) as e:
        check_target_layers(last, {"text_config": {"num_hidden_layers": 8}}, "x")
    assert "[7]" in str(e.value) and "0..6" in str(e.value)
    check_target_layers(drafter_spec("qwen3-8b", "dflash-moe"),
                        {"text_config": {"num_hidden_layers": 8}}, "x")


def test_cli_and_matrix_name_it(drafter: tuple[Path, Path]) -> None:
    from crossbench.cli.main import cli as main
    from crossbench.runner.matrix import parse_fixture_ref

    out = CliRunner().invoke(main, ["fixtures", "path", "dflash-moe"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == str(drafter[1])
    out = CliRunner().invoke(main, ["fixtures", "path", "dflash-moe", "--format", "hf"])
    assert out.stdout.strip() == str(drafter[0])
    out = CliRunner().invoke(main, ["fixtures", "path", "dflash-mo"])
    assert out.exit_code != 0 and "dflash-moe" in out.output  # click names the choices
    out = CliRunner().invoke(main, ["fixtures", "verify-hf", "--drafter", "dflash-moe"])
    assert out.exit_code == 0, out.output
    assert "dflash-moe: 25 tensors, 25 equal" in out.stdout
    assert parse_fixture_ref("fixture:qwen3-8b/dflash-moe@hf", "m") == (
        "qwen3-8b", "dflash-moe", "hf")
    assert parse_fixture_ref("fixture:qwen3-8b/dflash", "m") == ("qwen3-8b", "dflash", None)


def test_one_drafter_for_both_targets(drafter: tuple[Path, Path], tmp_path: Path) -> None:
    """Converted against the MoE target's folder instead of the dense twin's, the drafter is
    the same bytes, HF folder and GGUF: the converter reads only the target's tokenizer and
    RoPE config, which the two share."""
    import hashlib

    from crossbench.engines.llamacpp.build import source_tree
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
    from crossbench.fixtures.drafters import make_drafter
    from crossbench.fixtures.resolve import ensure_mtp_target, vocab_path
    from crossbench.fixtures.vocab import read_tokenizer

    never = tuple(read_tokenizer(vocab_path()).never_predicted)
    moe_hf = ensure_mtp_target("tiny", 0, "moe-target")[0]
    other = make_drafter("tiny", "dflash-moe", moe_hf, tmp_path / "moe",
                         source_tree(get_pin(DEFAULT_PIN)), never, seed=0)
    assert other.gguf.name == "dflash-moe.gguf" and other.kind == "dflash"
    assert other.manifest["spec"]["target"] == "dense-twin"  # the spec's, not the folder's

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    hf_dir, gguf = drafter
    for name in ("model.safetensors", "config.json"):
        assert sha(other.hf_dir / name) == sha(hf_dir / name)
    assert sha(other.gguf) == sha(gguf)
    assert other.manifest["target_hf_sha256"] != json.loads(
        (gguf.parent / "crossbench-drafter.json").read_text())["target_hf_sha256"]


RATES = [0.9, 0.7, 0.5, 0.2]


@pytest.mark.server
@pytest.mark.parametrize("role", ["moe-target", "dense-twin"])
def test_synthetic_acceptance_holds_with_draft_dflash(llama_server: Path, role: str,
                                                      drafter: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    """The CPU llama-server loads each tiny target with the one dflash-moe drafter and serves
    ``draft-dflash``: the drafter's layers are read from the qwen35moe / qwen35 graphs, and
    --spec-synth-rates is recovered per position (as tests/test_drafters.py checks it for
    the qwen3 target)."""
    from crossbench.fixtures.resolve import ensure_mtp_target
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    _, target = ensure_mtp_target("tiny", 0, role)
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(target), "ctx_size": 2048,
                          "spec": {"type": "draft-dflash", "n": 4,
                                   "draft_model": str(drafter[1]), "synth_rates": RATES}},
        "trials": 1, "load": {"requests": 8, "warmup": 1, "max_tokens": 320}})
    s = run(cfg, tmp_path / role)
    acc = s["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] >= 500, "too few drafts for a tight check"
    assert len(acc["per_position"]) == 4
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, (role, acc["per_position"])
    assert abs(acc["mean_acceptance_length"] - (1 + sum(RATES))) <= 0.1
    assert s["integrity"]["passed"], s["integrity"]
    log = (tmp_path / role / "server.log").read_text(errors="replace")
    assert "adding speculative implementation 'draft-dflash'" in log
    assert "n_extract=2" in log  # the drafter's two target layers, read from the target
