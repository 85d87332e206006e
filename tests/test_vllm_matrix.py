"""A whole matrix with ``engine: vllm``, run against the stand-in (not vLLM).

The stand-in follows the synthetic rates it is given, so the suite's acceptance figures have a
known true value; every result is marked as a stand-in result in the run's manifests.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from standins.vllm import write_launcher

from crossbench.runner.matrix_run import matrix_status, read_journal, run_matrix


def test_matrix_with_engine_vllm_on_the_standin(tmp_path: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "0",
                            "--standin-prefill-ms", "0")
    matrix = {
        "schema_version": 1,
        "study": {"name": "vllm-standin", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2, "enable_prefix_caching": False}}},
        "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 4, "warmup": 1, "max_tokens": 64},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "ngram", "n": "2,3", "synth_alpha": 0.8}],
        "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:code"]},
        "trials": 2,
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(matrix))
    out = tmp_path / "run"
    s = run_matrix(path, out)
    assert s["totals"] == {"done": 6, "failed": 0, "missing": 0}
    assert matrix_status(out)["totals"] == s["totals"]
    by_id = {c["id"]: c for c in s["cells"]}
    base = by_id["v/m/none/builtin-code/c1"]
    assert base["draft_acceptance_rate"] is None and base["integrity_passed"] is True
    for cid in ("v/m/synth/n2/builtin-code/c1", "v/m/synth/n3/builtin-code/c1"):
        assert by_id[cid]["baseline"] == "v/m/none/builtin-code/c1"
        assert by_id[cid]["integrity_passed"] is True
    summary = json.loads((out / "cells" / "v__m__synth__n2__builtin-code__c1" /
                          "summary.json").read_text())
    pos = summary["acceptance"]["per_position"]
    assert abs(pos[0] - 0.8) < 0.1 and abs(pos[1] - 0.64) < 0.1  # alpha^(k+1)
    assert len(read_journal(out)) == 6
    for man in (out / "cells").glob("*/manifest.json"):
        m = json.loads(man.read_text())
        engine = m["engine"]
        assert engine["standin"] is True and "standin" in engine["version"]
        for trial in m["trials"]:  # the start's record reaches the manifest (round 4 lost it)
            cut = trial["server_props"]["startup_cut"]
            assert cut["ready_s"] > 0 and cut["start"] in ("cold", "warm", "partial")


def test_no_secret_reaches_any_file_of_a_run(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Tokens in the environment and in the engine's env settings appear in no file."""
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run

    hf, own = "hf_abcdefghijklmnopqrstuvwxyz0123", "s3cr3t-value-42"
    monkeypatch.setenv("HF_TOKEN", hf)
    monkeypatch.setenv("ZENODO_TOKEN", "zenodo-token-value-99")
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "0",
                            "--standin-prefill-ms", "0")
    cfg = RunConfig.model_validate({
        "engine": "vllm", "trials": 1, "load": {"requests": 2, "max_tokens": 16},
        "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B",
                          "env": {"MY_SERVICE_TOKEN": own, "VLLM_LOGGING_LEVEL": "INFO"},
                          "spec": {"type": "ngram", "n": 2}}})
    run(cfg, tmp_path / "run")
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(files) >= 5
    for p in files:
        text = p.read_bytes()
        for secret in (hf, own, "zenodo-token-value-99"):
            assert secret.encode() not in text, f"{secret} in {p}"
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["config"]["engine_config"]["env"] == {"MY_SERVICE_TOKEN": "<redacted>",
                                                     "VLLM_LOGGING_LEVEL": "INFO"}
    assert man["trials"][0]["provenance"]["env"]["HF_TOKEN"] == "<redacted>"


def test_gpu_busy_policy_warns_or_refuses(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Another process on the GPU before a trial: recorded as a warning, or the trial is
    refused and recorded as failed, by policy (NVML readings scripted)."""
    import pytest

    from crossbench.errors import RunError
    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import run
    from crossbench.telemetry import checks

    busy = checks.Check("gpu-processes", "fail", "other processes hold GPU memory: python "
                        "(pid 4242) 2.0 GiB on GPU 0", "stop them (kill PID)")
    monkeypatch.setattr(checks, "before_trial", lambda *a, **k: [busy])
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "0",
                            "--standin-prefill-ms", "0")

    def cfg(policy: str) -> RunConfig:
        return RunConfig.model_validate({
            "engine": "vllm", "trials": 1, "gpu_busy": policy,
            "load": {"requests": 2, "max_tokens": 8},
            "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B"}})

    run(cfg("warn"), tmp_path / "warn")
    entry = json.loads((tmp_path / "warn" / "manifest.json").read_text())["trials"][0]
    assert entry["status"] == "ok"
    assert entry["warnings"] == ["other processes hold GPU memory: python (pid 4242) 2.0 GiB "
                                 "on GPU 0; stop them (kill PID)"]
    with pytest.raises(RunError, match="1 of 1 trials failed"):
        run(cfg("refuse"), tmp_path / "refuse")
    entry = json.loads((tmp_path / "refuse" / "manifest.json").read_text())["trials"][0]
    assert entry["status"] == "failed"
    assert entry["error"].startswith("refused by gpu_busy: refuse: other processes hold")
    assert not (tmp_path / "refuse" / "requests.jsonl").exists() or not (
        tmp_path / "refuse" / "requests.jsonl").read_text()
