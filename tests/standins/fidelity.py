"""How faithful the client's timing is: comparisons of records against known truth.

Two kinds of truth:

- the stand-in's log of when it sent each chunk (:func:`timing_errors`), for tests and
  ``benchmarks/client_fidelity.py``;
- a real server's own account of decoding (llama-server's ``timings``), for
  :func:`decode_rate_agreement`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TimingErrors:
    """Client-measured minus true times of one request, in nanoseconds.

    ``ttft_ns`` is measured TTFT minus true TTFT, both from the client's send time, which
    reduces to ``t_first_chunk_ns - true_send_ns[0]``. ``gaps_ns[i]`` is the measured gap
    between chunks i and i+1 minus the true one. ``true_gaps_ns`` are the true gaps.
    """

    ttft_ns: int
    true_ttft_ns: int
    gaps_ns: list[int]
    true_gaps_ns: list[int]


def timing_errors(record: dict[str, Any], true_send_ns: Sequence[int]) -> TimingErrors:
    """Compare one record's chunk arrivals with the true send times of the same chunks.

    Raises ValueError when the counts differ (chunks lost or merged: the comparison would be
    meaningless).
    """
    chunks = record["chunks"]
    if len(chunks) != len(true_send_ns) or not chunks:
        raise ValueError(
            f"request {record['request_index']}: {len(chunks)} chunks received, "
            f"{len(true_send_ns)} sent"
        )
    t = [c[0] for c in chunks]
    gaps = [t[i + 1] - t[i] for i in range(len(t) - 1)]
    true_gaps = [true_send_ns[i + 1] - true_send_ns[i] for i in range(len(t) - 1)]
    return TimingErrors(
        ttft_ns=t[0] - true_send_ns[0],
        true_ttft_ns=true_send_ns[0] - record["t_sent_ns"],
        gaps_ns=[m - g for m, g in zip(gaps, true_gaps, strict=True)],
        true_gaps_ns=true_gaps,
    )


@dataclass(frozen=True)
class FidelitySummary:
    """Errors of many requests, summarised relative to the truth.

    ``ttft_rel_median``: median over requests of ``|TTFT error| / true TTFT``.
    ``gap_rel_median``: median over all gaps of ``|gap error|``, divided by the median true
    gap (relative to each gap itself would blow up on the rare near-zero true gap).
    ``itl_rel_median``: median over requests of the relative error of the mean inter-token
    gap ``(t_last - t_first) / (n - 1)``, the figure ITL reports usually give.
    """

    n_requests: int
    n_gaps: int
    ttft_abs_median_ms: float
    ttft_abs_max_ms: float
    ttft_rel_median: float
    gap_abs_median_ms: float
    gap_rel_median: float
    itl_rel_median: float
    true_gap_median_ms: float


def summarise(errors: Sequence[TimingErrors]) -> FidelitySummary:
    """Summarise :func:`timing_errors` over requests (see :class:`FidelitySummary`)."""
    if not errors:
        raise ValueError("no requests to summarise")
    ttft_abs = [abs(e.ttft_ns) for e in errors]
    ttft_rel = [abs(e.ttft_ns) / e.true_ttft_ns for e in errors if e.true_ttft_ns > 0]
    gap_abs = [abs(g) for e in errors for g in e.gaps_ns]
    true_gaps = [g for e in errors for g in e.true_gaps_ns]
    itl_rel = [
        abs(sum(e.gaps_ns)) / sum(e.true_gaps_ns)
        for e in errors
        if e.true_gaps_ns and sum(e.true_gaps_ns) > 0
    ]
    true_gap_median = statistics.median(true_gaps) if true_gaps else 0.0
    gap_abs_median = statistics.median(gap_abs) if gap_abs else 0.0
    return FidelitySummary(
        n_requests=len(errors),
        n_gaps=len(gap_abs),
        ttft_abs_median_ms=statistics.median(ttft_abs) / 1e6,
        ttft_abs_max_ms=max(ttft_abs) / 1e6,
        ttft_rel_median=statistics.median(ttft_rel) if ttft_rel else float("nan"),
        gap_abs_median_ms=gap_abs_median / 1e6,
        gap_rel_median=gap_abs_median / true_gap_median if true_gap_median else float("nan"),
        itl_rel_median=statistics.median(itl_rel) if itl_rel else float("nan"),
        true_gap_median_ms=true_gap_median / 1e6,
    )


@dataclass(frozen=True)
class DecodeRateAgreement:
    """Client-measured decode rate against the server's own, for one request.

    Both rates count the tokens after the first chunk over the time from the first chunk to
    the last: the client's ``(N - n0) / (t_last_chunk - t_first_chunk)`` and the server's
    ``(predicted_n - n0) / predicted_ms``, where ``n0`` is the tokens of the first chunk and
    ``N`` the tokens of all chunks. llama-server starts ``predicted_ms`` when it samples the
    first token (its first chunk carries ``predicted_n: 1, predicted_ms: ~0``) and stops it
    at the last, so both measure the same window; the build checked (commit 0c1e570) reports
    ``predicted_per_second`` as exactly this server rate. A plain ``predicted_n /
    predicted_ms`` would count the first token without its time and read high by
    ``n0 / (predicted_n - n0)`` (0.8 % at 128 tokens), more than the 0.5 % this check allows.
    ``rel_error = client / server - 1``.
    """

    request_index: int
    n_tokens: int
    first_chunk_tokens: int
    client_tokens_per_s: float
    server_tokens_per_s: float
    server_reported_per_s: float | None
    rel_error: float


def decode_rate_agreement(record: dict[str, Any]) -> DecodeRateAgreement | None:
    """Compare one llama-server record's decode rate with the server's ``timings``.

    Returns None when the record cannot be compared: not ok, fewer than two chunks, no
    ``timings``, or chunks without token counts (ask for ``timings_per_token: true``). Chunk
    token counts must add up to ``predicted_n`` (else the final event carried tokens the
    chunks did not, and the windows differ): then None as well.
    """
    timings = record.get("timings")
    chunks = record["chunks"]
    if record["status"] != "ok" or len(chunks) < 2 or not timings:
        return None
    counts = [c[1] for c in chunks]
    if any(n is None for n in counts):
        return None
    n_total = sum(counts)
    n0 = counts[0]
    predicted_n = timings.get("predicted_n")
    predicted_ms = timings.get("predicted_ms")
    if predicted_n != n_total or not predicted_ms or n_total <= n0:
        return None
    span_s = (chunks[-1][0] - chunks[0][0]) / 1e9
    if span_s <= 0:
        return None
    client = (n_total - n0) / span_s
    server = (predicted_n - n0) / (predicted_ms / 1e3)
    reported = timings.get("predicted_per_second")
    return DecodeRateAgreement(
        request_index=record["request_index"],
        n_tokens=n_total,
        first_chunk_tokens=n0,
        client_tokens_per_s=client,
        server_tokens_per_s=server,
        server_reported_per_s=float(reported) if reported is not None else None,
        rel_error=client / server - 1.0,
    )
