"""vLLM's synthetic acceptance: the rule read from vLLM 0.26.0's source
(crossbench/engines/vllm/synthetic.py), and the recorded vLLM cells of ``examples/`` held
against it and against llama-server's clipped rule (docs/metrics.md, "Ground truth")."""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standins.study import request

from crossbench.analysis.synthetic import (
    EXPECTED_KEYS,
    expected_acceptance,
    expected_figures,
)
from crossbench.engines import registry
from crossbench.engines.base import SyntheticDraws
from crossbench.engines.vllm.synthetic import synth_len_rates

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RATES = [0.9, 0.81, 0.729, 0.6561]


def test_rates_as_given_and_unclipped() -> None:
    draws = registry.synthetic_draws("vllm", {"type": "eagle3", "n": 4, "synth_rates": RATES})
    assert draws == SyntheticDraws(tuple(RATES), clipped=False)
    assert registry.synthetic_draws("vllm", {"type": "eagle3", "n": 4}) is None


def test_synth_len_gives_vllms_minimum_variance_schedule() -> None:
    """``_acceptance_length_to_rates`` of vLLM 0.26.0, not llama.cpp's geometric rates."""
    assert synth_len_rates(3.5, 4) == [1.0, 1.0, 0.5, 0.0]
    assert synth_len_rates(1.0, 3) == [0.0, 0.0, 0.0]
    assert synth_len_rates(5.0, 4) == [1.0, 1.0, 1.0, 1.0]
    draws = registry.synthetic_draws("vllm", {"type": "dflash", "n": 4, "synth_len": 3.5})
    assert draws is not None and draws.rates == (1.0, 1.0, 0.5, 0.0)
    no_n = registry.synthetic_draws("vllm", {"type": "dflash", "synth_len": 3.5})
    assert no_n is not None and no_n.unpredictable and "without a recorded n" in no_n.unpredictable


@pytest.mark.parametrize("method", ["ngram", "ngram_gpu", "suffix", "custom_class"])
def test_methods_that_may_draft_less_are_unpredictable(method: str) -> None:
    draws = registry.synthetic_draws("vllm", {"type": method, "n": 4, "synth_rates": RATES})
    assert draws is not None and draws.unpredictable and method in draws.unpredictable
    got = expected_acceptance(draws, [request(trial=0, index=0, prompt_id="p", category="c",
                                              t_sent_ns=0, rate_tok_s=1.0, tokens=48)])
    assert got["expected_per_position"] is None
    assert got["expected_note"].startswith("no expected figures: method " + method)


def test_the_expectation_is_the_configured_rates_whatever_the_lengths() -> None:
    """No clipping: 24- and 48-token requests, and one stopped early, expect the rates."""
    draws = SyntheticDraws(tuple(RATES), clipped=False)
    records = [request(trial=0, index=i, prompt_id=f"p{i}", category="c", t_sent_ns=i,
                       rate_tok_s=1.0, tokens=n) for i, n in enumerate([24, 48, 48])]
    records[0]["finish_reason"] = "stop"
    got = expected_acceptance(draws, records)
    assert got["expected_per_position"] == RATES
    assert got["expected_mean_acceptance_length"] == pytest.approx(1 + sum(RATES))
    assert got["expected_draft_acceptance_rate"] == pytest.approx(sum(RATES) / 4)
    assert got["expected_note"].startswith("expected as vLLM counts it")
    assert got["expected_note"].endswith("over 3 requests")
    assert expected_acceptance(draws, []) == {**dict.fromkeys(EXPECTED_KEYS),
                                              "expected_note": "no expected figures: no "
                                                               "measured requests"}


def _recorded() -> Iterator[tuple[str, dict[str, Any], list[int], list[float]]]:
    """(cell, summary, max_tokens of the measured requests, configured rates) for every vLLM
    cell with synthetic rates in the archives under ``examples/``."""
    for archive in sorted(EXAMPLES.rglob("*.zip")):
        with zipfile.ZipFile(archive) as z:
            names = set(z.namelist())
            for name in sorted(names):
                parts = name.split("/")
                if parts[-1] != "summary.json" or "cells" not in parts:
                    continue
                folder = name[: -len("summary.json")]
                manifest = json.loads(z.read(folder + "manifest.json"))
                config = manifest["config"]
                spec = config["engine_config"].get("spec") or {}
                if config["engine"] != "vllm" or not spec.get("synth_rates"):
                    continue
                lengths = [json.loads(line)["max_tokens"]
                           for line in z.read(folder + "requests.jsonl").splitlines()
                           if line.strip() and not json.loads(line).get("warmup")]
                yield (f"{archive.parent.name}/{parts[-2]}", json.loads(z.read(name)),
                       lengths, [float(r) for r in spec["synth_rates"]])


