"""vLLM's synthetic acceptance as the analysis predicts it (``synthetic`` of
:func:`crossbench.engines.registry.register`; the figures: :mod:`crossbench.analysis.synthetic`).

Read from vLLM 0.26.0 (the wheel crossbench packs):

- ``SpeculativeConfig._resolve_synthetic_acceptance_rates`` (vllm/config/speculative.py) keeps
  ``synthetic_acceptance_rates`` as given and turns ``synthetic_acceptance_length`` L into the
  minimum-variance schedule: 1.0 for the first floor(L - 1) positions, the fraction next, 0 after
  (``_acceptance_length_to_rates``), not llama.cpp's geometric rates.
- Both rejection samplers accept drafted position i with the conditional rate
  p_i / p_{i-1} (``unconditional_to_conditional_rates``, vllm/v1/spec_decode/utils.py) and stop
  at the first rejection; a padded draft token (-1) is rejected. The V1 model runner (which
  crossbench's matrices select, ``VLLM_USE_V2_MODEL_RUNNER=0``) takes n uniforms a step from a
  generator seeded by the request's seed (``generate_uniform_probs``,
  vllm/v1/sample/rejection_sampler.py); the V2 runner's kernel
  (vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py) draws u = rand(seed, position).
  Either way a trial that sends the same seeded requests draws the same counts as the last.
- The scheduler (vllm/v1/core/sched/scheduler.py) schedules n draft tokens at every step,
  limited only by ``max_model_len``, and counts a step's drafted and accepted tokens
  (``make_spec_decoding_stats``) before ``check_stop`` trims the output at ``max_tokens``. So
  nothing is clipped at a request's end, as llama-server clips: the counters estimate the
  configured rates themselves (``clipped=False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossbench.engines.base import SyntheticDraws, synthetic_rates

FINDS = ("ngram", "ngram_gpu", "suffix", "custom_class")
"""Methods whose steps may draft fewer than n real tokens: the n-gram and suffix proposers
propose only what they find in the text (``ngram_gpu`` pads the rest with -1, which the
sampler rejects), and a custom class may do anything. Their counters cannot be predicted."""


def synth_len_rates(length: float, n: int) -> list[float]:
    """The rates vLLM 0.26.0 draws with for ``synthetic_acceptance_length`` ``length`` and
    ``n`` drafted tokens: the minimum-variance schedule, 1.0 for the first floor(length - 1)
    positions, the fraction left at the next, 0.0 after (``_acceptance_length_to_rates``).
    Example: ``synth_len_rates(3.5, 4) == [1.0, 1.0, 0.5, 0.0]``."""
    if n <= 0:
        return []
    drafts = length - 1
    full = int(drafts)
    return ([1.0] * full + [drafts - full] + [0.0] * (n - full - 1))[:n]


def synthetic_draws(spec: Mapping[str, Any]) -> SyntheticDraws | None:
    """How vLLM draws synthetic acceptance for a recorded spec config (None without
    ``synth_rates`` or ``synth_len``). Unclipped: every step drafts n tokens and counts them
    all. An n-gram or suffix method drafts only what it finds and is marked ``unpredictable``."""
    rates = synthetic_rates(spec, synth_len_rates)
    if rates is None:
        return None
    if isinstance(rates, str):
        return SyntheticDraws((), rates, clipped=False)
    kind = str(spec.get("type", ""))
    why = None
    if kind in FINDS:
        why = (f"method {kind} may draft fewer than n real tokens a step (n-gram and suffix "
               "methods draft only what they find)")
    return SyntheticDraws(rates, why, clipped=False)
