"""The target's verification cost curve by block size k, and an MoE target's expert-union
prediction of it.

:func:`curve` gives, per k, the llama-bench forward pass over k tokens in ms, in plain decode
steps and relative to one token. For an MoE GGUF, :func:`weight_split` splits the bytes a pass
reads into dense bytes (read once whatever k is; the MTP layers left out) and bytes per routed
expert, and :func:`predicted_ratio` gives (dense + D(k) * per_expert) / (dense + top_k *
per_expert) under the memory-bound :data:`ASSUMPTION`. Method, assumption and figures:
docs/moe-vs-dense.md, "Measuring the verification curve".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crossbench.analysis.decompose import Measured
from crossbench.analysis.moe import expected_distinct_experts
from crossbench.errors import UserError

MAX_K = 512
"""Largest block size: ``run_llama_bench`` sets the batch to max(k, 512) tokens, and a
verification block is a few drafted tokens; a larger k is a typo."""

ASSUMPTION = ("memory-bound: a forward pass's time is proportional to the weight bytes it "
              "reads, each routed expert read once per pass; compute, the KV cache and "
              "per-pass overheads are left out; routing uniform random (real routers are "
              "more local)")
"""The prediction's model in one line, as the command prints it and writes it to --out."""

_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_[a-z_]*_exps\.")
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class WeightSplit:
    """The bytes a forward pass of an MoE target reads, split for the union prediction."""

    n_experts: int
    top_k: int
    dense_bytes: int
    """Read once per pass whatever k is (attention, router, shared expert, head, one
    embedding row)."""
    bytes_per_expert: int
    """One routed expert's tensors summed over the MoE layers."""
    moe_layers: int
    skipped_mtp_bytes: int
    """Bytes of the MTP (nextn) layers, which the target's forward pass does not run."""


def predicted_ratio(split: WeightSplit, k: int) -> float:
    """Predicted forward cost of k tokens over that of one token under the memory-bound
    assumption (:data:`ASSUMPTION`): ``(dense + D(k) * per_expert) / (dense + top_k *
    per_expert)``."""
    one = split.dense_bytes + split.top_k * split.bytes_per_expert
    if one <= 0:
        raise UserError("the GGUF's forward pass reads no bytes",
                        "pass a GGUF with weights (a real model file)")
    d_k = expected_distinct_experts(split.n_experts, split.top_k, k)
    return (split.dense_bytes + d_k * split.bytes_per_expert) / one


def _int_field(fields: dict[str, Any], key: str) -> int | None:
    """An integer metadata value of a GGUFReader's fields, or None when absent."""
    f = fields.get(key)
    if f is None:
        return None
    value = f.contents()
    if isinstance(value, list):  # per-layer arrays: the MoE layers share one value here
        nonzero = [int(v) for v in value if int(v) > 0]
        return max(nonzero) if nonzero else 0
    return int(value)


