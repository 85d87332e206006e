"""Host time over the decode alone, against simulated NVML traces whose truth is set by hand:
a GPU busy a known share of each decode step, fully busy in prefill and idle between
requests, read the way NVML reports (a busy share over its averaging period, updated once a
period) by a 10 Hz sampler. The trial window mixes the three; the decode window recovers the
decode's share."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from crossbench.analysis import decompose as dec
from crossbench.analysis.decode_window import (
    MIN_SAMPLES,
    NVML_MIN_PERIOD_S,
    cell_decode_time,
    decode_only,
    nvml_period_s,
    trial_decode,
)
from crossbench.telemetry.sampler import COLUMNS, clock_anchor

WALL0 = 1_800_000_000_000_000_000  # the trace's clock (time.time_ns)
MONO0 = 5_000_000_000_000  # the records' clock (time.monotonic_ns)
MS = 1_000_000
NVML_PERIOD = 200 * MS  # what the H200 traces show: a new reading every 0.2 s
HZ = 10.0


def _requests(n: int, tokens: int, step_ms: float, busy: float, prefill_ms: int = 40,
              gap_ms: int = 150) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """``n`` requests one after another (c=1), each a prefill, then ``tokens`` chunks of one
    token every ``step_ms`` with the GPU busy ``busy`` of each step, then a host gap: the
    records (monotonic) and the GPU's busy intervals (wall)."""
    records, busy_spans = [], []
    t = MONO0
    step = int(step_ms * MS)
    for i in range(n):
        sent, first = t, t + prefill_ms * MS
        busy_spans.append((sent, first))
        chunks = [[first + k * step, 1] for k in range(tokens)]
        for k in range(1, tokens):  # the step that produced chunk k
            start = first + (k - 1) * step
            busy_spans.append((start, start + int(busy * step)))
        done = chunks[-1][0]
        records.append({"request_index": i, "trial": 0, "warmup": False, "status": "ok",
                        "t_sent_ns": sent, "t_first_chunk_ns": first, "t_done_ns": done,
                        "chunks": chunks, "usage": {"completion_tokens": tokens}})
        t = done + gap_ms * MS
    return records, [(a - MONO0 + WALL0, b - MONO0 + WALL0) for a, b in busy_spans]


def _covered(spans: list[tuple[int, int]], a: int, b: int) -> float:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in spans) / (b - a)


def _trace(path: Path, busy: list[tuple[int, int]], end: int, phase: int = 37 * MS) -> None:
    """NVML's reading (busy share over the last period, updated once a period) as a 10 Hz
    sampler records it, from before the first request to ``end`` (wall)."""
    step = int(1e9 / HZ)
    rows, t = [], WALL0 - 2 * NVML_PERIOD
    while t < end:
        update = (t - phase) // NVML_PERIOD * NVML_PERIOD + phase
        util = round(100 * _covered(busy, update - NVML_PERIOD, update))
        rows.append({"timestamp_ns": t, "gpu": 0, "util_gpu_pct": util})
        t += step
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)


def _cell(root: Path, records: list[dict[str, Any]], busy: list[tuple[int, int]],
          clock: bool = True) -> dict[str, Any]:
    _trace(root / "telemetry" / "t0.csv", busy, records[-1]["t_done_ns"] - MONO0 + WALL0)
    entry: dict[str, Any] = {"trial": 0, "status": "ok",
                             "telemetry": {"available": True, "trace": "t0.csv"}}
    if clock:
        entry["clock"] = {"wall_ns": WALL0 + 123 * MS, "monotonic_ns": MONO0 + 123 * MS}
    manifest = {"config": {"telemetry_hz": HZ}, "trials": [entry]}
    return cell_decode_time(root, manifest, records)


def _trial_window_share(records: list[dict[str, Any]], busy: list[tuple[int, int]]) -> float:
    """What the trial window sees: busy time over first send to last chunk."""
    a = records[0]["t_sent_ns"] - MONO0 + WALL0
    b = records[-1]["t_done_ns"] - MONO0 + WALL0
    return _covered(busy, a, b)


def test_the_decode_window_recovers_the_decode_s_busy_share(tmp_path: Path) -> None:
    records, busy = _requests(30, tokens=96, step_ms=6.0, busy=0.6)
    fig = _cell(tmp_path, records, busy)
    assert fig["available"], fig
    assert fig["gpu_busy_share"] == pytest.approx(0.6, abs=0.02)
    # 6 ms a token: 3.6 ms of GPU work, 2.4 ms waiting on the host
    assert fig["busy_ms_per_token"]["mean"] == pytest.approx(3.6, abs=0.12)
    assert fig["host_ms_per_token"]["mean"] == pytest.approx(2.4, abs=0.12)
    trial = fig["per_trial"]["0"]
    assert trial["tokens"] == 30 * 95  # the chunks after each request's first
    assert trial["wall_s"] == pytest.approx(30 * 95 * 0.006)
    assert trial["nvml_period_s"] == pytest.approx(0.2)
    assert trial["samples"] >= MIN_SAMPLES
    # the trial window mixes in prefill (busy) and the gaps (idle): about 0.50, not 0.6
    assert _trial_window_share(records, busy) == pytest.approx(0.503, abs=0.01)


