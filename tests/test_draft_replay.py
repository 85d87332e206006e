"""The draft_replay warning: a method that drafts from state every request of a server start
feeds (registered per engine) replays prompts served before on its start. Checked on the
archive where it happened (SGLang's NGRAM at c=16 after c=1 on one start, sglang-rest,
2026-12-06) and on cells whose manifests and records say exactly what was sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossbench.analysis.rundir import CellData
from crossbench.analysis.stability import WarningKind, _draft_replay
from crossbench.engines import registry
from crossbench.frames import open_run

ARCHIVE = (Path(__file__).resolve().parents[1] / "examples" / "h100-methods" / "sglang-rest"
           / "h100-sglang-rest-sglang-ngram.zip")


def test_the_replayed_sglang_cells_are_flagged_and_the_first_trials_are_not() -> None:
    """The c=16 cells (81 of 128 requests repeat a prompt; their trial followed c=1's on the
    start with no flush) carry the warning and a verdict caveat; the c=1 cells (the warm-up
    prompt once again among 32: 3 %) do not."""
    with open_run(ARCHIVE) as frames:
        pairs = frames.analysis["pairs"]
    assert len(pairs) == 6
    for p in pairs:
        replay = [w for w in p["warnings"] if w["kind"] == "draft_replay"]
        caveat = [c for c in p["verdict_caveats"] if "draft_replay" in c]
        if p["concurrency"] == 1:
            assert not replay and not caveat, p["cell"]
            continue
        (w,) = replay
        assert w["cell"] == p["cell"] and caveat
        assert "81 of 128 measured requests repeat a prompt" in w["message"]
        assert f"(after {p['cell'].replace('/c16', '/c1')}; reset: none-needed)" in w["message"]
        assert "(flush_cache)" in w["action"]


def _cell(engine: str, spec: dict[str, Any], records: list[dict[str, Any]],
          trials: list[dict[str, Any]]) -> CellData:
    cell = CellData("e/t/a/n4/w/c16", {}, "base", Path("/nonexistent"),
                    {"config": {"engine": engine, "engine_config": {"spec": spec}},
                     "trials": trials})
    cell.__dict__["records"] = records  # what read_records would return
    return cell


def _sent(prompts: list[str], trial: int = 0) -> list[dict[str, Any]]:
    return [{"trial": trial, "request_index": i, "t_sent_ns": 1000 + i, "prompt_id": pid,
             "warmup": i == 0} for i, pid in enumerate(prompts)]


def test_each_condition_alone_and_what_clears_it() -> None:
    once = _sent(["a", *[f"p{i}" for i in range(32)]])  # the warm-up's prompt not again
    fresh = [{"trial": 0, "reuse": {"position": 0}}]
    flushed = [{"trial": 0, "reuse": {"position": 1, "cache_reset":
                                      {"method": "flush_cache", "ok": True},
                                      "started_by": {"cell": "c1"}}}]
    kept = [{"trial": 0, "reuse": {"position": 1, "cache_reset":
                                   {"method": "none-needed", "ok": True},
                                   "started_by": {"cell": "c1"}}}]
    ngram = {"type": "NGRAM", "n": 4}
    assert _draft_replay(_cell("sglang", ngram, once, fresh)) == []
    assert _draft_replay(_cell("sglang", ngram, once, flushed)) == []  # the flush clears it
    (f,) = _draft_replay(_cell("sglang", ngram, once, kept))
    assert f.kind is WarningKind.DRAFT_REPLAY
    assert "trial(s) 0 (after c1; reset: none-needed) followed" in f.message
    assert "repeat a prompt" not in f.message
    # repeats inside a trial: 2 of 32 (6 %) warn, 1 of 32 (3 %) does not
    two = _sent(["a", "a", "b", "b", *[f"p{i}" for i in range(29)]])
    (f,) = _draft_replay(_cell("sglang", ngram, two, fresh))
    assert "2 of 32 measured requests repeat a prompt" in f.message
    assert _draft_replay(_cell("sglang", ngram, _sent(["a", "a", *[f"p{i}" for i in range(31)]]),
                               fresh)) == []
    # llama.cpp's ngram-mod: no reset clears its table, so a slot erase does not either
    erased = [{"trial": 0, "reuse": {"position": 2, "cache_reset":
                                     {"method": "slot-erase", "ok": True},
                                     "started_by": {"cell": "c1"}}}]
    (f,) = _draft_replay(_cell("llama-server", {"type": "ngram-mod", "n": 4}, once, erased))
    assert "ngram-mod drafts from one ngram-mod hash table per server" in f.message
    assert "or a reset" not in f.action
    # per-request drafting (vLLM's ngram), scripted acceptance and baselines: nothing
    assert registry.shared_drafts("vllm", "ngram") is None
    assert _draft_replay(_cell("vllm", {"type": "ngram", "n": 4}, two, kept)) == []
    assert _draft_replay(_cell("sglang", {**ngram, "synth_len": 3.0}, two, kept)) == []
    assert _draft_replay(_cell("sglang", {"type": "none"}, two, kept)) == []
