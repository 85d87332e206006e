"""A **stand-in** for SGLang's ``launch_server``, for tests on machines without a GPU. It is
not SGLang.

It takes the flags crossbench's adapter emits (any other flag the release's profile lists is
accepted and ignored; unknown ones fail as SGLang's argparse fails) and answers where
crossbench looks, in SGLang's formats:

- ``-c "import sglang; print(sglang.__version__)"`` prints ``0.5.17+crossbench.standin``:
  the adapter marks every result of it ``standin: true``;
- ``/health``, ``/v1/models``, ``/server_info`` and ``/get_server_info`` (the resolved
  server arguments plus ``version``: ``served_model_name`` defaults to the model path, as
  SGLang resolves it), OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``
  streamed one chunk per verification step (its accepted drafts plus one token), ``usage`` in
  every chunk with ``stream_options.continuous_usage_stats``;
- the native ``/generate`` (not streamed: a ``stream`` request is refused as a stand-in's
  limit), answering ``text``, ``output_ids`` and ``meta_info`` as SGLang 0.5.17's
  ``tokenizer_manager.py`` builds it: ``completion_tokens``, ``finish_reason``, and with a
  speculative algorithm ``spec_verify_ct``, ``spec_num_correct_drafts``,
  ``spec_num_proposed_drafts`` (verification steps x n), ``spec_accept_length``
  (completion tokens / verification steps), ``spec_accept_rate``, the histogram of accepted
  drafts per step and the older aliases of these names;
- ``/flush_cache`` (GET or POST), answering SGLang's text and logging its line;
- with ``TVM_FFI_CACHE_DIR`` in its environment, a module folder per speculative algorithm
  made there at start where missing, as SGLang's JIT kernels fill that cache on a
  configuration's first start (nothing is compiled);
- ``/metrics`` (only with ``--enable-metrics``, as SGLang) with SGLang's family names, types
  and help texts from the profile, label ``model_name``, rendered by prometheus_client:
  ``sglang:spec_verify_calls_total``, ``sglang:generation_tokens_total``,
  ``sglang:num_requests_total`` count exactly what was streamed.

Acceptance: each verification step accepts the first ``a`` of ``n`` drafts with
``P(a >= k+1) = alpha^(k+1)`` (``--standin-accept``), one uniform draw per step from a RNG
seeded by ``--random-seed``, the request's ``seed`` and its arrival number. ``--standin-accept
1`` accepts every draft, what a draft model identical to the target does under greedy
sampling (the known truth of ``crossbench engines check sglang``). The last step of a request
is cut at ``max_tokens``, and so are its accepted drafts.

Simulated acceptance, as SGLang 0.5.17 (``speculative/spec_utils.py``
``_sample_simulated_acc_len``): with ``SGLANG_SIMULATE_ACC_LEN`` L > 0 in its environment,
every algorithm's verification step commits a length drawn from L instead (clamped to
[1, n+1]): ``match-expected`` (``SGLANG_SIMULATE_ACC_METHOD``'s default) the floor of L or the
next length, the latter with probability L - floor(L), so the mean is L; ``multinomial`` a
normal draw of mean L and deviation 1, clamped and rounded. ``SGLANG_SIMULATE_ACC_TOKEN_MODE``
``fixed`` (default) emits token id 100 for every token; ``real-draft-token`` is refused on
NGRAM, as SGLang refuses it for a tree (here at start-up, there at the first verification).
A stand-in's simplification: SGLang draws one length per step for the whole batch; the
stand-in, which has no batches, draws one per request and step (the same mean).

Scripted fault, for tests that a check catches it: ``--standin-skew-verify-ct K`` makes
``/generate``'s ``meta_info.spec_verify_ct`` K more than the steps the counters count.

Use it as a config's ``binary`` through a launcher::

    python -m standins.sglang launcher /tmp/python-sglang --standin-step-ms 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

from crossbench.engines.sglang import metrics as names
from crossbench.engines.sglang.profile import DEFAULT_VERSION, STANDIN_SUFFIX, profile_for
from standins import launcher_export
from standins.cli import spawn_orphan, standin_main

_WORDS = (" alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta")
#: the token SGLang's SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed emits (spec_utils.py: "some legit
#: token id"), and the stand-in's word for it
FIXED_TOKEN, FIXED_WORD = 100, " <100>"


@dataclass(frozen=True)
class Simulated:
    """SGLang's simulated acceptance (``SGLANG_SIMULATE_ACC_*``), as read at start-up."""

    length: float
    method: str = "match-expected"
    token_mode: str = "fixed"

    def draw(self, rng: random.Random, max_len: int) -> int:
        """A step's committed length in [1, max_len], as ``_sample_simulated_acc_len``."""
        if self.method == "multinomial":
            return round(min(max(rng.gauss(self.length, 1.0), 1.0), max_len))
        length = max(1.0, min(float(max_len), self.length))
        lower = math.floor(length)
        if lower >= max_len:
            return lower
        return lower + 1 if rng.random() < length - lower else lower


