"""Expected synthetic acceptance of llama-server (``crossbench/analysis/synthetic.py``): the
dynamic program against an enumeration of every accept/reject path of llama-server's loop and
a seeded simulation of it, its limits, mixed request lengths, the engine's rule, and the
summary keys with the stored-summary contract (no engine runs here; the real server:
``tests/test_server_llama.py``)."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import request

from crossbench.analysis.synthetic import (
    EXPECTED_KEYS,
    budget_length,
    expected_acceptance,
    expected_counts,
    expected_figures,
    expected_steps,
)
from crossbench.cli.main import cli
from crossbench.engines import registry
from crossbench.engines.base import SyntheticDraws
from crossbench.engines.llamacpp.synthetic import synth_len_rates
from crossbench.importers.records import ImportedCell, run_config, write_import

RATES = [0.9, 0.7, 0.5, 0.2]
GEOMETRIC = [0.9 ** k for k in range(1, 5)]


def conditional(rates: Sequence[float]) -> list[float]:
    """llama.cpp's ``synth_probs``: rate_k / rate_{k-1}, 0 after a zero rate."""
    out, prev = [], 1.0
    for r in rates:
        out.append(r / prev if prev > 0 else 0.0)
        prev = r
    return out


def enumerate_paths(length: int, rates: Sequence[float]) -> tuple[float, float, list[float]]:
    """(drafts, drafted tokens, accepted per position) expected over one request, by walking
    every accept/reject path of llama-server's loop with its probability: no dynamic program,
    the conditional draws as llama-server makes them."""
    n, probs = len(rates), conditional(rates)
    totals = [0.0, 0.0, [0.0] * n]

    def step(g: int, weight: float) -> None:
        if g >= length or weight == 0.0:
            return
        limit = min(n, length - g - 1)
        if limit <= 0:
            step(g + 1, weight)
            return
        totals[0] += weight  # type: ignore[operator]
        totals[1] += weight * limit  # type: ignore[operator]
        reach = weight
        for i in range(limit):  # accept position i with probs[i], or stop here
            step(g + i + 1, reach * (1 - probs[i]))
            reach *= probs[i]
            totals[2][i] += reach  # type: ignore[index]
        step(g + limit + 1, reach)

    if length >= 1:
        step(1, 1.0)
    return totals[0], totals[1], totals[2]  # type: ignore[return-value]


def simulate(lengths: Sequence[int], rates: Sequence[float], seed: int
             ) -> tuple[int, int, list[int]]:
    """llama-server's loop with real draws: (drafts, drafted tokens, accepted per position)."""
    rng, probs, n = random.Random(seed), conditional(rates), len(rates)
    drafts = tokens = 0
    per_pos = [0] * n
    for length in lengths:
        g = 1
        while g < length:
            limit = min(n, length - g - 1)
            if limit <= 0:
                g += 1
                continue
            drafts += 1
            tokens += limit
            a = 0
            while a < limit and rng.random() < probs[a]:
                per_pos[a] += 1
                a += 1
            g += a + 1
    return drafts, tokens, per_pos


@pytest.mark.parametrize(("length", "rates"), [
    (3, RATES), (5, [0.8, 0.3]), (9, [1.0, 0.5, 0.0]), (12, RATES), (13, GEOMETRIC),
    (11, [0.6]), (10, [0.95, 0.9, 0.8, 0.7, 0.6, 0.5]),
])
def test_dynamic_program_equals_every_path_enumerated(length: int, rates: list[float]) -> None:
    got = expected_counts(length, rates)
    drafts, tokens, per_pos = enumerate_paths(length, rates)
    assert got.requests == 1
    assert math.isclose(got.drafts, drafts, rel_tol=1e-12)
    assert math.isclose(got.draft_tokens, tokens, rel_tol=1e-12)
    assert len(got.per_position) == len(rates)
    for a, b in zip(got.per_position, per_pos, strict=True):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize(("length", "rates"), [(48, GEOMETRIC), (48, RATES), (24, RATES)])
