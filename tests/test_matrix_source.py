"""A matrix file is read once: what is parsed is what is digested and copied into the run,
even if the file changes while the run starts (vLLM stand-in, named as one)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from standins.vllm import write_launcher

from crossbench.runner.matrix import read_matrix
from crossbench.runner.matrix_run import run_matrix


def test_the_bytes_run_are_the_bytes_digested_and_copied(tmp_path: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "0")
    doc = {"schema_version": 1, "study": {"name": "once", "notes": "stand-in, not vLLM"},
           "engines": {"v": {"kind": "vllm", "binary": str(binary)}},
           "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                            "quant": "BF16", "role": "target"}},
           "load": {"requests": 1, "warmup": 0, "max_tokens": 4},
           "arms": [{"method": "none"}],
           "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:code"]},
           "trials": 1, "telemetry_hz": 0}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    source = read_matrix(path)
    first = path.read_bytes()
    path.write_text(yaml.safe_dump({**doc, "trials": 5}))  # edited after it was read
    out = tmp_path / "run"
    s = run_matrix(source, out)
    assert s["totals"]["done"] == 1  # the run is the file as read: 1 trial, not 5
    assert (out / "matrix.yaml").read_bytes() == first
    state = json.loads((out / "state.json").read_text())
    assert state["matrix_sha256"] == hashlib.sha256(first).hexdigest() == source.digest