def simulated_from_env(env: dict[str, str], algorithm: str | None) -> Simulated | None:
    """The simulated acceptance ``env`` asks for (None when ``SGLANG_SIMULATE_ACC_LEN`` is
    unset or not above 0, or without a speculative algorithm); ValueError with SGLang's
    message for a method or token mode it refuses."""
    length = float(env.get("SGLANG_SIMULATE_ACC_LEN", "-1"))
    if length <= 0 or not algorithm:
        return None
    sim = Simulated(length, env.get("SGLANG_SIMULATE_ACC_METHOD", "match-expected"),
                    env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "fixed"))
    if sim.method not in ("match-expected", "multinomial"):
        raise ValueError(f"Invalid simulate_acc_method: {sim.method}")
    if sim.token_mode not in ("fixed", "real-draft-token"):
        raise ValueError(f"Invalid SGLANG_SIMULATE_ACC_TOKEN_MODE {sim.token_mode!r}; "
                         "expected 'fixed' or 'real-draft-token'.")
    if sim.token_mode == "real-draft-token" and algorithm.upper() == "NGRAM":
        raise ValueError("SGLANG_SIMULATE_ACC_LEN with real draft tokens currently requires "
                         "speculative_eagle_topk=1.")
    return sim


@dataclass
class Settings:
    """What the stand-in was asked to serve."""

    model: str
    served_name: str
    host: str
    port: int
    seed: int
    metrics: bool
    algorithm: str | None
    n: int
    args: dict[str, Any]
    step_s: float = 0.001
    alpha: float = 0.7
    version: str = DEFAULT_VERSION + STANDIN_SUFFIX
    skew_verify_ct: int = 0
    spawn_orphan: Path | None = None
    simulated: Simulated | None = None


def parse_settings(argv: Sequence[str]) -> Settings:
    """Settings from ``launch_server`` arguments; exits 2 on flags SGLang would refuse."""
    p = argparse.ArgumentParser(prog="launch_server", allow_abbrev=False)
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--random-seed", type=int, default=0)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-draft-model-path", default=None)
    p.add_argument("--standin-step-ms", type=float, default=1.0)
    p.add_argument("--standin-accept", type=float, default=0.7)
    p.add_argument("--standin-version", default=DEFAULT_VERSION)
    p.add_argument("--standin-skew-verify-ct", type=int, default=0)
    p.add_argument("--standin-spawn-orphan", type=Path, default=None, metavar="PIDFILE",
                   help="start a worker that leaves the process group and ignores SIGTERM "
                        "(as a scheduler outliving its server), its pid in PIDFILE")
    args, unknown = p.parse_known_args(list(argv))
    prof = profile_for(args.standin_version)
    bad = [u for u in unknown if u.startswith("-") and u.split("=", 1)[0] not in prof.flags]
    if bad:
        p.error(f"unrecognized arguments: {' '.join(bad)}")
    algo = args.speculative_algorithm
    if algo is not None and algo.upper() not in prof.algorithms:
        p.error(f"Unknown speculative algorithm name: {algo}")
    n = (args.speculative_num_draft_tokens or 1) - 1 if algo else 0
    try:
        simulated = simulated_from_env(dict(os.environ), algo)
    except ValueError as e:
        p.exit(1, f"ValueError: {e}\n")
    return Settings(model=args.model_path, served_name=args.served_model_name or
                    args.model_path, host=args.host, port=args.port, seed=args.random_seed,
                    metrics=args.enable_metrics, algorithm=algo, n=max(n, 0),
                    args={k: v for k, v in vars(args).items() if not k.startswith("standin")},
                    step_s=args.standin_step_ms / 1e3, alpha=args.standin_accept,
                    version=args.standin_version + STANDIN_SUFFIX,
                    skew_verify_ct=args.standin_skew_verify_ct,
                    spawn_orphan=args.standin_spawn_orphan, simulated=simulated)


