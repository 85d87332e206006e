"""vLLM's /metrics: parsing traps on text in vLLM 0.33's exact format, and acceptance figures
from counter deltas (fractions, 0-based positions) summed over data-parallel engines.

The fixtures are made by ``python tests/vllm_golden.py`` with prometheus_client
from the metric families the 0.33.0 profile read from the wheel; their counter values are
``golden.BEFORE`` and ``golden.AFTER``, written out as literals below.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from standins.vllm_formats import VllmMetrics

from crossbench.analysis import acceptance
from crossbench.engines import registry
from crossbench.engines.prometheus import counter, labelled, parse_samples, total
from crossbench.engines.vllm.metrics import cache_delta
from crossbench.engines.vllm.profile import profile_for

DATA = Path(__file__).parent / "data" / "vllm"
PREFIX = "vllm:spec_decode_"
M = 'model_name="Qwen/Qwen3-8B"'


@pytest.fixture(scope="module")
def before() -> dict[str, float]:
    return parse_samples((DATA / "metrics-0.33.0-before.prom").read_text())


@pytest.fixture(scope="module")
def after() -> dict[str, float]:
    return parse_samples((DATA / "metrics-0.33.0-after.prom").read_text())


def test_registered_prefix_is_vllms() -> None:
    assert registry.spec_metric_prefix("vllm") == PREFIX


def test_fixture_has_vllms_names_and_label_layout(after: dict[str, float]) -> None:
    text = (DATA / "metrics-0.33.0-after.prom").read_text()
    assert "# TYPE vllm:spec_decode_num_drafts_total counter" in text
    assert "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts." in text
    assert f'vllm:spec_decode_num_drafts_total{{engine="1",{M}}} 550.0' in text
    key = f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{M},position="3"}}'
    assert after[key] == 220.0


def test_created_series_are_not_counts(after: dict[str, float]) -> None:
    text = (DATA / "metrics-0.33.0-after.prom").read_text()
    assert re.search(r"^vllm:spec_decode_num_drafts_created\{.*\} 1\.7643e\+09$", text, re.M)
    assert not [k for k in after if "_created" in k]


def test_plain_counter_lookup_misses_labelled_series_total_sums_them(
        after: dict[str, float]) -> None:
    # the trap: every vLLM series carries model_name and engine, so no unlabelled key exists
    assert counter(after, PREFIX + "num_drafts_total") is None
    assert total(after, PREFIX + "num_drafts_total") == 1100 + 550
    assert total(after, PREFIX + "num_drafts") == 1650  # _total optional
    assert total(after, "vllm:num_requests_running") == 0.0
    assert total(after, "vllm:no_such_metric") is None


def test_histogram_named_total_is_not_a_counter(after: dict[str, float]) -> None:
    # vllm:iteration_tokens_total is a histogram: its samples are _bucket, _sum, _count
    assert total(after, "vllm:iteration_tokens_total") is None
    assert total(after, "vllm:iteration_tokens_total_count") == 2.0
    assert after[f'vllm:iteration_tokens_total_sum{{engine="0",{M}}}'] == 3.0


def test_per_position_sums_over_engines(after: dict[str, float]) -> None:
    per_pos = labelled(after, PREFIX + "num_accepted_tokens_per_pos_total", "position")
    assert per_pos == {"0": 1485.0, "1": 1155.0, "2": 660.0, "3": 330.0}


def test_acceptance_from_deltas(before: dict[str, float], after: dict[str, float]) -> None:
    d = acceptance.counter_delta(before, after, PREFIX)
    assert d.present
    assert (d.drafts, d.draft_tokens, d.accepted) == (1500.0, 6000.0, 3300.0)
    assert d.per_position == [1350.0, 1050.0, 600.0, 300.0]  # index k = position k (0-based)
    acc = acceptance.compute(d, [])
    assert acc.source == "metrics"
    assert acc.per_position == pytest.approx([0.9, 0.7, 0.4, 0.2])  # fractions, not percent
    assert acc.draft_acceptance_rate == pytest.approx(0.55)
    assert acc.mean_acceptance_length == pytest.approx(3.2)
    assert acc.mean_acceptance_length == pytest.approx(1 + sum(acc.per_position))


def test_exponent_notation_values(before: dict[str, float]) -> None:
    text = (DATA / "metrics-0.33.0-after.prom").read_text()
    text = text.replace(f'vllm:spec_decode_num_drafts_total{{engine="0",{M}}} 1100.0',
                        f'vllm:spec_decode_num_drafts_total{{engine="0",{M}}} 1.1e+03')
    text = text.replace(f'vllm:spec_decode_num_draft_tokens_total{{engine="1",{M}}} 2200.0',
                        f'vllm:spec_decode_num_draft_tokens_total{{engine="1",{M}}} 2.2E3')
    assert "1.1e+03" in text and "2.2E3" in text
    d = acceptance.counter_delta(before, parse_samples(text), PREFIX)
    assert (d.drafts, d.draft_tokens) == (1500.0, 6000.0)


def test_engine_label_order_and_other_label_sets_do_not_matter() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} 10\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5\n'
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 20\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 6\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0",engine="0",'
        'model_name="m"} 8\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",'
        'position="0"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
        'position="1"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",'
        'position="1"} 2\n')
    d = acceptance.counter_delta({}, parse_samples(text), PREFIX)
    assert (d.drafts, d.draft_tokens, d.accepted, d.per_position) == (15, 60, 18, [12, 6])


def test_cache_and_preemption_deltas(before: dict[str, float], after: dict[str, float]) -> None:
    c = cache_delta(before, after)
    assert (c.prefix_cache_queries, c.prefix_cache_hits, c.preemptions) == (15000, 7500, 3)
    assert c.prefix_cache_hit_rate == pytest.approx(0.5)
    assert c.to_dict()["prefix_cache_hit_rate"] == pytest.approx(0.5)
    missing = cache_delta({}, {})
    assert missing.prefix_cache_queries is None and missing.prefix_cache_hit_rate is None


def test_baseline_has_no_spec_families_but_has_the_rest() -> None:
    prof = profile_for("0.33.0")
    base = VllmMetrics(prof, "m", engines=2, process_collectors=False).text()
    spec = VllmMetrics(prof, "m", engines=2, num_spec_tokens=3, process_collectors=False).text()
    assert "vllm:spec_decode" not in base  # vLLM registers them only with speculation
    assert 'vllm:num_requests_running{engine="1",model_name="m"} 0.0' in base
    samples = parse_samples(spec)
    assert labelled(samples, PREFIX + "num_accepted_tokens_per_pos", "position") == {
        "0": 0.0, "1": 0.0, "2": 0.0}
    d = acceptance.counter_delta(samples, samples, PREFIX)
    assert d.present and d.drafts == 0 and d.per_position == [0.0, 0.0, 0.0]


def test_profile_metric_families_of_both_releases() -> None:
    for version in ("0.10.2", "0.33.0"):
        fams = {f["name"]: f for f in profile_for(version).metrics}
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            assert fams[PREFIX + name]["labels"] == ["model_name", "engine"]
            assert fams[PREFIX + name]["type"] == "counter"
        assert fams[PREFIX + "num_accepted_tokens_per_pos"]["labels"] == [
            "model_name", "engine", "position"]
        assert fams["vllm:num_requests_running"]["type"] == "gauge"
        for name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                     "vllm:num_preemptions"):
            assert fams[name]["type"] == "counter"
    assert "vllm:gpu_prefix_cache_queries" in {f["name"] for f in profile_for("0.10.2").metrics}
    assert "vllm:gpu_prefix_cache_queries" not in {
        f["name"] for f in profile_for("0.33.0").metrics}
