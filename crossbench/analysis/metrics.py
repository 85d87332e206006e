"""Per-request figures in the shape the analysis needs, built on ``summary.request_metrics``
(each figure defined once, there or here)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from crossbench.analysis.summary import NS_PER_MS, request_metrics


@dataclass(frozen=True, slots=True)
class RequestFigures:
    """One measured (non-warm-up), completed request and its client-side figures."""

    trial: int
    prompt_id: str
    category: str
    occurrence: int
    request_index: int
    tokens: float | None
    rate_tok_s: float | None
    decode_ms: float | None
    e2e_ms: float | None
    ttft_ms: float | None
    max_tokens: int | None
    text: str | None
    token_ids: tuple[int, ...] | None
    #: (characters, tokens) of ``text`` at the end of each content chunk, cumulative
    chunk_ends: tuple[tuple[int, int], ...] | None = None
    #: the trial whose server start served this request: the trial itself, unless trials
    #: reused one server (``server_start`` in the record); trials of one start share its state
    start: int | None = None
    #: reasoning the engine returned apart from ``text`` (a chat body's
    #: ``message.reasoning_content``, kept by an import as ``reasoning_text``); crossbench's
    #: own client already folds streamed ``reasoning_content`` into ``text``
    reasoning: str | None = None

    @property
    def generated(self) -> str | None:
        """Everything the model generated: reasoning, then content (None when neither is
        recorded). Output parity compares this, as the client measures it."""
        if self.reasoning is None:
            return self.text
        return self.reasoning + (self.text or "")

    @property
    def server_start(self) -> int:
        """The server start that served this request (its trial when none is recorded)."""
        return self.trial if self.start is None else self.start

    def tokens_before(self, char: int) -> int | None:
        """Tokens that lie wholly before character ``char`` of the text (from chunk ends)."""
        if self.chunk_ends is None:
            return None
        return max((tok for end, tok in self.chunk_ends if end <= char), default=0)

    @property
    def key(self) -> tuple[int, str, int]:
        """Pairing key: the same prompt, sent for the same time, in the same trial."""
        return (self.trial, self.prompt_id, self.occurrence)


@dataclass
class StatusCounts:
    """Requests by outcome; warm-up requests are counted apart."""

    ok: int = 0
    error: int = 0
    incomplete: int = 0
    warmup: int = 0


def request_figures(records: Iterable[Mapping[str, Any]]
                    ) -> tuple[list[RequestFigures], StatusCounts]:
    """Figures of every measured ``ok`` request, in record order, and the status counts."""
    out: list[RequestFigures] = []
    counts = StatusCounts()
    seen: dict[tuple[int, str], int] = {}
    for r in records:
        if r.get("warmup"):
            counts.warmup += 1
            continue
        status = str(r.get("status", "error"))
        if status != "ok":
            if status == "incomplete":
                counts.incomplete += 1
            else:
                counts.error += 1
            continue
        counts.ok += 1
        trial, prompt = int(r.get("trial", 0)), str(r.get("prompt_id", r.get("request_index")))
        occ = seen.get((trial, prompt), 0)
        seen[(trial, prompt)] = occ + 1
        m = request_metrics(r)
        ids = r.get("token_ids")
        out.append(RequestFigures(
            trial=trial, prompt_id=prompt, category=str(r.get("category") or "unknown"),
            occurrence=occ, request_index=int(r.get("request_index", len(out))),
            tokens=m["tokens"], rate_tok_s=m["rate_tok_s"], decode_ms=m["decode_ms"],
            e2e_ms=m["e2e_ms"], ttft_ms=m["ttft_ms"], max_tokens=r.get("max_tokens"),
            text=r.get("text"), token_ids=tuple(ids) if isinstance(ids, list) else None,
            chunk_ends=_chunk_ends(r),
            start=int(r["server_start"]) if r.get("server_start") is not None else None,
            reasoning=reasoning_text(r)))
    return out, counts


REASONING_KEYS = ("reasoning_text", "reasoning_content")
"""Record fields that may hold the reasoning an engine returned apart from the content,
first found wins (``reasoning_text``: an importer's; ``reasoning_content``: the field as
OpenAI-compatible chat bodies spell it)."""


def reasoning_text(r: Mapping[str, Any]) -> str | None:
    """The reasoning a record carries apart from ``text`` (:data:`REASONING_KEYS`), or None."""
    for key in REASONING_KEYS:
        v = r.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def _chunk_ends(r: Mapping[str, Any]) -> tuple[tuple[int, int], ...] | None:
    """Cumulative (characters, tokens) per content chunk, when the record has both counts."""
    chars, chunks = r.get("chunk_chars"), r.get("chunks") or []
    if not isinstance(chars, list) or len(chars) != len(chunks):
        return None
    out, c, t = [], 0, 0
    for n_chars, chunk in zip(chars, chunks, strict=True):
        if not isinstance(chunk[1], int):
            return None
        c, t = c + int(n_chars), t + chunk[1]
        out.append((c, t))
    return tuple(out)


def pooled_rate(figures: Iterable[RequestFigures]) -> float | None:
    """Pooled decode rate: sum(tokens - 1) / sum(decode seconds) over requests with a rate
    (``summarize_records``' ``pooled_tok_s``; a test holds the two equal)."""
    tok = sec = 0.0
    for f in figures:
        if f.rate_tok_s is not None and f.decode_ms and f.tokens is not None:
            tok += f.tokens - 1
            sec += f.decode_ms / 1e3
    return tok / sec if sec else None


def token_itl_ms(records: Iterable[Mapping[str, Any]]) -> npt.NDArray[np.float64]:
    """Token-level inter-token latencies of requests (docs/metrics.md, "Token-level ITL and
    chunk gaps"), as one array.

    Gaps between two requests' chunks are not counted; chunks whose token count is unknown
    give nothing. Vectorized: the chunks of all requests are flattened once.
    """
    chunk_lists = [r.get("chunks") or [] for r in records]
    lens = np.fromiter(map(len, chunk_lists), dtype=np.int64, count=len(chunk_lists))
    total = int(lens.sum())
    if total < 2:
        return np.zeros(0)
    flat = list(itertools.chain.from_iterable(chunk_lists))
    times = np.fromiter(map(itemgetter(0), flat), dtype=np.int64, count=total)
    tokens = np.array(list(map(itemgetter(1), flat)), dtype=float)[1:]  # None -> nan
    gaps = np.diff(times) / NS_PER_MS
    keep = np.isfinite(tokens) & (tokens > 0) & (tokens == np.floor(tokens))
    starts = np.cumsum(lens)[:-1]
    keep[starts[starts > 0] - 1] = False  # from one request's last chunk to the next's first
    k = tokens[keep].astype(np.int64)
    return np.repeat(gaps[keep] / k, k)
