"""Acceptance accounting: one definition of each figure, whatever the engine calls it.

Drafts, draft acceptance rate, mean acceptance length (MAL = 1 + accepted / drafts) and
per-position acceptance (unconditional, so MAL = 1 + sum p_k), all fractions in [0, 1], are
defined in docs/metrics.md, "Acceptance". Run-level figures come from ``/metrics`` counter
deltas under the names each engine registers (:class:`crossbench.engines.base.SpecCounters`),
per-request figures from each response's counts; the integrity checks tie the two together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from crossbench.analysis.records import output_tokens
from crossbench.engines.base import SpecCounters
from crossbench.engines.prometheus import labelled, total

#: llama-server's counter prefix (the default); other engines register theirs
PREFIX = "llamacpp:spec_decode_"


@dataclass
class CounterDelta:
    """Speculative counters accumulated over a measured window (after minus before)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_position: list[float] = field(default_factory=list)
    present: bool = False
    #: False when the engine counts no drafted tokens (``draft_tokens`` then stays 0 and the
    #: draft acceptance rate is unknown; SGLang counts verification steps only)
    draft_tokens_counted: bool = True

    def add(self, other: CounterDelta) -> None:
        """Accumulate another window (e.g. the next trial)."""
        if other.present:
            self.draft_tokens_counted = (self.draft_tokens_counted if self.present else True) \
                and other.draft_tokens_counted
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        n = max(len(self.per_position), len(other.per_position))
        a = self.per_position + [0.0] * (n - len(self.per_position))
        b = other.per_position + [0.0] * (n - len(other.per_position))
        self.per_position = [x + y for x, y in zip(a, b, strict=True)]
        self.present = self.present or other.present


def spec_counters(prefix: str) -> SpecCounters:
    """The counters of the engine registered with ``prefix`` (its ``spec_metric_prefix``,
    which manifests record); the standard four names under that prefix for any other."""
    from crossbench.engines import registry

    return registry.counters_for_prefix(prefix)


def series_delta(before: Mapping[str, float], after: Mapping[str, float],
                 name: str | None) -> float | None:
    """``name``'s growth between two parsed scrapes, summed over label sets (vLLM's ``engine``
    under data parallel); None without a name or when the series is missing after."""
    if name is None:
        return None
    a, b = total(dict(after), name), total(dict(before), name)
    return None if a is None else a - (b or 0.0)


def counter_delta(before: Mapping[str, float], after: Mapping[str, float],
                  prefix: str | SpecCounters = PREFIX) -> CounterDelta:
    """Delta of the speculative counters between two parsed ``/metrics`` scrapes.

    ``prefix`` is the engine's counter prefix (``llamacpp:spec_decode_``,
    ``vllm:spec_decode_``; registered with the engine, whose :class:`SpecCounters` it
    selects) or the counters themselves. Series that differ only in other labels (vLLM's
    ``engine`` under data parallel) are summed.
    """
    names = prefix if isinstance(prefix, SpecCounters) else spec_counters(prefix)
    d = partial(series_delta, before, after)
    drafts = d(names.drafts)
    tokens = d(names.draft_tokens)
    acc = d(names.accepted)
    if names.accepted is None:  # accepted = generated - requests - drafts
        generated, requests = d(names.generated), d(names.requests)
        if drafts is not None and generated is not None and requests is not None:
            acc = max(0.0, generated - requests - drafts)
    per_pos: list[float] = []
    if names.per_position is not None:
        pa = labelled(dict(after), names.per_position, "position")
        pb = labelled(dict(before), names.per_position, "position")
        top = max((int(k) for k in pa), default=-1)
        per_pos = [pa.get(str(k), 0.0) - pb.get(str(k), 0.0) for k in range(top + 1)]
    counted = names.draft_tokens is not None
    present = drafts is not None and acc is not None and (tokens is not None or not counted)
    return CounterDelta(drafts or 0.0, tokens or 0.0, acc or 0.0, per_pos, present, counted)


