"""``crossbench engines check sglang`` end to end against crossbench's SGLang stand-in (not
SGLang): the stand-in is told the acceptance of a draft identical to the target
(``--standin-accept 1``: every draft accepted), and scripted to misbehave where a check must
catch it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.sglang import write_launcher

from crossbench.cli.main import cli
from crossbench.runner.sglang_check import run_check

MODEL = "Qwen/Qwen3-8B"
FAST = ("--standin-step-ms", "0")
DRAFT_IS_TARGET = ("--standin-accept", "1")
NAMES = ["profile", "config", "ready", "server info", "streaming", "acceptance",
         "per-request meta_info", "stop"]


def _check(tmp_path: Path, *standin: str, args: tuple[str, ...] = ()) -> tuple[int, list[str],
                                                                                str]:
    py = write_launcher(tmp_path / "python", *FAST, *standin)
    r = CliRunner().invoke(cli, ["engines", "check", "sglang", "--binary", str(py),
                                 "--model", MODEL, "--out", str(tmp_path / "check"), *args])
    return r.exit_code, r.stdout.splitlines(), r.stderr


def _failed(lines: list[str]) -> list[str]:
    return [ln.split(":")[0].removeprefix("FAIL ") for ln in lines if ln.startswith("FAIL")]


def test_the_check_passes_on_the_standin_told_draft_equals_target(tmp_path: Path) -> None:
    code, lines, err = _check(tmp_path, *DRAFT_IS_TARGET)
    assert code == 0, lines
    assert [ln[:4] for ln in lines] == ["ok  "] * len(NAMES)
    assert [ln[5:].split(":")[0] for ln in lines] == NAMES
    assert "crossbench's STAND-IN, not SGLang" in lines[0]
    assert lines[0].startswith("ok   profile: sglang 0.5.17+crossbench.standin -> 0.5.17.yaml")
    ready = lines[2]
    assert "-m sglang.launch_server --model-path Qwen/Qwen3-8B" in ready
    assert ("--speculative-algorithm STANDALONE --speculative-draft-model-path Qwen/Qwen3-8B "
            "--speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4") in ready
    info = json.loads(lines[3].removeprefix("ok   server info: "))
    assert info["standin"] is True
    assert info["startup"]["speculative_algorithm"] == "STANDALONE"
    assert info["startup"]["speculative_num_draft_tokens"] == 4
    # 16 requests of 256 tokens, n 3, every draft accepted: 64 steps each (the last cut to
    # 3 tokens), MAL 1 + 191/64
    assert lines[5].startswith("ok   acceptance: 1024 verification steps, 3056 accepted "
                               "drafts, MAL 3.984; known truth (draft = target, greedy): "
                               "MAL n+1 = 4, wanted in [3.6, 4] over >= 200 steps")
    assert "'spec_verify_ct': 64" in lines[6] and "verification steps 64" in lines[6]
    assert lines[7].startswith("ok   stop: ") and "GPU: " in lines[7]
    assert err.endswith(f"crossbench: all checks passed; server log and scrapes in "
                        f"{tmp_path / 'check'}/\n")
    kept = tmp_path / "check"
    assert "sglang:spec_verify_calls_total{" in (kept / "after.prom").read_text()
    assert (kept / "before.prom").is_file()
    assert len((kept / "requests.jsonl").read_text().splitlines()) == 16
    assert "stand-in for SGLang" in (kept / "server.log").read_text()


def test_acceptance_below_the_known_truth_fails_that_line_only(tmp_path: Path) -> None:
    # a "draft = target" that rejects drafts: alpha 0.6 gives MAL 1 + 0.6 + 0.36 + 0.216
    code, lines, err = _check(tmp_path, "--standin-accept", "0.6")
    assert code == 1
    assert _failed(lines) == ["acceptance"]
    bad = next(ln for ln in lines if ln.startswith("FAIL acceptance"))
    assert "MAL below 3.6 = 0.9 x (n+1)" in bad
    assert err.startswith("crossbench: 1 check(s) failed")


def test_per_request_counts_disagreeing_fail_that_line_only(tmp_path: Path) -> None:
    code, lines, _ = _check(tmp_path, *DRAFT_IS_TARGET, "--standin-skew-verify-ct", "2")
    assert code == 1
    assert _failed(lines) == ["per-request meta_info"]
    bad = next(ln for ln in lines if ln.startswith("FAIL per-request"))
    assert "spec_verify_ct 66 != 64 counted" in bad


def test_too_few_verification_steps_fail_acceptance(tmp_path: Path) -> None:
    code, lines, _ = _check(tmp_path, *DRAFT_IS_TARGET,
                            args=("--requests", "2", "--max-tokens", "40"))
    assert code == 1
    assert _failed(lines) == ["acceptance"]
    assert "fewer than 200 verification steps (fix: raise --requests or --max-tokens)" in \
        next(ln for ln in lines if ln.startswith("FAIL acceptance"))


def test_another_draft_has_no_known_truth_only_bounds(tmp_path: Path) -> None:
    py = write_launcher(tmp_path / "python", *FAST, "--standin-accept", "0.6")
    lines: list[str] = []
    failed = run_check(str(py), MODEL, "Qwen/Qwen3-0.6B", tmp_path / "check", requests=8,
                       max_tokens=128, n=4, say=lines.append)
    assert failed == 0, lines
    acc = next(ln for ln in lines if "acceptance" in ln)
    assert "no known truth (the draft is not the target): bounds only" in acc
    assert "--speculative-num-steps 4" in lines[2]
    assert "--speculative-draft-model-path Qwen/Qwen3-0.6B" in lines[2]


def test_an_interpreter_without_sglang_fails_the_profile_line(tmp_path: Path) -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("this interpreter has sglang")
    lines: list[str] = []
    failed = run_check(sys.executable, MODEL, None, tmp_path / "check", requests=1,
                       max_tokens=8, say=lines.append)
    assert failed == 1
    assert lines == [f"FAIL profile: binary: {Path(sys.executable)} cannot import sglang "
                     "(fix: pip install sglang==0.5.17 into it (needs a GPU machine), or set "
                     "binary to an interpreter that has it)"]


def test_options_of_the_other_engine_are_refused(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["engines", "check", "vllm", "--n", "4",
                                 "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --n: applies to the sglang check, not to vllm "
                        "(whose check drafts 3 tokens with synthetic rates 0.9, 0.6, 0.3) "
                        "(fix: drop --n)\n")
    assert not (tmp_path / "o").exists()


def test_set_passes_server_fields_and_a_bad_item_is_refused(tmp_path: Path) -> None:
    code, lines, _ = _check(tmp_path, *DRAFT_IS_TARGET,
                            args=("--set", "attention_backend=triton",
                                  "--set", "mem_fraction_static=0.4"))
    assert code == 0, lines
    assert "--mem-fraction-static 0.4" in lines[2]
    assert "--attention-backend triton" in lines[2]
    code, lines, err = _check(tmp_path, args=("--set", "attention_backend"))
    assert code == 2 and lines == []
    assert "--set 'attention_backend' is not FIELD=VALUE" in err
