"""Drafter fixtures (EAGLE-3, DFlash): written as HF folders, converted by llama.cpp's own
``convert_hf_to_gguf.py``, checked tensor by tensor, and served by the real CPU llama-server
with synthetic acceptance recovered per draft type."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from crossbench.errors import UserError
from crossbench.fixtures.drafters import (
    DRAFTER_KINDS,
    _llama_permute,
    compare,
    drafter_spec,
    make_drafter,
)


@pytest.fixture(scope="module")
def drafters() -> dict[str, tuple[Path, Path]]:
    """Both tiny drafters, made (or reused) in the cache by the command's library layer."""
    from crossbench.fixtures.resolve import ensure_drafter

    return {kind: ensure_drafter("tiny", kind) for kind in DRAFTER_KINDS}


def test_llama_permute_interleaves_the_halves_of_each_head():
    # one head of 4 rows: rows (0, 1 | 2, 3) -> llama.cpp's pairs order 0, 2, 1, 3
    w = np.arange(8, dtype=np.float16).reshape(8, 1)
    assert _llama_permute(w, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_every_converted_tensor_equals_its_hf_tensor(drafters, kind):
    hf_dir, gguf = drafters[kind]
    checks = compare(drafter_spec("tiny", kind), hf_dir, gguf)
    assert checks and all(c.equal for c in checks), [c for c in checks if not c.equal]
    names = {c.gguf_name for c in checks}
    assert {"fc.weight", "output_norm.weight"} <= names
    config = json.loads((hf_dir / "config.json").read_text())
    if kind == "eagle3":
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["draft_vocab_size"] == 4096 and config["num_hidden_layers"] == 1
        assert "output.weight" in names and "blk.0.attn_norm_2.weight" in names
        changes = {c.hf_name: c.change for c in checks}
        assert changes["t2d"].startswith("dropped")
        assert changes["d2t"].startswith("offsets")
        assert "permuted" in changes["midlayer.self_attn.q_proj.weight"]
    else:
        assert config["architectures"] == ["DFlashDraftModel"]
        assert config["block_size"] == 16
        assert config["dflash_config"]["target_layer_ids"] == [1, 3, 5]
        assert "enc.output_norm.weight" in names and "output.weight" not in names


def test_a_changed_tensor_is_found(drafters, tmp_path):
    """The check can fail: one value of fc.weight changed in a copy of the GGUF."""
    from gguf import GGUFReader

    hf_dir, gguf = drafters["eagle3"]
    bad = tmp_path / "eagle3.gguf"
    shutil.copy(gguf, bad)
    fc = next(t for t in GGUFReader(str(bad)).tensors if t.name == "fc.weight")
    with bad.open("r+b") as f:
        f.seek(int(fc.data_offset))
        b = f.read(2)
        f.seek(int(fc.data_offset))
        f.write(bytes([b[0] ^ 1, b[1]]))
    checks = {c.gguf_name: c.equal for c in compare(drafter_spec("tiny", "eagle3"), hf_dir, bad)}
    assert checks["fc.weight"] is False
    assert sum(not ok for ok in checks.values()) == 1


def test_same_seed_same_bytes_other_seed_other_bytes(drafters, tmp_path):
    from crossbench.engines.llamacpp.build import source_tree
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin
    from crossbench.fixtures.resolve import ensure_hf_fixture, vocab_path
    from crossbench.fixtures.vocab import read_tokenizer

    hf_dir, gguf = drafters["dflash"]
    never = tuple(read_tokenizer(vocab_path()).never_predicted)
    tree = source_tree(get_pin(DEFAULT_PIN))
    target_hf = ensure_hf_fixture("tiny", "target")
    again = make_drafter("tiny", "dflash", target_hf, tmp_path / "again", tree, never, seed=0)
    other = make_drafter("tiny", "dflash", target_hf, tmp_path / "other", tree, never, seed=1)

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    st = "model.safetensors"
    assert sha(again.hf_dir / st) == sha(hf_dir / st)
    assert sha(again.gguf) == sha(gguf)
    assert sha(other.hf_dir / st) != sha(hf_dir / st)
    # reuse: a second call finds the manifest and writes nothing
    mtime = again.gguf.stat().st_mtime_ns
    make_drafter("tiny", "dflash", target_hf, tmp_path / "again", tree, never, seed=0)
    assert again.gguf.stat().st_mtime_ns == mtime


def test_unknown_drafter_and_missing_converter_deps_are_named(monkeypatch):
    with pytest.raises(UserError) as e:
        drafter_spec("tiny", "medusa")
    assert "tiny/eagle3" in e.value.hint
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    from crossbench.fixtures.drafters import check_converter_deps

    with pytest.raises(UserError) as e:
        check_converter_deps()
    assert "torch" in str(e.value) and "crossbench[convert]" in e.value.hint


def test_matrix_fixture_refs_name_drafters():
    from crossbench.runner.matrix import parse_fixture_ref

    assert parse_fixture_ref("fixture:qwen3-8b/eagle3@hf", "m") == ("qwen3-8b", "eagle3", "hf")
    assert parse_fixture_ref("fixture:dflash", "m") == ("tiny", "dflash", None)
    with pytest.raises(UserError):
        parse_fixture_ref("fixture:tiny/medusa", "m")


RATES = [0.9, 0.7, 0.5, 0.2]


@pytest.mark.server
@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_synthetic_acceptance_holds_per_draft_type(llama_server, fixture_models, drafters,
                                                   kind, tmp_path):
    """llama-server applies --spec-synth-rates in its verification step for every draft type:
    the suite recovers the configured per-position rates with an EAGLE-3 head and a DFlash
    block drafter as it does with a draft model (tests/test_server_llama.py)."""
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    target, _ = fixture_models
    _, gguf = drafters[kind]
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(target), "ctx_size": 2048,
                          "spec": {"type": f"draft-{kind}", "n": 4, "draft_model": str(gguf),
                                   "synth_rates": RATES}},
        "trials": 1, "load": {"requests": 8, "warmup": 1, "max_tokens": 320}})
    s = run(cfg, tmp_path / kind)
    acc = s["acceptance"]
    assert acc["source"] == "metrics"
    assert acc["drafts"] >= 500, "too few drafts for a tight check"
    assert len(acc["per_position"]) == 4
    for got, want in zip(acc["per_position"], RATES, strict=True):
        assert abs(got - want) <= 0.05, (kind, acc["per_position"])
    assert abs(acc["mean_acceptance_length"] - (1 + sum(RATES))) <= 0.1
    assert s["integrity"]["passed"], s["integrity"]
    log = (tmp_path / kind / "server.log").read_text(errors="replace")
    assert f"draft-{kind}" in log  # the server ran the type asked for, not a fallback


def test_hf_fixture_path_names_the_folder_the_ensure_functions_make(drafters) -> None:
    """``hf_fixture_path`` computes without making: the same folders the makers return (the
    compile-cache pick of ``benchmarks/study/study.py`` matches rounds to packs by them)."""
    from crossbench.errors import UserError
    from crossbench.fixtures.resolve import ensure_hf_fixture, ensure_mtp_target, hf_fixture_path

    for kind, (hf_dir, _gguf) in drafters.items():
        assert hf_fixture_path("tiny", kind) == hf_dir
    for role in ("target", "draft"):
        assert hf_fixture_path("tiny", role) == ensure_hf_fixture("tiny", role)
    assert hf_fixture_path("tiny", "mtp-target") == ensure_mtp_target("tiny", 0, "mtp-target")[0]
    assert hf_fixture_path("qwen3-8b", "target", cache_root=Path("/c")) == \
        Path("/c/fixtures/qwen3-8b-seed0-v1/hf-target")
    with pytest.raises(UserError, match="unknown fixture role 'eagle4'"):
        hf_fixture_path("tiny", "eagle4")