def test_dynamic_program_agrees_with_a_seeded_simulation(length: int, rates: list[float]) -> None:
    """20 000 simulated requests; each figure within 4 binomial standard errors of its
    expectation over the simulated drafts (a false alarm about once in 16 000 per figure;
    the seed makes it one fixed draw)."""
    drafts, tokens, per_pos = simulate([length] * 20_000, rates, seed=1)
    want = expected_figures([length], rates)
    assert want is not None
    assert abs(drafts - want.counts.drafts * 20_000) <= 4 * math.sqrt(drafts)
    for k, e in enumerate(want.per_position):
        se = math.sqrt(e * (1 - e) / drafts) or 1e-12
        assert abs(per_pos[k] / drafts - e) <= 4 * se, (k, per_pos[k] / drafts, e)
    assert abs(sum(per_pos) / tokens - want.draft_acceptance_rate) <= 0.01


def test_the_figures_at_48_and_384_tokens_read_below_the_rates_most_at_late_positions() -> None:
    """The H100 run with max_tokens 48, n = 4 and rates 0.9^k measured 0.886, 0.782, 0.700,
    0.605 and with 384 tokens 0.906, 0.827, 0.727, 0.656 (one seeded run each)."""
    short, long = expected_figures([48], GEOMETRIC), expected_figures([384], GEOMETRIC)
    assert short is not None and long is not None
    assert short.per_position[0] == pytest.approx(0.9, abs=1e-12)  # never clipped at n >= 1
    gaps = [r - e for r, e in zip(GEOMETRIC, short.per_position, strict=True)]
    assert gaps == sorted(gaps) and gaps[-1] > 0.04  # the gap grows with the position
    assert all(r > s > 0 for r, s in zip(GEOMETRIC[1:], short.per_position[1:], strict=True))
    for got, measured in zip(short.per_position, (0.886, 0.782, 0.700, 0.605), strict=True):
        assert abs(got - measured) <= 0.03  # about 2 standard errors at ~580 drafts
    for got, measured in zip(long.per_position, (0.906, 0.827, 0.727, 0.656), strict=True):
        assert abs(got - measured) <= 0.03


def test_long_requests_give_the_configured_rates() -> None:
    """Only the last few steps of a request are clipped: the figures approach the rates as
    1 / length, and MAL and the draft acceptance rate approach 1 + sum(rates) and
    sum(rates) / n."""
    for length in (2_000, 20_000):
        f = expected_figures([length], RATES)
        assert f is not None
        bound = 2 * len(RATES) * (1 + sum(RATES)) / length  # clipped steps over all steps
        for got, want in zip(f.per_position, RATES, strict=True):
            assert -1e-9 <= want - got <= bound
        assert -1e-9 <= 1 + sum(RATES) - f.mean_acceptance_length <= len(RATES) * bound
        assert f.draft_acceptance_rate == pytest.approx(sum(RATES) / len(RATES), abs=bound)


def test_requests_of_two_tokens_or_fewer_draft_nothing() -> None:
    for length in (0, 1, 2):
        c = expected_counts(length, RATES)
        assert (c.drafts, c.draft_tokens, c.per_position) == (0.0, 0.0, (0.0,) * 4)
    assert expected_figures([1, 2, 2], RATES) is None
    assert expected_figures([], RATES) is None
    three = expected_figures([3], RATES)  # one step, clipped to one token
    assert three is not None
    assert three.per_position == [0.9, 0.0, 0.0, 0.0]
    assert three.counts.drafts == 1.0 and three.counts.draft_tokens == 1.0


