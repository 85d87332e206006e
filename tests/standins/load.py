"""A stand-in streaming server with known chunk timing, for testing the load client.

This is **not an engine**: it generates no text worth reading. It answers the
OpenAI-compatible streaming endpoints (``/v1/completions``, ``/v1/chat/completions``) with
server-sent events on a schedule you set, and logs the moment each chunk left it, so tests and
``benchmarks/client_fidelity.py`` can compare what the client measured against the truth.
Every response says what it is: ``"model": "crossbench-standin"``,
``"system_fingerprint": "crossbench-standin"`` and the header ``X-Crossbench-Standin: 1``.

Per request it waits ``ttft_ms`` after the request arrived, sends the first chunk, then one
chunk every ``gap_ms`` (a constant, or a list used in turn and cycled), each carrying
``tokens_per_chunk`` tokens, until ``max_tokens`` tokens are out; then a final event with
``finish_reason`` (and no content) and ``data: [DONE]``. Deadlines are absolute (arrival time
plus the cumulative schedule on the monotonic clock), so lateness never accumulates.

Truth: right after each chunk is written to the socket (asyncio's transport sends at once when
its buffer is empty, so "written" is "handed to the kernel", i.e. after the drain),
``time.monotonic_ns()`` is appended to the request's ``send_ns``. If the kernel did not take the
whole chunk (the client is not reading), the request's ``backlogged`` count goes up and its
send times are no longer the truth. Truth is kept in :attr:`StandinServer.truth` (keyed by the
``X-Request-Id`` header, or ``standin-<n>`` without one) and, with ``log_path``, written as one
JSON line per finished request.

Any field of :class:`StandinConfig` can be overridden per request with a ``"standin": {...}``
object in the request body; tests use that to ask for an error status, a dropped connection
or a stalled stream.

Run it on its own::

    python -m standins.load --port 0 --ttft-ms 50 --gap-ms 10 --log truth.jsonl

or in-process::

    async with StandinServer(StandinConfig(ttft_ms=50, gap_ms=10)) as server:
        ...  # talk to server.base_url; read server.truth
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import selectors
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crossbench.errors import UserError

STANDIN_NAME = "crossbench-standin"
"""The ``model`` and ``system_fingerprint`` every stand-in response carries."""

_WORDS = [
    b" alpha", b" beta", b" gamma", b" delta", b" epsilon", b" zeta", b" eta", b" theta",
]  # fmt: skip


class StandinConfig(BaseModel):
    """The schedule and shape of the stand-in's answers (overridable per request)."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float = Field(
        default=50.0, ge=0, description="Delay from request arrival to first chunk."
    )
    gap_ms: float | list[float] = Field(
        default=10.0,
        description="Delay between chunks: a constant, or a list used in turn and cycled.",
    )
    tokens_per_chunk: int = Field(
        default=1, ge=1, description="Tokens carried by each content chunk."
    )
    default_max_tokens: int = Field(
        default=16, ge=1, description="Tokens generated when the request has no max_tokens."
    )
    timings_per_token: bool = Field(
        default=False,
        description="Put llama-server-like `timings` in every chunk (also on when the request "
        "body has `timings_per_token: true`).",
    )
    continuous_usage: bool = Field(
        default=False,
        description="Put vLLM-like cumulative `usage` in every chunk (also on when the request "
        "has `stream_options.continuous_usage_stats: true`).",
    )
    status: int = Field(
        default=200, description="HTTP status to answer; not 200 sends an error body."
    )
    error_message: str = Field(
        default="stand-in error", description="Message of the error body when status is not 200."
    )
    drop_after: int | None = Field(
        default=None,
        ge=0,
        description="Close the connection abruptly after this many content chunks.",
    )
    stall_after: int | None = Field(
        default=None,
        ge=0,
        description="Stop sending (keeping the connection open) after this many chunks.",
    )

    def gaps_ns(self) -> list[int]:
        """The gap schedule in nanoseconds (at least one entry)."""
        gaps = self.gap_ms if isinstance(self.gap_ms, list) else [self.gap_ms]
        if not gaps or any(g < 0 for g in gaps):
            raise UserError(
                f"stand-in gap_ms must be non-negative and non-empty, got {self.gap_ms!r}",
                hint="give a constant like 10 or a list like [10, 12, 8]",
            )
        return [round(g * 1e6) for g in gaps]


