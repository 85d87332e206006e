"""Expected synthetic acceptance as the engines count it: exact, for requests of known length.

llama-server draws per-position rates (below); SGLang draws a whole step's length
(:func:`expected_steps`, after this list); vLLM draws per-position rates and clips nothing.

Under ``--spec-synth-rates p_1..p_n`` a full draft reaches position k with probability p_k, yet
llama-server's per-position figures read lower, most at late positions, and the more so the
shorter the requests. The rule comes from llama.cpp b11312, tools/server/server-context.cpp:

- ``server_slot::get_n_draft_max`` limits each draft to ``n_remaining() - 1`` tokens
  (``n_remaining() = n_predict_max - stats.n_gen``; also to ``n_ctx - prompt.n_tokens() - 2``,
  a term requests far inside their context never reach). ``update_slots`` drafts nothing when
  the limit is 0: that step samples one token on its own and counts as no draft.
- ``server_sample_and_accept_synth`` accepts drafted position i with probability
  p_i / p_{i-1} (the ``synth_probs`` that ``common_speculative_init`` builds in
  common/speculative.cpp) and stops at the first rejection.
- Every verification step counts in ``n_draft_verif_steps`` (``llamacpp:spec_decode_num_drafts``,
  the denominator of the per-position figure), clipped ones included, and a clipped draft
  cannot be accepted beyond its length.

A request of N output tokens gets its first token from the prompt pass; :func:`expected_counts`
follows the generated count g = 1..N through every step as a dynamic program, with no sampling.
Figures over several requests are ratios of summed expected counts, which is what counter
deltas estimate (docs/metrics.md, "Acceptance").

SGLang's simulated acceptance (``SGLANG_SIMULATE_ACC_LEN``, crossbench/engines/sglang/synthetic.py)
commits the floor or the ceiling of a mean length m each verification step and counts the
tokens a request keeps. A request of N output tokens takes its first from the prompt pass and
T = N - 1 over its steps; the expected mean acceptance length is then T / E[steps] (pooled:
the summed T over the summed expected steps), below m because the last step stops at the
token limit. :func:`expected_steps` gives E[steps] by a dynamic program over the tokens left.

vLLM 0.26.0 (crossbench/engines/vllm/synthetic.py) drafts n tokens at every step and counts
them all before it trims the output at ``max_tokens``: nothing is clipped, and its counters
estimate the configured rates themselves (``SyntheticDraws.clipped`` False).

Not modelled: a target whose memory cannot drop a rejected tail (recurrent or hybrid, such as
Qwen3.5) restores a checkpoint after a partial rejection and replays the accepted tokens. That
one counted step then emits one token more, which moves the clipping slightly (by about 0.001
at 48 tokens and n = 4 in a rough check).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from crossbench.analysis.records import output_tokens
from crossbench.engines.base import SyntheticDraws

CLIP_NOTE = ("expected as llama-server counts it: each draft is clipped to the tokens the "
             "request has left, less one (server_slot::get_n_draft_max, llama.cpp b11312), and "
             "clipped steps count as drafts, so late positions read below the configured rates")
"""The start of ``expected_note`` where the expected figures are given."""
STEP_NOTE = ("expected as SGLang counts it: each verification step commits the floor or the "
             "ceiling of the simulated mean length (SGLANG_SIMULATE_ACC_LEN, match-expected, "
             "one draw per step; spec_utils.py, SGLang 0.5.17), and a request keeps only the "
             "tokens up to its max_tokens, so its last step counts fewer; no per-position or "
             "draft-rate figures (SGLang's counters have none)")
"""The start of ``expected_note`` for an engine that draws a whole step's length."""
UNCLIPPED_NOTE = ("expected as vLLM counts it: every step drafts n tokens whatever the request "
                  "has left and counts them all before the output is trimmed at max_tokens "
                  "(scheduler.py, vLLM 0.26.0), so the counters estimate the configured rates; "
                  "the draws follow each request's seed, so trials that send the same seeded "
                  "requests draw the same counts")
"""The start of ``expected_note`` for an engine that counts every drafted position."""