class StandinSglang:
    """The stand-in's HTTP application and its counters."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.registry = CollectorRegistry()
        prof = profile_for(s.version.partition("+")[0])

        def doc(name: str) -> str:
            return prof.metrics.get(name, {}).get("help", name)

        label = ["model_name"]
        self.verify = Counter(names.VERIFY_CALLS, doc(names.VERIFY_CALLS), label,
                              registry=self.registry)
        self.generated = Counter(names.GENERATED, doc(names.GENERATED),
                                 [*label, "is_streaming"], registry=self.registry)
        self.prompt = Counter(names.PROMPT, doc(names.PROMPT), [*label, "is_streaming"],
                              registry=self.registry)
        self.requests = Counter(names.REQUESTS, doc(names.REQUESTS), label,
                                registry=self.registry)
        self.running = Gauge(names.RUNNING, doc(names.RUNNING), label, registry=self.registry)
        self.accept_length = Gauge(names.ACCEPT_LENGTH, doc(names.ACCEPT_LENGTH), label,
                                   registry=self.registry)
        self.n_requests = 0
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/v1/models", self.models)
        for path in prof.server_info_paths:
            app.router.add_get(path, self.server_info)
        if s.metrics:
            app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/generate", self.generate)
        app.router.add_route("*", "/flush_cache", self.flush_cache)
        self.app = app

    def _l(self) -> str:
        return self.s.served_name

    async def health(self, _: web.Request) -> web.Response:
        """SGLang's ``/health``: 200 once serving."""
        return web.Response(status=200, headers={"X-Crossbench-Standin": "1"})

    async def flush_cache(self, request: web.Request) -> web.Response:
        """SGLang's ``/flush_cache`` (GET or POST): 200 with its text and its log line (the
        stand-in keeps no cache to flush); other methods 405, as FastAPI's route."""
        if request.method not in ("GET", "POST"):
            return web.Response(status=405)
        print("Cache flushed successfully!", flush=True)
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation "
                                 "will not be performed.)\n")

    async def models(self, _: web.Request) -> web.Response:
        """The served model, as SGLang lists it."""
        return web.json_response({"object": "list", "data": [
            {"id": self.s.served_name, "object": "model", "created": int(time.time()),
             "owned_by": "sglang", "root": self.s.model}]})

    async def server_info(self, _: web.Request) -> web.Response:
        """Resolved server arguments plus ``version``, as ``/server_info`` answers."""
        s, given = self.s, self.s.args
        info = {**given, "served_model_name": s.served_name,
                "speculative_eagle_topk": given.get("speculative_eagle_topk") or
                (1 if s.algorithm else None),
                "speculative_num_steps": given.get("speculative_num_steps") or s.n or None,
                "version": s.version, "standin": True}
        return web.json_response(info)

    async def prometheus(self, _: web.Request) -> web.Response:
        """``/metrics`` with SGLang's names."""
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``/v1/completions``."""
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``/v1/chat/completions``."""
        return await self._generate(request, chat=True)

    async def _steps(self, rng: random.Random, max_tokens: int
                     ) -> AsyncIterator[tuple[int, int | None]]:
        """(tokens, accepted drafts) of each step: the prefill's one token, then per
        verification step its accepted drafts plus one (None without speculation); the last
        step is cut at ``max_tokens``."""
        s, done = self.s, 0
        while done < max_tokens:
            await asyncio.sleep(s.step_s)
            if done == 0 or not s.n:  # the prefill's token, or plain decoding
                k, accepted = 1, None
            else:
                if s.simulated is not None:  # SGLANG_SIMULATE_ACC_LEN replaces acceptance
                    k = s.simulated.draw(rng, s.n + 1)
                else:
                    u = rng.random()
                    k = sum(1 for j in range(s.n) if u < s.alpha ** (j + 1)) + 1
                k = min(k, max_tokens - done)
                accepted = k - 1
            done += k
            yield k, accepted

    def _fixed(self, index: int) -> bool:
        """Is token ``index`` of a request SGLang's fixed simulated token (id 100)? Every
        token after the prefill's under SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed."""
        sim = self.s.simulated
        return index > 0 and sim is not None and sim.token_mode == "fixed"

    def _word(self, index: int) -> str:
        return FIXED_WORD if self._fixed(index) else _WORDS[index % len(_WORDS)]

    def _count(self, n_prompt: int, done: int, verify: int, stream: bool) -> None:
        """Count a finished request, as SGLang does when it finishes."""
        flag = "true" if stream else "false"
        self.prompt.labels(self._l(), flag).inc(n_prompt)
        self.verify.labels(self._l()).inc(verify)
        self.generated.labels(self._l(), flag).inc(done)
        self.requests.labels(self._l()).inc()
        if verify:
            self.accept_length.labels(self._l()).set(done / verify)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        s = self.s
        body = await request.json()
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        prompt = body.get("messages") if chat else body.get("prompt")
        n_prompt = max(1, len(json.dumps(prompt).split()))
        self.n_requests += 1
        rng = random.Random(f"{s.seed}:{body.get('seed')}:{self.n_requests}")
        stream = bool(body.get("stream"))
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        self.running.labels(self._l()).inc()
        head = {"id": f"standin-{self.n_requests}", "created": int(time.time()),
                "model": s.served_name,
                "object": "chat.completion.chunk" if chat else "text_completion"}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "X-Crossbench-Standin": "1"})
        done, verify, text_all = 0, 0, []
        try:
            if stream:
                await resp.prepare(request)
            async for k, accepted in self._steps(rng, max_tokens):
                verify += accepted is not None
                text = "".join(self._word(done + i) for i in range(k))
                done += k
                text_all.append(text)
                if not stream:
                    continue
                finish = "length" if done >= max_tokens else None
                choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish}
                          if chat else {"index": 0, "text": text, "finish_reason": finish})
                chunk: dict[str, Any] = {**head, "choices": [choice]}
                if continuous:
                    chunk["usage"] = _usage(n_prompt, done)
                await _send(resp, chunk)
            self._count(n_prompt, done, verify, stream)
            if not stream:
                full = "".join(text_all)
                return web.json_response({**head, "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": full},
                     "finish_reason": "length"} if chat else
                    {"index": 0, "text": full, "finish_reason": "length"}],
                    "usage": _usage(n_prompt, done)})
            if opts.get("include_usage") or continuous:
                await _send(resp, {**head, "choices": [], "usage": _usage(n_prompt, done)})
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.running.labels(self._l()).dec()

    async def generate(self, request: web.Request) -> web.Response:
        """SGLang's native ``/generate``, not streamed: ``text``, ``output_ids`` and
        ``meta_info`` (with the speculative figures of the request)."""
        s = self.s
        body = await request.json()
        if body.get("stream"):
            return web.json_response({"error": {
                "message": "crossbench's SGLang stand-in serves /generate without stream only",
                "type": "invalid_request_error", "code": 400}}, status=400)
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens") or 128)
        n_prompt = max(1, len(str(body.get("text") or body.get("input_ids") or "").split()))
        self.n_requests += 1
        rng = random.Random(f"{s.seed}:{params.get('sampling_seed')}:{self.n_requests}")
        t0 = time.monotonic()
        self.running.labels(self._l()).inc()
        done, ids, hist = 0, list[int](), [0] * (s.n + 1)
        try:
            async for k, accepted in self._steps(rng, max_new):
                ids.extend(FIXED_TOKEN if self._fixed(i) else i for i in range(done, done + k))
                done += k
                if accepted is not None:
                    hist[accepted] += 1
            verify = sum(hist)
            self._count(n_prompt, done, verify, False)
        finally:
            self.running.labels(self._l()).dec()
        meta: dict[str, Any] = {
            "id": f"standin-{self.n_requests:032x}", "finish_reason": {"type": "length",
                                                                     "length": max_new},
            "prompt_tokens": n_prompt, "weight_version": "default", "num_retractions": 0,
            "reasoning_tokens": 0, "completion_tokens": done, "cached_tokens": 0,
            "e2e_latency": time.monotonic() - t0}
        if s.algorithm and verify:
            correct = sum(a * c for a, c in enumerate(hist))
            while hist[-1] == 0:  # SGLang's histogram ends at the largest count seen
                hist.pop()
            proposed = verify * s.n
            meta.update({
                "spec_accept_rate": correct / proposed, "spec_accept_length": done / verify,
                "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed,
                "spec_verify_ct": verify + s.skew_verify_ct,
                "spec_accepted_drafts": correct, "spec_proposed_drafts": proposed,
                "spec_correct_drafts_histogram": hist, "spec_accept_histogram": hist})
        text = "".join(self._word(i) for i in range(done))
        return web.json_response({"text": text, "output_ids": ids, "meta_info": meta},
                                 headers={"X-Crossbench-Standin": "1"})


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


