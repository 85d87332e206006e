"""The streaming load client: OpenAI-compatible SSE over aiohttp, one raw record per request.

The client sends each request with ``stream: true`` and timestamps every server-sent event on
arrival with ``time.monotonic_ns()``, before any JSON parsing. It keeps nothing after a request
ends: the finished record goes straight to the caller's ``sink`` (which writes
``requests.jsonl``), so memory stays flat however long the run. Statistics are computed later,
from the records.

Two load modes:

- :class:`ConcurrencyMode` -- closed loop: N workers, each sends its next request when the
  previous one has finished.
- :class:`RateMode` -- open loop: Poisson arrivals at R requests/s from a seeded RNG; each
  request has a scheduled send time, recorded beside the actual one.

Warm-up requests run first, one at a time, and are recorded with ``"warmup": true``.

Each record holds the send time, every content chunk's arrival and token count, the text, the
server's ``timings``/``usage``/``metrics``, a status (``ok``, ``error``, ``incomplete``) and the
resends; the fields, how tokens per chunk and the status are decided, and the request ids:
docs/run-directory.md "``requests.jsonl`` lines".

Connections are kept alive between requests (``keepalive_s``). A send that meets a connection
the server closed is made once more, on a connection opened for it alone, only when it
provably never reached the server (:func:`never_delivered`); its record counts it in
``retries`` and keeps the failed send in ``failed_attempts``; :class:`_Sessions` stops reusing
connections that never carried an answer. docs/metrics.md, "Connections and resends", gives the
mechanism and what is never resent.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from crossbench.errors import RunError, UserError
from crossbench.load.workloads import RequestSpec

__all__ = [
    "ClientConfig",
    "ConcurrencyMode",
    "LoadMode",
    "LoadStats",
    "RateMode",
    "RequestSpec",
    "Sink",
    "never_delivered",
    "poisson_schedule_ns",
    "request_id",
    "run_load",
    "run_load_sync",
]

Sink = Callable[[dict[str, Any]], None]
"""Receives each finished record; called on the event loop, so keep it quick."""

RECORD_KEYS = (
    "request_index", "prompt_id", "category", "warmup", "endpoint", "max_tokens",
    "t_scheduled_ns", "t_sent_ns", "t_first_chunk_ns", "t_done_ns", "chunks", "n_chunks",
    "text", "chunk_chars", "finish_reason", "usage", "timings", "metrics", "status", "error",
    "http_status", "retries", "failed_attempts",
)  # fmt: skip
"""The keys of every record, in order."""


class ClientConfig(BaseModel):
    """How to talk to the server: endpoint, sampling fields, timeouts and connections."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="Root URL of the server, e.g. http://127.0.0.1:8080.")
    endpoint: Literal["completions", "chat"] = Field(
        default="completions",
        description="`completions` posts to /v1/completions, `chat` to /v1/chat/completions.",
    )
    model: str = Field(default="default", description="The `model` field of every request.")
    max_tokens: int = Field(default=128, ge=1, description="Tokens to generate per request.")
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 is greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    seed: int | None = Field(
        default=None, description="Sampling seed sent to the server; null omits it."
    )
    seed_per_request: bool = Field(
        default=True,
        description="Send seed + request index rather than one seed for all, so requests draw "
        "independent random streams (llama-server seeds its synthetic acceptance from it; one "
        "shared seed would repeat the same accept/reject pattern in every request).",
    )
    ignore_eos: bool = Field(
        default=True,
        description="Ask the server to keep generating past end-of-sequence, so every request "
        "generates max_tokens tokens (llama-server and vLLM both accept it).",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Merged (last, shallowly) into every request body, e.g. llama-server's "
        '{"cache_prompt": false, "timings_per_token": true} or vLLM\'s {"stream_options": '
        '{"include_usage": true, "continuous_usage_stats": true}}.',
    )
    request_timeout_s: float = Field(
        default=600.0, gt=0, description="Longest a request may take from send to end of stream."
    )
    connect_timeout_s: float = Field(
        default=10.0, gt=0, description="Longest a TCP connect may take."
    )
    max_connections: int = Field(
        default=0,
        ge=0,
        description="Cap on open connections; 0 sizes it to the load (N for concurrency N, "
        "unlimited for rate mode). Requests over the cap wait for a free connection.",
    )
    keepalive_s: float = Field(
        default=4.0,
        ge=0,
        description="How long an idle connection is kept for reuse; 0 opens a new connection "
        "for every request (`Connection: close`). Under the 5 s after which llama-server "
        "(cpp-httplib) and uvicorn (vLLM, SGLang) close an idle connection, so the client does "
        "not pick one the server is closing.",
    )
    send_request_id: bool = Field(
        default=True,
        description="Send an `X-Request-Id: <prefix>-<index>` header (`<prefix>-warmup-<index>` "
        "for warm-up) so server-side logs can be joined to records.",
    )
    request_id_prefix: str = Field(
        default="crossbench", description="Prefix of the X-Request-Id header."
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="Sent as `Authorization: Bearer KEY` with every request (servers started "
        "with --api-key); null sends no such header. Never shown in reprs or dumps.",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v

    def url(self) -> str:
        """The full URL requests are posted to."""
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path


class ConcurrencyMode(BaseModel):
    """Closed loop: ``concurrency`` workers, each sending its next request when one ends."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["concurrency"] = Field(default="concurrency", description="Selects this mode.")
    concurrency: int = Field(default=1, ge=1, description="Requests in flight at once.")


class RateMode(BaseModel):
    """Open loop: Poisson arrivals at ``rate`` requests/s, drawn from a seeded RNG."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["rate"] = Field(default="rate", description="Selects this mode.")
    rate: float = Field(gt=0, description="Mean arrival rate in requests per second.")
    seed: int = Field(
        default=0, description="Seed of the arrival process: same seed, same schedule."
    )


LoadMode = Annotated[ConcurrencyMode | RateMode, Field(discriminator="kind")]
"""Either load mode, chosen by its ``kind`` field."""


@dataclass(frozen=True)
class LoadStats:
    """Counts of one run's measured requests (warm-up counted apart) and its wall time."""

    n_ok: int
    n_error: int
    n_incomplete: int
    n_warmup: int
    n_chunks: int
    t_first_sent_ns: int | None
    t_last_done_ns: int | None
    n_retries: int = 0
    """Measured requests sent a second time after a stale connection (module docstring)."""

    @property
    def n_requests(self) -> int:
        """Measured requests, whatever their status."""
        return self.n_ok + self.n_error + self.n_incomplete

    @property
    def wall_s(self) -> float:
        """Seconds from the first measured send to the last measured end (0 if none)."""
        if self.t_first_sent_ns is None or self.t_last_done_ns is None:
            return 0.0
        return (self.t_last_done_ns - self.t_first_sent_ns) / 1e9

    @classmethod
    def combined(cls, parts: Sequence[LoadStats]) -> LoadStats:
        """The counts of runs made one after another, as one: their sums, the first send of
        the first and the last end of the last (``wall_s`` then spans the gaps between)."""
        sent = [p.t_first_sent_ns for p in parts if p.t_first_sent_ns is not None]
        done = [p.t_last_done_ns for p in parts if p.t_last_done_ns is not None]
        return cls(sum(p.n_ok for p in parts), sum(p.n_error for p in parts),
                   sum(p.n_incomplete for p in parts), sum(p.n_warmup for p in parts),
                   sum(p.n_chunks for p in parts), min(sent) if sent else None,
                   max(done) if done else None, sum(p.n_retries for p in parts))


def request_id(index: int, warmup: bool = False, prefix: str = "crossbench") -> str:
    """The ``X-Request-Id`` the client sends for a request."""
    return f"{prefix}-warmup-{index}" if warmup else f"{prefix}-{index}"


def poisson_schedule_ns(rate: float, n: int, seed: int) -> list[int]:
    """Offsets (ns from the start) of ``n`` Poisson arrivals at ``rate`` per second.

    Inter-arrival times are ``-ln(1 - U) / rate`` with ``U`` from ``random.Random(seed)``,
    whose stream Python keeps stable across versions. The first request is sent at 0.
    """
    rng = random.Random(seed)
    out: list[int] = []
    t = 0.0
    for i in range(n):
        if i:
            t += -math.log(1.0 - rng.random()) / rate
        out.append(round(t * 1e9))
    return out


def _request_body(cfg: ClientConfig, spec: RequestSpec) -> bytes:
    """The JSON body of one request; UserError for token ids on the chat endpoint."""
    p = spec.prompt
    body: dict[str, Any] = {"model": cfg.model}
    if cfg.endpoint == "chat":
        if p.text is None:
            raise UserError(
                f"prompt {p.id!r} is token ids; the chat endpoint needs text",
                hint="use endpoint 'completions' for random:<N> workloads",
            )
        body["messages"] = [{"role": "user", "content": p.text}]
    else:
        body["prompt"] = p.text if p.text is not None else p.token_ids
    body.update(
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        stream=True,
    )
    if cfg.seed is not None:
        body["seed"] = cfg.seed + spec.request_index if cfg.seed_per_request else cfg.seed
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update(cfg.extra_body)
    return orjson.dumps(body)


def _error_message(status: int, body: bytes) -> str:
    """The message of an OpenAI-style error body, else the start of the body."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return f"HTTP {status}: {err['message']}"
        if isinstance(err, str):
            return f"HTTP {status}: {err}"
    text = body[:500].decode("utf-8", "replace").strip()
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _data_of(event: bytes) -> bytes | None:
    """The data payload of one SSE event (lines joined with \\n), or None if it has none."""
    if event.startswith(b"data: ") and b"\n" not in event:
        return event[6:]
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            v = line[5:]
            parts.append(v[1:] if v.startswith(b" ") else v)
    return b"\n".join(parts) if parts else None


class _SSEStream:
    """Parse state of one streamed response: SSE events in, record fields out."""

    __slots__ = (
        "buf", "chunks", "done_ns", "error", "finish_reason", "last_ct", "last_pn", "metrics",
        "pieces", "timings", "usage",
    )  # fmt: skip

    def __init__(self) -> None:
        self.buf = b""
        self.chunks: list[list[int | None]] = []
        self.pieces: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.timings: Any = None
        self.metrics: Any = None  # vLLM's per-request ``metrics`` (final usage chunk)
        self.error: str | None = None
        self.done_ns = 0  # arrival of data: [DONE]; 0 until then
        self.last_pn = 0  # predicted_n at the previous content chunk
        self.last_ct = 0  # usage.completion_tokens at the previous content chunk

    def feed(self, data: bytes, t: int) -> None:
        """Take the bytes of one read, stamped ``t``; handle every event it completes."""
        if self.done_ns:
            return  # after [DONE] the rest is drained unread
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        if b"\n\n" not in buf:
            self.buf = buf
            return
        events = buf.split(b"\n\n")
        self.buf = events.pop()
        for ev in events:
            payload = _data_of(ev)
            if payload is None:
                continue  # comment, keep-alive, or event without data
            if payload == b"[DONE]":
                self.done_ns = t
                return
            obj = orjson.loads(payload)
            if isinstance(obj, dict):
                self._event(obj, t)

    def _event(self, obj: dict[str, Any], t: int) -> None:
        u = obj.get("usage")
        if u:
            self.usage = u
        tm = obj.get("timings")
        if tm:
            self.timings = tm
        em = obj.get("metrics")
        if em:
            self.metrics = em
        choices = obj.get("choices")
        content = None
        if choices:
            c = choices[0]
            d = c.get("delta")
            content = (d.get("content") or d.get("reasoning_content")) if d else c.get("text")
            fr = c.get("finish_reason")
            if fr:
                self.finish_reason = fr
        elif "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = f"error event: {msg}"
        if content:
            n: int | None = None
            if tm and "predicted_n" in tm:
                n = tm["predicted_n"] - self.last_pn
                self.last_pn = tm["predicted_n"]
            elif u and u.get("completion_tokens") is not None:
                n = u["completion_tokens"] - self.last_ct
                self.last_ct = u["completion_tokens"]
            self.chunks.append([t, n])
            self.pieces.append(content)


_SERVER_DISCONNECTED = str(aiohttp.ServerDisconnectedError())
"""aiohttp's message for a connection closed before any part of a response was parsed."""


def never_delivered(exc: BaseException, reused: bool, http_status: int | None) -> bool:
    """Did this failed send provably never reach the server, so it may be sent again?

    Only on a ``reused`` keep-alive connection, before any response (``http_status`` None),
    and only for the errors of a connection the server had closed: a clean close with
    nothing of a response parsed (``ServerDisconnectedError``), or a reset or broken pipe
    while the request was written or awaited (``ClientOSError`` such as "Can not write
    request body", ``ConnectionResetError``; never a failed connect). A server that accepted
    a new connection may have read the request, and one that sent any response byte did:
    neither is sent again.
    """
    if not reused or http_status is not None:
        return False
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return exc.message == _SERVER_DISCONNECTED
    return isinstance(
        exc, aiohttp.ClientOSError | ConnectionResetError | BrokenPipeError
    ) and not isinstance(exc, aiohttp.ClientConnectorError)


@dataclass(slots=True)
class _Attempt:
    """Trace context of one send: whether the connection it went out on was a reused one."""

    reused: bool = False


async def _on_reuse(_session: Any, ctx: Any, _params: Any) -> None:
    """Marks a send's :class:`_Attempt` when the connector hands it a pooled connection."""
    ctx.trace_request_ctx.reused = True


@dataclass(slots=True)
class _Sessions:
    """The run's two sessions, ``pooled`` (connections kept for reuse) and ``fresh`` (a new
    one per send), and what it has learnt of the server's keep-alive: a send on a reused
    connection that finds it closed, while no reused connection has yet carried an answer,
    sends every later request on ``fresh`` (``fresh_only``; module docstring)."""

    pooled: aiohttp.ClientSession
    fresh: aiohttp.ClientSession
    reuse_answered: bool = False  # a send on a reused connection got a response
    fresh_only: bool = False

    def session(self) -> aiohttp.ClientSession:
        """The session the next request is sent on."""
        return self.fresh if self.fresh_only else self.pooled

    def stale(self) -> aiohttp.ClientSession:
        """Note a send that met a closed reused connection; the session to resend it on."""
        if not self.reuse_answered:
            self.fresh_only = True
        return self.fresh


async def _one_request(
    sessions: _Sessions,
    cfg: ClientConfig,
    url: str,
    spec: RequestSpec,
    warmup: bool,
    t_scheduled_ns: int,
    sink: Sink,
) -> None:
    """Send one request, read its stream, build its record and hand it to ``sink``.

    A send that :func:`never_delivered` is made again on ``sessions.fresh`` (whose sends are
    never on a reused connection, so never made again); the failed one is kept in
    ``failed_attempts``.
    """
    body = _request_body(cfg, spec)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if cfg.send_request_id:
        headers["X-Request-Id"] = request_id(spec.request_index, warmup, cfg.request_id_prefix)
    if cfg.api_key is not None:
        headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
    monotonic_ns = time.monotonic_ns
    session = sessions.session()
    failed: list[dict[str, Any]] = []
    status = "error"
    while True:
        st = _SSEStream()
        status = "error"
        error: str | None = None
        http_status: int | None = None
        attempt = _Attempt()
        t_done_ns = 0
        t_sent_ns = monotonic_ns()
        try:
            async with (
                asyncio.timeout(cfg.request_timeout_s),
                session.post(url, data=body, headers=headers, trace_request_ctx=attempt) as resp,
            ):
                http_status = resp.status
                if attempt.reused:
                    sessions.reuse_answered = True
                if resp.status != 200:
                    error = _error_message(resp.status, await resp.read())
                else:
                    status = "incomplete"  # until the stream ends properly
                    read = resp.content.readany
                    feed = st.feed
                    while True:
                        data = await read()
                        t = monotonic_ns()  # first thing after the bytes arrive
                        if not data:
                            break  # end of the body; read on after [DONE] to reuse the connection
                        feed(data, t)
                    if st.error is not None:
                        status, error = "error", st.error
                    elif st.done_ns or st.finish_reason is not None:
                        status = "ok"
                    else:
                        error = "stream ended before [DONE] or a finish_reason"
            t_done_ns = st.done_ns or monotonic_ns()
        except TimeoutError:
            t_done_ns = monotonic_ns()
            error = f"timeout after {cfg.request_timeout_s:g} s (request_timeout_s)"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            t_done_ns = monotonic_ns()
            if isinstance(exc, orjson.JSONDecodeError):
                status = "error"  # a malformed event is a protocol error, not an early end
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if never_delivered(exc, attempt.reused, http_status):
                failed.append({"t_sent_ns": t_sent_ns, "t_done_ns": t_done_ns, "error": error})
                session = sessions.stale()
                continue
        break
    if st.error is not None and status != "error":  # an error event, then the stream broke
        status, error = "error", st.error
    chunks = st.chunks
    sink(
        {
            "request_index": spec.request_index,
            "prompt_id": spec.prompt.id,
            "category": spec.prompt.category,
            "warmup": warmup,
            "endpoint": cfg.endpoint,
            "max_tokens": cfg.extra_body.get("max_tokens", cfg.max_tokens),
            "t_scheduled_ns": t_scheduled_ns,
            "t_sent_ns": t_sent_ns,
            "t_first_chunk_ns": chunks[0][0] if chunks else None,
            "t_done_ns": t_done_ns,
            "chunks": chunks,
            "n_chunks": len(chunks),
            "text": "".join(st.pieces),
            "chunk_chars": [len(p) for p in st.pieces],
            "finish_reason": st.finish_reason,
            "usage": st.usage,
            "timings": st.timings,
            "metrics": st.metrics,
            "status": status,
            "error": error,
            "http_status": http_status,
            "retries": len(failed),
            "failed_attempts": failed,
        }
    )


class _Tally:
    """Running counts; the only state kept across requests."""

    def __init__(self) -> None:
        self.counts = {"ok": 0, "error": 0, "incomplete": 0}
        self.n_warmup = 0
        self.n_chunks = 0
        self.n_retries = 0
        self.t_first_sent: int | None = None
        self.t_last_done: int | None = None

    def add(self, rec: dict[str, Any]) -> None:
        if rec["warmup"]:
            self.n_warmup += 1
            return
        self.counts[rec["status"]] += 1
        self.n_chunks += rec["n_chunks"]
        self.n_retries += rec["retries"]
        if self.t_first_sent is None or rec["t_sent_ns"] < self.t_first_sent:
            self.t_first_sent = rec["t_sent_ns"]
        if self.t_last_done is None or rec["t_done_ns"] > self.t_last_done:
            self.t_last_done = rec["t_done_ns"]

    def stats(self) -> LoadStats:
        c = self.counts
        return LoadStats(
            c["ok"], c["error"], c["incomplete"], self.n_warmup, self.n_chunks,
            self.t_first_sent, self.t_last_done, self.n_retries,
        )  # fmt: skip


_SPIN_NS = 1_500_000
"""Rate mode yields in a loop for the last 1.5 ms before a send: asyncio's default selector
rounds every wait up to a whole millisecond, so a plain sleep sends up to 1 ms late."""


async def _sleep_until_ns(t_ns: int) -> None:
    """Wait until the monotonic clock reaches ``t_ns``: never early, rarely late by more than
    one event-loop iteration (other tasks keep running meanwhile)."""
    delay = t_ns - time.monotonic_ns()
    if delay > _SPIN_NS:
        await asyncio.sleep((delay - _SPIN_NS) / 1e9)
    while time.monotonic_ns() < t_ns:
        await asyncio.sleep(0)


async def run_load(
    config: ClientConfig,
    requests: Sequence[RequestSpec],
    mode: ConcurrencyMode | RateMode,
    sink: Sink,
    warmup: Sequence[RequestSpec] = (),
) -> LoadStats:
    """Run warm-up (sequentially), then the measured requests under ``mode``.

    Every record goes to ``sink`` as soon as its request ends; nothing is kept here beyond
    counts. Raises :class:`UserError` for requests the endpoint cannot send, and re-raises
    whatever ``sink`` raises (the run stops).
    """
    if config.endpoint == "chat":  # fail before sending anything
        for spec in (*warmup, *requests):
            _request_body(config, spec)
    tally = _Tally()

    def emit(rec: dict[str, Any]) -> None:
        tally.add(rec)
        sink(rec)

    if isinstance(mode, ConcurrencyMode):
        limit = config.max_connections or mode.concurrency
    else:
        limit = config.max_connections
    if config.keepalive_s:
        connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=config.keepalive_s)
    else:
        connector = aiohttp.TCPConnector(limit=limit, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout_s)
    url = config.url()
    opts: dict[str, Any] = {"timeout": timeout, "auto_decompress": False,
                            "raise_for_status": False}  # fmt: skip
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reuse)
    async with (
        aiohttp.ClientSession(connector=connector, trace_configs=[trace], **opts) as s,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), **opts) as fresh,
    ):
        sessions = _Sessions(s, fresh)
        for spec in warmup:
            await _one_request(sessions, config, url, spec, True, time.monotonic_ns(), emit)
        if isinstance(mode, ConcurrencyMode):
            await _run_closed_loop(sessions, config, url, requests, mode.concurrency, emit)
        else:
            await _run_poisson(sessions, config, url, requests, mode, emit)
    return tally.stats()


