"""A **stand-in** for ``vllm serve``, for tests on machines without a GPU. It is not vLLM.

It takes the flags crossbench's adapter emits (``--speculative-config`` JSON included; any
other flag the pinned release's profile lists is accepted and ignored, unknown flags fail as
vLLM's argparse fails), and behaves like vLLM where crossbench looks:

- ``--version`` prints ``0.33.0+crossbench.standin``: the adapter marks every result of it
  ``standin: true``, so nothing it produces passes for a vLLM result;
- the startup log is written with vLLM's own format strings (the profile's ``log_formats``)
  and line prefix, after a first line that says it is a stand-in;
- with ``--api-key`` or ``VLLM_API_KEY``, paths under ``/v1`` answer 401 without
  ``Authorization: Bearer KEY``, as vLLM's middleware does;
- ``/health``, ``/v1/models``, ``/version``, and OpenAI-compatible ``/v1/completions`` and
  ``/v1/chat/completions``, streamed as vLLM streams them: one chunk per engine step, which
  under speculation carries the accepted drafts plus the bonus token; ``usage`` in every chunk
  with ``stream_options.continuous_usage_stats``, a final usage chunk (with
  ``metrics.speculative_decoding`` under ``--per-request-spec-decode-metrics``) with
  ``include_usage``; a request for another model gets vLLM's 404;
- ``/metrics`` in vLLM's exact format (families, help, labels ``model_name``/``engine`` from
  the profile, rendered by prometheus_client), with speculative counters that count exactly
  the drafts behind the streamed chunks, per engine under ``--data-parallel-size``.

Acceptance: each verification step accepts the first ``a`` of ``n`` drafts, with
``P(a >= k+1) = rate_k``: the synthetic rates of the spec config (vLLM's own conversion from
``synthetic_acceptance_length``), else ``--standin-accept`` alpha as ``alpha^(k+1)``. One
uniform draw per step from a RNG seeded by ``--seed``, the request's ``seed`` and its arrival
number, so a test can check that the suite recovers the rates. As vLLM 0.33's scheduler does,
no drafts are proposed after a step that samples the request's last token.

Options of the stand-in itself start with ``--standin-`` (step and prefill time, start-up
delay, a child process that outlives the server for cleanup tests, ignoring SIGTERM).

Use it as a config's ``binary`` through a launcher script::

    python -m standins.vllm launcher /tmp/vllm --standin-step-ms 0
    /tmp/vllm --version     # 0.33.0+crossbench.standin
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from crossbench.engines.vllm.metrics import SPEC_PREFIX
from crossbench.engines.vllm.profile import (
    DEFAULT_VERSION,
    VllmProfile,
    known_profiles,
    profile_for,
)
from crossbench.engines.vllm.startup_cut import default_capture_sizes
from crossbench.errors import UserError
from standins import launcher_export, vllm_formats
from standins.cli import spawn_orphan, standin_main
from standins.load import STANDIN_NAME
from standins.vllm_formats import VllmMetrics

STANDIN_SUFFIX = "+crossbench.standin"
"""Local version part of every stand-in version string (``0.33.0+crossbench.standin``)."""

_WORDS = (" alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta")
def synthetic_rates(n: int, rates: list[float] | None, length: float | None) -> list[float]:
    """Unconditional per-position rates, as vLLM 0.33 resolves them (``SpeculativeConfig.
    _resolve_synthetic_acceptance_rates``: a length becomes the minimum-variance schedule)."""
    if (rates is None) == (length is None):
        raise ValueError("rejection_sample_method='synthetic' requires exactly one of "
                         "synthetic_acceptance_rates or synthetic_acceptance_length.")
    if rates is not None:
        if len(rates) != n:
            raise ValueError(f"synthetic_acceptance_rates must have length {n}, got {rates}.")
        if any(not 0.0 <= r <= 1.0 for r in rates) or any(
                rates[i] > rates[i - 1] for i in range(1, n)):
            raise ValueError(f"synthetic_acceptance_rates must be non-increasing fractions, "
                             f"got {rates}.")
        return list(rates)
    assert length is not None
    if not 1.0 <= length <= float(n + 1):
        raise ValueError(f"synthetic_acceptance_length must be in [1, {n + 1}], got {length}.")
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


@dataclass
class Settings:
    """What the stand-in was asked to serve (from vLLM's flags and its own)."""

    model: str
    served_name: str
    host: str
    port: int
    seed: int
    engines: int
    max_model_len: int
    max_num_batched_tokens: int
    prefix_caching: bool
    spec: dict[str, Any] | None
    per_request: str
    version: str
    profile: VllmProfile
    step_s: float = 0.001
    prefill_s: float = 0.002
    alpha: float = 0.7
    startup_s: float = 0.0
    max_num_seqs: int = 256
    capture_sizes: list[int] | None = None
    compile_s: float = 0.0
    capture_ms: float = 0.0
    spawn_orphan: Path | None = None
    ignore_sigterm: bool = False
    rates: list[float] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    cli_api_keys: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Drafted tokens per step (0 without speculation)."""
        return len(self.rates)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve", description="crossbench's stand-in for "
                                "`vllm serve` (not vLLM)", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-parallel-size", type=int, default=1)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True)
    p.add_argument("--speculative-config", type=json.loads, default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--compilation-config", type=json.loads, default=None)
    p.add_argument("--api-key", nargs="+", default=None)
    p.add_argument("--per-request-spec-decode-metrics", default="none",
                   choices=["none", "summary", "detailed"])
    s = p.add_argument_group("stand-in options (not vLLM's)")
    s.add_argument("--standin-step-ms", type=float, default=1.0,
                   help="time of one engine step (0: as fast as possible)")
    s.add_argument("--standin-prefill-ms", type=float, default=2.0, help="time to first token")
    s.add_argument("--standin-accept", type=float, default=0.7,
                   help="alpha of the default acceptance alpha^(k+1) (without synthetic rates)")
    s.add_argument("--standin-startup-s", type=float, default=0.0,
                   help="seconds before the port opens (vLLM loads and compiles meanwhile)")
    s.add_argument("--standin-compile-s", type=float, default=0.0,
                   help="seconds a cold torch.compile takes (a warm cache: a tenth of it); "
                   "the compile cache lives in VLLM_CACHE_ROOT as vLLM's does")
    s.add_argument("--standin-capture-ms", type=float, default=0.0,
                   help="milliseconds to capture one CUDA graph size")
    s.add_argument("--standin-spawn-orphan", type=Path, default=None, metavar="PIDFILE",
                   help="spawn a child that leaves the process group, ignores SIGTERM and "
                   "outlives the server; its pid goes to PIDFILE")
    s.add_argument("--standin-ignore-sigterm", action="store_true")
    s.add_argument("--standin-ignore-synthetic", action="store_true",
                   help="accept with --standin-accept even under synthetic rates (a broken "
                   "engine, for testing that checks catch it)")
    s.add_argument("--standin-version", default=DEFAULT_VERSION,
                   help="vLLM release to pose as (its profile gives formats and metrics)")
    return p


def _fail(msg: str) -> None:
    print(f"vllm serve: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def parse_settings(argv: Sequence[str]) -> Settings:
    """Settings from ``serve`` arguments; exits 2 on flags vLLM would refuse."""
    args, unknown = _parser().parse_known_args(list(argv))
    try:
        prof = profile_for(args.standin_version)
    except UserError as e:
        _fail(e.one_line())
    bad = [u for u in unknown if u.startswith("-") and u.split("=", 1)[0] not in prof.flags]
    if bad:
        _fail(f"unrecognized arguments: {' '.join(bad)}")
    model = args.model or args.model_tag
    if not model:
        _fail("a model is required (--model or MODEL)")
    served = (args.served_model_name or [model])[0]
    spec = args.speculative_config
    rates: list[float] = []
    if spec is not None:
        method = spec.get("method")
        if method not in prof.methods:
            _fail(f"argument --speculative-config: method {method!r} is not one of "
                  f"{list(prof.methods)}")
        n = spec.get("num_speculative_tokens")
        if n is None:
            n = 24 if method == "suffix" else None
        if n is None or n < 1:
            _fail("argument --speculative-config: num_speculative_tokens was provided but "
                  "without speculative model.")
        if spec.get("rejection_sample_method") == "synthetic" \
                and not args.standin_ignore_synthetic:
            try:
                rates = synthetic_rates(n, spec.get("synthetic_acceptance_rates"),
                                        spec.get("synthetic_acceptance_length"))
            except ValueError as e:
                _fail(f"argument --speculative-config: {e}")
        else:
            rates = [args.standin_accept ** (k + 1) for k in range(n)]
    elif args.per_request_spec_decode_metrics != "none":
        _fail("--per-request-spec-decode-metrics requires speculative decoding to be enabled "
              "(via --speculative-config).")
    return Settings(
        model=model, served_name=served, host=args.host or "0.0.0.0", port=args.port,
        seed=args.seed, engines=args.data_parallel_size, max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        prefix_caching=args.enable_prefix_caching, spec=spec,
        per_request=args.per_request_spec_decode_metrics,
        version=args.standin_version + STANDIN_SUFFIX, profile=prof,
        step_s=args.standin_step_ms / 1e3, prefill_s=args.standin_prefill_ms / 1e3,
        alpha=args.standin_accept, startup_s=args.standin_startup_s,
        max_num_seqs=args.max_num_seqs,
        capture_sizes=(args.compilation_config or {}).get("cudagraph_capture_sizes"),
        compile_s=args.standin_compile_s, capture_ms=args.standin_capture_ms,
        spawn_orphan=args.standin_spawn_orphan, ignore_sigterm=args.standin_ignore_sigterm,
        rates=rates,
        # vLLM: --api-key takes precedence over VLLM_API_KEY; neither leaves the server open
        api_keys=[k for k in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if k],
        cli_api_keys=list(args.api_key or []))


@dataclass
class _RequestSpec:
    """Per-request speculative statistics (vLLM's ``RequestSpecDecodeMetrics``)."""

    n: int
    histogram: list[int]
    drafted: int = 0
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def to_dict(self, detailed: bool) -> dict[str, Any]:
        steps = sum(self.histogram)
        accepted = sum(j * c for j, c in enumerate(self.histogram))
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.drafted if self.drafted else 0.0,
            "acceptance_histogram": list(self.histogram), "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted, "num_draft_tokens": self.drafted,
            "num_spec_tokens": self.n}
        if detailed:
            out["per_step_accepted"] = self.per_step_accepted
            out["per_step_drafted"] = self.per_step_drafted
        return out


class StandinVllm:
    """The stand-in's HTTP application and its simulated engines."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.metrics = VllmMetrics(s.profile, s.served_name, s.engines,
                                   s.n if s.spec is not None else None)
        self.n_requests = 0
        self.seen_prompts: set[str] = set()
        self.app = web.Application(middlewares=[self.authenticate] if s.api_keys else [])
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/metrics", self.prometheus)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat)
        if os.environ.get("VLLM_SERVER_DEV_MODE") == "1":  # as vLLM: dev routes only then
            self.app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """vLLM's AuthenticationMiddleware: a path under /v1 needs ``Authorization: Bearer``
        with one of the keys (401 ``{"error": "Unauthorized"}`` otherwise); /health and
        /metrics stay open."""
        if request.method != "OPTIONS" and request.path.startswith("/v1"):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or token not in self.s.api_keys:
                return web.json_response({"error": "Unauthorized"}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def health(self, _: web.Request) -> web.Response:
        """vLLM's ``/health``: 200 with an empty body once serving."""
        return web.Response(status=200, headers={"X-Crossbench-Standin": "1"})

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        """vLLM's dev-mode ``POST /reset_prefix_cache``: the stand-in caches nothing."""
        print(vllm_formats.log_line("Resetting prefix cache...", "serve", os.getpid())[0],
              flush=True)
        return web.json_response({"success": True})

    async def version(self, _: web.Request) -> web.Response:
        """vLLM's ``/version``."""
        return web.json_response({"version": self.s.version})

    async def models(self, _: web.Request) -> web.Response:
        """The served model, as vLLM lists it."""
        card = {"id": self.s.served_name, "object": "model", "created": int(time.time()),
                "owned_by": STANDIN_NAME, "root": self.s.model, "parent": None,
                "max_model_len": self.s.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def prometheus(self, _: web.Request) -> web.Response:
        """``/metrics`` in vLLM's format."""
        return web.Response(body=self.metrics.text().encode(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``/v1/completions``."""
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``/v1/chat/completions``."""
        return await self._generate(request, chat=True)

    # -- generation -----------------------------------------------------------------------------

    def _prompt_tokens(self, body: dict[str, Any], chat: bool) -> tuple[int, str]:
        if chat:
            text = " ".join(str(m.get("content") or "") for m in body.get("messages") or [])
            return max(1, len(text.split())), text
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return len(prompt), " ".join(map(str, prompt))
        text = str(prompt or "")
        return max(1, len(text.split())), text

    async def _steps(self, engine: int, max_tokens: int, rng: random.Random,
                     per_req: _RequestSpec | None) -> AsyncIterator[int]:
        """Tokens of each engine step; counts every verified draft in the metrics."""
        s, m = self.s, self.metrics
        await asyncio.sleep(s.prefill_s)
        out, drafts_ready = 1, s.n > 0 and max_tokens > 1
        yield 1
        while out < max_tokens:
            await asyncio.sleep(s.step_s)
            before = out
            if drafts_ready:
                u = rng.random()
                accepted = sum(1 for r in s.rates if u < r)
                m.child(SPEC_PREFIX + "num_drafts", engine).inc()
                m.child(SPEC_PREFIX + "num_draft_tokens", engine).inc(s.n)
                m.child(SPEC_PREFIX + "num_accepted_tokens", engine).inc(accepted)
                for pos in range(accepted):
                    m.child(SPEC_PREFIX + "num_accepted_tokens_per_pos", engine, str(pos)).inc()
                if per_req is not None:
                    per_req.histogram[accepted] += 1
                    per_req.drafted += s.n
                    per_req.per_step_accepted.append(accepted)
                    per_req.per_step_drafted.append(s.n)
                k = min(accepted + 1, max_tokens - out)
            else:
                k = 1
            out += k
            drafts_ready = s.n > 0 and before + 1 < max_tokens  # vLLM's _drafts_unused
            yield k

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        s, m = self.s, self.metrics
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "BadRequestError", "request body is not JSON")
        model = body.get("model")
        if model and model != s.served_name:
            return _error(404, "NotFoundError", f"The model `{model}` does not exist.",
                          param="model")
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        n_prompt, prompt_text = self._prompt_tokens(body, chat)
        self.n_requests += 1
        engine = (self.n_requests - 1) % s.engines
        rng = random.Random(f"{s.seed}:{body.get('seed')}:{self.n_requests}")
        key = hashlib.sha256(prompt_text.encode()).hexdigest()
        if s.prefix_caching and m.has("vllm:prefix_cache_queries"):
            m.child("vllm:prefix_cache_queries", engine).inc(n_prompt)
            if key in self.seen_prompts:
                m.child("vllm:prefix_cache_hits", engine).inc(n_prompt // 16 * 16)
        self.seen_prompts.add(key)
        m.child("vllm:prompt_tokens", engine).inc(n_prompt)
        running = m.child("vllm:num_requests_running", engine)
        running.inc()
        per_req = (_RequestSpec(s.n, [0] * (s.n + 1))
                   if s.spec is not None and s.per_request != "none" else None)
        rid = ("chatcmpl-" if chat else "cmpl-") + hashlib.md5(
            f"{self.n_requests}".encode()).hexdigest()
        created = int(time.time())
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage")) or continuous
        head = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created, "model": s.served_name}
        done, pieces, t0 = 0, [], time.monotonic()
        resp: web.StreamResponse | None = None
        try:
            if body.get("stream"):
                resp = web.StreamResponse(headers={
                    "Content-Type": "text/event-stream", "X-Crossbench-Standin": "1"})
                await resp.prepare(request)
                if chat:
                    await _send(resp, {**head, "choices": [{
                        "index": 0, "delta": {"role": "assistant", "content": ""},
                        "logprobs": None, "finish_reason": None}]})
            t_first = t_last = t0
            async for k in self._steps(engine, max_tokens, rng, per_req):
                t_last = time.monotonic()
                if done == 0:
                    t_first = t_last
                    m.child("vllm:time_to_first_token_seconds", engine).observe(
                        time.monotonic() - t0)
                text = "".join(_WORDS[(done + i) % len(_WORDS)] for i in range(k))
                done += k
                pieces.append(text)
                m.child("vllm:generation_tokens", engine).inc(k)
                m.child("vllm:iteration_tokens_total", engine).observe(k)
                if resp is None:
                    continue
                last = done >= max_tokens
                finish = "length" if last else None
                choice: dict[str, Any] = (
                    {"index": 0, "delta": {"content": text}, "logprobs": None,
                     "finish_reason": finish} if chat else
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None})
                chunk: dict[str, Any] = {**head, "choices": [choice]}
                if continuous:
                    chunk["usage"] = _usage(n_prompt, done)
                await _send(resp, chunk)
            usage = _usage(n_prompt, done)
            metrics = ({"speculative_decoding": per_req.to_dict(s.per_request == "detailed")}
                       if per_req is not None else None)
            m.child("vllm:request_success", engine, "length").inc()
            # vLLM's per-request histograms: tokens, and decode time from first token to last
            for name, value in (("vllm:request_generation_tokens", done),
                                ("vllm:request_decode_time_seconds", t_last - t_first)):
                if m.has(name):
                    m.child(name, engine).observe(value)
            if resp is None:
                text = "".join(pieces)
                whole: dict[str, Any] = {
                    **head, "object": "chat.completion" if chat else "text_completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "length"} if chat else
                                {"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": usage}
                if metrics is not None:
                    whole["metrics"] = metrics
                return web.json_response(whole, headers={"X-Crossbench-Standin": "1"})
            if include_usage:
                final: dict[str, Any] = {**head, "choices": [], "usage": usage}
                if metrics is not None:
                    final["metrics"] = metrics
                await _send(resp, final)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            running.dec()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion}


async def _send(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _error(status: int, kind: str, message: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param,
                                        "code": status}}, status=status,
                             headers={"X-Crossbench-Standin": "1"})


def _capture_sizes(s: Settings) -> list[int]:
    """The sizes vLLM would capture: ``--compilation-config``'s, else the default."""
    if s.capture_sizes:
        return sorted({int(x) for x in s.capture_sizes if int(x) <= s.max_num_batched_tokens})
    return default_capture_sizes(s.max_num_seqs, s.n, s.max_num_batched_tokens)


def _compile(s: Settings) -> float:
    """torch.compile as vLLM's cache sees it: an entry keyed by a hash of the engine's
    config under ``VLLM_CACHE_ROOT/torch_compile_cache/`` is loaded (a tenth of
    ``--standin-compile-s``), else compiled and stored (unless VLLM_DISABLE_COMPILE_CACHE=1);
    logs vLLM 0.26's lines and returns the seconds spent."""
    pid = os.getpid()
    key = json.dumps([s.version, s.model, s.spec, _capture_sizes(s), s.max_num_seqs,
                      s.max_num_batched_tokens, s.max_model_len], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    root = Path(os.path.expanduser(os.environ.get("VLLM_CACHE_ROOT", "~/.cache/vllm")))
    folder = root / "torch_compile_cache" / digest / "rank_0_0" / "backbone"
    disabled = os.environ.get("VLLM_DISABLE_COMPILE_CACHE") == "1"
    hit = not disabled and (folder / "artifact").is_file()
    lines = [f"Using cache directory: {folder} for vLLM's torch.compile"]
    spent = s.compile_s * (0.1 if hit else 1.0)
    time.sleep(spent)
    rng = f"(1, {s.max_num_batched_tokens})"
    if hit:
        lines.append(f"Directly load the compiled graph(s) for compile range {rng} from the "
                     f"cache, took {spent:.3f} s")
    else:
        lines.append(f"Compiling a graph for compile range {rng} takes {spent:.2f} s")
        if not disabled:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "artifact").write_text(key)
    lines.append(f"torch.compile took {spent:.2f} s in total")
    for line in lines:
        print(vllm_formats.log_line(line, "compile", pid)[0], flush=True)
    return spent


def _startup_lines(s: Settings) -> list[str]:
    spec = s.spec
    spec_repr = "None" if spec is None else (
        f"SpeculativeConfig(method={spec.get('method')!r}, model={spec.get('model')!r}, "
        f"num_spec_tokens={s.n})")
    sched = s.max_num_batched_tokens if spec is not None else None  # vLLM 0.33's default
    return vllm_formats.render_startup(
        s.profile.log_formats, os.getpid(), version=s.version, model=s.model,
        spec_repr=spec_repr, capture_sizes=_capture_sizes(s), kv_tokens=81920,
        kv_gib=1.25, max_model_len=s.max_model_len, attention="FLASH_ATTN",
        max_scheduled=sched, capture_s=None)


async def _serve(s: Settings) -> None:
    print(f"crossbench stand-in for vLLM (not vLLM: no model is loaded) {s.version}",
          flush=True)
    given = {"model_tag": s.model, **({"api_key": s.cli_api_keys} if s.cli_api_keys else {})}
    print(vllm_formats.log_line(f"non-default args: {given}", "utils", os.getpid())[0],
          flush=True)  # vLLM echoes its arguments, a key given with --api-key included
    for line in _startup_lines(s):
        print(line, flush=True)
    if s.spawn_orphan is not None:
        spawn_orphan(s.spawn_orphan)
    t0 = time.monotonic()
    compile_s = _compile(s)
    capture_s = len(_capture_sizes(s)) * s.capture_ms / 1e3
    await asyncio.sleep(s.startup_s + capture_s)
    pid = os.getpid()
    print(vllm_formats.log_line(f"Graph capturing finished in {capture_s:.0f} secs, took "
                               "0.12 GiB", "graph_capture", pid)[0], flush=True)
    print(vllm_formats.log_line("init engine (profile, create kv cache, warmup model) took "
                               f"{time.monotonic() - t0:.2f} s (compilation: {compile_s:.2f} "
                               "s)", "engine_init", pid)[0], flush=True)
    server = StandinVllm(s)
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, s.host, s.port)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if s.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(vllm_formats.log_line(f"Starting vLLM server on http://{s.host}:{s.port}", "serve",
                               os.getpid())[0], flush=True)
    await stop.wait()
    print(vllm_formats.log_line("Shutting down (stand-in)", "serve", os.getpid())[0],
          flush=True)
    await runner.cleanup()


def write_launcher(path: Path, *standin_args: str) -> Path:
    """An executable script that runs the stand-in as ``vllm`` (for a config's ``binary``)."""
    args = " ".join(shlex.quote(a) for a in standin_args)
    path.write_text(
        "#!/bin/sh\n"
        "# crossbench's stand-in for vllm (not vLLM); made by "
        "`python -m standins.vllm launcher`\n"
        f"{launcher_export()}"
        f'if [ "$1" = "--version" ]; then exec {shlex.quote(sys.executable)} -m '
        f"standins.vllm --version {args}; fi\n"
        f'exec {shlex.quote(sys.executable)} -m standins.vllm "$@" {args}\n')
    path.chmod(0o755)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.vllm {serve ...|--version|launcher PATH}``."""
    known = ", ".join(p.version for p in known_profiles())
    return standin_main(argv, DEFAULT_VERSION, STANDIN_SUFFIX, write_launcher,
                        "usage: python -m standins.vllm {serve MODEL [flags] | "
                        f"--version | launcher PATH [--standin-... options]}} (poses as vLLM "
                        f"{known})", parse_settings, _serve)


if __name__ == "__main__":
    raise SystemExit(main())