def _sd_of_mal(rates: list[float], drafts: float) -> float:
    """Standard error of a mean acceptance length over ``drafts`` independent steps under the
    configured rates: the accepted count L has P(L >= k) = rates[k-1]."""
    var = sum((2 * k - 1) * r for k, r in enumerate(rates, 1)) - sum(rates) ** 2
    return math.sqrt(var / drafts)


def test_recorded_vllm_cells_read_the_configured_rates_not_the_clipped_ones() -> None:
    """Every recorded vLLM synthetic cell: (1) its trials drew the same counts (the draws
    follow the requests' seeds and positions), so one trial's drafts are the sample; (2) its
    mean acceptance length lies within 3 standard errors of the configured figure; (3) where
    llama-server's clipped expectation for the same requests lies 3 standard errors or more
    from the configured one (the c=16 cells of 128 requests at n = 8 and 15), the cell reads
    closer to the configured figure, and 2.5 standard errors or more from the clipped one."""
    separating: list[tuple[float, float, float]] = []  # drafts, z configured, z clipped
    c1_48: list[float] = []  # |z| against the configured figure of the 48-token c=1 cells
    cells = list(_recorded())
    assert len(cells) >= 40, len(cells)
    for cell, summary, lengths, rates in cells:
        trials = [t["acceptance"] for t in summary["per_trial"]]
        assert len({(t["drafts"], t["accepted_tokens"]) for t in trials}) == 1, cell
        drafts = trials[0]["drafts"]
        mal = summary["acceptance"]["mean_acceptance_length"]
        se = _sd_of_mal(rates, drafts)
        configured = 1 + sum(rates)
        assert abs(mal - configured) < 3 * se, (cell, mal, configured, se)
        if cell.endswith("__c1") and set(lengths) == {48}:
            c1_48.append(abs(mal - configured) / se)
        clipped = expected_figures(lengths, rates)
        assert clipped is not None
        if configured - clipped.mean_acceptance_length >= 3 * se:
            off = abs(mal - clipped.mean_acceptance_length)
            assert off > abs(mal - configured), (cell, mal, clipped.mean_acceptance_length)
            assert off >= 2.5 * se, (cell, mal, clipped.mean_acceptance_length, se)
            separating.append((drafts, abs(mal - configured) / se, off / se))
    # the figures docs/metrics.md gives for these cells
    flat = " ".join((Path(__file__).resolve().parent.parent / "docs" / "metrics.md")
                    .read_text().split())
    drafts = [d for d, *_ in separating]
    near = max(z for _, z, _ in separating)
    far = [z for *_, z in separating]
    assert (f"Five c=16 cells of 128 requests (n = 8 and 15, {min(drafts):.0f}-"
            f"{max(drafts):,.0f} drafts)") in flat
    assert f"within {near:.2f} standard errors" in flat
    assert f"{min(far):.2f}-{max(far):.2f} from the clipped one" in flat
    assert len(separating) == 5
    assert f"within {math.ceil(10 * max(c1_48)) / 10:.1f} standard errors of the configured " \
        "figure." in flat


def test_the_c1_cells_repeat_one_draw() -> None:
    """The 48-token c=1 cells at alpha 0.9, n = 4, whatever their method and machine: most
    drew exactly the same counts in a trial, 1,168 accepted over 388 drafts (docs/metrics.md
    gives the count and the figure)."""
    c1 = [s["per_trial"][0]["acceptance"] for cell, s, lengths, _ in _recorded()
          if cell.endswith("a0.9__n4__builtin-mixed__c1") and set(lengths) == {48}]
    same = [a for a in c1 if (a["drafts"], a["accepted_tokens"]) == (388, 1168)]
    assert f"{1 + 1168 / 388:.3f}" == "4.010"
    flat = " ".join((Path(__file__).resolve().parent.parent / "docs" / "metrics.md")
                    .read_text().split())
    assert (f"{len(same)} of the {len(c1)} recorded 48-token c=1 cells at alpha 0.9, n = 4 "
            "read MAL 4.010 on 388 drafts") in flat
    assert len(same) >= len(c1) - 2