async def _send(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


async def _serve(s: Settings) -> None:
    print(f"crossbench stand-in for SGLang (not SGLang: no model is loaded) {s.version}",
          flush=True)
    if s.spawn_orphan is not None:
        spawn_orphan(s.spawn_orphan)
    runner = web.AppRunner(StandinSglang(s).app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, s.host, s.port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]")
    jit = os.environ.get("TVM_FFI_CACHE_DIR")
    if jit:  # as SGLang's JIT kernels: a configuration's first start builds its module there
        Path(jit, f"sgl_kernel_jit_standin_{s.algorithm or 'none'}").mkdir(parents=True,
                                                                       exist_ok=True)
    # SGLang 0.5.17's start-up lines in its format (startup_log.py reads them); the
    # stand-in loads nothing: its figures are placeholders (a load of 0.01 s, no capture time)
    for line in ("Load weight end. elapsed=0.01 s, type=StandIn, avail mem=0.00 GB, "
                 "mem usage=0.00 GB.",
                 "KV Cache is allocated. dtype: torch.float16, #tokens: 4096, K size: 0.00 GB, "
                 "V size: 0.00 GB",
                 "Capture target decode CUDA graph end. elapsed=0.00 s, mem usage=0.00 GB, "
                 "avail mem=0.00 GB."):
        print(f"{stamp} {line}", flush=True)
    print(f"{stamp} The server is fired up and ready to roll! (stand-in, {s.host}:{s.port})",
          flush=True)
    await stop.wait()
    await runner.cleanup()


def write_launcher(path: Path, *standin_args: str) -> Path:
    """An executable script that acts as a Python interpreter with sglang (for a config's
    ``binary``): ``-c`` prints the stand-in's version, ``-m sglang.launch_server`` serves."""
    args = " ".join(shlex.quote(a) for a in standin_args)
    py = shlex.quote(sys.executable)
    path.write_text(
        "#!/bin/sh\n"
        "# crossbench's stand-in for an interpreter with sglang (not SGLang); made by "
        "`python -m standins.sglang launcher`\n"
        f"{launcher_export()}"
        f'if [ "$1" = "-c" ]; then exec {py} -m standins.sglang '
        f"--version {args}; fi\n"
        'if [ "$1" = "-m" ]; then shift 2; fi\n'
        f'exec {py} -m standins.sglang serve "$@" {args}\n')
    path.chmod(0o755)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m standins.sglang {serve ...|--version|launcher PATH}``."""
    return standin_main(argv, DEFAULT_VERSION, STANDIN_SUFFIX, write_launcher,
                        "usage: python -m standins.sglang {serve --model-path M "
                        "[flags] | --version | launcher PATH [--standin-... options]}",
                        parse_settings, _serve)


if __name__ == "__main__":
    raise SystemExit(main())
