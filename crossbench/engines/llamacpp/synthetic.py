"""llama-server's synthetic acceptance as the analysis predicts it (``synthetic`` of
:func:`crossbench.engines.registry.register`; the figures: :mod:`crossbench.analysis.synthetic`).

Read from llama.cpp b11312: ``common_speculative_synth_rates_resolve`` (common/speculative.cpp)
turns ``--spec-synth-rates`` or ``--spec-synth-len`` into unconditional per-position rates;
``server_sample_and_accept_synth`` (tools/server/server-context.cpp) accepts each drafted
position with the conditional probability rate_k / rate_{k-1} and stops at the first
rejection; ``server_slot::get_n_draft_max`` limits every draft to the tokens the request has
left, less one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossbench.engines.base import SyntheticDraws, synthetic_rates


def synth_len_rates(length: float, n: int) -> list[float]:
    """The rates llama-server draws with for ``--spec-synth-len length`` and ``n`` drafted
    tokens: geometric, p, p^2, ..., p^n, with p found by 32 bisection steps so that
    p + ... + p^n = length - 1 (``common_speculative_synth_rates_resolve``)."""
    if n <= 0:
        return []
    if length >= n + 1:
        p = 1.0
    elif length <= 1:
        p = 0.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(32):
            mid = 0.5 * (lo + hi)
            total, term = 0.0, mid
            for _ in range(n):
                total += term
                term *= mid
            if total < length - 1:
                lo = mid
            else:
                hi = mid
        p = 0.5 * (lo + hi)
    return [p ** (k + 1) for k in range(n)]


def synthetic_draws(spec: Mapping[str, Any]) -> SyntheticDraws | None:
    """How llama-server draws synthetic acceptance for a recorded spec config (None when it
    sets no ``synth_rates`` or ``synth_len``). The counters can be predicted only where every
    draft is as long as the limit allows. Two things break that, and are marked
    ``unpredictable``: an n-gram drafter, which drafts what it finds, and ``p_min`` or
    ``n_min``, which cut or drop drafts."""
    rates = synthetic_rates(spec, synth_len_rates)
    if rates is None:
        return None
    if isinstance(rates, str):
        return SyntheticDraws((), rates)
    kind = str(spec.get("type", ""))
    why = None
    if not kind.startswith("draft-"):
        why = (f"spec type {kind} drafts only what it finds (n-gram), so drafts can be shorter "
               "than the limit")
    elif float(spec.get("p_min") or 0) > 0:
        why = f"p_min {spec['p_min']:g} ends drafts early"
    elif int(spec.get("n_min") or 0) > 1:
        why = f"n_min {spec['n_min']} drops drafts the limit shortens"
    return SyntheticDraws(rates, why)
