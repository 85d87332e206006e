"""vLLM's Prometheus metrics: the families a release defines, rendered with prometheus_client,
and the counters crossbench reads besides acceptance (docs/vllm.md "Metrics"): prefix-cache
queries and hits (tokens), preemptions, and the gauge of running requests.

Every family carries the labels ``model_name`` and ``engine`` (one series per engine under
data parallel), in that order; ``vllm:spec_decode_num_accepted_tokens_per_pos`` adds
``position`` (0-based).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from crossbench.engines.prometheus import total
from crossbench.engines.vllm.profile import VllmProfile

SPEC_PREFIX = "vllm:spec_decode_"
IN_FLIGHT = "vllm:num_requests_running"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"

#: families vLLM registers only under options or hardware crossbench does not use
_CONDITIONAL = ("vllm:kv_block_", "vllm:watermark", "vllm:corrupted_requests",
                "vllm:lora_requests_info", "vllm:num_requests_kv_fetch", "vllm:diffusion_",
                "vllm:engine_sleep_state")
_ENGINE_LABELS = ["model_name", "engine"]


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


@dataclass
class VllmMetrics:
    """A registry holding a release's metric families as vLLM creates them at start-up.

    Per-engine children exist from the start (zeros), as vLLM's ``create_metric_per_engine``
    makes them; the speculative families exist only with speculation, with one
    ``position`` child per drafted position. Used by the stand-in and by the fixture maker.
    """

    profile: VllmProfile
    model_name: str
    engines: int = 1
    num_spec_tokens: int | None = None
    process_collectors: bool = True
    registry: CollectorRegistry = field(init=False)
    families: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        if self.process_collectors:  # vLLM serves the default registry, which has these
            for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(c)
        for fam in self.profile.metrics:
            name, labels = str(fam["name"]), fam.get("labels")
            if labels is None or name.startswith(_CONDITIONAL):
                continue
            if name.startswith(SPEC_PREFIX) and self.num_spec_tokens is None:
                continue  # SpecDecodingProm registers nothing without speculation
            kind, doc = fam["type"], str(fam.get("help") or name)
            metric: Any
            if kind == "counter":
                metric = Counter(name, doc, labels, registry=self.registry)
            elif kind == "gauge":
                metric = Gauge(name, doc, labels, registry=self.registry)
            else:
                buckets = fam.get("buckets") or Histogram.DEFAULT_BUCKETS
                metric = Histogram(name, doc, labels, registry=self.registry, buckets=buckets)
            self.families[name] = metric
            if list(labels) == _ENGINE_LABELS:
                for e in range(self.engines):
                    metric.labels(self.model_name, str(e))
            elif list(labels) == [*_ENGINE_LABELS, "position"]:
                for e in range(self.engines):
                    for pos in range(self.num_spec_tokens or 0):
                        metric.labels(self.model_name, str(e), str(pos))

    def child(self, name: str, engine: int, *extra: str) -> Any:
        """The series of family ``name`` (without ``_total``) for one engine."""
        return self.families[name].labels(self.model_name, str(engine), *extra)

    def has(self, name: str) -> bool:
        """Whether the release defines family ``name`` (and it is registered here)."""
        return name in self.families

    def text(self) -> str:
        """The exposition text, as vLLM's ``/metrics`` serves it."""
        return generate_latest(self.registry).decode()
