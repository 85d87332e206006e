"""When the client sends a request again: only a send on a reused connection that failed
before any response byte (a stale keep-alive connection); every resend recorded.

Each server here is a small asyncio HTTP/1.1 server that keeps its own truth: the requests
it parsed, per connection. A request it never parsed never reached it; one it parsed must
never be sent again once the server answered anything or the connection was new.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from crossbench.load.client import (
    ClientConfig,
    ConcurrencyMode,
    LoadStats,
    never_delivered,
    run_load,
)
from crossbench.load.workloads import Prompt, RequestSpec

PROMPT = Prompt("p-01", "code", "write a function", None)
SSE = b'data: {"choices":[{"index":0,"text":"a","finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE)
)
"""A whole streamed answer that leaves the connection open, as llama-server's does."""
HEAD_ONLY = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

Handler = Callable[[int, int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""(connection number, request number on it, reader, writer) -> keep the connection."""


class Server:
    """A local server whose ``handler`` decides, per request, what to answer; ``parsed``
    lists ``(connection, X-Request-Id)`` of every request read in full."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.parsed: list[tuple[int, str]] = []
        self.n_conn = 0
        self.url = ""
        self._server: asyncio.Server | None = None

    async def read_request(self, conn: int, reader: asyncio.StreamReader) -> None:
        """Read one request in full and note it as parsed."""
        head = await reader.readuntil(b"\r\n\r\n")
        fields = dict(
            line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
        )
        await reader.readexactly(int(fields[b"Content-Length"]))
        self.parsed.append((conn, fields[b"X-Request-Id"].decode()))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.n_conn += 1
        conn = self.n_conn
        k = 0
        try:
            while await self.handler(conn, k, reader, writer):
                k += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its side
        finally:
            writer.close()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


async def answer(server: Server, conn: int, reader: Any, writer: asyncio.StreamWriter) -> bool:
    """Parse the request and stream a whole answer; keep the connection."""
    await server.read_request(conn, reader)
    writer.write(OK)
    await writer.drain()
    return True


async def discard_next(reader: asyncio.StreamReader) -> bool:
    """What llama-server does after every stream: close, discarding what arrives unread."""
    await reader.read(1)  # the next request has begun to arrive; never parsed
    return False


async def collect(url: str, n: int, **cfg: Any) -> tuple[list[dict[str, Any]], LoadStats]:
    records: list[dict[str, Any]] = []
    reqs = [RequestSpec(PROMPT, i) for i in range(n)]
    stats = await run_load(ClientConfig(base_url=url, **cfg), reqs, ConcurrencyMode(),
                           records.append)  # fmt: skip
    return records, stats


async def test_stale_connection_is_sent_again_on_a_new_one_and_recorded() -> None:
    """The first connection answers one request, then closes on the next without reading it
    (llama-server's close after a stream, caught late): that one goes again, once, on a new
    connection; the record says so; the server parsed every request exactly once. No reused
    connection has answered, so the run stops reusing: each later request opens its own,
    although this server would keep them alive."""

    async def handler(conn: int, k: int, reader: Any, writer: Any) -> bool:
        if conn == 1 and k == 1:
            return await discard_next(reader)
        return await answer(server, conn, reader, writer)

    async with Server(handler) as server:
        records, stats = await collect(server.url, 4)
    assert [r["status"] for r in records] == ["ok"] * 4
    assert [r["retries"] for r in records] == [0, 1, 0, 0]
    (failed,) = records[1]["failed_attempts"]
    assert failed["error"] == "ServerDisconnectedError: Server disconnected"
    assert failed["t_sent_ns"] < failed["t_done_ns"] <= records[1]["t_sent_ns"]
    assert records[1]["t_sent_ns"] < records[1]["t_first_chunk_ns"]  # the resend's timing
    assert [len(r["failed_attempts"]) for r in records] == [0, 1, 0, 0]
    assert stats.n_ok == 4 and stats.n_retries == 1
    # each request parsed once; the resend and every later request on a new connection
    assert server.parsed == [(i + 1, f"crossbench-{i}") for i in range(4)]


async def test_a_server_that_keeps_connections_alive_keeps_the_pool() -> None:
    """A reused connection has answered, so one stale send (an idle close caught late) is
    resent and the pool stays: the next requests share a connection again."""

    async def handler(conn: int, k: int, reader: Any, writer: Any) -> bool:
        if conn == 1 and k == 2:
            return await discard_next(reader)
        return await answer(server, conn, reader, writer)

    async with Server(handler) as server:
        records, stats = await collect(server.url, 6)
    assert [(r["status"], r["retries"]) for r in records] == [("ok", 0)] * 2 + [
        ("ok", 1)] + [("ok", 0)] * 3  # fmt: skip
    assert stats.n_retries == 1
    conns = [c for c, _ in server.parsed]
    assert conns[:3] == [1, 1, 2]  # the resend on a connection of its own
    assert conns[3:] == [3, 3, 3]  # then the pool again: one kept-alive connection


async def test_reset_while_writing_is_sent_again() -> None:
    """A reset (the server closed with our bytes unread) on a reused connection counts as a
    stale connection too: resent once, recorded with the reset's error."""

    async def handler(conn: int, k: int, reader: Any, writer: asyncio.StreamWriter) -> bool:
        if conn == 1 and k == 1:
            await reader.read(1)
            writer.transport.abort()  # RST: the request's bytes are dropped unread
            return False
        return await answer(server, conn, reader, writer)

    async with Server(handler) as server:
        records, stats = await collect(server.url, 2)
    assert [(r["status"], r["retries"]) for r in records] == [("ok", 0), ("ok", 1)]
    assert stats.n_ok == 2 and stats.n_retries == 1
    (failed,) = records[1]["failed_attempts"]
    assert failed["error"].startswith(("ClientOSError", "ServerDisconnectedError")), failed
    assert sorted(rid for _, rid in server.parsed) == ["crossbench-0", "crossbench-1"]


async def test_request_read_on_a_new_connection_is_never_sent_again() -> None:
    """The server reads the request on a connection opened for it and closes without a
    word: it may have acted on it, so the request is recorded failed, not resent."""

    async def handler(conn: int, k: int, reader: Any, writer: Any) -> bool:
        await server.read_request(conn, reader)
        return False

    async with Server(handler) as server:
        (r,), stats = await collect(server.url, 1)
    assert r["status"] == "error" and r["http_status"] is None
    assert r["error"] == "ServerDisconnectedError: Server disconnected"
    assert r["retries"] == 0 and r["failed_attempts"] == []
    assert stats.n_error == 1 and stats.n_retries == 0
    assert server.parsed == [(1, "crossbench-0")]


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (b"H", "error"),  # one byte of a status line
        (HEAD_ONLY, "incomplete"),  # status line and headers, then nothing
        (HEAD_ONLY + b"5\r\ndata:", "incomplete"),  # part of the stream
    ],
)
async def test_any_response_byte_on_a_reused_connection_is_never_sent_again(
    reply: bytes, status: str
) -> None:
    """On a reused connection, a server that sent any byte of an answer got the request:
    the request is recorded failed (error or incomplete), never resent."""

    async def handler(conn: int, k: int, reader: Any, writer: asyncio.StreamWriter) -> bool:
        if k == 0:
            return await answer(server, conn, reader, writer)
        await server.read_request(conn, reader)
        writer.write(reply)
        await writer.drain()
        return False

    async with Server(handler) as server:
        records, stats = await collect(server.url, 2)
    assert records[0]["status"] == "ok"
    r = records[1]
    assert r["status"] == status and r["retries"] == 0 and r["failed_attempts"] == []
    assert r["error"]
    assert stats.n_retries == 0
    assert server.parsed == [(1, "crossbench-0"), (1, "crossbench-1")]


