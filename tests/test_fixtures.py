"""The fixture generator: deterministic, loadable-shaped qwen3 GGUF pairs with the real tokenizer."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from crossbench.errors import UserError
from crossbench.fixtures import (
    GENERATOR_VERSION,
    SHAPES,
    FixturePair,
    ModelSpec,
    ShapeSpec,
    fixture_dir,
    make_fixtures,
    make_fixtures_from_spec,
)
from crossbench.fixtures import make as make_mod
from crossbench.fixtures.vocab import read_tokenizer

N_VOCAB = 151936


@pytest.fixture(scope="session")
def vocab() -> Path:
    """llama.cpp's ggml-vocab-qwen35.gguf: $CROSSBENCH_TEST_VOCAB, else the pinned llama.cpp
    tree's copy (unpacked into crossbench's cache from the sdist, as ``crossbench fixtures
    make`` does; tests/run.sh has made it before the tests start)."""
    from crossbench.fixtures.resolve import vocab_path

    env = os.environ.get("CROSSBENCH_TEST_VOCAB")
    return Path(env) if env else vocab_path()


@pytest.fixture(scope="session")
def tiny(vocab: Path, tmp_path_factory: pytest.TempPathFactory) -> FixturePair:
    """The default tiny pair, seed 0, written once for the session."""
    return make_fixtures(vocab, tmp_path_factory.mktemp("tiny0"))


@pytest.fixture(scope="session")
def readers(vocab: Path, tiny: FixturePair) -> dict[str, GGUFReader]:
    """GGUFReader of the vocab, the tiny target and the tiny draft (each takes seconds)."""
    return {
        "vocab": GGUFReader(vocab),
        "target": GGUFReader(tiny.target),
        "draft": GGUFReader(tiny.draft),
    }


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def field(r: GGUFReader, key: str) -> object:
    return r.fields[key].contents()


def small_vocab(path: Path) -> tuple[Path, int, list[int]]:
    """A vocab-only GGUF with 300 tokens, the last 4 special: (path, n_vocab, special ids)."""
    n = 300
    tokens = [f"t{i}" for i in range(n - 4)] + [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "[PAD299]",
    ]
    types = [1] * (n - 4) + [3, 3, 3, 4]
    w = GGUFWriter(path, "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["t 1", "t 2"])
    w.add_eos_token_id(n - 4)
    w.add_chat_template("{{ messages }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, n, list(range(n - 4, n))


def test_same_seed_same_bytes_other_seed_other_bytes(
    vocab: Path, tiny: FixturePair, tmp_path: Path
) -> None:
    again = make_fixtures(vocab, tmp_path / "again", "tiny", 0)
    assert sha(again.target) == sha(tiny.target)
    assert sha(again.draft) == sha(tiny.draft)
    other = make_fixtures(vocab, tmp_path / "other", "tiny", 1)
    assert other.seed == 1
    assert sha(other.target) != sha(tiny.target)
    assert sha(other.draft) != sha(tiny.draft)
    assert other.target.stat().st_size == tiny.target.stat().st_size


def test_tiny_pair_is_qwen3_with_the_real_tokenizer(
    tiny: FixturePair, readers: dict[str, GGUFReader]
) -> None:
    assert tiny.shape == "tiny" and tiny.seed == 0
    assert tiny.target.name == "target.gguf" and tiny.draft.name == "draft.gguf"
    assert tiny.target.stat().st_size < 100_000_000
    assert tiny.draft.stat().st_size < tiny.target.stat().st_size
    spec = SHAPES["tiny"]
    for role, model in (("target", spec.target), ("draft", spec.draft)):
        r = readers[role]
        assert field(r, "general.architecture") == "qwen3"
        assert field(r, "general.file_type") == 1
        assert field(r, "qwen3.block_count") == model.n_layer
        assert field(r, "qwen3.embedding_length") == model.n_embd
        assert field(r, "qwen3.feed_forward_length") == model.n_ff
        assert field(r, "qwen3.attention.head_count") == model.n_head
        assert field(r, "qwen3.attention.head_count_kv") == model.n_head_kv
        assert field(r, "qwen3.attention.key_length") == model.head_dim
        tokens = field(r, "tokenizer.ggml.tokens")
        assert isinstance(tokens, list) and len(tokens) == N_VOCAB
        assert tokens[151644] == "<|im_start|>"
        assert field(r, "tokenizer.ggml.model") == "gpt2"
        assert field(r, "tokenizer.ggml.pre") == "qwen35"
        assert "<|im_start|>" in str(field(r, "tokenizer.chat_template"))
        names = {t.name for t in r.tensors}
        assert {"token_embd.weight", "output_norm.weight", "output.weight"} <= names
        assert f"blk.{model.n_layer - 1}.ffn_down.weight" in names
        assert f"blk.{model.n_layer}.attn_q.weight" not in names
        assert len(names) == 3 + 11 * model.n_layer
        emb = next(t for t in r.tensors if t.name == "token_embd.weight")
        assert [int(x) for x in emb.shape] == [model.n_embd, N_VOCAB]
        assert emb.tensor_type.name == "F16"


def test_tokenizer_keys_are_copied_verbatim(
    tiny: FixturePair, readers: dict[str, GGUFReader]
) -> None:
    src = readers["vocab"]
    keys = [k for k in src.fields if k.startswith("tokenizer.")]
    assert len(keys) >= 8
    for role in ("target", "draft"):
        dst = readers[role]
        assert [k for k in dst.fields if k.startswith("tokenizer.")] == keys
        for k in keys:
            assert dst.fields[k].types == src.fields[k].types, k
            assert dst.fields[k].contents() == src.fields[k].contents(), k


def test_tiny_draft_is_the_targets_first_layers(readers: dict[str, GGUFReader]) -> None:
    """Early exit: shared tensors byte-identical, the target's later layers scaled by gamma."""
    spec = SHAPES["tiny"]
    t = {x.name: x for x in readers["target"].tensors}
    d = {x.name: x for x in readers["draft"].tensors}
    assert set(d) < set(t)
    for name in d:
        assert np.array_equal(np.asarray(d[name].data), np.asarray(t[name].data)), name
    for suffix in ("ffn_down", "attn_output"):
        first = np.asarray(t[f"blk.0.{suffix}.weight"].data, dtype=np.float32)
        last = np.asarray(
            t[f"blk.{spec.target.n_layer - 1}.{suffix}.weight"].data, dtype=np.float32
        )
        assert float(last.std() / first.std()) == pytest.approx(spec.gamma, rel=0.05)


