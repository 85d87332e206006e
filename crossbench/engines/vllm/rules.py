"""vLLM's own known interactions (registered with the engine: ``rules`` of
:func:`crossbench.engines.registry.register`; the interface:
:mod:`crossbench.engines.confound_rule`), checked beside the shared rules of
:mod:`crossbench.confounds.rules`."""

from __future__ import annotations

from crossbench.engines.confound_rule import (
    Finding,
    PairContext,
    Rule,
    View,
    arms,
    kind,
    mtp,
    truthy,
)


def _is_vllm(v: View) -> bool:
    return kind(v).startswith("vllm")


def _prefix_caching_mtp(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    out = []
    for label, v in arms(a, b, ctx):
        if not (_is_vllm(v) and mtp(v)):
            continue
        keys = ("server.enable_prefix_caching", "engine.startup.enable_prefix_caching",
                "engine.startup.prefix_caching")
        given = [v[k] for k in keys if k in v]
        if given and not truthy(given[0]):
            continue
        how = "on" if given else "not set, and vLLM enables it by default"
        out.append(rule.finding(
            "confounding",
            f"{label}: vLLM with MTP and prefix caching ({how}); MTP lowers the prefix-cache hit "
            "rate, so the MTP arm pays prefill the baseline skips and the speed difference "
            "mixes the two effects",
            "run both arms with prefix caching off (server: {enable_prefix_caching: false}, "
            "i.e. --no-enable-prefix-caching), or with prompts that share no prefix"))
    return out


def _runner_fallback(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    key = "engine.startup.model_runner_fallback"
    fa, fb = truthy(a.get(key)), truthy(b.get(key))
    la, lb = ctx.labels
    if fa != fb:
        arm = la if fa else lb
        return [rule.finding(
            "confounding",
            f"{arm} fell back from vLLM's V2 model runner to V1 (logged at start-up), the "
            "other arm did not: the arms ran different execution paths",
            "find the feature that forces the fallback (the start-up log names it) and give "
            "both arms the same runner (VLLM_USE_V2_MODEL_RUNNER=0 on both, or avoid the "
            "feature)")]
    if fa and fb and not ctx.single:
        return [rule.finding(
            "caveat", "both arms fell back from vLLM's V2 model runner to V1",
            "report the runner with the result; results on the default runner may differ")]
    if fa and ctx.single:
        return [rule.finding(
            "caveat", f"{la} fell back from vLLM's V2 model runner to V1",
            "check that its comparison arm fell back as well")]
    return []


def _server_differs(a: View, b: View, ctx: PairContext, key: str, default: object
                    ) -> tuple[object, object, str, str] | None:
    """(value of ``a``, of ``b``, their labels) where two vLLM arms of a pair set the server
    setting ``key`` differently (unset reads ``default``); None otherwise."""
    if not (_is_vllm(a) and _is_vllm(b)) or ctx.single:
        return None
    got_a, got_b = a.get(key), b.get(key)
    va = default if got_a is None else got_a
    vb = default if got_b is None else got_b
    if va == vb:
        return None
    la, lb = ctx.labels
    return va, vb, la, lb


def _cudagraph_sizes(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    diff = _server_differs(a, b, ctx, "server.cudagraph_sizes", "default")
    if diff is None:
        return []
    va, vb, la, lb = diff
    return [rule.finding(
        "confounding",
        f"{la} captured CUDA graphs {va!r}, {lb} {vb!r}: decode steps pad to the same graphs "
        "under both, but mixed prefill steps above the decode sizes run with a graph under "
        "one and without under the other",
        "give both arms the same cudagraph_sizes (decode on both is comparable: each arm "
        "keeps vLLM's default sizes up to its own largest decode step)")]


def _engine_process(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    diff = _server_differs(a, b, ctx, "server.engine_process", "spawn")
    if diff is None:
        return []
    va, vb, la, lb = diff
    return [rule.finding(
        "confounding",
        f"{la} started vLLM's engine core by {va}, {lb} by {vb}: the same engine core code "
        "should run either way, but a forked engine core inherits the API server's process "
        "state, and no measurement has shown the decode rate unchanged yet",
        "give both arms the same engine_process")]


def _kv_cache_memory(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    diff = _server_differs(a, b, ctx, "server.kv_cache_memory_bytes", None)
    if diff is None:
        return []
    va, vb, la, lb = diff

    def how(v: object) -> str:
        return "profiled" if v is None else f"set to {v} bytes"

    return [rule.finding(
        "confounding",
        f"{la}'s KV cache was {how(va)}, {lb}'s {how(vb)}: a decode step reads the same "
        "blocks either way, but the arms can hold different numbers of tokens before vLLM "
        "preempts, and only one of them ran vLLM's memory profiling",
        "give both arms the same kv_cache_memory_bytes, or leave it unset on both")]


RULES: tuple[Rule, ...] = (
    Rule("vllm-prefix-caching-mtp", "Prefix caching with MTP on vLLM",
         "MTP speculative decoding lowers vLLM's prefix-cache hit rate, so with prefix caching "
         "on an MTP arm re-prefills what a baseline serves from cache.",
         "https://github.com/vllm-project/vllm/issues/38182", _prefix_caching_mtp,
         per_arm=True),
    Rule("vllm-model-runner-fallback", "vLLM model runner fallback on one arm only",
         "vLLM falls back from the V2 to the V1 model runner when a feature is unsupported and "
         "logs it at start-up; arms on different runners run different code.",
         "https://github.com/vllm-project/vllm/issues/41286", _runner_fallback, per_arm=True),
    Rule("vllm-cudagraph-sizes", "CUDA graph sizes differ between arms",
         "crossbench's cudagraph_sizes decode keeps vLLM's default capture sizes up to the "
         "largest decode step; an arm on the full default list also has graphs for larger "
         "mixed prefill steps, so the pair differs in more than its variable.",
         "https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/config/vllm.py",
         _cudagraph_sizes),
    Rule("vllm-engine-process", "vLLM engine core started differently between arms",
         "engine_process fork starts vLLM's engine core by fork (it inherits the API server's "
         "imports) instead of spawn; a pair whose arms differ in it differs in more than its "
         "variable until a measurement shows the decode rate unchanged.",
         "https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/utils/system_utils.py",
         _engine_process),
    Rule("vllm-kv-cache-memory", "KV cache sized differently between arms",
         "kv_cache_memory_bytes gives vLLM the KV cache's size and skips its memory "
         "profiling; an arm with another size (or a profiled one) can hold a different number "
         "of tokens before it preempts.",
         "https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/v1/worker/gpu_worker.py",
         _kv_cache_memory),
)