async def test_a_resend_that_fails_too_is_recorded_failed_with_both_errors() -> None:
    """The resend goes on a new connection, so it is never resent again: a failure there is
    the record's error, and the stale send stays in failed_attempts."""

    async def handler(conn: int, k: int, reader: Any, writer: Any) -> bool:
        if conn == 1 and k == 0:
            return await answer(server, conn, reader, writer)
        if conn == 1:
            return await discard_next(reader)
        await server.read_request(conn, reader)  # the resend: read, then no answer
        return False

    async with Server(handler) as server:
        records, stats = await collect(server.url, 2)
    r = records[1]
    assert r["status"] == "error" and r["retries"] == 1
    assert r["error"] == "ServerDisconnectedError: Server disconnected"
    assert [a["error"] for a in r["failed_attempts"]] == [r["error"]]
    assert stats.n_error == 1 and stats.n_retries == 1
    assert server.parsed == [(1, "crossbench-0"), (2, "crossbench-1")]


async def test_keepalive_0_opens_a_connection_per_request() -> None:
    """With keepalive_s 0 every request asks for its own connection (Connection: close), so
    no connection is ever reused and nothing is ever resent."""
    heads: list[bytes] = []

    async def handler(conn: int, k: int, reader: Any, writer: Any) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
        writer.write(OK)
        await writer.drain()
        return False

    async with Server(handler) as server:
        records, _ = await collect(server.url, 3, keepalive_s=0)
    assert [(r["status"], r["retries"]) for r in records] == [("ok", 0)] * 3
    assert server.n_conn == 3 and all(b"Connection: close" in h for h in heads)


