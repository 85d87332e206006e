"""The stand-in server: its schedule, its truth log, its routes and its labels."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from standins.load import STANDIN_NAME, StandinConfig, StandinServer

from crossbench.errors import UserError

MS = 1_000_000


@pytest.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandinServer]:
    server = StandinServer(StandinConfig(ttft_ms=30, gap_ms=5), log_path=tmp_path / "t.jsonl")
    async with server:
        yield server


async def _stream(url: str, body: dict[str, Any], rid: str) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, json=body, headers={"X-Request-Id": rid}) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for ev in raw.split(b"\n\n"):
        if ev.startswith(b"data: "):
            payload = ev[6:]
            out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


async def test_schedule_is_absolute_and_never_early(standin: StandinServer) -> None:
    body = {
        "prompt": "a b c",
        "max_tokens": 60,
        "stream": True,
        "standin": {"ttft_ms": 20, "gap_ms": [1, 2]},
    }
    status, headers, raw = await _stream(standin.base_url + "/v1/completions", body, "r1")
    assert status == 200 and headers["X-Crossbench-Standin"] == "1"
    truth = standin.truth["r1"]
    assert truth.outcome == "ok" and len(truth.send_ns) == 60 and truth.backlogged == 0
    planned = [truth.t_received_ns + 20 * MS]
    for i in range(59):
        planned.append(planned[-1] + (1 if i % 2 == 0 else 2) * MS)
    lateness = [s - p for s, p in zip(truth.send_ns, planned, strict=True)]
    assert min(lateness) >= 0  # never early
    # Absolute deadlines: lateness does not pile up. Sleeping 1-2 ms at a time, each step
    # rounded up to the next millisecond by epoll, would end some 30 ms late.
    assert statistics.median(lateness[-10:]) < 5 * MS, lateness
    events = _events(raw)
    assert events[-1] == "[DONE]"
    content = [e for e in events[:-1] if e["choices"][0]["text"]]
    assert len(content) == 60
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert {e["model"] for e in events[:-1]} == {STANDIN_NAME}
    assert {e["system_fingerprint"] for e in events[:-1]} == {STANDIN_NAME}


async def test_tokens_per_chunk_timings_and_usage(standin: StandinServer) -> None:
    body = {
        "prompt": "one two",
        "max_tokens": 10,
        "stream": True,
        "timings_per_token": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "standin": {"ttft_ms": 1, "gap_ms": 1, "tokens_per_chunk": 3},
    }
    _, _, raw = await _stream(standin.base_url + "/v1/completions", body, "tpc")
    assert standin.truth["tpc"].tokens == [3, 3, 3, 1]
    events = [e for e in _events(raw) if e != "[DONE]"]
    content = events[:4]
    assert [e["timings"]["predicted_n"] for e in content] == [3, 6, 9, 10]
    assert [e["usage"]["completion_tokens"] for e in content] == [3, 6, 9, 10]
    assert [e["timings"]["draft_n_accepted"] for e in content] == [2, 4, 6, 6]
    assert content[0]["timings"]["predicted_ms"] == 0.0
    assert content[0]["usage"]["prompt_tokens"] == 2
    final = events[-1]
    assert final["choices"][0]["text"] == "" and final["timings"]["predicted_n"] == 10


async def test_chat_sends_role_event_first(standin: StandinServer) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "standin": {"ttft_ms": 1, "gap_ms": 1},
    }
    _, _, raw = await _stream(standin.base_url + "/v1/chat/completions", body, "chat")
    events = _events(raw)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert events[0]["object"] == "chat.completion.chunk"
    assert [e["choices"][0]["delta"].get("content") for e in events[1:4]] == [
        " alpha",
        " beta",
        " gamma",
    ]
    assert len(standin.truth["chat"].send_ns) == 3


async def test_truth_log_has_one_line_per_request(standin: StandinServer, tmp_path: Path) -> None:
    for rid in ("x1", "x2"):
        body = {
            "prompt": "p",
            "max_tokens": 2,
            "stream": True,
            "standin": {"ttft_ms": 0, "gap_ms": 0},
        }
        await _stream(standin.base_url + "/v1/completions", body, rid)
    lines = [orjson.loads(x) for x in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    assert [d["request_id"] for d in lines] == ["x1", "x2"]
    assert lines[0]["send_ns"] == standin.truth["x1"].send_ns
    assert set(lines[0]) == {
        "request_id",
        "t_received_ns",
        "send_ns",
        "tokens",
        "backlogged",
        "outcome",
    }


async def test_routes_and_errors(standin: StandinServer) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(standin.base_url + "/health") as r:
            assert r.status == 200 and await r.json() == {"status": "ok"}
        async with s.get(standin.base_url + "/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == STANDIN_NAME
        async with s.get(standin.base_url + "/nope") as r:
            assert r.status == 404
        async with s.post(standin.base_url + "/v1/completions", data=b"not json") as r:
            assert r.status == 400
        bad = {"prompt": "p", "stream": True, "standin": {"no_such_field": 1}}
        async with s.post(standin.base_url + "/v1/completions", json=bad) as r:
            assert r.status == 400 and "no_such_field" in (await r.json())["error"]["message"]
        err = {"prompt": "p", "stream": True, "standin": {"status": 503, "error_message": "busy"}}
        async with s.post(standin.base_url + "/v1/completions", json=err) as r:
            assert r.status == 503
            assert (await r.json())["error"] == {
                "code": 503,
                "message": "busy",
                "type": "server_error",
            }
        whole = {"prompt": "p", "max_tokens": 4}
        async with s.post(standin.base_url + "/v1/completions", json=whole) as r:
            body = await r.json()
            assert body["model"] == STANDIN_NAME and body["usage"]["completion_tokens"] == 4


async def test_drop_closes_mid_stream(standin: StandinServer) -> None:
    body = {
        "prompt": "p",
        "max_tokens": 10,
        "stream": True,
        "standin": {"ttft_ms": 0, "gap_ms": 1, "drop_after": 2},
    }
    with pytest.raises(aiohttp.ClientPayloadError):
        await _stream(standin.base_url + "/v1/completions", body, "drop")
    assert standin.truth["drop"].outcome == "dropped"
    assert len(standin.truth["drop"].send_ns) == 2


def test_bad_gap_is_user_error() -> None:
    with pytest.raises(UserError, match="gap_ms"):
        StandinServer(StandinConfig(gap_ms=[]))


def test_command_line_prints_bound_address() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "standins.load",
            "--port",
            "0",
            "--ttft-ms",
            "5",
            "--gap-ms",
            "1,2",
            "--stop-after-s",
            "20",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("crossbench stand-in (not an engine) listening on http://127.0.0.1:")
        url = line.split()[-1]

        async def check() -> None:
            async with aiohttp.ClientSession() as s, s.get(url + "/health") as r:
                assert r.headers["X-Crossbench-Standin"] == "1"

        t0 = time.monotonic()
        asyncio.run(check())
        assert time.monotonic() - t0 < 5
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_command_line_rejects_bad_values() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "standins.load", "--gap-ms", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2
    assert p.stderr.startswith("error: stand-in gap_ms must be non-negative")