@dataclass
class RequestTruth:
    """What the stand-in actually did for one request (monotonic nanoseconds)."""

    request_id: str
    t_received_ns: int
    send_ns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    backlogged: int = 0
    outcome: str = "streaming"

    def as_json(self) -> dict[str, Any]:
        """The JSON line written to the truth log."""
        return {
            "request_id": self.request_id,
            "t_received_ns": self.t_received_ns,
            "send_ns": self.send_ns,
            "tokens": self.tokens,
            "backlogged": self.backlogged,
            "outcome": self.outcome,
        }


def _http_response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"X-Crossbench-Standin: 1\r\n\r\n%s" % (status, reason, content_type, len(body), body)
    )


def _error_body(status: int, message: str) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return orjson.dumps({"error": {"code": status, "message": message, "type": kind}})


class _Stream:
    """One streaming answer in progress: emits its chunks from loop timer callbacks."""

    __slots__ = (
        "cfg",
        "chat",
        "completion_id",
        "conn",
        "created",
        "deadline",
        "done_tokens",
        "draft_n",
        "first_tokens",
        "gap_iter",
        "handle",
        "loop",
        "max_tokens",
        "n_chunks",
        "prompt_n",
        "server",
        "t_first_ns",
        "timings",
        "truth",
        "usage_each",
        "usage_final",
    )  # fmt: skip

    def __init__(
        self,
        server: StandinServer,
        conn: _Connection,
        cfg: StandinConfig,
        body: dict[str, Any],
        chat: bool,
        truth: RequestTruth,
    ) -> None:
        self.server = server
        self.conn = conn
        self.cfg = cfg
        self.chat = chat
        self.truth = truth
        self.loop = server.loop
        self.completion_id = b"standin-" + truth.request_id.encode()
        self.created = int(time.time())
        max_tokens = (
            body.get("max_tokens") or body.get("max_completion_tokens") or body.get("n_predict")
        )
        self.max_tokens = int(max_tokens) if max_tokens else cfg.default_max_tokens
        self.prompt_n = _prompt_tokens(body)
        self.timings = cfg.timings_per_token or bool(body.get("timings_per_token"))
        opts = body.get("stream_options") or {}
        self.usage_each = cfg.continuous_usage or bool(opts.get("continuous_usage_stats"))
        self.usage_final = self.usage_each or bool(opts.get("include_usage"))
        self.gap_iter = itertools.cycle(cfg.gaps_ns())
        self.done_tokens = 0
        self.n_chunks = 0
        self.draft_n = 0
        self.t_first_ns = 0
        self.first_tokens = 0
        self.handle: asyncio.TimerHandle | None = None
        # Absolute deadline in loop time (seconds of time.monotonic()).
        self.deadline = truth.t_received_ns / 1e9 + cfg.ttft_ms / 1e3

    def start(self) -> None:
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\nX-Crossbench-Standin: 1\r\nX-Request-Id: %s\r\n\r\n"
            % self.truth.request_id.encode()
        )
        if self.chat:  # role-only first event, as real servers send: not a content chunk
            head += _frame(self._event(b'{"role":"assistant","content":null}', b"null", b""))
        self.conn.transport.write(head)
        self.handle = self.loop.call_at(self.deadline, self.emit)

    def _event(self, delta_or_text: bytes, finish: bytes, extra: bytes) -> bytes:
        if self.chat:
            choice = b'{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}' % (
                delta_or_text,
                finish,
            )
            obj = b"chat.completion.chunk"
        else:
            choice = b'{"index":0,"text":%s,"logprobs":null,"finish_reason":%s}' % (
                delta_or_text,
                finish,
            )
            obj = b"text_completion"
        return (
            b'data: {"id":"%s","object":"%s","created":%d,"model":"crossbench-standin",'
            b'"system_fingerprint":"crossbench-standin","choices":[%s]%s}\n\n'
            % (self.completion_id, obj, self.created, choice, extra)
        )

    def _extra(self, now_ns: int, with_timings: bool, with_usage: bool) -> bytes:
        extra = b""
        if with_usage:
            extra += b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                self.prompt_n,
                self.done_tokens,
                self.prompt_n + self.done_tokens,
            )
        if with_timings:
            # As llama-server: the clock starts at the first token, so rates leave it out.
            predicted_ms = (now_ns - self.t_first_ns) / 1e6 if self.t_first_ns else 0.0
            after_first = self.done_tokens - self.first_tokens
            per_s = after_first / predicted_ms * 1e3 if predicted_ms > 0 else 0.0
            per_tok = predicted_ms / after_first if after_first > 0 else 0.0
            prompt_ms = self.cfg.ttft_ms
            extra += (
                b',"timings":{"cache_n":0,"prompt_n":%d,"prompt_ms":%.3f,'
                b'"prompt_per_token_ms":%.6f,"prompt_per_second":%.3f,"predicted_n":%d,'
                b'"predicted_ms":%.3f,"predicted_per_token_ms":%.6f,"predicted_per_second":%.3f,'
                b'"draft_n":%d,"draft_n_accepted":%d}'
                % (
                    self.prompt_n,
                    prompt_ms,
                    prompt_ms / max(self.prompt_n, 1),
                    self.prompt_n / prompt_ms * 1e3 if prompt_ms > 0 else 0.0,
                    self.done_tokens,
                    predicted_ms,
                    per_tok,
                    per_s,
                    self.draft_n,
                    self.done_tokens - self.n_chunks,
                )
            )
        return extra

    def emit(self) -> None:
        """Timer callback: send the next content chunk, then schedule the one after."""
        self.handle = None
        transport = self.conn.transport
        if transport.is_closing():
            self.finish("client-gone")
            return
        cfg = self.cfg
        k = min(cfg.tokens_per_chunk, self.max_tokens - self.done_tokens)
        start = self.done_tokens
        self.done_tokens += k
        self.n_chunks += 1
        self.draft_n += cfg.tokens_per_chunk - 1
        text = b"".join(_WORDS[(start + i) & 7] for i in range(k))
        delta = b'{"content":"%s"}' % text if self.chat else b'"%s"' % text
        now = time.monotonic_ns()
        if not self.t_first_ns:
            self.t_first_ns = now
            self.first_tokens = k
        extra = (
            self._extra(now, self.timings, self.usage_each)
            if (self.timings or self.usage_each)
            else b""
        )
        ev = self._event(delta, b"null", extra)
        transport.write(b"%x\r\n%s\r\n" % (len(ev), ev))
        t = time.monotonic_ns()
        truth = self.truth
        truth.send_ns.append(t)
        truth.tokens.append(k)
        if transport.get_write_buffer_size():
            truth.backlogged += 1
        if cfg.drop_after is not None and self.n_chunks >= cfg.drop_after:
            transport.abort()
            self.finish("dropped")
            return
        if self.done_tokens >= self.max_tokens:
            self.end()
            return
        if cfg.stall_after is not None and self.n_chunks >= cfg.stall_after:
            self.truth.outcome = "stalled"
            return  # keeps the connection open; the client's timeout ends it
        self.deadline += next(self.gap_iter) / 1e9
        self.handle = self.loop.call_at(self.deadline, self.emit)

    def end(self) -> None:
        now = time.monotonic_ns()
        ev = self._event(
            b"{}" if self.chat else b'""', b'"length"', self._extra(now, True, self.usage_final)
        )
        done = b"data: [DONE]\n\n"
        self.conn.transport.write(_frame(ev) + _frame(done) + b"0\r\n\r\n")
        self.finish("ok")
        self.conn.response_done()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.truth.outcome in ("streaming", "stalled"):
            self.finish("client-gone")

    def finish(self, outcome: str) -> None:
        if self.truth.outcome in ("streaming", "stalled"):
            self.truth.outcome = outcome
            self.server.record_done(self.truth)


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _prompt_tokens(body: dict[str, Any]) -> int:
    """A rough prompt length: token ids count as given, text as whitespace words."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return len(prompt)
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    messages = body.get("messages")
    if isinstance(messages, list):
        words = 0
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                words += len(content.split())
        return max(1, words)
    return 1


class _Connection(asyncio.Protocol):
    """Minimal HTTP/1.1 server side: keep-alive, Content-Length bodies, one request at a time."""

    def __init__(self, server: StandinServer) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.stream is not None:
            self.stream.cancel()
            self.stream = None

    def data_received(self, data: bytes) -> None:
        t_ns = time.monotonic_ns()
        self.buf += data
        if self.stream is None:
            self._try_request(t_ns)

    def response_done(self) -> None:
        self.stream = None
        if self.buf:
            self._try_request(time.monotonic_ns())

    def _try_request(self, t_ns: int) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(self.buf) < end + 4 + length:
            return
        body_bytes = self.buf[end + 4 : end + 4 + length]
        self.buf = self.buf[end + 4 + length :]
        parts = head[0].split(" ")
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        self.server.dispatch(self, method, path.split("?", 1)[0], headers, body_bytes, t_ns)
        if self.stream is None and self.buf:
            self._try_request(t_ns)


class StandinServer:
    """The stand-in server; an async context manager that binds on enter and stops on exit."""

    def __init__(
        self,
        config: StandinConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
        keep_truth: bool = True,
    ) -> None:
        self.config = config or StandinConfig()
        self.config.gaps_ns()  # validate early
        self.host = host
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        self.keep_truth = keep_truth
        #: request id -> what was sent, for requests in progress and finished ones
        self.truth: dict[str, RequestTruth] = {}
        self.connections: set[_Connection] = set()
        self.n_requests = 0
        self.n_chunks = 0
        self._server: asyncio.Server | None = None
        self._log: IO[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on."""
        assert self._loop is not None, "stand-in not started"
        return self._loop

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the bound socket."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and start serving; the bound port is in :attr:`port` afterwards."""
        self._loop = asyncio.get_running_loop()
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        self._server = await self._loop.create_server(
            lambda: _Connection(self), self.host, self.port, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop serving, close every connection and the truth log."""
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.transport.abort()
            await self._server.wait_closed()
            self._server = None
        if self._log is not None:
            self._log.close()
            self._log = None

    async def __aenter__(self) -> StandinServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def record_done(self, truth: RequestTruth) -> None:
        """Count a finished request and append its truth line to the log."""
        self.n_chunks += len(truth.send_ns)
        if self._log is not None:
            self._log.write(orjson.dumps(truth.as_json()) + b"\n")
            self._log.flush()
        if not self.keep_truth:
            self.truth.pop(truth.request_id, None)

    def dispatch(
        self,
        conn: _Connection,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        t_ns: int,
    ) -> None:
        """Answer one parsed request."""
        tr = conn.transport
        if method == "GET" and path == "/health":
            tr.write(_http_response(200, b'{"status":"ok"}'))
            return
        if method == "GET" and path == "/v1/models":
            models = {
                "object": "list",
                "data": [{"id": STANDIN_NAME, "object": "model", "owned_by": STANDIN_NAME}],
            }
            tr.write(_http_response(200, orjson.dumps(models)))
            return
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            tr.write(_http_response(404, _error_body(404, f"no route {method} {path}")))
            return
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise ValueError("body is not a JSON object")
            overrides = req.get("standin") or {}
            if not isinstance(overrides, dict):
                raise ValueError("'standin' must be an object")
            cfg = self.config
            if overrides:
                cfg = StandinConfig.model_validate({**cfg.model_dump(), **overrides})
                cfg.gaps_ns()
        except (ValueError, ValidationError, UserError) as exc:
            tr.write(_http_response(400, _error_body(400, f"bad request: {exc}")))
            return
        self.n_requests += 1
        request_id = headers.get("x-request-id") or f"standin-{self.n_requests}"
        truth = RequestTruth(request_id=request_id, t_received_ns=t_ns)
        self.truth[request_id] = truth
        if cfg.status != 200:
            truth.outcome = f"status-{cfg.status}"
            tr.write(_http_response(cfg.status, _error_body(cfg.status, cfg.error_message)))
            self.record_done(truth)
            return
        chat = path == "/v1/chat/completions"
        if not req.get("stream"):
            self._answer_whole(conn, req, cfg, chat, truth)
            return
        conn.stream = _Stream(self, conn, cfg, req, chat, truth)
        conn.stream.start()

    def _answer_whole(
        self,
        conn: _Connection,
        req: dict[str, Any],
        cfg: StandinConfig,
        chat: bool,
        truth: RequestTruth,
    ) -> None:
        """A non-streaming answer: sent at once (no timing is simulated)."""
        n = int(req.get("max_tokens") or cfg.default_max_tokens)
        text = b"".join(_WORDS[i & 7] for i in range(n)).decode()
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        prompt_n = _prompt_tokens(req)
        body = {
            "id": f"standin-{truth.request_id}",
            "object": "chat.completion" if chat else "text_completion",
            "model": STANDIN_NAME,
            "system_fingerprint": STANDIN_NAME,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_n,
                "completion_tokens": n,
                "total_tokens": prompt_n + n,
            },
        }
        conn.transport.write(_http_response(200, orjson.dumps(body)))
        truth.send_ns.append(time.monotonic_ns())
        truth.tokens.append(n)
        truth.outcome = "ok"
        self.record_done(truth)


def precise_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop whose timers fire within tens of microseconds.

    asyncio's default epoll selector rounds every wait up to a whole millisecond, so a chunk
    due in 0.3 ms goes out 1 ms later. ``select()`` takes microseconds; with the few sockets a
    stand-in serves its cost is the same.
    """
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def _parse_gaps(text: str) -> float | list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    return values[0] if len(values) == 1 else values


async def _serve(server: StandinServer, stop_after_s: float | None) -> None:
    async with server:
        print(f"crossbench stand-in (not an engine) listening on {server.base_url}", flush=True)
        if stop_after_s is None:
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(stop_after_s)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.load``: serve until interrupted."""
    p = argparse.ArgumentParser(
        prog="python -m standins.load",
        description="Stand-in OpenAI-compatible streaming server with known chunk timing "
        "(not an engine).",
        epilog="example: python -m standins.load --port 0 --ttft-ms 50 --gap-ms 10 "
        "--log truth.jsonl",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--gap-ms", default="10", help="constant, or comma-separated list cycled")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument(
        "--max-tokens",
        type=int,
        default=16,
        help="tokens generated when a request has no max_tokens",
    )
    p.add_argument("--timings-per-token", action="store_true")
    p.add_argument("--continuous-usage", action="store_true")
    p.add_argument("--log", help="append one JSON line of truth per finished request")
    p.add_argument("--cpu", type=int, help="pin this process to one CPU (sched_setaffinity)")
    p.add_argument(
        "--precise",
        action="store_true",
        help="select()-based loop: sub-millisecond timers (few connections only)",
    )
    p.add_argument("--stop-after-s", type=float, help="exit after this many seconds")
    args = p.parse_args(argv)
    try:
        cfg = StandinConfig(
            ttft_ms=args.ttft_ms,
            gap_ms=_parse_gaps(args.gap_ms),
            tokens_per_chunk=args.tokens_per_chunk,
            default_max_tokens=args.max_tokens,
            timings_per_token=args.timings_per_token,
            continuous_usage=args.continuous_usage,
        )
        server = StandinServer(
            cfg, host=args.host, port=args.port, log_path=args.log, keep_truth=False
        )
    except (ValueError, ValidationError, UserError) as exc:
        msg = exc.one_line() if isinstance(exc, UserError) else str(exc).splitlines()[0]
        print(f"error: {msg}", file=sys.stderr)
        return 2
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    loop = precise_event_loop() if args.precise else asyncio.new_event_loop()
    try:
        loop.run_until_complete(_serve(server, args.stop_after_s))
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(server.stop())
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
