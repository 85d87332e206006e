"""llama-server's own known interactions (registered with the engine: ``rules`` of
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
    num,
    synthetic,
)


def _parallel_mtp(rule: Rule, a: View, b: View, ctx: PairContext) -> list[Finding]:
    out = []
    for label, v in arms(a, b, ctx):
        if kind(v) != "llama-server" or not mtp(v):
            continue
        slots = max(num(v.get("server.parallel")) or 1, num(v.get("server_props.total_slots"))
                    or 1)
        if slots > 1 and synthetic(v):  # the collapse is of acceptance, which is scripted
            out.append(rule.finding(
                "caveat",
                f"{label}: llama-server with MTP and {slots:g} parallel slots, under synthetic "
                "acceptance: the acceptance collapse of multi-slot MTP cannot show (the rates "
                "are scripted), so the speed stands; real acceptance with this setup would not",
                "measure real MTP acceptance with parallel: 1 (-np 1), or with a build that "
                "fixes multi-slot MTP"))
        elif slots > 1:
            out.append(rule.finding(
                "confounding",
                f"{label}: llama-server with MTP and {slots:g} parallel slots; with more than "
                "one slot MTP drafts read other slots' hidden states and acceptance collapses, "
                "so the MTP arm is slowed by the setup, not by MTP",
                "run MTP arms with parallel: 1 (-np 1), or use a build that fixes multi-slot "
                "MTP and record it"))
    return out


RULES: tuple[Rule, ...] = (
    Rule("llama-parallel-slots-mtp", "llama-server parallel slots > 1 with MTP",
         "With more than one slot, MTP drafts of slots other than the first read the wrong "
         "hidden states and acceptance collapses.",
         "https://github.com/ggml-org/llama.cpp/issues/27572", _parallel_mtp, per_arm=True),
)
