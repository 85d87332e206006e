"""Analysis of a real CPU matrix run end to end (2 cells x 2 trials on the real llama-server).

Run it under the shared lock so it never overlaps another llama-server on the machine:
``flock /tmp/crossbench-cpu.lock python3 -m pytest -q tests/test_analysis_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from crossbench.cli.main import cli
from crossbench.runner.matrix_run import run_matrix

pytestmark = pytest.mark.server


def test_real_matrix_analysis(llama_server, fixture_models, tmp_path: Path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "schema_version": 1, "study": {"name": "analysis-e2e"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(llama_server)}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                   "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
        "server": {"ctx_size": 1024},
        # ignore_eos: every request decodes 32 tokens, so each of the 8 pairs has a decode rate
        # (a random-weight model may end a request at its first token; CI saw 7 pairs once)
        "load": {"requests": 4, "warmup": 1, "max_tokens": 32, "ignore_eos": True},
        "arms": [{"method": "none"}, {"method": "draft-simple", "draft": "d", "n": 2}],
        "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:mixed"]},
        "trials": 2,
    }))
    out = tmp_path / "run"
    run_matrix(matrix, out)
    r = CliRunner().invoke(cli, ["analyze", str(out), "--json", "--min-samples", "4",
                                 "--resamples", "2000"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    (pair,) = obj["pairs"]
    assert pair["cell"] == "llama/t/draft-simple/n2/builtin-mixed/c1"
    assert pair["baseline_cell"] == "llama/t/none/builtin-mixed/c1"
    assert (pair["model"], pair["method"], pair["n"]) == ("t", "draft-simple", 2)
    sp = pair["speedup"]
    # 8 pairs; a pair counts where both requests have a decode rate: two chunk arrivals at
    # different times (on a loaded 2-core host the client can read a short request's whole
    # stream at once, which gives no rate: CI saw 7 such samples twice)
    state = json.loads((out / "state.json").read_text())
    timed = {}
    for c in state["cells"]:
        for line in (out / c["dir"] / "requests.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if not rec.get("warmup"):
                times = {ch[0] for ch in rec.get("chunks") or []}
                timed[(c["id"], rec["trial"], rec["prompt_id"])] = len(times) >= 2
    spec_id, base_id = pair["cell"], pair["baseline_cell"]
    both = sum(ok and timed.get((base_id, t, pid), False)
               for (cid, t, pid), ok in timed.items() if cid == spec_id)
    assert pair["pairing"]["paired"] == 8 and sp["n_prompts"] == 4
    assert sp["n_samples"] == both >= 6, (sp, pair.get("pairing"))
    assert sp["ci95"][0] <= sp["geomean"] <= sp["ci95"][1]
    assert pair["verdict"] in {"faster", "slower", "indistinguishable"}
    # the analysis re-derives what the runner's summary.json says, from the raw files
    for cell in obj["cells"]:
        d = next(c["dir"] for c in json.loads((out / "state.json").read_text())["cells"]
                 if c["id"] == cell["cell"])
        summary = json.loads((out / d / "summary.json").read_text())
        assert cell["throughput"]["pooled_tok_s"] == pytest.approx(
            summary["throughput"]["pooled_tok_s"])
        for key in ("draft_acceptance_rate", "mean_acceptance_length", "per_position"):
            assert cell["acceptance"][key] == pytest.approx(summary["acceptance"][key])
    acc = pair["acceptance"]
    assert 0 < acc["draft_acceptance_rate"] <= 1
    assert 1 < acc["mean_acceptance_length"] <= 3
    assert acc["source"] == "metrics"
    assert pair["parity"]["verdict"] in {"identical", "diverges"}
    assert pair["parity"]["compared"] == 8
    if pair["parity"]["verdict"] == "diverges":  # positions from the real chunk boundaries
        assert pair["parity"]["token_level"] == "chunk boundaries"
        toks = pair["parity"]["first_divergence_tokens"]
        assert 0 <= toks["min"] <= toks["max"] < 32
    assert (out / "analysis.json").exists() and (out / "analysis" / "verdicts.md").exists()