def weight_split(gguf: Path) -> WeightSplit | None:
    """The dense / per-expert byte split of ``gguf`` from its header, or None when its metadata
    names no routed experts (a dense model). Works for quantized GGUFs: sizes are the tensors'
    stored bytes."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(gguf))
    except (ValueError, OSError, IndexError, KeyError, TypeError) as e:  # a truncated file
        raise UserError(f"cannot read GGUF {gguf}: {e or type(e).__name__}",
                        "pass a GGUF model file") from e
    fields = reader.fields
    arch_field = fields.get("general.architecture")
    if arch_field is None:
        raise UserError(f"{gguf}: no general.architecture in its header",
                        "pass a GGUF model file")
    arch = str(arch_field.contents())
    n_experts = _int_field(fields, f"{arch}.expert_count") or 0
    top_k = _int_field(fields, f"{arch}.expert_used_count") or 0
    if n_experts <= 1 or top_k < 1:
        return None
    n_layer = _int_field(fields, f"{arch}.block_count") or 0
    n_mtp = _int_field(fields, f"{arch}.nextn_predict_layers") or 0
    first_mtp = n_layer - n_mtp if n_layer else None
    sizes = {t.name: (int(t.n_bytes), [int(x) for x in t.shape]) for t in reader.tensors}
    dense = expert = mtp = 0
    moe_layers: set[int] = set()
    for name, (nbytes, shape) in sizes.items():
        layer = _LAYER.match(name)
        if layer and first_mtp is not None and int(layer[1]) >= first_mtp:
            mtp += nbytes
        elif (m := _EXPERT_TENSOR.match(name)) is not None:
            if shape[-1] != n_experts:
                raise UserError(f"{gguf}: expert tensor {name} has {shape[-1]} experts, the "
                                f"header says {n_experts}", "pass an unmodified GGUF")
            expert += nbytes
            moe_layers.add(int(m[1]))
        elif name == "token_embd.weight" and "output.weight" in sizes:
            dense += nbytes // shape[-1]  # one row; the head is output.weight
        else:
            dense += nbytes  # with a tied head, token_embd is read whole as the head
    if not moe_layers:
        return None
    return WeightSplit(n_experts=n_experts, top_k=top_k, dense_bytes=dense,
                       bytes_per_expert=expert // n_experts, moe_layers=len(moe_layers),
                       skipped_mtp_bytes=mtp)


def check_k(ks: list[int]) -> None:
    """UserError naming ``--k`` unless every block size is in 1..:data:`MAX_K`."""
    if not ks:
        raise UserError("--k: no block sizes", "give e.g. --k 1-16")
    bad = [k for k in ks if not 1 <= k <= MAX_K]
    if bad:
        raise UserError(f"--k: {bad[0]} is outside 1..{MAX_K}",
                        f"give block sizes from 1 to {MAX_K}, e.g. --k 1-16")


def curve(m: Measured, ks: list[int], split: WeightSplit | None) -> list[dict[str, Any]]:
    """One row per k: ``verify_ms``, ``plain_steps`` (over the plain step), ``x_k1`` (over
    the one-token pass, when k = 1 was measured) and, for an MoE target, ``distinct_experts``
    and ``predicted_x_k1`` (:func:`predicted_ratio`)."""
    one = m.verify_ms.get(1)
    rows = []
    for k in ks:
        if k not in m.verify_ms:
            raise UserError(f"no forward pass of {k} tokens was measured",
                            f"add {k} to llama-bench's -p list")
        ms = m.verify_ms[k]
        row: dict[str, Any] = {"k": k, "verify_ms": ms, "plain_ms": m.plain_ms,
                               "plain_steps": ms / m.plain_ms,
                               "x_k1": ms / one if one else None,
                               "distinct_experts": None, "predicted_x_k1": None}
        if split is not None:
            row["distinct_experts"] = expected_distinct_experts(split.n_experts, split.top_k, k)
            row["predicted_x_k1"] = predicted_ratio(split, k)
        rows.append(row)
    return rows


def split_dict(split: WeightSplit | None) -> dict[str, Any] | None:
    """The split as JSON-ready fields (None for a dense target)."""
    return None if split is None else asdict(split)


def format_rows(name: str, rows: list[dict[str, Any]]) -> str:
    """A plain-text table of :func:`curve`'s rows for one target."""
    def f(x: Any, spec: str = ".3f") -> str:
        return "-" if x is None else format(x, spec) if isinstance(x, float) else str(x)

    head = ["target", "k", "ms", "plain steps", "x k=1", "predicted x k=1", "distinct exp"]
    lines = ["  ".join(f"{h:>15}" for h in head)]
    for r in rows:
        cells = [name, r["k"], f(r["verify_ms"]), f(r["plain_steps"]), f(r["x_k1"]),
                 f(r["predicted_x_k1"]), f(r["distinct_experts"], ".2f")]
        lines.append("  ".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)
