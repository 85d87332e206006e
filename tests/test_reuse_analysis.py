"""Trials that reused one server start share its state: the trial draw of the bootstrap is over
server starts, never over the reused trials as if each were a restart."""

from __future__ import annotations

from typing import Any

import numpy as np

from crossbench.analysis.metrics import request_figures
from crossbench.analysis.paired import StatsOptions, compare

OPTS = StatsOptions(resamples=4000, seed=1, strata="none", min_samples=4)
PROMPTS = [f"p{i}" for i in range(8)]


def _records(rates: dict[int, float], starts: dict[int, int] | None,
             jitter: np.random.Generator) -> list[dict[str, Any]]:
    """Measured records: 8 prompts per trial, each decoding 100 tokens at the trial's rate
    (with 1 % prompt noise); ``starts`` maps trial -> its server start."""
    out = []
    for t, rate in rates.items():
        for i, p in enumerate(PROMPTS):
            r = rate * float(np.exp(jitter.normal(0, 0.01)))
            rec: dict[str, Any] = {
                "trial": t, "prompt_id": p, "category": "c", "request_index": i,
                "warmup": False, "status": "ok", "t_sent_ns": 0, "t_first_chunk_ns": 10**7,
                "t_done_ns": 10**7 + int(99 / r * 1e9), "output_tokens": 100,
                "chunks": [[10**7, 1]] + [[10**7 + int(k / r * 1e9), 1] for k in range(1, 100)],
            }
            if starts is not None:
                rec["server_start"] = starts[t]
            out.append(rec)
    return out


def _speedup(starts: dict[int, int] | None) -> dict[str, Any]:
    # two server starts with very different states (+30 % and -10 %), three trials on each;
    # within a start the trials agree: they share the start's state
    g = np.random.default_rng(0)
    spec_rates = {0: 130.0, 1: 130.0, 2: 130.0, 3: 90.0, 4: 90.0, 5: 90.0}
    base_rates = dict.fromkeys(range(6), 100.0)
    spec, _ = request_figures(_records(spec_rates, starts, g))
    base, _ = request_figures(_records(base_rates, starts, g))
    out: dict[str, Any] = compare(spec, base, OPTS)["speedup"]
    return out


def test_reused_trials_are_resampled_as_server_starts() -> None:
    reused = _speedup({0: 0, 1: 0, 2: 0, 3: 3, 4: 3, 5: 3})
    naive = _speedup(None)  # the same numbers read as six independent starts
    assert reused["design"] == "prompts x server starts, unstratified"
    assert naive["design"] == "prompts x trials, unstratified"
    assert (reused["n_trials"], reused["n_server_starts"]) == (6, 2)
    assert "n_server_starts" not in naive
    assert reused["geomean"] == naive["geomean"]  # the point estimate does not change
    lo_r, hi_r = reused["ci95"]
    lo_n, hi_n = naive["ci95"]
    # two starts carry two states: the honest interval is far wider than six starts' would be
    assert (hi_r - lo_r) > 1.3 * (hi_n - lo_n)
    assert lo_r < 0.95 and hi_r > 1.25  # it spans both starts' states


def test_fresh_trials_keep_their_design() -> None:
    """A record naming its own trial as its start is a fresh start: nothing changes."""
    fresh = _speedup({t: t for t in range(6)})
    naive = _speedup(None)
    assert fresh["design"] == naive["design"] and fresh["ci95"] == naive["ci95"]
    assert "n_server_starts" not in fresh
