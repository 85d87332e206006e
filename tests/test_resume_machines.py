"""Resuming a run on another machine: a rebuilt engine of the same source is accepted and
recorded, a changed engine is refused, and trial pairs that straddle two machines are flagged.

Uses crossbench's stand-in ``vllm serve`` (not vLLM); a "rebuild" is the launcher written
again with other bytes, which is what a reinstall on another machine looks like to the runner.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from standins.vllm import write_launcher

from crossbench.analysis.confounding import split_occasions
from crossbench.errors import UserError
from crossbench.runner.config import RunConfig
from crossbench.runner.single import RunSession
from crossbench.store.atomic import sha256_file

FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0")


def config(binary: Path) -> RunConfig:
    return RunConfig.model_validate({
        "engine": "vllm", "trials": 2, "load": {"requests": 2, "max_tokens": 16, "warmup": 0},
        "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B"}})


def test_resume_on_a_rebuilt_engine_records_a_new_epoch(tmp_path: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    out = tmp_path / "run"
    first = RunSession(config(binary), out)
    assert first.run_trial(0)["status"] == "ok"
    first.finish()
    old_hash = sha256_file(binary)
    write_launcher(binary, *FAST, "--standin-accept", "0.5")  # same release, other bytes
    new_hash = sha256_file(binary)
    assert new_hash != old_hash
    said: list[str] = []
    again = RunSession(config(binary), out, progress=said.append, resume=True)
    assert again.run_trial(1)["status"] == "ok"
    again.finish()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"]["sha256"] == {"vllm": old_hash}  # what the run started with
    epochs = manifest["engine_epochs"]
    assert [(e["first_trial_count"], e["sha256"]) for e in epochs] == [(1, {"vllm": new_hash})]
    by_trial = {e["trial"]: e["provenance"]["engine"]["sha256"] for e in manifest["trials"]}
    assert by_trial == {0: {"vllm": old_hash}, 1: {"vllm": new_hash}}
    assert any("engine_epochs" in s for s in said)
    # a third session on the new build: nothing more to record
    RunSession(config(binary), out, resume=True).finish()
    assert len(json.loads((out / "manifest.json").read_text())["engine_epochs"]) == 1


def test_resume_on_another_engine_source_is_refused(tmp_path: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    out = tmp_path / "run"
    session = RunSession(config(binary), out)
    session.run_trial(0)
    session.finish()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["engine"]["version"] = "0.32.9+crossbench.standin"
    manifest["engine"]["sha256"] = {"vllm": "0" * 64}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"engine changed .*version: 0\.32\.9"):
        RunSession(config(binary), out, resume=True)


def _manifest(*occasions: tuple[int, str | None, list[str]]) -> dict[str, Any]:
    return {"trials": [{"trial": t, "provenance": {"host": {"boot_id": boot},
                                                   "gpu": {"gpus": [{"uuid": u} for u in gpus]}}}
                       for t, boot, gpus in occasions]}


def test_trial_pairs_on_two_machines_are_found() -> None:
    spec = _manifest((0, "boot-a", ["GPU-1"]), (1, "boot-b", ["GPU-2"]), (2, "boot-b", ["GPU-2"]))
    base = _manifest((0, "boot-a", ["GPU-1"]), (1, "boot-a", ["GPU-1"]), (2, "boot-b", ["GPU-2"]))
    assert split_occasions(spec, base) == [1]
    # same machine and card, different boot: a reboot between the two trials
    assert split_occasions(_manifest((0, "x", ["GPU-1"])), _manifest((0, "y", ["GPU-1"]))) == [0]
    # runs recorded before boot ids: GPUs alone decide
    assert split_occasions(_manifest((0, None, ["GPU-1"])), _manifest((0, "y", ["GPU-1"]))) == []
    assert split_occasions(_manifest((0, None, ["GPU-1"])), _manifest((0, None, ["GPU-2"]))) == [0]
    # a trial only one side ran is not a pair
    assert split_occasions(_manifest((3, "x", [])), _manifest((4, "y", []))) == []


def test_a_baseline_without_any_finished_trial_is_not_a_confound(tmp_path: Path) -> None:
    """A speculative cell whose baseline never finished a trial (killed in the middle, as on
    the H200 on 2026-12-01) reads `too few samples`, not `confounded` by the missing
    provenance."""
    from crossbench.analysis.confounding import confounds
    from crossbench.analysis.rundir import load_cell_dir

    binary = write_launcher(tmp_path / "vllm", *FAST)
    spec_cfg = config(binary).model_copy(deep=True)
    spec_cfg.engine_config["spec"] = {"type": "ngram", "n": 2, "synth_rates": [0.9, 0.8]}
    s = RunSession(spec_cfg, tmp_path / "spec")
    s.run_trial(0)
    s.finish()
    b = RunSession(config(binary), tmp_path / "base")  # made, never ran a trial
    b.finish()
    got = confounds(load_cell_dir(tmp_path / "spec"), load_cell_dir(tmp_path / "base"))
    assert got["checked"] is False and got["confounded"] is False
    assert "no recorded trial" in got["reason"]