@dataclass
class Acceptance:
    """Acceptance figures of a measured window, with their raw counts."""

    source: str  # "metrics" (counter deltas) or "timings" (per-request sums only)
    drafts: float | None
    draft_tokens: float
    accepted_tokens: float
    draft_acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float]
    per_request_draft_tokens: float
    per_request_accepted_tokens: float
    requests_with_drafts: int
    requests_without_drafts: int
    #: tokens per target step estimated from per-request counts where no counter gives the
    #: number of drafts: (tokens - 1) / ((tokens - 1) - accepted), each target step
    #: emitting its accepted drafts plus one token of its own (see ``mal_note``)
    mean_acceptance_length_estimate: float | None = None
    #: why the mean acceptance length is missing, or how its estimate was made
    mal_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        return asdict(self)


def per_request_sums(records: Iterable[Mapping[str, Any]]) -> tuple[float, float, int, int]:
    """(drafted, accepted, requests with draft counts, requests without): from llama-server's
    ``timings`` (``draft_n``, ``draft_n_accepted``) or vLLM's per-request
    ``metrics.speculative_decoding`` (``num_draft_tokens``, ``num_accepted_draft_tokens``)."""
    drafted = accepted = 0.0
    with_d = without = 0
    for r in records:
        counts = draft_counts(r)
        if counts is None:
            without += 1
            continue
        drafted += counts[0]
        accepted += counts[1]
        with_d += 1
    return drafted, accepted, with_d, without


def draft_counts(r: Mapping[str, Any]) -> tuple[float, float] | None:
    """(drafted, accepted) of one record from its per-request counts (``timings`` of
    llama-server, ``metrics.speculative_decoding`` of vLLM), None without them."""
    t = r.get("timings") or {}
    sd = (r.get("metrics") or {}).get("speculative_decoding") or {}
    if "draft_n" in t:
        return float(t["draft_n"]), float(t.get("draft_n_accepted", 0))
    if "num_draft_tokens" in sd:
        return float(sd["num_draft_tokens"]), float(sd.get("num_accepted_draft_tokens", 0))
    return None


def all_accepted(records: Iterable[Mapping[str, Any]]) -> tuple[int, float] | None:
    """(requests, drafted tokens) when every measured, completed request that drafted had
    every draft accepted (accepted == drafted in each), None otherwise or when no such
    request carries per-request counts. With a real drafter some drafts are rejected, so
    this shape points at a misread counter (docs/analysis.md, ``acceptance_counter``)."""
    requests, drafted = 0, 0.0
    for r in records:
        if r.get("warmup") or r.get("status", "ok") != "ok":
            continue
        counts = draft_counts(r)
        if counts is None or counts[0] <= 0:
            continue
        if counts[1] != counts[0]:
            return None
        requests += 1
        drafted += counts[0]
    return (requests, drafted) if requests else None


