"""The ``sglang:*`` Prometheus names crossbench reads (from ``engines/sglang/*.yaml``, which
:mod:`.profile_gen` reads from ``sglang/srt/observability/metrics_collector.py``).

SGLang counts speculation in ``/metrics`` (served only with ``--enable-metrics``) by
verification steps alone: ``sglang:spec_verify_calls_total``. Its other speculative series
(``sglang:spec_accept_length``, ``sglang:spec_accept_rate``) are gauges of the last batch,
not counts. Accepted tokens follow from the counters: every request's first token comes
from its prefill and every later step is a verification step that emits its accepted drafts
plus one token, so accepted = generated tokens - finished requests - verification steps.
SGLang counts no drafted tokens (its per-request ``spec_num_proposed_drafts``, verification
steps x (``speculative_num_draft_tokens`` - 1), is reported only by the native
``/generate``), so the draft acceptance rate stays unknown from ``/metrics``.
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
ACCEPT_RATE = "sglang:spec_accept_rate"

COUNTERS = SpecCounters(drafts=VERIFY_CALLS, draft_tokens=None, accepted=None,
                        per_position=None, generated=GENERATED, requests=REQUESTS)
"""SGLang's speculative counters as the analysis reads them."""
