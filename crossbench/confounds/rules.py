"""Known harmful interactions, each with its explanation, the action that removes it and a
source: the evidence that it is real.

A rule reads two normalized views (:mod:`.normalize`), A and B, and returns
:class:`Finding` s: ``confounding`` (the comparison does not isolate its variable: the verdict
must not stay clean) or ``caveat`` (results are valid only with a qualification). The rule
interface (:class:`Rule`, :class:`Finding`, the view readers) lives in
:mod:`crossbench.engines.confound_rule`, below both these shared rules and every engine's
own, which the registry supplies (:func:`all_rules`).

Example::

    for f in check_pair(spec_view, base_view, labels=("spec", "baseline")):
        print(f"{f.severity}: {f.message} -> {f.action} [{f.source}]")
"""

from __future__ import annotations

from typing import Any

from crossbench.engines.confound_rule import (
    Finding,
    PairContext,
    Rule,
    Scalar,
    Severity,
    View,
    arms,
    kind,
    num,
    synthetic_settings,
)


def _fmt(v: Scalar | None) -> str:
    return "unset" if v is None else str(v)


# -- the rules ---------------------------------------------------------------------------------


def _batched_tokens(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    key = "server.max_num_batched_tokens"
    va, vb = a.get(key), b.get(key)
    if va == vb or kind(a) != kind(b):  # across engines, settings differ by nature
        return []
    la, lb = ctx.labels
    if va is None or vb is None:
        arm = la if va is not None else lb
        msg = (f"max_num_batched_tokens is set on {arm} only ({_fmt(va)} vs {_fmt(vb)}): the "
               "other arm runs with the engine's default token budget per step, which changes "
               "prefill chunking and batching")
    else:
        msg = (f"max_num_batched_tokens differs ({la} {va}, {lb} {vb}): the token budget per "
               "scheduler step changes prefill chunking and batching")
    return [rule.finding("confounding", msg,
                         "set max_num_batched_tokens to the same value on both arms (in the "
                         "matrix's shared `server:`)")]


def _memory_or_seqs(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    la, lb = ctx.labels
    diffs = [f"{k.removeprefix('server.')} {_fmt(a.get(k))}/{_fmt(b.get(k))}"
             for k in ("server.gpu_memory_utilization", "server.max_num_seqs")
             if a.get(k) != b.get(k)]
    if not diffs or kind(a) != kind(b):  # across engines, settings differ by nature
        return []
    return [rule.finding(
        "confounding",
        f"serve settings differ ({la}/{lb}: {', '.join(diffs)}): KV cache size and the batch "
        "cap set how many requests run together and when they are preempted, so speed moves "
        "with them, not with the intended variable",
        "give both arms the same gpu_memory_utilization and max_num_seqs (in the matrix's "
        "shared `server:`)")]


def _synthetic(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    out = []
    for label, v in arms(a, b, ctx):
        synth = synthetic_settings(v)
        if synth:
            listed = ", ".join(f"{k.removeprefix('spec.')}={x}" for k, x in sorted(synth.items()))
            out.append(rule.finding(
                "caveat",
                f"{label}: synthetic acceptance ({listed}): acceptance is scripted, not the "
                "draft's; the output text is invalid and the speed shows what that acceptance "
                "would give, not what this draft achieves",
                "report it as a synthetic-acceptance result; measure real acceptance with "
                "synth_rates/synth_len unset"))
    return out


def _engine_builds(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    keys = ["engine.kind", "engine.version", "engine.build_number", "engine.commit",
            "server.pin", "server.variant"]
    keys += sorted({k for k in (*a, *b) if k.startswith("engine.sha256.")})
    differ = [k for k in keys if a.get(k) != b.get(k)]
    if not differ:
        return []
    la, lb = ctx.labels
    if a.get("engine.kind") != b.get("engine.kind"):
        what = (f"different engines ({la} {_fmt(a.get('engine.kind'))}, {lb} "
                f"{_fmt(b.get('engine.kind'))}): kernels, schedulers and defaults all differ, "
                "so the comparison is multi-variable")
    else:
        shown = ", ".join(k.removeprefix("engine.") for k in differ[:4])
        more = f" and {len(differ) - 4} more" if len(differ) > 4 else ""
        what = (f"the arms ran different engine builds ({shown}{more} differ): speculative "
                "decoding speed changes between builds")
    severity: Severity = "caveat" if ctx.axis == "engine" else "confounding"
    return [rule.finding(severity, what,
                         "run every arm on one build (one `engines:` entry); compare builds "
                         "only as their own axis")]


def _greedy_parity(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    if not ctx.greedy_parity:
        return []
    hot = [f"{label} temperature {v.get('load.temperature')}" for label, v in arms(a, b, ctx)
           if (num(v.get("load.temperature")) or 0) > 0]
    if not hot:
        return []
    return [rule.finding(
        "confounding",
        f"greedy parity is claimed but sampling is not greedy ({', '.join(hot)}): sampled "
        "outputs differ between arms by chance, so parity cannot be checked",
        "set temperature: 0 on both arms for the parity check")]


def _thinking(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    va, vb = a.get("load.thinking"), b.get("load.thinking")
    if va == vb:
        return []
    if "chat" not in (a.get("load.endpoint"), b.get("load.endpoint")):
        return []  # raw completions apply no template: thinking is ignored
    la, lb = ctx.labels
    return [rule.finding(
        "confounding",
        f"thinking mode differs ({la} {_fmt(va)}, {lb} {_fmt(vb)}; unset means the template's "
        "default, which is on for Qwen3-style templates): the arms generate different text, "
        "so acceptance and speed differ for that reason",
        "set load.thinking to the same value on both arms")]


SHARED_RULES: tuple[Rule, ...] = (
    Rule("max-num-batched-tokens-one-arm", "max_num_batched_tokens on one arm only",
         "The scheduler's token budget per step sets prefill chunking and batching; an arm "
         "left at the default runs a different scheduler configuration.",
         "https://docs.vllm.ai/en/stable/configuration/optimization/#chunked-prefill",
         _batched_tokens),
    Rule("serve-memory-or-seqs-differ", "gpu_memory_utilization or max_num_seqs differ",
         "KV cache size and the sequence cap decide batching and preemption; the seed case is "
         "an MTP arm at 0.80/2 against a baseline at 0.90/8.",
         "https://docs.vllm.ai/en/stable/configuration/optimization/#preemption",
         _memory_or_seqs),
    Rule("synthetic-acceptance", "Synthetic acceptance",
         "Benchmark-only acceptance: the verifier accepts drafts with scripted probabilities; "
         "the speed is real for that acceptance, the output is not valid text.",
         "https://github.com/ggml-org/llama.cpp/pull/27711", _synthetic, per_arm=True),
    Rule("engine-builds-differ", "Different engine builds on the two arms",
         "Speculative decoding speed changes between engine builds (e.g. MTP throughput fell "
         "15-20 % from one llama.cpp build to a later one).",
         "https://github.com/ggml-org/llama.cpp/issues/25489", _engine_builds),
    Rule("greedy-parity-temperature", "Temperature > 0 when greedy parity is claimed",
         "Speculative decoding is lossless only up to sampling: output parity between arms "
         "holds for greedy decoding, not for sampled text.",
         "https://docs.vllm.ai/en/stable/features/speculative_decoding/"
         "#lossless-guarantees-of-speculative-decoding", _greedy_parity),
    Rule("thinking-one-arm", "Thinking mode on in one arm",
         "Qwen3-style chat templates switch a thinking mode on or off; the arms then generate "
         "different text with different acceptance.",
         "https://huggingface.co/Qwen/Qwen3-8B#switching-between-thinking-and-non-thinking-mode",
         _thinking),
)


def all_rules() -> tuple[Rule, ...]:
    """The shared rules, then every registered engine's own (``rules`` of
    :func:`crossbench.engines.registry.register`)."""
    from crossbench.engines import registry

    return (*SHARED_RULES, *registry.engine_rules())


def __getattr__(name: str) -> Any:
    """``RULES``: :func:`all_rules`, computed when asked for (so an engine registered after
    this module loaded counts too)."""
    if name == "RULES":
        return all_rules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rule(rule_id: str) -> Rule:
    """A rule by id."""
    rules = all_rules()
    for r in rules:
        if r.id == rule_id:
            return r
    raise KeyError(f"no rule {rule_id!r}; rules: {', '.join(r.id for r in rules)}")


def check_pair(a: View, b: View, labels: tuple[str, str] = ("A", "B"),
               axis: str | None = "spec", greedy_parity: bool = False) -> list[Finding]:
    """Every finding of every rule on a pair of trials (A and B as normalized views)."""
    ctx = PairContext(labels, axis, greedy_parity)
    return [f for r in all_rules() for f in r.check(r, a, b, ctx)]


def check_trial(view: View, label: str = "trial") -> list[Finding]:
    """The findings of the rules that concern one trial alone."""
    ctx = PairContext((label, label), None, False, single=True)
    return [f for r in all_rules() if r.per_arm for f in r.check(r, view, view, ctx)]