async def _run_closed_loop(
    sessions: _Sessions,
    cfg: ClientConfig,
    url: str,
    requests: Sequence[RequestSpec],
    concurrency: int,
    sink: Sink,
) -> None:
    it = iter(requests)

    async def worker() -> None:
        for spec in it:  # a shared iterator: each worker takes the next request
            await _one_request(sessions, cfg, url, spec, False, time.monotonic_ns(), sink)

    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(requests)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run_poisson(
    sessions: _Sessions,
    cfg: ClientConfig,
    url: str,
    requests: Sequence[RequestSpec],
    mode: RateMode,
    sink: Sink,
) -> None:
    offsets = poisson_schedule_ns(mode.rate, len(requests), mode.seed)
    in_flight: set[asyncio.Task[None]] = set()
    failure: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failure.append(task.exception())  # type: ignore[arg-type]

    t0 = time.monotonic_ns()
    try:
        for spec, off in zip(requests, offsets, strict=True):
            t_sched = t0 + off
            await _sleep_until_ns(t_sched)
            if failure:
                break
            task = asyncio.create_task(_one_request(sessions, cfg, url, spec, False, t_sched, sink))
            in_flight.add(task)
            task.add_done_callback(done)
        while in_flight and not failure:
            await asyncio.wait(set(in_flight), return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in list(in_flight):
            task.cancel()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
    if failure:
        raise failure[0]


def run_load_sync(
    config: ClientConfig,
    requests: Sequence[RequestSpec],
    mode: ConcurrencyMode | RateMode,
    sink: Sink,
    warmup: Sequence[RequestSpec] = (),
) -> LoadStats:
    """:func:`run_load` from synchronous code (starts and closes its own event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_load(config, requests, mode, sink, warmup))
    raise RunError(
        "run_load_sync was called from inside a running event loop",
        hint="await run_load(...) instead",
    )