def test_mixed_lengths_are_ratios_of_summed_expectations() -> None:
    """What counters over requests of several lengths give: summed counts over summed
    drafts, by enumeration, which is not the mean of each length's figures."""
    lengths = [6, 11, 11, 3]
    drafts = tokens = 0.0
    per_pos = [0.0] * 4
    for length in lengths:
        d, t, p = enumerate_paths(length, RATES)
        drafts, tokens = drafts + d, tokens + t
        per_pos = [a + b for a, b in zip(per_pos, p, strict=True)]
    got = expected_figures(lengths, RATES)
    assert got is not None and got.counts.requests == 4
    assert got.per_position == pytest.approx([c / drafts for c in per_pos], rel=1e-12)
    assert got.mean_acceptance_length == pytest.approx(1 + sum(per_pos) / drafts, rel=1e-12)
    assert got.draft_acceptance_rate == pytest.approx(sum(per_pos) / tokens, rel=1e-12)
    each = [expected_figures([n], RATES) for n in lengths]
    mean_of_ratios = sum(f.per_position[1] for f in each if f) / len(lengths)
    assert abs(mean_of_ratios - got.per_position[1]) > 0.01
    # a request too short to draft adds nothing beside one that drafts
    with_short, alone = expected_figures([11, 2], RATES), expected_figures([11], RATES)
    assert with_short is not None and alone is not None
    assert with_short.per_position == pytest.approx(alone.per_position, rel=1e-12)


def test_synth_len_gives_llama_cpps_geometric_rates() -> None:
    """``--spec-synth-len L`` at n: p, ..., p^n with p + ... + p^n = L - 1 (32 bisection
    steps: within 2^-32 in p)."""
    rates = synth_len_rates(3.2, 4)
    assert sum(rates) == pytest.approx(2.2, abs=1e-8)
    assert all(b == pytest.approx(a * rates[0]) for a, b in itertools.pairwise(rates))
    assert synth_len_rates(5.0, 4) == [1.0] * 4
    assert synth_len_rates(1.0, 4) == [0.0] * 4


def test_llama_servers_rule_and_what_it_cannot_predict() -> None:
    draws = registry.synthetic_draws("llama-server", {"type": "draft-simple", "n": 4,
                                                      "synth_rates": RATES})
    assert draws == SyntheticDraws(tuple(RATES))
    by_len = registry.synthetic_draws("llama-server", {"type": "draft-mtp", "n": 4,
                                                       "synth_len": 3.2})
    assert by_len is not None and by_len.rates == tuple(synth_len_rates(3.2, 4))
    assert registry.synthetic_draws("llama-server", {"type": "draft-simple", "n": 4}) is None
    for spec, why in (({"type": "ngram-mod", "n": 8}, "n-gram"), ({"p_min": 0.5}, "p_min"),
                      ({"n_min": 3}, "n_min")):
        got = registry.synthetic_draws("llama-server", {"type": "draft-simple", "n": 4,
                                                        "synth_rates": RATES, **spec})
        assert got is not None and got.unpredictable and why in got.unpredictable
    # an engine without a per-position rule, and an import's label, get none
    for engine in ("sglang", "synthetic"):
        assert registry.synthetic_draws(engine, {"type": "draft_model", "n": 4,
                                                 "synth_rates": RATES}) is None


def _records(lengths: Sequence[int], **extra: object) -> list[dict[str, object]]:
    return [request(trial=0, index=i, prompt_id=f"p{i}", category="code", t_sent_ns=i * 10**9,
                    rate_tok_s=100.0, tokens=n, **extra) for i, n in enumerate(lengths)]


def test_expected_keys_need_every_request_to_run_to_its_budget() -> None:
    draws = SyntheticDraws(tuple(RATES))
    warmup = {**_records([24])[0], "warmup": True, "finish_reason": "stop"}
    records = [*_records([24, 24, 48]), warmup]
    got = expected_acceptance(draws, records)
    want = expected_figures([24, 24, 48], RATES)
    assert want is not None
    assert got["expected_per_position"] == want.per_position
    assert got["expected_mean_acceptance_length"] == want.mean_acceptance_length
    assert got["expected_draft_acceptance_rate"] == want.draft_acceptance_rate
    assert got["expected_note"].endswith("over 3 requests of 24-48 tokens")
    assert "get_n_draft_max" in got["expected_note"]
    stopped = _records([24, 20], finish_reason="stop")
    stopped[0]["finish_reason"] = "length"
    assert budget_length(stopped[1]) is None
    note = expected_acceptance(draws, stopped)
    assert note["expected_per_position"] is None
    assert "1 of 2 requests did not complete at their max_tokens" in note["expected_note"]
    failed = _records([24, 24])
    failed[1]["status"] = "error"
    assert "1 of 2" in expected_acceptance(draws, failed)["expected_note"]
    assert expected_acceptance(None, records) == dict.fromkeys(EXPECTED_KEYS)
    hidden = expected_acceptance(SyntheticDraws(tuple(RATES), "p_min 0.5 ends drafts early"),
                                 records)
    assert hidden["expected_per_position"] is None
    assert hidden["expected_note"] == "no expected figures: p_min 0.5 ends drafts early"


