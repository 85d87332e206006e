"""Verdicts downgraded to `confounded` when more than the speculative settings differ."""

from __future__ import annotations

import json
from pathlib import Path

from standins.study import Arm, study

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions

PROMPTS = [("p0", "code"), ("p1", "math"), ("p2", "code"), ("p3", "chat")]
OPTS = StatsOptions(resamples=500, min_samples=4)
ACC = {"drafts": 10, "draft_tokens": 20, "accepted": 10, "per_position": [6, 4]}


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 150.0 if arm.method != "none" else 100.0 + trial  # a clear 1.5x


def make(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    study(root, PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2, acceptance=ACC)], rate,
          trials=3)
    return root


def baseline_manifest(root: Path) -> Path:
    state = json.loads((root / "state.json").read_text())
    cell = next(c for c in state["cells"] if c["coords"]["method"] == "none")
    return root / cell["dir"] / "manifest.json"


def test_clean_pair_keeps_its_statistical_verdict(tmp_path: Path) -> None:
    (pair,) = analyze(make(tmp_path), OPTS)["pairs"]
    assert pair["verdict"] == pair["statistical_verdict"] == "faster"
    assert pair["confounds"]["checked"] and not pair["confounds"]["confounded"]
    assert [d["field"] for d in pair["confounds"]["diff"]["differences"]
            if d["kind"] == "confounding"] == []


def test_a_differing_server_setting_makes_the_pair_confounded(tmp_path: Path) -> None:
    root = make(tmp_path)
    path = baseline_manifest(root)
    man = json.loads(path.read_text())
    man["config"]["engine_config"]["ctx_size"] = 8192  # the baseline ran another context
    path.write_text(json.dumps(man))
    (pair,) = analyze(root, OPTS)["pairs"]
    assert pair["verdict"] == "confounded"
    assert pair["statistical_verdict"] == "faster"  # the numbers stay
    assert pair["speedup"]["geomean"] > 1.4
    assert "server.ctx_size" in pair["confounds"]["confounding_fields"]
    kinds = [w["kind"] for w in pair["warnings"]]
    assert "confounded" in kinds
    w = next(w for w in pair["warnings"] if w["kind"] == "confounded")
    assert "server.ctx_size" in w["message"] and "identical non-speculative" in w["action"]


def test_records_of_unfinished_trials_never_enter_statistics(tmp_path: Path) -> None:
    """A trial killed mid-way (as when a device call ran out) leaves records but no finished
    entry in the manifest: the analysis and the summary leave them out."""
    from crossbench.analysis.summary import summarize_run_dir

    root = make(tmp_path)
    state = json.loads((root / "state.json").read_text())
    for cell in state["cells"]:
        path = root / cell["dir"] / "manifest.json"
        man = json.loads(path.read_text())
        man["trials"] = [{"trial": 0, "status": "ok"}, {"trial": 1, "status": "ok"}]
        path.write_text(json.dumps(man))  # trial 2 never finished
    (pair,) = analyze(root, OPTS)["pairs"]
    assert pair["speedup"]["n_samples"] == 2 * len(PROMPTS)
    assert pair["pairing"]["unmatched_spec"] == pair["pairing"]["unmatched_baseline"] == 0
    summary = summarize_run_dir(root / state["cells"][0]["dir"])
    assert summary["requests"]["ok"] == 2 * len(PROMPTS)
