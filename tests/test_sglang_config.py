"""SGLang config validation and argv per speculative algorithm (against the real 0.5.17
profile); no server starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crossbench.engines import registry
from crossbench.errors import UserError


def _server(**cfg: Any) -> Any:
    return registry.create("sglang", {"model": "Qwen/Qwen3-8B", **cfg}, Path("/dev/null"))


def _spec_args(argv: list[str]) -> list[str]:
    i = next((k for k, a in enumerate(argv) if a.startswith("--speculative-")), len(argv))
    return argv[i:]


def test_baseline_argv_is_the_server_settings_only() -> None:
    argv = _server(tp_size=2, disable_radix_cache=True).argv(
        _server().profile, "python3")
    assert argv == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                    "--host", "127.0.0.1", "--port", "0", "--enable-metrics",
                    "--tp-size", "2", "--disable-radix-cache"]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"type": "EAGLE3", "n": 3, "draft_model": "AngelSlim/Qwen3-8B_eagle3"},
     ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
      "AngelSlim/Qwen3-8B_eagle3", "--speculative-num-steps", "3",
      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]),
    ({"type": "EAGLE", "n": 2, "draft_model": "hf://org/head@abc123"},
     ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "org/head",
      "--speculative-draft-model-revision", "abc123", "--speculative-num-steps", "2",
      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]),
    ({"type": "NEXTN", "n": 1},
     ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"]),
    ({"type": "NGRAM", "n": 8},
     ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "9"]),
    ({"type": "STANDALONE", "n": 4, "draft_model": "/fx/hf-draft"},
     ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/fx/hf-draft",
      "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
      "--speculative-num-draft-tokens", "5"]),
    # DFLASH: one block of the current token + n drafts; SGLang sets steps and topk to 1
    ({"type": "DFLASH", "n": 15, "draft_model": "/fx/drafter-dflash/hf"},
     ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
      "/fx/drafter-dflash/hf", "--speculative-dflash-block-size", "16",
      "--speculative-num-draft-tokens", "16"]),
    ({"type": "DFLASH", "n": 2, "draft_model": "hf://z-lab/Qwen3-8B-DFlash-b16@abc123"},
     ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
      "z-lab/Qwen3-8B-DFlash-b16", "--speculative-draft-model-revision", "abc123",
      "--speculative-dflash-block-size", "3", "--speculative-num-draft-tokens", "3"]),
])
def test_argv_per_algorithm(spec: dict[str, Any], expected: list[str]) -> None:
    srv = _server(spec=spec)
    assert _spec_args(srv.argv(srv.profile, "python3")) == expected


@pytest.mark.parametrize(("cfg", "message", "fix"), [
    ({"spec": {"type": "EAGLE3", "n": 3}}, "spec: EAGLE3 needs a draft model",
     "fix `spec`"),
    ({"spec": {"type": "NGRAM", "n": 3, "draft_model": "a/b"}},
     "spec: NGRAM takes no draft model; drop draft_model", "fix `spec`"),
    ({"spec": {"type": "NEXTN"}}, "spec: NEXTN needs n", "fix `spec`"),
    ({"spec": {"type": "DFLASH", "n": 4}},
     "spec: DFLASH needs a DFlash block drafter (config.json architectures DFlashDraftModel); "
     "set draft_model", "fix `spec`"),
    ({"spec": {"type": "DFLASH", "draft_model": "/fx/df"}}, "spec: DFLASH needs n",
     "fix `spec`"),
    ({"spec": {"type": "DFLASH", "n": 4, "draft_model": "/fx/df", "synth_len": 6.0}},
     "spec: synth_len 6 exceeds n + 1 = 5", "fix `spec`"),
    ({"spec": {"type": "DFLASH", "n": 0, "draft_model": "/fx/df"}},
     "spec.n: Input should be greater than or equal to 1", "fix `spec.n`"),
    ({"spec": {"type": "NGRAM", "n": 3, "synth_rates": [0.9, 0.8, 0.7]}},
     "spec: synth_rates: SGLang has no per-position synthetic acceptance", "fix `spec`"),
    ({"spec": {"type": "MEDUSA", "n": 3}}, "spec.type: Input should be 'none', 'DFLASH', 'EAGLE'",
     "fix `spec.type`"),
    ({"mem_fraction_static": 1.5}, "mem_fraction_static: Input should be less than 1",
     "fix `mem_fraction_static`"),
    ({"max_num_seqs": 8}, "max_num_seqs: unknown field", "remove it or check its spelling"),
])
def test_config_errors_name_field_and_fix(cfg: dict[str, Any], message: str, fix: str) -> None:
    with pytest.raises(UserError) as e:
        _server(**cfg)
    assert e.value.message.startswith(message), e.value.message
    assert e.value.hint == fix


def test_profile_refusals_name_the_setting() -> None:
    with pytest.raises(UserError) as e:
        _server(extra_args=["--no-such-flag"]).validate_static()
    assert e.value.message == "extra_args (--no-such-flag): SGLang 0.5.17 has no --no-such-flag"
    with pytest.raises(UserError) as e:
        _server(extra_args=["--port", "1"]).validate_static()
    assert e.value.message == "extra_args: --port is set by crossbench"
    with pytest.raises(UserError) as e:
        _server(version="0.4.0").validate_static()
    assert e.value.message.startswith("version: no SGLang profile for '0.4.0' (known: 0.5.17, "
                                      "0.5.23)")
    assert "profile_gen" in e.value.hint
    # a real flag of the release passes through, checked
    srv = _server(extra_args=["--cuda-graph-max-bs-decode", "8"])
    assert srv.argv(srv.profile, "python3")[-2:] == ["--cuda-graph-max-bs-decode", "8"]


def test_dflash_flags_are_managed_and_in_the_profile() -> None:
    srv = _server(spec={"type": "DFLASH", "n": 4, "draft_model": "/fx/df"})
    assert "DFLASH" in srv.profile.algorithms
    for flag in ("--speculative-dflash-block-size", "--speculative-draft-model-revision"):
        with pytest.raises(UserError) as e:
            _server(extra_args=[flag, "5"]).validate_static()
        assert e.value.message == f"extra_args: {flag} is set by crossbench"


def _dflash_folder(tmp_path: Path, **config: Any) -> Path:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_dflash_block_checked_against_a_local_drafter(tmp_path: Path) -> None:
    # the fixture's drafter (crossbench/fixtures/drafters.py): top-level block_size 16
    folder = _dflash_folder(tmp_path, architectures=["DFlashDraftModel"], block_size=16,
                            dflash_config={"target_layer_ids": [1, 9], "mask_token_id": 7})
    _server(spec={"type": "DFLASH", "n": 15, "draft_model": str(folder)}).check_block_drafter()
    with pytest.raises(UserError) as e:
        _server(spec={"type": "DFLASH", "n": 16,
                      "draft_model": str(folder)}).check_block_drafter()
    assert e.value.message == (f"spec.n: DFLASH drafts at most 15 tokens per step with "
                               f"{folder} (block_size 16); n=16 needs a block of 17")
    assert e.value.hint == "set n <= 15"


def test_dflash_refuses_a_folder_that_is_not_a_dflash_drafter(tmp_path: Path) -> None:
    folder = _dflash_folder(tmp_path, architectures=["LlamaForCausalLMEagle3"])
    with pytest.raises(UserError) as e:
        _server(spec={"type": "DFLASH", "n": 4, "draft_model": str(folder)}
                ).check_block_drafter()
    assert e.value.message.startswith(f"spec.draft_model: {folder} is not a DFlash drafter")
    with pytest.raises(UserError) as e:
        _server(spec={"type": "DFLASH", "n": 4, "draft_model": str(tmp_path)}
                ).check_block_drafter()
    assert e.value.message == f"spec.draft_model: {tmp_path} has no config.json"
    # a hub id is read by SGLang at start-up; other methods are not checked here
    _server(spec={"type": "DFLASH", "n": 40, "draft_model": "org/df"}).check_block_drafter()
    _server(spec={"type": "EAGLE3", "n": 40, "draft_model": str(folder)}
            ).check_block_drafter()


def test_run_options_come_from_the_config_model() -> None:
    assert registry.spec_methods("sglang") == ("none", "DFLASH", "EAGLE", "EAGLE3", "NEXTN",
                                               "NGRAM", "STANDALONE")
    opts = registry.run_options("sglang")
    assert opts["binary"] == "binary" and opts["server_args"] == "extra_args"
    assert "ctx_size" not in opts and "pin" not in opts


def test_attention_backend_is_a_typed_server_setting() -> None:
    argv = _server(attention_backend="triton").argv(_server().profile, "python3")
    assert argv[-2:] == ["--attention-backend", "triton"]
    assert "--attention-backend" not in _server().argv(_server().profile, "python3")


def test_binary_defaults_to_the_installed_release(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `binary`, a matrix finds the interpreter `crossbench engines install sglang`
    wrote for the config's release (the newest Python's), before python3 on PATH."""
    from crossbench.engines.sglang.config import SglangServerConfig
    from crossbench.engines.sglang.server import SglangServer

    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path))
    cfg = SglangServerConfig(model="/models/t")
    on_path = SglangServer(cfg, log_path=tmp_path / "a.log").binary
    assert on_path.name.startswith("python3")  # nothing installed: PATH
    want = None
    for py in ("3.9", "3.12", "3.11"):
        launcher = tmp_path / "engines" / f"sglang-{cfg.version}-py{py}" / "bin" / "python"
        launcher.parent.mkdir(parents=True)
        launcher.write_text("#!/bin/sh\n")
        want = launcher if py == "3.12" else want
    other = tmp_path / "engines" / "sglang-0.0.1-py3.12" / "bin" / "python"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    assert SglangServer(cfg, log_path=tmp_path / "b.log").binary == want
    given = tmp_path / "mine"
    given.write_text("#!/bin/sh\n")
    assert SglangServer(SglangServerConfig(model="/models/t", binary=given),
                        log_path=tmp_path / "c.log").binary == given