def _import(out: Path, engine: str, spec: dict[str, object], lengths: Sequence[int]) -> Path:
    records = _records(lengths)
    for r in records:
        r["timings"] = {"draft_n": 10, "draft_n_accepted": 5}
    coords = {"engine": engine, "target": "m", "arm": "synth", "method": spec["type"],
              "n": spec.get("n"), "workload": "w", "concurrency": 1}
    cell = ImportedCell(coords, run_config(engine=engine, model="m", spec=spec,
                                           load={"max_tokens": max(lengths)}, trials=1),
                        {"kind": engine, "version": None, "sha256": None}, records,
                        {"trials": [0]})
    state = write_import(out, [cell], {"tool": "test"}, [])
    return out / state["cells"][0]["dir"]


def test_summary_carries_the_expected_figures_and_older_summaries_still_check(
        tmp_path: Path) -> None:
    """summary.json (version 5) holds the expected figures of a llama-server synthetic cell;
    a version-2 summary without them still re-derives, a current one without them does
    not (``summarize --check``). A vLLM cell's figures are the configured rates; a version-4
    vLLM summary, written before they were, holds None and still re-derives."""
    spec = {"type": "draft-simple", "n": 4, "synth_rates": RATES}
    cell = _import(tmp_path / "imp", "llama-server", spec, [24] * 5)
    path = cell / "summary.json"
    stored = json.loads(path.read_text())
    assert stored["schema_version"] == 5
    acc = stored["acceptance"]
    want = expected_figures([24] * 5, RATES)
    assert want is not None and acc["expected_per_position"] == want.per_position
    check = CliRunner().invoke(cli, ["summarize", "--check", str(cell)])
    assert check.exit_code == 0, check.output
    old = json.loads(path.read_text())
    old["schema_version"] = 2
    for k in EXPECTED_KEYS:
        del old["acceptance"][k]
    path.write_text(json.dumps(old))
    check = CliRunner().invoke(cli, ["summarize", "--check", str(cell)])
    assert check.exit_code == 0, check.output
    old["schema_version"] = 5
    path.write_text(json.dumps(old))
    check = CliRunner().invoke(cli, ["summarize", "--check", str(cell)])
    assert check.exit_code == 1
    table = CliRunner().invoke(cli, ["summarize", str(cell)])
    rows = [re.split(r"\s{2,}", line) for line in table.output.splitlines()]
    assert [[row[0], row[-1]] for row in rows if row[0].startswith("expected")] == \
        [["expected per position (synthetic, clipped drafts)", "0.900, 0.670, 0.457, 0.174"]]
    other = _import(tmp_path / "vllm", "vllm", {"type": "draft_model", "n": 4,
                                                "synth_rates": RATES}, [24] * 5)
    acc = json.loads((other / "summary.json").read_text())["acceptance"]
    assert acc["expected_per_position"] == RATES  # vLLM clips nothing
    assert acc["expected_note"].startswith("expected as vLLM counts it")
    table = CliRunner().invoke(cli, ["summarize", str(other)])
    rows = [re.split(r"\s{2,}", line) for line in table.output.splitlines()]
    assert [[row[0], row[-1]] for row in rows if row[0].startswith("expected")] == \
        [["expected per position (synthetic, as configured)", "0.900, 0.700, 0.500, 0.200"]]
    path = other / "summary.json"
    older = json.loads(path.read_text())
    older["schema_version"] = 4
    older["acceptance"].update(dict.fromkeys(EXPECTED_KEYS))
    path.write_text(json.dumps(older))
    check = CliRunner().invoke(cli, ["summarize", "--check", str(other)])
    assert check.exit_code == 0, check.output
    older["schema_version"] = 5
    path.write_text(json.dumps(older))
    assert CliRunner().invoke(cli, ["summarize", "--check", str(other)]).exit_code == 1