@dataclass(frozen=True)
class ExpectedCounts:
    """Expected counter totals over requests: verification steps (``drafts``), drafted tokens
    and accepted tokens at each position (position 0 first)."""

    requests: int
    drafts: float
    draft_tokens: float
    per_position: tuple[float, ...]

    @property
    def accepted(self) -> float:
        """Expected accepted tokens (every position summed)."""
        return sum(self.per_position)

    def __add__(self, other: ExpectedCounts) -> ExpectedCounts:
        n = max(len(self.per_position), len(other.per_position))
        a = self.per_position + (0.0,) * (n - len(self.per_position))
        b = other.per_position + (0.0,) * (n - len(other.per_position))
        return ExpectedCounts(self.requests + other.requests, self.drafts + other.drafts,
                              self.draft_tokens + other.draft_tokens,
                              tuple(x + y for x, y in zip(a, b, strict=True)))

    def times(self, k: int) -> ExpectedCounts:
        """The totals of ``k`` such requests."""
        return ExpectedCounts(self.requests * k, self.drafts * k, self.draft_tokens * k,
                              tuple(c * k for c in self.per_position))


@dataclass(frozen=True)
class ExpectedFigures:
    """Acceptance figures expected from :class:`ExpectedCounts` (docs/metrics.md defines them):
    per-position acceptance (accepted at k / drafts), mean acceptance length (1 + accepted /
    drafts) and draft acceptance rate (accepted / drafted)."""

    per_position: list[float]
    mean_acceptance_length: float
    draft_acceptance_rate: float
    counts: ExpectedCounts


@lru_cache(maxsize=256)
def _counts(length: int, rates: tuple[float, ...]) -> ExpectedCounts:
    n = len(rates)
    reach = (1.0, *rates)  # reach[k]: a full draft is accepted up to position k
    mass = [0.0] * (length + 1)  # mass[g]: probability that a step begins with g generated
    if length >= 1:
        mass[1] = 1.0  # the prompt pass samples the first token
    drafts = tokens = 0.0
    accepted = [0.0] * n
    for g in range(1, length):
        p = mass[g]
        if p == 0.0:
            continue
        d = min(n, length - g - 1)  # n_remaining() - 1 = length - g - 1
        if d <= 0:
            mass[g + 1] += p  # no draft: one token sampled on its own, not counted
            continue
        drafts += p
        tokens += p * d
        for k in range(1, d + 1):
            accepted[k - 1] += p * reach[k]
        for a in range(d):  # a accepted, then a rejection: a + 1 tokens
            mass[g + a + 1] += p * (reach[a] - reach[a + 1])
        mass[g + d + 1] += p * reach[d]  # the whole clipped draft and the target's token
    return ExpectedCounts(1, drafts, tokens, tuple(accepted))


def expected_counts(length: int, rates: Sequence[float]) -> ExpectedCounts:
    """Expected counter totals of one request of ``length`` output tokens (``ignore_eos``,
    ``max_tokens`` = ``length``) under synthetic ``rates`` (unconditional, non-increasing, one
    per drafted position: n = ``len(rates)``), each draft clipped as llama-server clips it.
    A request of 2 tokens or fewer drafts nothing (all zero)."""
    return _counts(int(length), tuple(float(r) for r in rates))


def expected_figures(lengths: Iterable[int], rates: Sequence[float]) -> ExpectedFigures | None:
    """Figures expected over requests of the given output lengths (one entry per request):
    ratios of the summed expected counts; None when no request drafts (all of 2 tokens or
    fewer, or none)."""
    total = ExpectedCounts(0, 0.0, 0.0, ())
    for length, k in sorted(Counter(lengths).items()):
        total = total + expected_counts(length, rates).times(k)
    if total.drafts <= 0:
        return None
    return ExpectedFigures([c / total.drafts for c in total.per_position],
                           1.0 + total.accepted / total.drafts,
                           total.accepted / total.draft_tokens, total)


