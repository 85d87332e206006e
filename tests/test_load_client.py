"""The streaming client: timing against the stand-in's truth, SSE parsing, statuses, modes."""

from __future__ import annotations

import asyncio
import gc
import itertools
import statistics
import threading
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from standins.fidelity import (
    TimingErrors,
    decode_rate_agreement,
    summarise,
    timing_errors,
)
from standins.load import StandinConfig, StandinServer

from crossbench.errors import RunError, UserError
from crossbench.load.client import (
    RECORD_KEYS,
    ClientConfig,
    ConcurrencyMode,
    LoadStats,
    RateMode,
    poisson_schedule_ns,
    request_id,
    run_load,
    run_load_sync,
)
from crossbench.load.workloads import Prompt, RequestSpec, load_workload

MS = 1_000_000
PROMPT = Prompt("p-01", "code", "write a function", None)


def reqs(n: int, start: int = 0) -> list[RequestSpec]:
    return [RequestSpec(PROMPT, start + i) for i in range(n)]


@pytest.fixture
async def standin() -> AsyncIterator[StandinServer]:
    async with StandinServer(StandinConfig(ttft_ms=5, gap_ms=2)) as server:
        yield server


async def collect(
    cfg: ClientConfig,
    requests: list[RequestSpec],
    mode: ConcurrencyMode | RateMode | None = None,
    warmup: list[RequestSpec] | None = None,
) -> tuple[list[dict[str, Any]], LoadStats]:
    records: list[dict[str, Any]] = []
    stats = await run_load(cfg, requests, mode or ConcurrencyMode(), records.append, warmup or [])
    return records, stats


# --- timing against the truth -----------------------------------------------------------


async def _timing_attempt() -> tuple[list[TimingErrors], list[dict[str, Any]]]:
    async with StandinServer(StandinConfig(ttft_ms=50, gap_ms=10)) as server:
        cfg = ClientConfig(base_url=server.base_url, max_tokens=20)
        records, stats = await collect(cfg, reqs(5), warmup=reqs(1, start=100))
        assert stats.n_ok == 5 and stats.n_warmup == 1 and stats.n_chunks == 100
        measured = [r for r in records if not r["warmup"]]
        errs = [
            timing_errors(r, server.truth[request_id(r["request_index"])].send_ns) for r in measured
        ]
    return errs, measured


async def test_timing_matches_standin_truth_at_concurrency_1() -> None:
    """TTFT and every gap within 5 ms of the stand-in's truth, for every request.

    Stand-in and client share one process, so only the time between the stand-in's stamp and
    the client's can differ: a client bug shows in every attempt, while a preemption of the
    whole process by another program (a loaded 2-core machine) hits one attempt. Hence up to
    three attempts; the medians must be tight in each.
    """
    failures = []
    for _ in range(3):
        errs, measured = await _timing_attempt()
        for e, r in zip(errs, measured, strict=True):
            assert e.true_ttft_ns >= 50 * MS  # the stand-in is never early
            assert r["t_first_chunk_ns"] - r["t_sent_ns"] - e.true_ttft_ns == e.ttft_ns
            assert len(e.gaps_ns) == 19
        s = summarise(errs)
        assert s.n_requests == 5 and s.ttft_abs_median_ms < 2 and s.gap_abs_median_ms < 1
        worst = max(max(abs(e.ttft_ns), *map(abs, e.gaps_ns)) for e in errs)
        if worst <= 5 * MS:
            return
        failures.append(worst / MS)
    pytest.fail(f"worst timing error over 5 ms in all 3 attempts: {failures} ms")


