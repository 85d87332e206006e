"""The expert-union prediction for verifying a block of tokens on a mixture-of-experts target.

Under uniform random routing (each of k tokens picks ``top_k`` distinct experts of
``n_experts``) one MoE layer loads on average

    E[distinct] = n_experts * (1 - (1 - top_k / n_experts) ** k)

experts: an upper-end reference, since trained routers are more local
(docs/moe-vs-dense.md, "The expert-union prediction"). :func:`hf_bytes` splits a Hugging Face
checkpoint's bytes into those a pass reads whole and the routed experts'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from crossbench.errors import UserError

_HF_EXPERT = re.compile(r"\.layers\.(\d+)\.mlp\.experts\.\d+\.")


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


def distinct_experts_in_windows(routes: Sequence[Sequence[int]], k: int) -> float:
    """Mean number of distinct experts over every window of ``k`` consecutive tokens of one
    layer's routing (``routes[t]``: the experts token ``t`` routes to, in token order): the
    measured counterpart of :func:`expected_distinct_experts` for a verification block of k
    consecutive tokens. Needs at least k tokens."""
    if k < 1:
        raise UserError(f"k (tokens verified) must be >= 1, got {k}",
                        "pass the block size n+1 of the verification step")
    if len(routes) < k:
        raise UserError(f"{len(routes)} routed tokens hold no window of {k}",
                        "route a longer text")
    counts = [len(set().union(*routes[t:t + k])) for t in range(len(routes) - k + 1)]
    return sum(counts) / len(counts)


def hf_bytes(tensors: dict[str, tuple[tuple[int, ...], int]]) -> tuple[int, int, int, int]:
    """A Hugging Face checkpoint's bytes by what a one-token forward pass does with them, from
    each tensor's (shape, stored bytes): (read whole, the routed experts' tensors in all,
    the MTP layers' ``mtp.*``, not run; the number of layers with routed experts). Routed
    experts are tensors named per expert, ``...layers.{i}.mlp.experts.{e}.*``, as Qwen3-MoE
    and Qwen3.5-MoE publish them; the embedding counts one row where a separate ``lm_head``
    is read."""
    dense = expert = mtp = 0
    layers: set[int] = set()
    has_head = any(n.endswith("lm_head.weight") for n in tensors)
    for name, (shape, nbytes) in tensors.items():
        if name.startswith("mtp."):
            mtp += nbytes
        elif (m := _HF_EXPERT.search(name)) is not None:
            expert += nbytes
            layers.add(int(m[1]))
        elif name.endswith("embed_tokens.weight") and has_head:
            dense += nbytes // shape[0]  # HF stores [n_vocab, n_embd]: one row is read
        else:
            dense += nbytes
    return dense, expert, mtp, len(layers)