def _sglang_steps(tokens: int, mean: float, longest: int, rng: random.Random) -> int:
    """One request under SGLang's match-expected draw (spec_utils.py, 0.5.17): each step the
    floor or the ceiling of ``mean`` (clamped to [1, longest]), until ``tokens`` are out."""
    m = max(1.0, min(longest, mean))
    lower = int(m // 1)
    upper = lower + 1 if lower < longest else lower
    steps, left = 0, tokens
    while left > 0:
        left -= upper if upper != lower and rng.random() < m - lower else lower
        steps += 1
    return steps


@pytest.mark.parametrize(("tokens", "mean", "longest"),
                         [(47, 2.71, 3), (47, 4.0951, 5), (47, 6.12579511, 9), (47, 8.147, 16),
                          (383, 4.0951, 5), (10, 1.0, 5), (10, 5.0, 5), (12, 7.5, 5)])
def test_sglangs_expected_steps_agree_with_a_seeded_simulation(tokens: int, mean: float,
                                                                longest: int) -> None:
    """The dynamic program against 40,000 seeded requests of the draw it models: within four
    standard errors of the simulated mean; whole means and means above the longest commit
    are exact (no draw)."""
    rng = random.Random(7)
    runs = [_sglang_steps(tokens, mean, longest, rng) for _ in range(40_000)]
    avg = sum(runs) / len(runs)
    sd = math.sqrt(sum((x - avg) ** 2 for x in runs) / (len(runs) - 1))
    want = expected_steps(tokens, mean, longest)
    assert abs(want - avg) <= 4 * sd / math.sqrt(len(runs)) + 1e-12, (want, avg, sd)
    if mean == int(mean) or mean >= longest:
        k = min(longest, int(mean))
        assert want == math.ceil(tokens / k)
    assert expected_steps(0, mean, longest) == 0.0
    with pytest.raises(ValueError, match="at least one token"):
        expected_steps(tokens, mean, 0)


def test_sglangs_rule_gives_the_mean_length_as_its_counters_read_it() -> None:
    """SGLang's rule (registered with the engine): synth_len and n give the step draw; the
    expected mean acceptance length of 48-token requests is 47 / E[steps], below the
    configured mean (the last step stops at the limit), with no per-position or draft-rate
    figure; NGRAM and a config without n are unpredictable, no synth_len is no draw."""
    draws = registry.synthetic_draws("sglang", {"type": "EAGLE3", "n": 4, "synth_len": 4.0951})
    assert draws == SyntheticDraws((), step_mean=4.0951, step_max=5)
    exp = expected_acceptance(draws, _records([48] * 32))
    assert exp["expected_mean_acceptance_length"] == pytest.approx(
        47 / expected_steps(47, 4.0951, 5))
    assert 3.94 < exp["expected_mean_acceptance_length"] < 3.95 < 4.0951
    assert exp["expected_per_position"] is None and exp["expected_draft_acceptance_rate"] is None
    assert exp["expected_note"].startswith("expected as SGLang counts it")
    assert "over 32 requests of 48 tokens" in exp["expected_note"]
    mixed = expected_acceptance(draws, _records([48, 24]))
    assert mixed["expected_mean_acceptance_length"] == pytest.approx(
        (47 + 23) / (expected_steps(47, 4.0951, 5) + expected_steps(23, 4.0951, 5)))
    ngram = registry.synthetic_draws("sglang", {"type": "NGRAM", "n": 4, "synth_len": 3.0})
    assert ngram is not None and ngram.unpredictable is not None
    assert expected_acceptance(ngram, _records([48]))["expected_note"].startswith(
        "no expected figures: NGRAM verifies a tree")
    assert registry.synthetic_draws("sglang", {"type": "EAGLE3", "synth_len": 3.0}) \
        .unpredictable is not None  # type: ignore[union-attr]
    assert registry.synthetic_draws("sglang", {"type": "EAGLE3", "n": 4}) is None