def test_output_head_never_predicts_special_or_partial_tokens(
    vocab: Path, readers: dict[str, GGUFReader]
) -> None:
    tok = read_tokenizer(vocab)
    never = np.asarray(tok.never_predicted)
    # 3 control + 290 [PAD] tokens, 8 marker-like ones such as </s> (llama.cpp makes a NORMAL
    # </s> end generation), 1448 byte pieces that are not whole UTF-8 characters
    assert len(never) == 3 + 290 + 8 + 1448
    assert {151643, 151644, 151645, 151935, 128247} <= set(never.tolist())
    tokens = readers["vocab"].fields["tokenizer.ggml.tokens"].contents()
    assert tokens[never[0]] == "¡"  # a lone byte (0xA1) in GPT-2's byte-to-unicode map
    out = np.asarray(
        next(x for x in readers["target"].tensors if x.name == "output.weight").data,
        dtype=np.float32,
    )
    assert not out[never].any()  # zero logit: never the argmax, a positive one always exists
    keep = np.ones(len(out), dtype=bool)
    keep[never] = False
    norms = np.linalg.norm(out[keep], axis=1)
    scale = SHAPES["tiny"].target.logit_scale
    assert norms.min() == pytest.approx(scale, rel=0.01)
    assert norms.max() == pytest.approx(scale, rel=0.01)


def test_reuse_skips_work_and_repairs_damage(vocab: Path, tmp_path: Path) -> None:
    out = tmp_path / "pair"
    msgs: list[str] = []
    first = make_fixtures(vocab, out, progress=msgs.append)
    assert any(": layer " in m for m in msgs)
    man = json.loads((out / "fixtures.json").read_text())
    assert man["generator_version"] == GENERATOR_VERSION
    assert (man["shape"], man["seed"]) == ("tiny", 0)
    assert man["files"]["target.gguf"]["sha256"] == sha(first.target)
    assert man["files"]["draft.gguf"]["sha256"] == sha(first.draft)
    assert sorted(p.name for p in out.iterdir()) == ["draft.gguf", "fixtures.json", "target.gguf"]

    mtime = first.target.stat().st_mtime_ns
    msgs.clear()
    make_fixtures(vocab, out, progress=msgs.append)
    assert msgs == [f"fixtures up to date in {out}"]
    assert first.target.stat().st_mtime_ns == mtime

    good = sha(first.draft)
    with first.draft.open("r+b") as f:  # same size, different bytes
        f.seek(-10, os.SEEK_END)
        f.write(b"x" * 10)
    msgs.clear()
    make_fixtures(vocab, out, progress=msgs.append)
    assert msgs != [f"fixtures up to date in {out}"]
    assert sha(first.draft) == good