def test_decodes_shorter_than_nvml_s_period_give_no_figure_and_say_why(tmp_path: Path) -> None:
    records, busy = _requests(30, tokens=48, step_ms=3.0, busy=0.6)
    fig = _cell(tmp_path, records, busy)
    assert not fig["available"]
    assert "longer requests (max_tokens)" in fig["reason"]
    assert "0.20 s" in fig["reason"]  # NVML's period, as estimated from the trace


def test_a_trial_without_a_clock_anchor_gets_no_decode_figures(tmp_path: Path) -> None:
    records, busy = _requests(5, tokens=96, step_ms=6.0, busy=0.6)
    fig = _cell(tmp_path, records, busy, clock=False)
    assert not fig["available"] and "no clock anchor" in fig["reason"]
    assert not fig["per_trial"]["0"]["available"]


def test_another_request_s_prefill_is_cut_out_of_a_decode(tmp_path: Path) -> None:
    """c=2: request B's prefill falls inside A's decode; that stretch is not decode-only,
    and the tokens that arrived in it are not counted."""
    a = {"status": "ok", "t_sent_ns": 0, "t_first_chunk_ns": 10,
         "chunks": [[10, 1], [20, 1], [30, 1], [40, 1], [50, 1], [60, 1]]}
    b = {"status": "ok", "t_sent_ns": 25, "t_first_chunk_ns": 45,
         "chunks": [[45, 1], [55, 2], [80, 1]]}
    warm = {"status": "ok", "warmup": True, "t_sent_ns": 0, "t_first_chunk_ns": 1,
            "chunks": [[1, 1], [100, 1]]}
    spans, tokens = decode_only([a, b, warm], offset_ns=1000)
    assert spans == [(1010, 1025), (1045, 1080)]
    # A's chunks at 20 (in), 30/40 (in B's prefill: out), 50/60 (in); B's 55 (2) and 80 (in)
    assert tokens == 1 + 1 + 1 + 2 + 1


def test_nvml_s_period_is_read_from_the_trace() -> None:
    assert nvml_period_s([5, 5, 7, 7, 9, 9, 9, 9, 4, 4], 0.1) == pytest.approx(0.2)
    assert nvml_period_s([1, 2, 3, 4], 0.1) == pytest.approx(NVML_MIN_PERIOD_S)
    assert nvml_period_s([100] * 300, 0.1) == pytest.approx(1.0)  # saturated: NVML's cap


def test_a_chunk_without_a_token_count_gives_no_decode_figure(tmp_path: Path) -> None:
    records, _ = _requests(3, tokens=10, step_ms=6.0, busy=0.5)
    records[1]["chunks"][4][1] = None
    entry = {"clock": {"wall_ns": WALL0, "monotonic_ns": MONO0}}
    out = trial_decode(records, entry, tmp_path / "t0.csv", HZ)
    assert out == {"available": False, "reason": "the records' chunks carry no token counts"}


def test_the_clock_anchor_reads_both_clocks_together() -> None:
    import time

    before_w, before_m = time.time_ns(), time.monotonic_ns()
    a = clock_anchor()
    after_w, after_m = time.time_ns(), time.monotonic_ns()
    assert before_w <= a["wall_ns"] <= after_w
    assert before_m <= a["monotonic_ns"] <= after_m


def _host_time(busy_ms: float, host_ms: float, decode: tuple[float, float] | None
               ) -> dict[str, Any]:
    out: dict[str, Any] = {"busy_ms_per_token": {"mean": busy_ms},
                           "host_ms_per_token": {"mean": host_ms}}
    if decode is not None:
        out["decode"] = {"available": True, "busy_ms_per_token": {"mean": decode[0]},
                         "host_ms_per_token": {"mean": decode[1]}}
    return out