async def test_record_format(standin: StandinServer) -> None:
    cfg = ClientConfig(base_url=standin.base_url, max_tokens=4)
    records, _ = await collect(cfg, reqs(1))
    (r,) = records
    assert tuple(r) == RECORD_KEYS
    assert orjson.loads(orjson.dumps(r)) == r  # plain JSON
    assert r["request_index"] == 0 and r["prompt_id"] == "p-01" and r["category"] == "code"
    assert r["warmup"] is False and r["endpoint"] == "completions" and r["max_tokens"] == 4
    assert r["t_scheduled_ns"] <= r["t_sent_ns"] < r["t_first_chunk_ns"] <= r["t_done_ns"]
    assert r["n_chunks"] == 4 and [c[1] for c in r["chunks"]] == [None] * 4
    assert [c[0] for c in r["chunks"]] == sorted(c[0] for c in r["chunks"])
    assert r["text"] == " alpha beta gamma delta"
    assert r["finish_reason"] == "length" and r["status"] == "ok"
    assert r["error"] is None and r["http_status"] == 200
    assert r["timings"]["predicted_n"] == 4  # the final event's timings are kept
    assert r["usage"] is None


# --- tokens per chunk ---------------------------------------------------------------------


async def test_tokens_per_chunk_from_timings(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url,
        max_tokens=11,
        extra_body={"timings_per_token": True, "standin": {"tokens_per_chunk": 4}},
    )
    (r,), _ = await collect(cfg, reqs(1))
    assert [c[1] for c in r["chunks"]] == [4, 4, 3]
    assert r["timings"]["predicted_n"] == 11 and r["timings"]["draft_n_accepted"] == 8


async def test_tokens_per_chunk_from_usage(standin: StandinServer) -> None:
    opts = {"include_usage": True, "continuous_usage_stats": True}
    cfg = ClientConfig(
        base_url=standin.base_url,
        max_tokens=7,
        endpoint="chat",
        extra_body={"stream_options": opts, "standin": {"tokens_per_chunk": 2}},
    )
    (r,), _ = await collect(cfg, reqs(1))
    assert [c[1] for c in r["chunks"]] == [2, 2, 2, 1]  # the role-only event is not a chunk
    assert r["usage"]["completion_tokens"] == 7 and r["endpoint"] == "chat"
    assert r["text"] == " alpha beta gamma delta epsilon zeta eta"


async def test_decode_rate_agreement_with_standin_timings(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url,
        max_tokens=12,
        extra_body={"timings_per_token": True, "standin": {"gap_ms": 8}},
    )
    (r,), _ = await collect(cfg, reqs(1))
    a = decode_rate_agreement(r)
    assert a is not None and a.n_tokens == 12 and a.first_chunk_tokens == 1
    assert abs(a.rel_error) < 0.02
    assert abs(a.server_tokens_per_s - 125) < 15  # 11 tokens over 11 gaps of ~8 ms
    no_counts = dict(r, chunks=[[t, None] for t, _ in r["chunks"]])
    assert decode_rate_agreement(no_counts) is None


# --- statuses -------------------------------------------------------------------------------


async def test_http_error_body_gives_status_error(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url,
        extra_body={"standin": {"status": 500, "error_message": "out of KV"}},
    )
    (r,), stats = await collect(cfg, reqs(1))
    assert r["status"] == "error" and r["http_status"] == 500
    assert r["error"] == "HTTP 500: out of KV"
    assert r["chunks"] == [] and r["t_first_chunk_ns"] is None
    assert stats.n_error == 1 and stats.n_ok == 0


async def test_connection_drop_is_incomplete_with_chunks(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url, max_tokens=10, extra_body={"standin": {"drop_after": 3}}
    )
    (r,), stats = await collect(cfg, reqs(1))
    assert r["status"] == "incomplete" and r["n_chunks"] == 3 and r["http_status"] == 200
    assert r["text"] == " alpha beta gamma" and r["error"]
    assert stats.n_incomplete == 1


async def test_timeout_mid_stream_is_incomplete(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url,
        max_tokens=10,
        request_timeout_s=0.3,
        extra_body={"standin": {"stall_after": 2}},
    )
    (r,), _ = await collect(cfg, reqs(1))
    assert r["status"] == "incomplete" and r["n_chunks"] == 2
    assert r["error"] == "timeout after 0.3 s (request_timeout_s)"
    assert 0.25 * 1e9 < r["t_done_ns"] - r["t_sent_ns"] < 2e9