def test_unknown_shape_names_the_valid_ones(vocab: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        make_fixtures(vocab, tmp_path, shape="huge")
    text = e.value.one_line()
    assert "huge" in text
    for name in SHAPES:
        assert name in text
    assert e.value.hint
    assert not any(tmp_path.iterdir())


def test_bad_inputs_are_user_errors(vocab: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="vocab GGUF not found"):
        make_fixtures(tmp_path / "missing.gguf", tmp_path / "out")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(UserError, match="cannot read GGUF metadata"):
        make_fixtures(junk, tmp_path / "out")
    with pytest.raises(UserError, match="seed"):
        make_fixtures(vocab, tmp_path / "out", seed=-1)


def test_fixture_dir_names_shape_seed_and_version(tmp_path: Path) -> None:
    d = fixture_dir(tmp_path, "tiny", 3)
    assert d == tmp_path / "fixtures" / f"tiny-seed3-v{GENERATOR_VERSION}"
    assert fixture_dir(tmp_path, "tiny", 4) != d
    assert fixture_dir(tmp_path, "qwen3-8b", 3) != d


def test_shapes_table() -> None:
    big = SHAPES["qwen3-8b"]
    assert (big.target.n_layer, big.target.n_embd, big.target.n_ff) == (36, 4096, 12288)
    assert (big.target.n_head, big.target.n_head_kv, big.target.head_dim) == (32, 8, 128)
    assert not big.target.tied_output
    assert (big.draft.n_layer, big.draft.n_embd, big.draft.n_ff) == (28, 1024, 3072)
    assert (big.draft.n_head, big.draft.n_head_kv, big.draft.head_dim) == (16, 8, 128)
    assert big.draft.tied_output
    # about 8.2 B and 0.6 B weights
    assert 8.0e9 < big.target.n_params(N_VOCAB) < 8.4e9
    assert 0.55e9 < big.draft.n_params(N_VOCAB) < 0.65e9
    tiny = SHAPES["tiny"]
    assert tiny.early_exit and tiny.draft.n_layer < tiny.target.n_layer
    with pytest.raises(ValueError, match="early-exit"):
        replace(tiny, draft=replace(tiny.draft, n_embd=32))


def test_streaming_path_of_the_big_shape_scaled_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qwen3-8b's code path (independent draft, tied draft, untied target) at a small size and
    with a small vocab, written in many small chunks: bytes do not depend on the chunk size
    or on the number of generator threads."""
    vocab, n_vocab, special = small_vocab(tmp_path / "vocab.gguf")
    big = SHAPES["qwen3-8b"]
    small = ShapeSpec(
        name="qwen3-8b-small",
        target=replace(
            big.target, n_layer=3, n_embd=32, n_ff=96, n_head=4, n_head_kv=2, head_dim=16
        ),
        draft=replace(big.draft, n_layer=2, n_embd=16, n_ff=48, n_head=2, n_head_kv=1, head_dim=8),
        early_exit=False,
    )
    one = make_fixtures_from_spec(small, vocab, tmp_path / "whole", seed=7, threads=1)
    monkeypatch.setattr(make_mod, "_CHUNK_ELEMENTS", 100)  # 3 rows of token_embd per chunk
    msgs: list[str] = []
    two = make_fixtures_from_spec(small, vocab, tmp_path / "chunked", seed=7, progress=msgs.append,
                                  threads=5)
    assert sha(one.target) == sha(two.target) and sha(one.draft) == sha(two.draft)
    # progress: each big non-layer tensor, then each layer
    assert msgs[:2] == [
        "target.gguf: token_embd.weight [32, 300]",
        "target.gguf: output.weight [32, 300]",
    ]
    assert "target.gguf: layer 3/3" in msgs and "draft.gguf: layer 2/2" in msgs
    assert sum(": layer " in m for m in msgs) == 3 + 2

    src = GGUFReader(vocab)
    for path, m in ((two.target, small.target), (two.draft, small.draft)):
        r = GGUFReader(path)
        assert field(r, "general.architecture") == "qwen3"
        assert field(r, "general.file_type") == 1
        assert field(r, "qwen3.block_count") == m.n_layer
        assert field(r, "qwen3.context_length") == 40960
        assert field(r, "qwen3.embedding_length") == m.n_embd
        assert field(r, "qwen3.feed_forward_length") == m.n_ff
        assert field(r, "qwen3.attention.head_count") == m.n_head
        assert field(r, "qwen3.attention.head_count_kv") == m.n_head_kv
        assert field(r, "qwen3.attention.key_length") == m.head_dim
        assert field(r, "qwen3.attention.value_length") == m.head_dim
        assert field(r, "qwen3.rope.freq_base") == pytest.approx(1e6)
        assert field(r, "qwen3.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
        for k in (k for k in src.fields if k.startswith("tokenizer.")):
            assert field(r, k) == src.fields[k].contents(), k
        shapes = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in r.tensors}
        q, kv = m.n_head * m.head_dim, m.n_head_kv * m.head_dim
        want = {
            "token_embd.weight": ([m.n_embd, n_vocab], "F16"),
            "output_norm.weight": ([m.n_embd], "F32"),
        }
        if not m.tied_output:
            want["output.weight"] = ([m.n_embd, n_vocab], "F16")
        for i in range(m.n_layer):
            want |= {
                f"blk.{i}.attn_norm.weight": ([m.n_embd], "F32"),
                f"blk.{i}.attn_q.weight": ([m.n_embd, q], "F16"),
                f"blk.{i}.attn_k.weight": ([m.n_embd, kv], "F16"),
                f"blk.{i}.attn_v.weight": ([m.n_embd, kv], "F16"),
                f"blk.{i}.attn_output.weight": ([q, m.n_embd], "F16"),
                f"blk.{i}.attn_q_norm.weight": ([m.head_dim], "F32"),
                f"blk.{i}.attn_k_norm.weight": ([m.head_dim], "F32"),
                f"blk.{i}.ffn_norm.weight": ([m.n_embd], "F32"),
                f"blk.{i}.ffn_gate.weight": ([m.n_embd, m.n_ff], "F16"),
                f"blk.{i}.ffn_up.weight": ([m.n_embd, m.n_ff], "F16"),
                f"blk.{i}.ffn_down.weight": ([m.n_ff, m.n_embd], "F16"),
            }
        assert shapes == want
        data = {t.name: np.asarray(t.data, dtype=np.float32) for t in r.tensors}
        assert all(np.isfinite(v).all() for v in data.values())
        head = data["token_embd.weight" if m.tied_output else "output.weight"]
        assert not head[special].any()  # special tokens are never predicted
        assert head[: special[0]].any(axis=1).all()
        assert (data["output_norm.weight"] == 1).all()
    # an independent draft shares no values with the target
    t_q = np.asarray(
        next(t for t in GGUFReader(two.target).tensors if t.name == "blk.0.attn_q.weight").data
    ).ravel()[:8]
    d_q = np.asarray(
        next(t for t in GGUFReader(two.draft).tensors if t.name == "blk.0.attn_q.weight").data
    ).ravel()[:8]
    assert t_q.tolist() != d_q.tolist()


def test_model_spec_rejects_impossible_shapes() -> None:
    with pytest.raises(ValueError):
        ModelSpec(n_layer=1, n_embd=8, n_ff=8, n_head=3, n_head_kv=2, head_dim=4, tied_output=True)
    with pytest.raises(ValueError):
        ModelSpec(n_layer=1, n_embd=8, n_ff=8, n_head=2, n_head_kv=2, head_dim=3, tied_output=True)


def test_quantize_uses_a_cuda_build_when_no_cpu_build_exists(tmp_path, monkeypatch):
    """On the GPU machine only the CUDA build exists (found by the H200 study)."""
    from crossbench.fixtures.resolve import quantize

    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "cache"))
    bin_dir = tmp_path / "cache" / "engines" / "llama-cpp-python-0.3.36-cuda-sm90" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "llama-quantize"
    tool.write_text('#!/bin/sh\necho "$3" > "$2"\n')  # writes the type it was asked for
    tool.chmod(0o755)
    src = tmp_path / "target.gguf"
    src.write_bytes(b"GGUF")
    out = quantize(src, "Q4_K_M", progress_fn=lambda _: None)
    assert out == tmp_path / "target-Q4_K_M.gguf"
    assert out.read_text() == "Q4_K_M\n"