def steps_estimate(records: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
    """(tokens after the first, target steps) summed over records with per-request accepted
    counts: every target step emits its accepted drafts plus one token, so steps =
    (tokens - 1) - accepted, whether or not each step drafted; None without such records."""
    after = steps = 0.0
    for r in records:
        t = r.get("timings") or {}
        sd = (r.get("metrics") or {}).get("speculative_decoding") or {}
        acc = t.get("draft_n_accepted", sd.get("num_accepted_draft_tokens"))
        n = output_tokens(r)
        if r.get("warmup") or r.get("status", "ok") != "ok" or n is None or n < 2 or \
                not isinstance(acc, int | float):
            continue
        after += n - 1
        steps += n - 1 - float(acc)
    return (after, steps) if steps > 0 else None


def compute(delta: CounterDelta | None, records: Iterable[Mapping[str, Any]]) -> Acceptance:
    """Acceptance from counter deltas (preferred) and per-request timings."""
    records = list(records)
    drafted, accepted, with_d, without = per_request_sums(records)
    if delta is not None and delta.present:
        drafts: float | None = delta.drafts
        tok, acc, source = delta.draft_tokens, delta.accepted, "metrics"
        per_pos = [c / delta.drafts for c in delta.per_position] if delta.drafts else []
    else:
        drafts, tok, acc, source, per_pos = None, drafted, accepted, "timings", []
    rate = acc / tok if tok else None
    mal = 1.0 + acc / drafts if drafts else None
    estimate, note = None, None
    if mal is None and with_d:
        est = steps_estimate(records)
        if est is not None:
            estimate = est[0] / est[1]
            note = ("no draft counter: estimated as tokens per target step, (tokens - 1) / "
                    "((tokens - 1) - accepted), from per-request counts")
        else:
            note = "no draft counter and no per-request token counts"
    elif mal is None:
        note = "no draft counts at all (no counters, no per-request drafted/accepted)"
    return Acceptance(source, drafts, tok, acc, rate, mal, per_pos, drafted, accepted,
                      with_d, without, estimate, note)


@dataclass
class Check:
    """One integrity check: its name, outcome, and what was compared."""

    name: str
    passed: bool
    detail: str


def integrity(acc: Acceptance, delta: CounterDelta | None, n: int | None,
              spec_enabled: bool) -> list[Check]:
    """Checks that fail loudly when acceptance figures cannot be trusted."""
    checks: list[Check] = []
    if not spec_enabled:
        ok = acc.draft_tokens == 0 and acc.per_request_draft_tokens == 0
        return [Check("no_drafts_without_spec", ok,
                      f"drafted tokens {acc.draft_tokens:g} (expected 0: speculation is off)")]
    counted = delta is not None and delta.present
    tokens_counted = delta is None or delta.draft_tokens_counted
    drafting = acc.requests_with_drafts > 0 or (counted and (
        acc.draft_tokens > 0 if tokens_counted else (acc.drafts or 0) > 0))
    checks.append(Check(
        "spec_configured_and_drafting", drafting,
        f"{acc.requests_with_drafts} requests report draft_n, {acc.requests_without_drafts} "
        f"do not; counters: {acc.draft_tokens:g} drafted tokens"
        + ("" if drafting else ": speculation is configured but nothing was drafted")))
    if tokens_counted:
        checks.append(Check(
            "accepted_le_drafted", acc.accepted_tokens <= acc.draft_tokens
            and acc.per_request_accepted_tokens <= acc.per_request_draft_tokens,
            f"accepted {acc.accepted_tokens:g} <= drafted {acc.draft_tokens:g} (counters); "
            f"{acc.per_request_accepted_tokens:g} <= {acc.per_request_draft_tokens:g} "
            "(timings)"))
    elif n is not None:  # no drafted-token counter: at most n accepted per verification step
        most = (acc.drafts or 0.0) * n
        checks.append(Check(
            "accepted_le_drafted", acc.accepted_tokens <= most + 1e-9,
            f"accepted {acc.accepted_tokens:g} <= verification steps x n = {most:g} "
            "(the engine counts no drafted tokens)"))
    if n is not None and acc.mean_acceptance_length is not None:
        checks.append(Check(
            "mal_le_n_plus_1", acc.mean_acceptance_length <= n + 1 + 1e-9,
            f"MAL {acc.mean_acceptance_length:.4f} <= n+1 = {n + 1}"))
    if delta is not None and delta.present and acc.requests_with_drafts:
        same = (abs(delta.draft_tokens - acc.per_request_draft_tokens) < 0.5
                and abs(delta.accepted - acc.per_request_accepted_tokens) < 0.5)
        checks.append(Check(
            "per_request_sums_equal_counters", same,
            f"timings: drafted {acc.per_request_draft_tokens:g}, accepted "
            f"{acc.per_request_accepted_tokens:g}; /metrics deltas: drafted "
            f"{delta.draft_tokens:g}, accepted {delta.accepted:g}"))
    if delta is not None and delta.present:
        if delta.per_position:
            s = sum(delta.per_position)
            mono = all(b <= a for a, b in zip(delta.per_position, delta.per_position[1:],
                                               strict=False))
            checks.append(Check(
                "per_position_consistent", abs(s - delta.accepted) < 0.5 and mono,
                f"sum over positions {s:g} vs accepted {delta.accepted:g}; "
                f"non-increasing: {mono}"))
    else:
        checks.append(Check("counters_present", False,
                            "the speculative counters are missing from /metrics"))
    return checks