async def test_connection_refused_is_error() -> None:
    async with StandinServer() as server:
        url = server.base_url
    (r,), stats = await collect(ClientConfig(base_url=url), reqs(1))
    assert r["status"] == "error" and r["http_status"] is None and r["error"]
    assert stats.n_error == 1


# --- SSE parsing against a scripted server ---------------------------------------------------

Script = list[bytes | float]  # bytes are written, floats are pauses in seconds


async def scripted_server(
    script: Script, seen: list[tuple[bytes, bytes]] | None = None
) -> tuple[asyncio.Server, str]:
    """A server that answers every request with the scripted bytes (body ends at close)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        if seen is not None:
            seen.append((head, body))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for step in script:
            if isinstance(step, float):
                await writer.drain()
                await asyncio.sleep(step)
            else:
                writer.write(step)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def run_script(
    script: Script, seen: list[tuple[bytes, bytes]] | None = None, **cfg: Any
) -> dict[str, Any]:
    server, url = await scripted_server(script, seen)
    async with server:
        (r,), _ = await collect(ClientConfig(base_url=url, **cfg), reqs(1))
    return r


def ev(text: str, finish: str | None = None, **extra: Any) -> bytes:
    obj = {"choices": [{"index": 0, "text": text, "finish_reason": finish}], **extra}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def test_events_split_across_reads_and_batched_in_one() -> None:
    first, second = ev("a"), ev("b")
    script: Script = [
        first[:9],
        0.05,
        first[9:] + second + ev("c"),
        0.05,
        b": keep-alive comment\n\n",
        ev("", "stop"),
        b"data: [DONE]\n\n",
    ]
    r = await run_script(script)
    assert r["status"] == "ok" and r["text"] == "abc" and r["finish_reason"] == "stop"
    t = [c[0] for c in r["chunks"]]
    assert len(t) == 3 and t[1] == t[2]  # one read, one timestamp
    assert t[0] - r["t_sent_ns"] >= 45 * MS  # stamped when the event was complete
    assert r["t_done_ns"] - t[2] >= 45 * MS


async def test_crlf_line_endings_and_multiline_data() -> None:
    crlf = ev("x").replace(b"\n", b"\r\n")
    script: Script = [
        crlf[:-1],
        0.02,
        crlf[-1:] + b'data: {"choices":\r\ndata: [{"text":"y","finish_reason":"length"}]}\r\n\r\n',
        b"data: [DONE]\r\n\r\n",
    ]
    r = await run_script(script)
    assert r["status"] == "ok" and r["text"] == "xy" and r["n_chunks"] == 2


async def test_usage_only_and_role_only_events_are_not_chunks() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    script: Script = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}\n\n',
        b'data: {"choices":[],"usage":' + orjson.dumps(usage) + b"}\n\n",
        b"data: [DONE]\n\n",
    ]
    r = await run_script(script, endpoint="chat")
    assert r["n_chunks"] == 2 and r["text"] == "hi!" and r["usage"] == usage
    assert [c[1] for c in r["chunks"]] == [None, None] and r["status"] == "ok"


async def test_in_stream_error_event_is_error() -> None:
    script: Script = [ev("a"), b'data: {"error":{"code":500,"message":"slot died"}}\n\n']
    r = await run_script(script)
    assert r["status"] == "error" and r["error"] == "error event: slot died"
    assert r["n_chunks"] == 1


async def test_finish_reason_without_done_is_ok_and_bare_eof_is_incomplete() -> None:
    assert (await run_script([ev("a"), ev("b", "length")]))["status"] == "ok"
    r = await run_script([ev("a"), ev("b")])
    assert r["status"] == "incomplete" and r["n_chunks"] == 2
    assert r["error"] == "stream ended before [DONE] or a finish_reason"


async def test_reused_connection_closed_by_server_is_sent_again() -> None:
    """llama-server closes connections after a stream despite Keep-Alive: resend once."""
    seen: list[int] = []  # connection number of every request received
    n_conn = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal n_conn
        n_conn += 1
        conn = n_conn
        for k in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            seen.append(conn)
            if conn == 1 and k == 1:
                break  # the second request on the first connection: close, no answer
            body = ev("a", "stop") + b"data: [DONE]\n\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n\r\n"
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        records, stats = await collect(ClientConfig(base_url=url), reqs(3))
    assert stats.n_ok == 3, [r["error"] for r in records]
    assert seen[:3] == [1, 1, 2]  # the dropped request went again on a new connection


async def test_request_body_and_headers() -> None:
    seen: list[tuple[bytes, bytes]] = []
    await run_script(
        [ev("a", "stop")],
        seen,
        max_tokens=9,
        seed=7,
        model="m",
        extra_body={"cache_prompt": False, "temperature": 0.5},
    )
    head, body = seen[0]
    assert head.startswith(b"POST /v1/completions HTTP/1.1")
    assert b"x-request-id: crossbench-0" in head.lower()
    assert orjson.loads(body) == {
        "model": "m",
        "prompt": "write a function",
        "max_tokens": 9,
        "temperature": 0.5,
        "top_p": 1.0,
        "stream": True,
        "seed": 7,
        "ignore_eos": True,
        "cache_prompt": False,
    }


async def test_token_id_prompts_and_chat_rejects_them() -> None:
    ids = Prompt("r", "random", None, [1001, 1002])
    seen: list[tuple[bytes, bytes]] = []
    server, url = await scripted_server([ev("a", "stop")], seen)
    async with server:
        await run_load(
            ClientConfig(base_url=url), [RequestSpec(ids, 0)], ConcurrencyMode(), lambda r: None
        )
        with pytest.raises(UserError, match="chat endpoint needs text"):
            await run_load(
                ClientConfig(base_url=url, endpoint="chat"),
                [RequestSpec(ids, 0)],
                ConcurrencyMode(),
                lambda r: None,
            )
    assert orjson.loads(seen[0][1])["prompt"] == [1001, 1002]
    assert len(seen) == 1  # nothing was sent for the rejected run


# --- load modes ---------------------------------------------------------------------------------


def test_poisson_schedule_is_seeded() -> None:
    a = poisson_schedule_ns(10.0, 2000, seed=3)
    assert a == poisson_schedule_ns(10.0, 2000, seed=3)
    assert a != poisson_schedule_ns(10.0, 2000, seed=4)
    assert a[0] == 0 and all(x < y for x, y in itertools.pairwise(a))
    gaps = [y - x for x, y in itertools.pairwise(a)]
    assert abs(statistics.mean(gaps) / 1e8 - 1) < 0.1  # mean 100 ms
    assert abs(statistics.stdev(gaps) / statistics.mean(gaps) - 1) < 0.1  # exponential: cv 1


async def test_rate_mode_follows_the_schedule(standin: StandinServer) -> None:
    cfg = ClientConfig(base_url=standin.base_url, max_tokens=3)
    mode = RateMode(rate=40.0, seed=11)
    records, stats = await collect(cfg, reqs(12), mode)
    assert stats.n_ok == 12
    records.sort(key=lambda r: r["request_index"])
    t0 = records[0]["t_scheduled_ns"]
    assert [r["t_scheduled_ns"] - t0 for r in records] == poisson_schedule_ns(40.0, 12, 11)
    late = [r["t_sent_ns"] - r["t_scheduled_ns"] for r in records]
    assert min(late) >= 0
    assert statistics.median(late) < 2 * MS


async def test_concurrency_mode_keeps_n_in_flight(standin: StandinServer) -> None:
    cfg = ClientConfig(
        base_url=standin.base_url,
        max_tokens=5,
        extra_body={"standin": {"ttft_ms": 20, "gap_ms": 5}},
    )
    records, stats = await collect(cfg, reqs(12), ConcurrencyMode(concurrency=4))
    assert stats.n_ok == 12 and sorted(r["request_index"] for r in records) == list(range(12))
    events = sorted(
        [(r["t_sent_ns"], 1) for r in records] + [(r["t_done_ns"], -1) for r in records]
    )
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 4
    assert stats.wall_s == (stats.t_last_done_ns - stats.t_first_sent_ns) / 1e9  # type: ignore[operator]
    assert 0.1 < stats.wall_s < 2.0  # 3 rounds of ~40 ms


def _is_record(o: object) -> bool:
    """A request record (a dict with a status string: the record type's own annotations,
    ``store.rundir.RequestRecord.__annotations__``, carry the same keys and live forever)."""
    return type(o) is dict and "t_first_chunk_ns" in o and isinstance(o.get("status"), str)


async def test_memory_stays_flat(standin: StandinServer) -> None:
    """The client keeps no records: they exist only until the sink has them."""
    calls = 0
    live_at_sink: list[int] = []

    def sink(rec: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls % 10 == 0:
            gc.collect()
            live_at_sink.append(
                sum(1 for o in gc.get_objects() if _is_record(o))
            )

    cfg = ClientConfig(
        base_url=standin.base_url, max_tokens=3, extra_body={"standin": {"ttft_ms": 0, "gap_ms": 0}}
    )
    result = await run_load(cfg, reqs(60), ConcurrencyMode(concurrency=4), sink, reqs(3, 100))
    assert calls == 63
    assert isinstance(result, LoadStats)
    assert result.n_ok == 60 and result.n_warmup == 3 and result.n_chunks == 180
    assert max(live_at_sink) <= 4, live_at_sink  # only the record being handed over, per worker
    gc.collect()
    assert not [o for o in gc.get_objects() if _is_record(o)]


async def test_sink_errors_stop_the_run(standin: StandinServer) -> None:
    def sink(rec: dict[str, Any]) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await run_load(
            ClientConfig(base_url=standin.base_url, max_tokens=2),
            reqs(5),
            ConcurrencyMode(concurrency=2),
            sink,
        )


def test_sync_wrapper_runs_workload() -> None:
    # run_load_sync needs a thread without a running loop: the stand-in runs in another one.
    ready: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with StandinServer(StandinConfig(ttft_ms=1, gap_ms=1)) as server:
                ready.append(server.base_url)
                while not stop.is_set():
                    await asyncio.sleep(0.01)

        asyncio.run(main())

    t = threading.Thread(target=serve)
    t.start()
    try:
        while not ready:
            stop.wait(0.01)
        w = load_workload("builtin:mixed", count=6)
        records: list[dict[str, Any]] = []
        stats = run_load_sync(
            ClientConfig(base_url=ready[0], max_tokens=2, endpoint="chat"),
            w.requests(),
            ConcurrencyMode(concurrency=2),
            records.append,
        )
        assert stats.n_ok == 6 and {r["category"] for r in records} == {
            "code",
            "math",
            "creative",
            "factual",
            "analysis",
            "howto",
        }
    finally:
        stop.set()
        t.join()


async def test_sync_wrapper_refuses_inside_a_loop() -> None:
    with pytest.raises(RunError, match="inside a running event loop"):
        run_load_sync(
            ClientConfig(base_url="http://127.0.0.1:1"), [], ConcurrencyMode(), lambda r: None
        )


def test_seed_is_offset_by_request_index_unless_shared():
    from crossbench.load.client import ClientConfig, _request_body

    spec = RequestSpec(Prompt("p", "code", "hi", None), 7)
    per = orjson.loads(_request_body(ClientConfig(base_url="http://x", seed=100), spec))
    shared = orjson.loads(_request_body(
        ClientConfig(base_url="http://x", seed=100, seed_per_request=False), spec))
    assert (per["seed"], shared["seed"]) == (107, 100)
