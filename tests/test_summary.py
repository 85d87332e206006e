"""summarize_records on records with known timing."""

from __future__ import annotations

from crossbench.analysis.summary import summarize_records

S = 1_000_000_000


def rec(trial: int, t0: int, tokens: int = 100) -> dict[str, object]:
    chunks = [[t0 + S // 10 + i * (S - S // 10) // (tokens - 1), 1] for i in range(tokens)]
    return {"trial": trial, "warmup": False, "status": "ok", "t_sent_ns": t0,
            "t_first_chunk_ns": chunks[0][0], "chunks": chunks,
            "usage": {"completion_tokens": tokens}}


def test_wall_rate_excludes_the_gap_between_trials() -> None:
    # two trials of one 1-second request each, 50 s apart (a server restart between them)
    s = summarize_records([rec(0, 0), rec(1, 51 * S)])
    assert s["throughput"]["output_tokens_total"] == 200
    assert abs(s["throughput"]["wall_output_tok_s"] - 100.0) < 1e-6
    # decode: 99 tokens after the first in 0.9 s per request
    assert abs(s["throughput"]["pooled_tok_s"] - 110.0) < 1e-6
    assert abs(s["latency_ms"]["ttft"]["mean"] - 100.0) < 1e-6
