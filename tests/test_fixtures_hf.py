"""The Hugging Face copy of the fixtures: same tensors as the GGUF, same token ids as llama.cpp.

Ground truths: the GGUF's own bytes (read back by an independent reader, ``safetensors``), the
fixture's :class:`ModelSpec`, and the real llama-server's ``/tokenize`` on the same GGUF.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import subprocess
import time
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import tokenizers
from click.testing import CliRunner

from crossbench.cli import fixtures_cmd
from crossbench.cli.main import cli
from crossbench.engines.process import free_port
from crossbench.errors import UserError
from crossbench.fixtures import SHAPES, resolve
from crossbench.fixtures.hf import (
    MANIFEST_NAME,
    PRE_TOKENIZER_REGEX,
    WEIGHTS_NAME,
    compare_tensors,
    ensure_hf,
    hf_name,
    reusable_hf,
    write_hf,
)
from crossbench.runner.matrix import parse_fixture_ref

PROMPTS = Path(__file__).resolve().parent.parent / "crossbench" / "load" / "prompts" / "builtin.jsonl"
HARD = [
    "  two leading spaces",
    " one leading space",
    "trailing spaces   ",
    "line one\nline two\n\n\nafter blank lines\r\nwindows\ttab",
    "12345 and 3.14159 and 1,000,000",
    "don't I'LL we'Re you've He'd it's",
    "中文文本：你好，世界！今天天气很好。",
    "emoji 🤖🚀 and flags 🇫🇷 and a family 👨‍👩‍👧",
    "accents: café naïve Ångström",
    "combining: e\u0301 a\u0308 n\u0303o",  # not NFC: llama.cpp does not normalize
    "mixed: Привет мир, γειά σου, مرحبا",
    "Thai: ที่นี่ สวัสดีครับ",  # combining vowel marks: qwen35's regex, not qwen2's
    "code: def f(x):\n    return x**2  # square\n",
    "<|im_start|>user\nhi<|im_end|>\n",  # control tokens, parsed as llama-server does
    "",
]


def prompts() -> list[str]:
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    return [r["prompt"] for r in rows] + HARD


@pytest.fixture(scope="module")
def hf_pair(fixture_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, tuple[Path, Path]]:
    """role -> (GGUF, its HF folder written into a temp dir)."""
    out = tmp_path_factory.mktemp("hf")
    target, draft = fixture_models
    return {role: (gguf, write_hf(gguf, out / f"hf-{role}").path)
            for role, gguf in (("target", target), ("draft", draft))}


# ---------------------------------------------------------------- weights


def test_every_tensor_equal_and_loadable(hf_pair: dict[str, tuple[Path, Path]]) -> None:
    from gguf import GGUFReader

    loaded: dict[str, dict[str, np.ndarray]] = {}
    for role, (gguf, hf_dir) in hf_pair.items():  # target first
        spec = getattr(SHAPES["tiny"], role)
        matches = compare_tensors(gguf, hf_dir)
        assert len(matches) == 11 * spec.n_layer + 3  # embeddings, norm, untied output head
        assert all(m.equal for m in matches), [m for m in matches if not m.equal]
        assert all(m.gguf_sha256 == m.hf_sha256 for m in matches)

        # independent readers of each format: safetensors, and gguf's GGUFReader for the
        # target (20 s: it builds every vocabulary string); the tiny draft is the target's
        # first 2 layers, byte for byte, so the target's arrays are its truth too.
        loaded[role] = safetensors.numpy.load_file(str(hf_dir / WEIGHTS_NAME))
        assert len(loaded[role]) == len(matches)
        if role == "target":
            for t in GGUFReader(gguf).tensors:
                arr = loaded[role][hf_name(t.name)]
                want = np.asarray(t.data)
                assert arr.dtype == want.dtype and arr.dtype in (np.float16, np.float32)
                assert arr.shape == want.shape, t.name
                assert arr.tobytes() == want.tobytes(), t.name
        else:
            for name, arr in loaded[role].items():
                assert arr.dtype == loaded["target"][name].dtype, name
                assert arr.tobytes() == loaded["target"][name].tobytes(), name
        e, v = spec.n_embd, 151936
        assert loaded[role]["model.embed_tokens.weight"].shape == (v, e)
        assert loaded[role]["lm_head.weight"].shape == (v, e)
        assert loaded[role]["model.layers.0.self_attn.q_proj.weight"].shape == (
            spec.n_head * spec.head_dim, e)
        assert loaded[role]["model.layers.0.self_attn.k_proj.weight"].shape == (
            spec.n_head_kv * spec.head_dim, e)
        assert loaded[role]["model.layers.0.mlp.down_proj.weight"].shape == (e, spec.n_ff)
        assert loaded[role]["model.layers.0.self_attn.q_norm.weight"].dtype == np.float32


def test_config_matches_model_spec(hf_pair: dict[str, tuple[Path, Path]]) -> None:
    for role, (_gguf, hf_dir) in hf_pair.items():
        spec = getattr(SHAPES["tiny"], role)
        cfg = json.loads((hf_dir / "config.json").read_text())
        assert cfg["architectures"] == ["Qwen3ForCausalLM"]
        assert cfg["model_type"] == "qwen3"
        assert cfg["vocab_size"] == 151936
        assert cfg["hidden_size"] == spec.n_embd
        assert cfg["intermediate_size"] == spec.n_ff
        assert cfg["num_hidden_layers"] == spec.n_layer
        assert cfg["num_attention_heads"] == spec.n_head
        assert cfg["num_key_value_heads"] == spec.n_head_kv
        assert cfg["head_dim"] == spec.head_dim
        assert cfg["max_position_embeddings"] == spec.context_length
        assert cfg["rope_theta"] == spec.rope_freq_base
        assert cfg["rms_norm_eps"] == spec.rms_eps  # 1e-06, not float32's 9.99...e-07
        assert cfg["tie_word_embeddings"] is spec.tied_output is False
        assert (cfg["hidden_act"], cfg["attention_bias"], cfg["torch_dtype"]) == (
            "silu", False, "float16")
        assert cfg["bos_token_id"] == cfg["eos_token_id"] == 151643  # <|endoftext|>
        gen = json.loads((hf_dir / "generation_config.json").read_text())
        assert (gen["bos_token_id"], gen["eos_token_id"]) == (151643, 151643)
        tc = json.loads((hf_dir / "tokenizer_config.json").read_text())
        assert tc["tokenizer_class"] == "PreTrainedTokenizerFast"
        assert (tc["eos_token"], tc["add_bos_token"]) == ("<|endoftext|>", False)
        assert tc["chat_template"].startswith("{% for message in messages %}")
        assert tc["model_max_length"] == spec.context_length


def test_manifest_records_source_and_every_file(hf_pair: dict[str, tuple[Path, Path]]) -> None:
    gguf, hf_dir = hf_pair["target"]
    man = json.loads((hf_dir / MANIFEST_NAME).read_text())
    assert man["source"]["name"] == "target.gguf"
    assert man["source"]["sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert len(man["tensors"]) == 91
    by_gguf = {t["gguf"]: t for t in man["tensors"]}
    assert by_gguf["blk.7.ffn_down.weight"] == {
        **by_gguf["blk.7.ffn_down.weight"], "hf": "model.layers.7.mlp.down_proj.weight",
        "dtype": "F16", "shape": [64, 4096]}
    assert sorted(man["files"]) == sorted(
        p.name for p in hf_dir.iterdir() if p.name != MANIFEST_NAME)
    for name, entry in man["files"].items():
        data = (hf_dir / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # the safetensors header is what the format demands: 8-byte length, padded JSON
    raw = (hf_dir / WEIGHTS_NAME).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0 and raw[8:9] == b"{"
    header = json.loads(raw[8 : 8 + n])
    assert header["__metadata__"] == {"format": "pt"}
    ends = sorted((v["data_offsets"] for k, v in header.items() if k != "__metadata__"))
    assert ends[0][0] == 0 and ends[-1][1] == len(raw) - 8 - n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))


def test_deterministic_and_tamper_detected(hf_pair: dict[str, tuple[Path, Path]],
                                           tmp_path: Path) -> None:
    gguf, first = hf_pair["draft"]
    again = write_hf(gguf, tmp_path / "again").path
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in again.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left

    # reuse: same GGUF and sizes -> nothing written; another sha256 -> rewritten
    sha = json.loads((again / MANIFEST_NAME).read_text())["source"]["sha256"]
    assert reusable_hf(again, sha) is not None
    assert reusable_hf(again, "0" * 64) is None
    mtime = (again / WEIGHTS_NAME).stat().st_mtime_ns
    assert ensure_hf(gguf, again, gguf_sha256=sha).n_tensors == 25
    assert (again / WEIGHTS_NAME).stat().st_mtime_ns == mtime

    # one flipped byte inside the data of model.layers.1.mlp.up_proj.weight
    raw = bytearray((again / WEIGHTS_NAME).read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    a, b = header["model.layers.1.mlp.up_proj.weight"]["data_offsets"]
    raw[8 + n + (a + b) // 2] ^= 0x01
    (again / WEIGHTS_NAME).write_bytes(bytes(raw))
    bad = [m for m in compare_tensors(gguf, again) if not m.equal]
    assert [(m.gguf_name, m.hf_name, m.problem) for m in bad] == [
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight", "sha256 differs")]
    assert reusable_hf(again, sha) is not None  # sizes only: verify-hf is the byte check


def test_write_replaces_an_old_folder_atomically(hf_pair: dict[str, tuple[Path, Path]],
                                                 tmp_path: Path) -> None:
    gguf, _ = hf_pair["draft"]
    out = tmp_path / "hf-draft"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    write_hf(gguf, out)
    assert not (out / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-draft"]


def test_unknown_tensor_and_quantized_gguf_are_user_errors(tmp_path: Path) -> None:
    from gguf import GGMLQuantizationType, GGUFWriter

    with pytest.raises(UserError, match="no Qwen3ForCausalLM counterpart"):
        hf_name("blk.0.attn_qkv.weight")
    assert hf_name("blk.12.attn_k_norm.weight") == "model.layers.12.self_attn.k_norm.weight"
    path = tmp_path / "q.gguf"
    w = GGUFWriter(path, "qwen3")
    w.add_tensor("token_embd.weight", np.zeros((2, 34), dtype=np.uint8),
                 raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match="Q8_0; only F32, F16 and BF16"):
        write_hf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.gguf"]


def test_unknown_pre_tokenizer_names_the_known_ones(tmp_path: Path) -> None:
    from crossbench.fixtures import hf

    with pytest.raises(UserError, match=r"unknown tokenizer.ggml.pre 'llama3'; known: qwen2, "
                                        r"qwen35"):
        hf._tokenizer({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama3"},
                      tmp_path / "x.gguf")
    assert set(PRE_TOKENIZER_REGEX) == {"qwen2", "qwen35"}


# ---------------------------------------------------------------- tokenizer against llama-server


@pytest.fixture(scope="module")
def tokenize_url(llama_server: Path, fixture_models: tuple[Path, Path],
                 tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """URL of /tokenize on a real llama-server with the tiny target."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(llama_server), "-m", str(fixture_models[0]), "--host", "127.0.0.1",
             "--port", str(port), "-c", "512", "-np", "1", "-t", "1"],
            stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama-server did not become healthy in 120 s")
            time.sleep(0.2)
        yield base + "/tokenize"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def llama_ids(url: str, text: str) -> list[int]:
    req = urllib.request.Request(url, data=json.dumps({"content": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return list(json.loads(r.read())["tokens"])


@pytest.mark.server
def test_token_ids_equal_llama_server(hf_pair: dict[str, tuple[Path, Path]],
                                      tokenize_url: str) -> None:
    tok = tokenizers.Tokenizer.from_file(str(hf_pair["target"][1] / "tokenizer.json"))
    texts = prompts()
    assert len(texts) == 48 + len(HARD)
    for text in texts:
        want = llama_ids(tokenize_url, text)
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == want, (text, got, want)
        assert tok.decode(got, skip_special_tokens=False) == text
    # the draft's tokenizer is the same file
    assert (hf_pair["draft"][1] / "tokenizer.json").read_bytes() == (
        hf_pair["target"][1] / "tokenizer.json").read_bytes()


@pytest.mark.server
def test_qwen2_regex_would_break_equality(hf_pair: dict[str, tuple[Path, Path]],
                                          tokenize_url: str) -> None:
    """The vocab GGUF says pre 'qwen35': its regex (with \\p{M}) is the one llama.cpp runs."""
    spec = json.loads((hf_pair["target"][1] / "tokenizer.json").read_text())
    split = spec["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == PRE_TOKENIZER_REGEX["qwen35"]
    split["pattern"]["Regex"] = PRE_TOKENIZER_REGEX["qwen2"]
    qwen2 = tokenizers.Tokenizer.from_str(json.dumps(spec))
    text = "ที่นี่ สวัสดีครับ"
    assert llama_ids(tokenize_url, text) == [130742, 129328, 124294, 35648, 124311, 125459]
    assert qwen2.encode(text, add_special_tokens=False).ids != llama_ids(tokenize_url, text)


@pytest.mark.server
def test_nfc_normalizer_would_break_equality(hf_pair: dict[str, tuple[Path, Path]],
                                             tokenize_url: str) -> None:
    """Why tokenizer.json has no normalizer, unlike Qwen's own (NFC): llama.cpp has none."""
    spec = json.loads((hf_pair["target"][1] / "tokenizer.json").read_text())
    assert spec["normalizer"] is None
    spec["normalizer"] = {"type": "NFC"}
    nfc = tokenizers.Tokenizer.from_str(json.dumps(spec))
    text = "combining: e\u0301"
    assert unicodedata.normalize("NFC", text) != text
    want = llama_ids(tokenize_url, text)
    assert nfc.encode(text, add_special_tokens=False).ids != want
    assert nfc.encode(unicodedata.normalize("NFC", text), add_special_tokens=False).ids == (
        llama_ids(tokenize_url, unicodedata.normalize("NFC", text)))


@pytest.mark.server
def test_transformers_auto_tokenizer_gives_the_same_ids(
        hf_pair: dict[str, tuple[Path, Path]], tokenize_url: str) -> None:
    """What vLLM loads: AutoTokenizer on the folder, with its default add_special_tokens."""
    transformers = pytest.importorskip("transformers")
    hf_dir = hf_pair["target"][1]
    tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    for text in prompts():
        assert tok(text)["input_ids"] == llama_ids(tokenize_url, text), text
    cfg = transformers.AutoConfig.from_pretrained(str(hf_dir))
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.head_dim) == ("qwen3", 8, 32)


# ---------------------------------------------------------------- CLI and matrix


def test_cli_path_and_verify(fixture_models: tuple[Path, Path]) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["fixtures", "path", "draft", "--format", "hf"])
    assert res.exit_code == 0, res.output
    folder = Path(res.stdout.strip())
    assert folder == fixture_models[1].parent / "hf-draft"
    assert (folder / MANIFEST_NAME).is_file()

    res = runner.invoke(cli, ["fixtures", "make", "--hf"])
    assert res.exit_code == 0, res.output
    d = fixture_models[0].parent
    assert res.stdout.splitlines() == [str(d / "target.gguf"), str(d / "draft.gguf"),
                                       str(d / "hf-target"), str(d / "hf-draft")]

    res = runner.invoke(cli, ["fixtures", "verify-hf"])
    assert res.exit_code == 0, res.output
    assert res.stdout == ("target: 91 tensors, all sha256 equal\n"
                          "draft: 25 tensors, all sha256 equal\n")


def test_cli_verify_fails_on_a_changed_tensor(fixture_models: tuple[Path, Path],
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = (shutil.copy(p, tmp_path / p.name) for p in fixture_models)
    folders = {r: write_hf(Path(g), tmp_path / f"hf-{r}").path
               for r, g in (("target", target), ("draft", draft))}
    raw = bytearray((folders["target"] / WEIGHTS_NAME).read_bytes())
    raw[-1] ^= 0xFF  # last byte: inside the last tensor of the file
    (folders["target"] / WEIGHTS_NAME).write_bytes(bytes(raw))
    monkeypatch.setattr(fixtures_cmd, "ensure_fixtures", lambda *_a: (Path(target), Path(draft)))
    monkeypatch.setattr(fixtures_cmd, "ensure_hf_fixture", lambda _s, role, _seed: folders[role])
    res = CliRunner().invoke(cli, ["fixtures", "verify-hf"])
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith("target: 1 of 91 tensors differ: ")
    assert lines[0].endswith(" (sha256 differs)")
    assert lines[1] == "draft: 25 tensors, all sha256 equal"
    assert "the Hugging Face copy of target differs from its GGUF" in res.stderr


def test_matrix_hf_reference(fixture_models: tuple[Path, Path]) -> None:
    from crossbench.runner.matrix_run import _resolve

    assert parse_fixture_ref("fixture:qwen3-8b/target@hf", "m") == ("qwen3-8b", "target", "hf")
    assert parse_fixture_ref("fixture:draft@hf", "m") == ("tiny", "draft", "hf")
    assert _resolve("fixture:tiny/target@hf") == str(fixture_models[0].parent / "hf-target")
    assert _resolve("fixture:target") == str(fixture_models[0])


def test_tied_output_has_no_lm_head(tmp_path: Path) -> None:
    """A tied model (like the qwen3-8b draft): no lm_head.weight, tie_word_embeddings true."""
    from crossbench.fixtures import ModelSpec, ShapeSpec, make_fixtures_from_spec

    small = ModelSpec(n_layer=1, n_embd=32, n_ff=64, n_head=2, n_head_kv=1, head_dim=16,
                      tied_output=True)
    spec = ShapeSpec(name="tied", target=small, draft=small, early_exit=False)
    pair = make_fixtures_from_spec(spec, resolve.vocab_path(), tmp_path / "gguf", threads=1)
    folder = write_hf(pair.draft, tmp_path / "hf-draft")
    assert (folder.tied_output, folder.n_tensors) == (True, 13)
    matches = compare_tensors(pair.draft, folder.path)
    assert len(matches) == 13 and all(m.equal for m in matches)
    assert "lm_head.weight" not in {m.hf_name for m in matches}
    cfg = json.loads((folder.path / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True
