"""Output parity: does speculative decoding still produce the baseline's output?

Pairs (same trial, prompt and occurrence) compare everything the model generated
(``RequestFigures.generated``: reasoning, then content): the exact-match rate and, where a
pair differs, the first diverging character and token (from ``token_ids``, else the
baseline's chunk boundaries). Synthetic acceptance, temperature > 0 (lengths only) and
records without text are said not comparable. Verdicts and token positions:
docs/analysis.md, "Output parity".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from crossbench.analysis.paired import lengths, pair
from crossbench.analysis.rundir import CellData

MAX_EXAMPLES = 3


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first element where two sequences differ (None when equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _temperature(cell: CellData) -> float:
    return float(cell.load.get("temperature") or 0.0)


def _dist(values: list[int]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": float(min(values)), "median": float(np.median(values)),
            "max": float(max(values))}


def parity(spec: CellData, base: CellData) -> dict[str, Any]:
    """Parity of a speculative cell's outputs against its baseline's (see module docstring)."""
    if spec.synthetic:
        return {"verdict": "not applicable (synthetic acceptance)", "compared": 0,
                "note": "synthetic acceptance accepts drafts by chance: its text is not valid"}
    p = pair(spec.figures, base.figures)
    pairs = list(zip(p.spec, p.base, strict=True))
    if _temperature(spec) > 0 or _temperature(base) > 0:
        ln = lengths(p)
        n = ln["compared"]
        return {"verdict": "lengths only (temperature > 0)", "compared": n,
                "note": "sampled outputs differ by design; only output lengths are compared",
                "equal_length_rate": (n - ln["mismatched"]) / n if n else None,
                "mean_tokens": {"spec": ln["spec_mean_tokens"],
                                "baseline": ln["baseline_mean_tokens"]}}
    texts = [(s, b) for s, b in pairs if s.generated is not None and b.generated is not None]
    if not texts:
        return {"verdict": "not applicable (no output text)", "compared": 0,
                "note": "the records carry no output text"}
    chars: list[int] = []
    toks: list[int] = []
    examples: list[dict[str, Any]] = []
    for s, b in texts:
        st, bt = s.generated, b.generated
        assert st is not None and bt is not None
        if st == bt:
            continue
        pos = first_divergence(st, bt)
        assert pos is not None  # the texts differ
        chars.append(pos)
        tpos = None
        if s.token_ids is not None and b.token_ids is not None:
            tpos = first_divergence(s.token_ids, b.token_ids)
        elif b.reasoning is None:  # the token holding the first differing character
            tpos = b.tokens_before(pos)
        if tpos is not None:
            toks.append(tpos)
        if len(examples) < MAX_EXAMPLES:
            examples.append({"prompt_id": s.prompt_id, "trial": s.trial, "char": pos,
                             "token": tpos, "spec": st[max(0, pos - 10):pos + 20],
                             "baseline": bt[max(0, pos - 10):pos + 20]})
    with_ids = sum(1 for s, b in texts if s.token_ids is not None and b.token_ids is not None)
    with_chunks = sum(1 for s, b in texts if b.chunk_ends is not None)
    out: dict[str, Any] = {
        "verdict": "identical" if not chars else "diverges",
        "compared": len(texts),
        "exact_match_rate": (len(texts) - len(chars)) / len(texts),
        "first_divergence_chars": _dist(chars),
        "first_divergence_tokens": _dist(toks) if with_ids or with_chunks else None,
        "token_level": ("token ids" if with_ids else
                        "chunk boundaries" if with_chunks else None),
        "examples": examples,
        "compares": ("reasoning and content" if any(s.reasoning is not None
                                                    or b.reasoning is not None
                                                    for s, b in texts) else "text"),
    }
    if not with_ids and with_chunks:
        out["note"] = ("token positions count the baseline's streamed tokens before the first "
                       "differing character (exact where chunks carry one token, as "
                       "llama-server streams them)")
    elif not with_ids:
        out["note"] = ("records carry no token ids: divergence is in characters of the text "
                       "only")
    return out
