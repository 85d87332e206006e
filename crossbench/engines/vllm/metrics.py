"""vLLM's Prometheus metrics: the counters crossbench reads besides acceptance (docs/vllm.md
"Metrics"): prefix-cache queries and hits (tokens), preemptions, and the gauge of running
requests.

Every family carries the labels ``model_name`` and ``engine`` (one series per engine under
data parallel), in that order; ``vllm:spec_decode_num_accepted_tokens_per_pos`` adds
``position`` (0-based).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from crossbench.engines.prometheus import total

SPEC_PREFIX = "vllm:spec_decode_"
IN_FLIGHT = "vllm:num_requests_running"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"


@dataclass
class CacheDelta:
    """Prefix-cache and preemption counters over a window (after minus before, summed over
    engines); None where the release does not export the counter."""

    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    preemptions: float | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits / queries (a fraction), None without queries."""
        if not self.prefix_cache_queries or self.prefix_cache_hits is None:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view, with the hit rate."""
        return {**asdict(self), "prefix_cache_hit_rate": self.prefix_cache_hit_rate}


def cache_delta(before: dict[str, float], after: dict[str, float]) -> CacheDelta:
    """Prefix-cache queries and hits and preemptions between two parsed scrapes."""
    def d(name: str) -> float | None:
        a, b = total(after, name), total(before, name)
        return None if a is None else a - (b or 0.0)

    return CacheDelta(d(PREFIX_CACHE_QUERIES), d(PREFIX_CACHE_HITS), d(PREEMPTIONS))
