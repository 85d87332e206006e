"""The expert-union prediction for verifying a block of tokens on a mixture-of-experts target.

Verifying ``k`` tokens at batch 1 runs every token through each MoE layer; a token routes to
``top_k`` of ``n_experts`` experts, and the layer must load the union of the experts its
tokens picked. Under uniform random routing (each token picks ``top_k`` distinct experts, every
``top_k``-subset equally likely, tokens independent) a given expert is missed by one token with
probability ``1 - top_k / n_experts``, so the expected number of distinct experts loaded is

    E[distinct] = n_experts * (1 - (1 - top_k / n_experts) ** k).

This is an upper-end reference, not a measurement: real routers are more local (consecutive
tokens of a text often reuse experts, and routing is load-balanced only over many tokens), so a
trained model loads fewer distinct experts for the same ``k``; the fixtures' random weights
route near uniformly. docs/moe-vs-dense.md says where the measured curve is still to come.
"""

from __future__ import annotations

import numpy as np

from crossbench.errors import UserError


def _check(n_experts: int, top_k: int, k: int) -> None:
    if n_experts < 1:
        raise UserError(f"n_experts must be at least 1, got {n_experts}",
                        "pass the model's expert count (num_experts)")
    if not 1 <= top_k <= n_experts:
        raise UserError(f"top_k must be in 1..n_experts ({n_experts}), got {top_k}",
                        "pass the model's routed experts per token (num_experts_per_tok)")
    if k < 0:
        raise UserError(f"k (tokens verified) must be >= 0, got {k}",
                        "pass the block size n+1 of the verification step")


def expected_distinct_experts(n_experts: int, top_k: int, k: int) -> float:
    """Expected number of distinct experts one MoE layer loads for ``k`` tokens at batch 1,
    each routing to ``top_k`` of ``n_experts`` uniformly at random (see the module docstring:
    real routers are more local, so this is the high end)."""
    _check(n_experts, top_k, k)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** k)


def expert_union_ratio(n_experts: int, top_k: int, k: int) -> float:
    """Expected distinct experts for ``k`` tokens over those for one token (``top_k``): how
    many times the expert weights of a one-token step the verification of ``k`` tokens reads
    under uniform random routing (k = 0 gives 0)."""
    return expected_distinct_experts(n_experts, top_k, k) / top_k


def simulate_distinct_experts(n_experts: int, top_k: int, k: int, trials: int,
                              seed: int = 0) -> float:
    """Monte Carlo mean of distinct experts for ``k`` tokens with uniform random top-k routing
    (seeded), the check of :func:`expected_distinct_experts`."""
    _check(n_experts, top_k, k)
    rng = np.random.default_rng(seed)
    total = 0
    for _ in range(trials):
        used = np.zeros(n_experts, dtype=bool)
        for _ in range(k):
            used[rng.choice(n_experts, size=top_k, replace=False)] = True
        total += int(used.sum())
    return total / trials
