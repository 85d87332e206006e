"""SGLang config validation and argv per speculative algorithm (against the real 0.5.17
profile); no server starts."""

from __future__ import annotations

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
    ({"spec": {"type": "NGRAM", "n": 3, "synth_rates": [0.9, 0.8, 0.7]}},
     "spec: SGLang has no synthetic acceptance", "fix `spec`"),
    ({"spec": {"type": "MEDUSA", "n": 3}}, "spec.type: Input should be 'none', 'EAGLE'",
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


def test_run_options_come_from_the_config_model() -> None:
    assert registry.spec_methods("sglang") == ("none", "EAGLE", "EAGLE3", "NEXTN", "NGRAM",
                                               "STANDALONE")
    opts = registry.run_options("sglang")
    assert opts["binary"] == "binary" and opts["server_args"] == "extra_args"
    assert "ctx_size" not in opts and "pin" not in opts


def test_attention_backend_is_a_typed_server_setting() -> None:
    argv = _server(attention_backend="triton").argv(_server().profile, "python3")
    assert argv[-2:] == ["--attention-backend", "triton"]
    assert "--attention-backend" not in _server().argv(_server().profile, "python3")
