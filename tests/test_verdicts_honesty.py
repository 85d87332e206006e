"""Verdicts that mean something (issue 35, items 6, 8, 9 and 10), each on data of the shape
that misled: a thinking model's outputs compared on content alone, a baseline rerun read as
`slower`, a short-output arm credited with an end-to-end speedup for generating less, and a
cell whose every request says accepted == drafted read as "slower despite 100 % acceptance".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from standins.study import Arm, request, study

from crossbench.analysis import stats
from crossbench.analysis.analyze import analyze, verdict_table
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.sequential import SequentialRule
from crossbench.cli.main import cli
from crossbench.importers.records import ImportedCell, run_config, write_import

PROMPTS = [(f"p{i}", "code" if i % 2 else "math") for i in range(24)]
OPTS = StatsOptions(resamples=1000)


def _kinds(result: dict[str, Any], cell_part: str) -> list[str]:
    return [w["kind"] for w in result["stability"] if cell_part in str(w["cell"])]


def _pair(result: dict[str, Any], arm: str) -> dict[str, Any]:
    (p,) = [p for p in result["pairs"] if f"/{arm}/" in p["cell"]]
    return p


# -- item 8: practical equivalence -----------------------------------------------------------

def _rerun_import(out: Path, factor: Callable[[str], float], trials: int = 1) -> Path:
    """A one-trial import of a baseline and a rerun of the same baseline, the rerun paired
    against it (as ``import --baseline-arm base`` pairs several method-none arms)."""
    def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
        base = 80.0 + 3.0 * int(pid[1:])  # prompts differ in speed, as real ones do
        return base * factor(pid) if arm.name == "rerun" else base

    study(out, PROMPTS, [Arm("rerun"), Arm("base")], rate, trials=trials)
    state_path = out / "state.json"
    state = json.loads(state_path.read_text())
    ids = {c["coords"]["arm"]: c["id"] for c in state["cells"]}
    for c in state["cells"]:
        c["baseline"] = ids["base"] if c["coords"]["arm"] == "rerun" else None
    state_path.write_text(json.dumps(state))
    return out


def _null_factor(pid: str) -> float:
    # a rerun 0.1-0.2 % slower on every prompt: what a second pass over a warm machine gives
    return 0.9985 + 0.0001 * (int(pid[1:]) % 5 - 2)


def test_a_baseline_rerun_reads_indistinguishable(tmp_path: Path) -> None:
    run = _rerun_import(tmp_path / "rerun", _null_factor)
    result = analyze(run, OPTS)
    p = _pair(result, "rerun")
    lo, hi = p["speedup"]["ci95"]
    assert 0.998 <= lo < hi < 1.0  # the interval excludes 1: without a band, "slower"
    assert p["speedup"]["within_band"] is True
    assert p["verdict"] == "indistinguishable"
    assert p["speedup"]["verdict"] == "indistinguishable"
    assert result["options"]["equivalence"] == stats.EQUIVALENCE == 0.02
    assert "indistinguishable within the +-2% equivalence band" in verdict_table(result)
    # the band is configurable, and 0 turns it off: the same data then read slower
    off = analyze(run, StatsOptions(resamples=1000, equivalence=0.0))
    assert _pair(off, "rerun")["verdict"] == "slower"
    assert _pair(off, "rerun")["speedup"]["within_band"] is False


def test_the_band_does_not_swallow_a_real_difference(tmp_path: Path) -> None:
    run = _rerun_import(tmp_path / "slow", lambda pid: 0.95)
    assert _pair(analyze(run, OPTS), "rerun")["verdict"] == "slower"
    # an interval that crosses the band's edge keeps its side
    assert stats.verdict((1.01, 1.03), 40, 10, 10, equivalence=0.02) == "faster"
    assert stats.verdict((0.981, 0.999), 40, 10, 10, equivalence=0.02) == "indistinguishable"
    assert stats.verdict((0.979, 0.999), 40, 10, 10, equivalence=0.02) == "slower"


def test_one_definition_of_the_band() -> None:
    # the sequential rule's "equivalent" and the verdict's band are the same interval
    rule = SequentialRule(max_trials=5, equivalence=0.02)
    assert rule.band_log == stats.band_log(0.02) == math.log1p(0.02)
    assert stats.band_log(0.0) is None and stats.band_log(None) is None


def test_analyze_option_and_its_refusal(tmp_path: Path) -> None:
    run = _rerun_import(tmp_path / "cli", _null_factor)
    r = CliRunner().invoke(cli, ["analyze", str(run), "--resamples", "500", "--json",
                                 "--equivalence", "0"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["options"]["equivalence"] == 0.0
    assert obj["pairs"][0]["verdict"] == "slower"
    r = CliRunner().invoke(cli, ["analyze", str(run), "--equivalence", "2"])
    assert r.exit_code != 0
    assert "--equivalence 2.0 is not a relative band" in r.output


# -- item 9: unequal output lengths ----------------------------------------------------------

def _lengths_import(out: Path, spec_tokens: int, base_tokens: int) -> Path:
    """A speculative arm and its baseline at the same decode rate, whose requests produced
    different numbers of tokens (the arm stopped early at an end of sequence)."""
    cells = []
    for name, method, tokens in (("base", "none", base_tokens),
                                 ("draft", "draft-simple", spec_tokens)):
        records = []
        for t in range(3):
            clock = 0
            for i, (pid, cat) in enumerate(PROMPTS):
                rec = request(trial=t, index=i, prompt_id=pid, category=cat, t_sent_ns=clock,
                              rate_tok_s=100.0 + int(pid[1:]), tokens=tokens)
                records.append(rec)
                clock = rec["t_done_ns"] + 1_000_000
        spec = {"type": method, **({"n": 4} if method != "none" else {})}
        load = {"workload": "synthetic", "max_tokens": 256, "temperature": 0.0,
                "ignore_eos": False, "cache_prompt": False, "concurrency": 1}
        coords = {"engine": "synthetic", "target": "m", "arm": name, "method": method,
                  "n": 4 if method != "none" else None, "workload": "synthetic",
                  "concurrency": 1}
        cells.append(ImportedCell(coords, run_config(engine="synthetic", model="m", spec=spec,
                                                     load=load, trials=3),
                                  {"kind": "synthetic", "version": None, "sha256": None},
                                  records, {"trials": [0, 1, 2]}))
    write_import(out, cells, {"tool": "synthetic"}, [])
    return out


def test_a_short_output_arm_is_not_an_end_to_end_speedup(tmp_path: Path) -> None:
    result = analyze(_lengths_import(tmp_path / "len", spec_tokens=64, base_tokens=256), OPTS)
    p = _pair(result, "draft")
    assert p["speedup"]["geomean"] == pytest.approx(1.0)  # same decode rate
    # whole latencies would say about 3.9x faster; per output token the two are alike
    assert abs(p["speedup_e2e"]["geomean"] - 1.0) < 0.01
    assert p["speedup_e2e"]["verdict"] != "faster"
    assert p["lengths"]["mismatched"] == p["lengths"]["compared"] == 72
    assert p["lengths"]["spec_mean_tokens"] == 64 and p["lengths"]["baseline_mean_tokens"] == 256
    assert "length_mismatch" in [w["kind"] for w in p["warnings"]]
    text = verdict_table(result)
    assert "lengths differ" in text.splitlines()[0]
    assert "72/72" in text
    assert "latency per output token (length_mismatch)" in text


def test_equal_lengths_keep_the_plain_latency_ratio(tmp_path: Path) -> None:
    result = analyze(_lengths_import(tmp_path / "eq", spec_tokens=128, base_tokens=128), OPTS)
    p = _pair(result, "draft")
    assert p["lengths"]["mismatched"] == 0 and p["lengths"]["compared"] == 72
    assert "length_mismatch" not in [w["kind"] for w in p["warnings"]]
    assert "lengths differ" not in verdict_table(result)


# -- item 10: counters that cannot be right --------------------------------------------------

def _counter_study(out: Path, accepted: int, synth: list[float] | None = None,
                   method: str = "draft-simple") -> dict[str, Any]:
    """A speculative arm slower than its baseline whose every request reports ``accepted``
    of its drafted tokens (480 drafted over 24 x 2 requests)."""
    spec = {"synth_rates": synth} if synth else {}
    arm = Arm("draft", method, 4, spec=spec,
              acceptance={"drafts": 120, "draft_tokens": 480, "accepted": accepted})

    def rate(a: Arm, pid: str, trial: int, occ: int) -> float:
        return 70.0 + int(pid[1:]) if a.method != "none" else 100.0 + int(pid[1:])

    study(out, PROMPTS, [Arm("base"), arm], rate, trials=2)
    return analyze(out, OPTS)


def test_accepted_equal_to_drafted_everywhere_is_flagged(tmp_path: Path) -> None:
    result = _counter_study(tmp_path / "all", accepted=480)
    p = _pair(result, "draft")
    assert p["verdict"] == "slower"
    assert p["acceptance"]["draft_acceptance_rate"] == 1.0
    assert "acceptance_counter" in _kinds(result, "/draft/")
    (w,) = [w for w in p["warnings"] if w["kind"] == "acceptance_counter"]
    assert "accepted equals drafted in every one of the 48 requests" in w["message"]
    assert "timings.draft_n" in w["message"]  # how to tell
    assert "synth_rates all 1.0" in w["message"]
    (net,) = [w for w in p["warnings"] if w["kind"] == "net_loss_despite_high_acceptance"]
    assert "the acceptance counter may be misread" in net["message"]


def test_synthetic_acceptance_at_rate_one_is_not_flagged(tmp_path: Path) -> None:
    result = _counter_study(tmp_path / "synth", accepted=480, synth=[1.0, 1.0, 1.0, 1.0])
    assert "acceptance_counter" not in _kinds(result, "/draft/")
    # below 1.0, all accepted is as suspect as without synthetic acceptance
    low = _counter_study(tmp_path / "synth-low", accepted=480, synth=[0.9, 0.8, 0.7, 0.6])
    assert "acceptance_counter" in _kinds(low, "/draft/")


def test_a_lookup_drafter_copying_seen_text_is_not_flagged(tmp_path: Path) -> None:
    """ngram-mod on a prompt asked again copies the answer it has seen: every draft right
    (the demo's n-gram cell on builtin:repeat drafted in 18 of 24 requests, all accepted)."""
    for method in ("ngram-mod", "ngram"):
        result = _counter_study(tmp_path / method, accepted=480, method=method)
        assert "acceptance_counter" not in _kinds(result, "/draft/")


def test_real_acceptance_is_not_flagged(tmp_path: Path) -> None:
    result = _counter_study(tmp_path / "real", accepted=300)
    assert "acceptance_counter" not in _kinds(result, "/draft/")
    assert _pair(result, "draft")["acceptance"]["counter_suspect"] is None


# -- item 6: parity on thinking models -------------------------------------------------------

def _thinking_study(out: Path, spec_reasoning: Callable[[str], str]) -> dict[str, Any]:
    """A thinking model whose answer lives in ``reasoning_content`` (content empty), as
    llama-server's chat bodies carry it, greedy on both sides."""
    def extra(arm: Arm, pid: str, trial: int, occ: int) -> dict[str, Any]:
        reasoning = spec_reasoning(pid) if arm.method != "none" else f"think about {pid} first"
        return {"text": "", "reasoning_content": reasoning}

    study(out, PROMPTS, [Arm("base"), Arm("draft", "draft-simple", 4)],
          lambda a, pid, t, o: 100.0, trials=1, extra=extra)
    return analyze(out, OPTS)


def test_parity_compares_the_reasoning_of_a_thinking_model(tmp_path: Path) -> None:
    result = _thinking_study(tmp_path / "diff",
                             lambda pid: f"think about {pid} later" if int(pid[1:]) < 2 else
                             f"think about {pid} first")
    par = _pair(result, "draft")["parity"]
    assert par["verdict"] == "diverges"  # content alone ("" == "") read identical, 1.0
    assert par["compared"] == 24
    assert par["exact_match_rate"] == 22 / 24
    assert par["first_divergence_chars"]["min"] == len("think about p0 ")
    assert par["compares"] == "reasoning and content"
    same = _pair(_thinking_study(tmp_path / "same", lambda pid: f"think about {pid} first"),
                 "draft")["parity"]
    assert same["verdict"] == "identical" and same["exact_match_rate"] == 1.0


def test_requests_read_in_one_go_are_counted_not_silently_dropped(tmp_path: Path) -> None:
    # a loaded host can read a short request's whole stream at once: every chunk then has
    # one timestamp and no decode rate; the cell says how many, and the pair's samples drop
    def rate(a: Arm, pid: str, trial: int, occ: int) -> float:
        return 90.0 + int(pid[1:]) if a.method != "none" else 100.0 + int(pid[1:])

    out = tmp_path / "run"
    study(out, PROMPTS, [Arm("base"), Arm("draft", "draft-simple", 4)], rate, trials=1)
    (spec_dir,) = [d for d in (out / "cells").iterdir() if "draft" in d.name]
    path = spec_dir / "requests.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    collapsed = 0
    for r in records:
        if not r.get("warmup") and collapsed < 5:
            t = r["chunks"][-1][0]
            r["chunks"] = [[t, k] for _, k in r["chunks"]]
            r["t_first_chunk_ns"] = t
            collapsed += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = analyze(out, OPTS)
    (w,) = [w for w in result["stability"] if w["kind"] == "unrated_requests"]
    assert "draft" in w["cell"] and w["message"].startswith("5 of 24 completed requests")
    assert _pair(result, "draft")["speedup"]["n_samples"] == 24 - 5
    assert "unrated_requests" not in _kinds(result, "/none/")  # the baseline read normally