def _step_lengths(mean: float, longest: int) -> tuple[tuple[int, float], ...]:
    """The lengths one step commits and their probabilities: the floor and the ceiling of
    ``mean`` clamped to [1, ``longest``], weighted so that their mean is ``mean``."""
    m = max(1.0, min(float(longest), float(mean)))
    lower = int(m // 1)
    upper = lower + 1 if lower < longest else lower
    if upper == lower or m == lower:
        return ((lower, 1.0),)
    return ((lower, 1.0 - (m - lower)), (upper, m - lower))


@lru_cache(maxsize=256)
def _steps(tokens: int, mean: float, longest: int) -> float:
    lengths = _step_lengths(mean, longest)
    need = [0.0] * (tokens + 1)  # need[r]: expected steps to emit r tokens
    for r in range(1, tokens + 1):
        need[r] = 1.0 + sum(p * need[max(0, r - k)] for k, p in lengths)
    return need[tokens]


def expected_steps(tokens: int, mean: float, longest: int) -> float:
    """Expected verification steps to emit ``tokens`` tokens when each step commits the floor
    or the ceiling of ``mean`` (at most ``longest``; SGLang's match-expected draw) and the
    last one stops at the limit. 0 for no tokens."""
    if longest < 1:
        raise ValueError(f"longest {longest} < 1: a step commits at least one token")
    return _steps(max(0, int(tokens)), float(mean), int(longest))


def budget_length(r: Mapping[str, Any]) -> int | None:
    """Output tokens of a completed request that ran to its ``max_tokens`` (finish reason
    ``length``, or as many tokens as asked for where no reason is recorded); None for any
    other: its drafts near the end were not clipped by the budget as the rule assumes."""
    n = output_tokens(r)
    if r.get("status", "ok") != "ok" or n is None:
        return None
    reason = r.get("finish_reason")
    if reason == "length" or (reason is None and r.get("max_tokens") == n):
        return n
    return None


EXPECTED_KEYS = ("expected_per_position", "expected_mean_acceptance_length",
                 "expected_draft_acceptance_rate", "expected_note")
"""The keys :func:`expected_acceptance` adds to a summary's ``acceptance``."""


def expected_acceptance(draws: SyntheticDraws | None,
                        records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The summary's expected figures (:data:`EXPECTED_KEYS`) for the measured ``records`` under
    an engine's synthetic draws (``registry.synthetic_draws``; None: no synthetic acceptance,
    or no rule registered, and every key None). Where the figures cannot be predicted, they
    are None and ``expected_note`` says why."""
    out: dict[str, Any] = dict.fromkeys(EXPECTED_KEYS)
    if draws is None:
        return out
    if draws.unpredictable:
        out["expected_note"] = f"no expected figures: {draws.unpredictable}"
        return out
    measured = [r for r in records if not r.get("warmup")]
    if not measured:
        out["expected_note"] = "no expected figures: no measured requests"
        return out
    if not draws.clipped:  # rates without ``unpredictable`` are one per drafted position
        rates = list(draws.rates)
        out.update(expected_per_position=rates,
                   expected_mean_acceptance_length=1.0 + sum(rates),
                   expected_draft_acceptance_rate=sum(rates) / len(rates),
                   expected_note=f"{UNCLIPPED_NOTE}; over {len(measured)} requests")
        return out
    lengths = [budget_length(r) for r in measured]
    short = sum(1 for n in lengths if n is None)
    if short:
        out["expected_note"] = (f"no expected figures: {short} of {len(measured)} requests did "
                                "not complete at their max_tokens (failed, or stopped early), "
                                "so the draft limits of their last steps are unknown; run with "
                                "ignore_eos")
        return out
    known = [n for n in lengths if n is not None]
    span = f"{min(known)}" if min(known) == max(known) else f"{min(known)}-{max(known)}"
    if draws.step_mean is not None and draws.step_max is not None:
        steps = sum(expected_steps(n - 1, draws.step_mean, draws.step_max) for n in known)
        if steps <= 0:
            out["expected_note"] = ("no expected figures: no request was long enough to "
                                    "verify (2 output tokens or more)")
            return out
        out.update(expected_mean_acceptance_length=sum(n - 1 for n in known) / steps,
                   expected_note=f"{STEP_NOTE}; over {len(known)} requests of {span} tokens")
        return out
    figures = expected_figures(known, draws.rates)
    if figures is None:
        out["expected_note"] = ("no expected figures: no request was long enough to draft "
                                "(3 output tokens or more)")
        return out
    out.update(expected_per_position=figures.per_position,
               expected_mean_acceptance_length=figures.mean_acceptance_length,
               expected_draft_acceptance_rate=figures.draft_acceptance_rate,
               expected_note=f"{CLIP_NOTE}; over {len(known)} requests of {span} tokens")
    return out


def expected_for_run(config: Mapping[str, Any],
                     records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`expected_acceptance` for a recorded run config (a manifest's ``config``: its
    ``engine`` and ``engine_config.spec``), the one place the summary and the analysis read
    an engine's synthetic draws (``registry.synthetic_draws``)."""
    from crossbench.engines import registry

    spec = (config.get("engine_config") or {}).get("spec") or {}
    return expected_acceptance(registry.synthetic_draws(str(config.get("engine")), spec),
                               records)
