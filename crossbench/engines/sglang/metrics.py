"""The ``sglang:*`` Prometheus names crossbench reads (from ``engines/sglang/*.yaml``).

SGLang counts speculation only by verification steps (``sglang:spec_verify_calls_total``),
so accepted tokens follow from the counters: generated tokens - finished requests -
verification steps; drafted tokens stay unknown (docs/sglang.md).
"""

from __future__ import annotations

from crossbench.engines.base import SpecCounters

PREFIX = "sglang:spec_"
"""``spec_metric_prefix`` of the registration (what manifests record)."""

VERIFY_CALLS = "sglang:spec_verify_calls_total"
GENERATED = "sglang:generation_tokens_total"
PROMPT = "sglang:prompt_tokens_total"
REQUESTS = "sglang:num_requests_total"
RUNNING = "sglang:num_running_reqs"
ACCEPT_LENGTH = "sglang:spec_accept_length"

COUNTERS = SpecCounters(drafts=VERIFY_CALLS, draft_tokens=None, accepted=None,
                        per_position=None, generated=GENERATED, requests=REQUESTS)
"""SGLang's speculative counters as the analysis reads them."""