def test_a_float16_gated_delta_net_needs_its_conv_state_in_float16(tmp_path: Path) -> None:
    """The Qwen3.5 fixture's config (as crossbench.fixtures.mtp writes it) in float16: SGLang
    0.5.17 would keep the conv state in bfloat16 and fail its first CUDA graph capture
    (sglang-rest, 2026-12-06), so the config is refused before a start, naming the variable;
    with it, in bfloat16, or with a full-attention-only model it passes."""
    from crossbench.fixtures.mtp import hf_config, mtp_spec

    folder = tmp_path / "q35"
    folder.mkdir()
    config = hf_config(mtp_spec("tiny"), 151936, 151643, 151645)
    (folder / "config.json").write_text(json.dumps(config))
    assert "linear_attention" in config["text_config"]["layer_types"]
    for dtype in ("float16", None):  # None: the folder's own torch_dtype, float16
        with pytest.raises(UserError) as e:
            _server(model=str(folder), dtype=dtype).check_conv_state_dtype()
        assert e.value.message.startswith(f"env: {folder} has linear-attention layers")
        assert "SGLANG_MAMBA_CONV_DTYPE is bfloat16" in e.value.message
        assert "SGLANG_MAMBA_CONV_DTYPE: float16" in e.value.hint
    _server(model=str(folder), dtype="float16",
            env={"SGLANG_MAMBA_CONV_DTYPE": "float16"}).check_conv_state_dtype()
    _server(model=str(folder), dtype="bfloat16").check_conv_state_dtype()
    (folder / "config.json").write_text(json.dumps(
        {**config, "text_config": {**config["text_config"],
                                   "layer_types": ["full_attention"] * 4}}))
    _server(model=str(folder), dtype="float16").check_conv_state_dtype()
    _server(model="Qwen/Qwen3.5-9B", dtype="float16").check_conv_state_dtype()  # hub: skipped


def test_the_study_matrix_serves_its_qwen35_cells_with_the_conv_state_in_float16() -> None:
    from crossbench.runner.matrix import expand, load_matrix

    path = Path(__file__).resolve().parents[1] / "matrices" / "h200-methods.yaml"
    cells = [c for c in expand(load_matrix(path), path) if c.coords["target"] == "q35-hf"
             and c.coords["engine"].startswith("sglang")]
    assert cells and {c.coords["engine"] for c in cells} == {"sglang-q35"}
    assert {c.engine_config["env"]["SGLANG_MAMBA_CONV_DTYPE"] for c in cells} == {"float16"}