def test_never_delivered_decision() -> None:
    """The decision alone: a reused connection, no response, a connection-level error."""
    gone = aiohttp.ServerDisconnectedError()
    write = aiohttp.ClientOSError(32, "Can not write request body for http://x/v1/completions")
    assert never_delivered(gone, reused=True, http_status=None)
    assert never_delivered(write, reused=True, http_status=None)
    assert never_delivered(ConnectionResetError(104, "reset"), reused=True, http_status=None)
    assert not never_delivered(gone, reused=False, http_status=None)  # a new connection
    assert not never_delivered(write, reused=False, http_status=None)
    assert not never_delivered(gone, reused=True, http_status=200)  # a response came
    partial = aiohttp.ServerDisconnectedError(message=object())  # a partly parsed response
    assert not never_delivered(partial, reused=True, http_status=None)
    key = SimpleNamespace(host="127.0.0.1", port=1, ssl=False)
    refused = aiohttp.ClientConnectorError(key, OSError(111, "refused"))  # type: ignore[arg-type]
    assert not never_delivered(refused, reused=True, http_status=None)
    assert not never_delivered(TimeoutError(), reused=True, http_status=None)
    assert not never_delivered(aiohttp.ClientPayloadError("x"), reused=True, http_status=None)


class HttplibLike:
    """A threaded server that closes like cpp-httplib 0.58 after a llama-server stream: it
    answers with ``Keep-Alive``, half-closes, then reads and discards whatever arrives until
    the client closes (httplib: ``drain_and_close_socket``). Truth: the requests it parsed,
    and the requests that began to arrive after its answer and were discarded unread."""

    def __init__(self) -> None:
        self.parsed: list[str] = []
        self.discarded = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, _, body = buf.partition(b"\r\n\r\n")
            fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
            while len(body) < int(fields[b"Content-Length"]):
                body += conn.recv(65536)
            with self._lock:
                self.parsed.append(fields[b"X-Request-Id"].decode())
            time.sleep(0.002)  # generation
            conn.sendall(OK)
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(5)
            late = False
            try:
                while data := conn.recv(65536):
                    late = True  # a request written on this closed connection: dropped
            except OSError:
                pass
            if late:
                with self._lock:
                    self.discarded += 1

    def close(self) -> None:
        self._sock.close()


@pytest.mark.parametrize("concurrency", [1, 4, 16])
async def test_a_server_closing_after_every_stream_loses_nothing(concurrency: int) -> None:
    """Against a server that closes every connection after its answer (as llama-server
    does), every request completes, each is parsed once, every request the server dropped
    unread was resent and recorded, and there are at most as many resends as requests in
    flight (a resend may also be of a request that never
    left the client: aiohttp found the transport closing before it wrote a byte)."""
    server = HttplibLike()
    try:
        records: list[dict[str, Any]] = []
        reqs = [RequestSpec(PROMPT, i) for i in range(48)]
        stats = await run_load(ClientConfig(base_url=server.url), reqs,
                               ConcurrencyMode(concurrency=concurrency), records.append)
    finally:
        server.close()
    await asyncio.sleep(0.05)  # the last drains see the client's close
    assert [r["status"] for r in records] == ["ok"] * 48, [r["error"] for r in records]
    assert sorted(server.parsed) == sorted(f"crossbench-{i}" for i in range(48))
    assert stats.n_retries == sum(r["retries"] for r in records) >= server.discarded
    assert stats.n_retries <= concurrency  # no reuse once one failed with none answered
    errors = {a["error"].split(" for ")[0] for r in records for a in r["failed_attempts"]}
    assert errors <= {"ServerDisconnectedError: Server disconnected",
                      "ClientOSError: [Errno None] Can not write request body"}, errors
