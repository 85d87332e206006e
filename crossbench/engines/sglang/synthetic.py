"""SGLang's simulated acceptance as the analysis predicts it (``synthetic`` of
:func:`crossbench.engines.registry.register`; the figures: :mod:`crossbench.analysis.synthetic`).

Read from SGLang 0.5.17: ``_sample_simulated_acc_len`` (srt/speculative/spec_utils.py) draws,
once per verification step for the whole batch, the floor or the ceiling of
``SGLANG_SIMULATE_ACC_LEN`` (match-expected: the ceiling with probability equal to the
fraction), clamped to [1, the step's longest commit]: ``max_tree_depth`` for the chain
algorithms (``eagle_utils.py``), the block size for DFLASH (``dflash_utils.py``), n + 1 in both
as crossbench configures them. Its counters count the tokens a request keeps: on the H100 on
2026-12-06 every request of 48 tokens counted 47 after its first (accepted + verification
steps), so a request's last step stops at its ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossbench.engines.base import SyntheticDraws


def synthetic_draws(spec: Mapping[str, Any]) -> SyntheticDraws | None:
    """How SGLang draws simulated acceptance for a recorded spec config (None without
    ``synth_len``). NGRAM verifies a tree whose depth crossbench does not set, so its longest
    commit, and with it the counters, is marked unpredictable."""
    if spec.get("synth_len") is None:
        return None
    if str(spec.get("type", "")).upper() == "NGRAM":
        return SyntheticDraws((), "NGRAM verifies a tree whose depth bounds the simulated "
                                  "length; crossbench does not set it")
    if not spec.get("n"):
        return SyntheticDraws((), "synth_len without a recorded n: the longest commit is "
                                  "unknown")
    return SyntheticDraws((), step_mean=float(spec["synth_len"]), step_max=int(spec["n"]) + 1)