def test_decompose_s_split_takes_the_decode_window_where_both_cells_have_it() -> None:
    analysis = {"cells": [
        {"cell": "base", "host_time": _host_time(5.0, 2.0, (4.0, 1.0))},
        {"cell": "n2", "host_time": _host_time(4.0, 3.0, (3.0, 2.0))},
        {"cell": "n4", "host_time": _host_time(4.0, 3.0, None)}]}
    sweep = {"baseline_cell": "base", "points": [
        {"n": 2, "cell": "n2", "mean_acceptance_length": 2.0},
        {"n": 4, "cell": "n4", "mean_acceptance_length": 3.0}]}
    split = dec.telemetry_split(analysis, sweep)
    assert split[2]["window"] == "decode"
    assert split[2]["gpu_ms_per_step"] == pytest.approx(6.0)
    assert split[2]["telemetry_steps"] == pytest.approx((6.0 + 4.0) / 5.0)
    assert split[4]["window"] == "trial"  # its cell has no decode figures: both take the trial's
    assert split[4]["window_note"] == "no decode figures" and split[2]["window_note"] is None
    assert split[4]["telemetry_steps"] == pytest.approx((12.0 + 9.0) / 7.0)



def test_a_batch_shape_row_splits_its_telemetry_into_verification_drafting_and_idle() -> None:
    """Known figures: the baseline 8 ms of GPU work and 2 ms idle a token; the arm 12 ms of
    work and 4 ms idle a step; the batch shape's verification 1.1 whole steps. So the
    verification's GPU work is 1.1 x 8 = 8.8 ms (0.88 of a 10 ms step), 3.2 ms beyond it
    (0.32) and 4 ms idle (0.40, the baseline's 0.20): 1.60 in all, the telemetry's sum."""
    row = {"n": 4, "verify_ms": 11.0, "verify_steps": 1.1, "draft_steps": None,
           "parts_steps": 1.1, "plain_ms": 10.0, "verify_from": "batch shape",
           "draft_note": "not measured", "gpu_ms_per_step": 12.0, "host_ms_per_step": 4.0,
           "telemetry_base_ms": 10.0, "telemetry_base_busy_ms": 8.0,
           "telemetry_steps": 1.6, "window": "decode", "window_note": None}
    split = dec.shape_split(row)
    assert split == pytest.approx({"verify_gpu_steps": 0.88, "beyond_gpu_steps": 0.32,
                                   "idle_steps": 0.40, "base_idle_steps": 0.20})
    assert sum(split[k] for k in ("verify_gpu_steps", "beyond_gpu_steps", "idle_steps")) == (
        pytest.approx(row["telemetry_steps"]))
    text = dec.format_rows([row | split])
    assert ("verification's GPU work 0.88 (the batch shape's 1.10 x the baseline's GPU share "
            "0.80), GPU work beyond it 0.32 (drafting, sampling), GPU idle 0.40 (host; the "
            "baseline's 0.20) (decode window)") in text
    # llama-bench's rows (timed passes in ms) and rows without telemetry get no such split
    assert dec.shape_split({**row, "verify_from": None}) == {}
    assert dec.shape_split({k: v for k, v in row.items() if k != "gpu_ms_per_step"}) == {}


def test_decompose_s_table_names_the_window_and_why_not_the_decode() -> None:
    row = {"n": 2, "verify_ms": 9.0, "verify_steps": 1.8, "draft_steps": 0.5,
           "parts_steps": 2.3, "rest_steps": 0.7, "draft_note": None, "plain_ms": 5.0,
           "gpu_ms_per_step": 11.0, "host_ms_per_step": 4.0, "telemetry_steps": 3.0,
           "window": "trial", "window_note": "the trial has no clock anchor"}
    text = dec.format_rows([row, {**row, "n": 4}])
    assert "of the baseline's steps (trial window)" in text
    assert text.count("no decode-only window: the trial has no clock anchor") == 1
    assert "no decode-only window" not in dec.format_rows([{**row, "window": "decode",
                                                            "window_note": None}])


def test_a_host_bound_message_adds_the_decode_window_where_there_is_one() -> None:
    from crossbench.analysis.host_time import host_bound

    def fig(share: float, host: float, busy: float) -> dict[str, Any]:
        one = {"mean": host, "min": host, "max": host, "cv": None}
        return {"trials": 1, "gpu_busy_share": share, "host_ms_per_token": one,
                "busy_ms_per_token": {**one, "mean": busy}, "per_trial": {}}

    base, spec = fig(0.8, 1.0, 4.0), fig(0.4, 6.0, 4.0)
    plain = host_bound(spec, base)
    assert plain is not None and "decode alone" not in plain
    spec["decode"] = {"available": True, "gpu_busy_share": 0.45,
                      "host_ms_per_token": {"mean": 5.5}}
    text = host_bound(spec, base)
    assert text is not None
    assert "over the decode alone the GPU was busy 45%, 5.50 ms per token waiting" in text
    spec["decode"] = {"available": False, "reason": "no clock anchor"}
    assert host_bound(spec, base) == plain
