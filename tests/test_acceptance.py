"""Acceptance accounting on hand-made counters whose true values are known."""

from __future__ import annotations

import pytest

from crossbench.analysis.acceptance import CounterDelta, compute, counter_delta, integrity
from crossbench.engines.prometheus import counter, labelled, parse_samples

BEFORE = """\
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 10
llamacpp:spec_decode_num_draft_tokens_total 40
llamacpp:spec_decode_num_accepted_tokens_total 20
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 8
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 2
"""

# 100 more drafts of n=4: 90 reach pos 0, 70 pos 1, 50 pos 2, 20 pos 3 -> 230 accepted.
AFTER = """\
llamacpp:spec_decode_num_drafts 110
llamacpp:spec_decode_num_draft_tokens 440
llamacpp:spec_decode_num_accepted_tokens 250
llamacpp:spec_decode_num_accepted_tokens_per_pos{position="0"} 98
llamacpp:spec_decode_num_accepted_tokens_per_pos{position="1"} 76
llamacpp:spec_decode_num_accepted_tokens_per_pos{position="2"} 54
llamacpp:spec_decode_num_accepted_tokens_per_pos{position="3"} 22
llamacpp:spec_decode_num_accepted_tokens_per_pos{position="10"} 0
"""


def records(drafted: int, accepted: int) -> list[dict[str, object]]:
    return [{"timings": {"draft_n": drafted // 2, "draft_n_accepted": accepted // 2}},
            {"timings": {"draft_n": drafted - drafted // 2,
                         "draft_n_accepted": accepted - accepted // 2}}]


def test_delta_accepts_names_with_and_without_total_and_orders_positions_numerically():
    d = counter_delta(parse_samples(BEFORE), parse_samples(AFTER))
    assert (d.drafts, d.draft_tokens, d.accepted) == (100, 400, 230)
    assert d.per_position[:4] == [90, 70, 50, 20]
    assert len(d.per_position) == 11  # index k is position k; "10" is not sorted after "1"
    assert d.per_position[4:] == [0] * 7


def test_figures_are_fractions_with_one_definition_each():
    d = counter_delta(parse_samples(BEFORE), parse_samples(AFTER))
    d.per_position = d.per_position[:4]
    acc = compute(d, records(400, 230))
    assert acc.source == "metrics"
    assert acc.draft_acceptance_rate == pytest.approx(230 / 400)
    assert acc.mean_acceptance_length == pytest.approx(1 + 230 / 100)
    assert acc.per_position == pytest.approx([0.9, 0.7, 0.5, 0.2])
    assert acc.mean_acceptance_length == pytest.approx(1 + sum(acc.per_position))
    checks = {c.name: c.passed for c in integrity(acc, d, 4, True)}
    assert checks == {"spec_configured_and_drafting": True, "accepted_le_drafted": True,
                      "mal_le_n_plus_1": True, "per_request_sums_equal_counters": True,
                      "per_position_consistent": True}


def test_integrity_fails_loudly():
    bad = CounterDelta(drafts=10, draft_tokens=40, accepted=60, per_position=[10, 20],
                       present=True)
    acc = compute(bad, records(40, 30))
    failed = {c.name for c in integrity(acc, bad, 4, True) if not c.passed}
    assert failed == {"accepted_le_drafted", "mal_le_n_plus_1",
                      "per_request_sums_equal_counters", "per_position_consistent"}


def test_spec_configured_but_no_drafts():
    acc = compute(CounterDelta(present=True), [{"timings": {"predicted_n": 5}}])
    failed = {c.name for c in integrity(acc, CounterDelta(present=True), 4, True)
              if not c.passed}
    assert "spec_configured_and_drafting" in failed


def test_missing_counters_fall_back_to_timings_and_say_so():
    acc = compute(None, records(40, 10))
    assert acc.source == "timings"
    assert acc.draft_acceptance_rate == pytest.approx(0.25)
    assert acc.mean_acceptance_length is None  # needs the number of drafts
    names = {c.name: c.passed for c in integrity(acc, None, 4, True)}
    assert names["counters_present"] is False


def test_prometheus_parser_handles_exponents_labels_and_created():
    text = (
        "# TYPE vllm:x counter\n"
        'vllm:x_total{engine="0",model_name="m"} 1.5e3\n'
        'vllm:x_total{engine="1",model_name="m"} 2.5e+2\n'
        'vllm:x_created{engine="0",model_name="m"} 1.7e9\n'
    )
    s = parse_samples(text)
    assert not [k for k in s if "_created" in k]
    assert labelled(s, "vllm:x", "engine") == {"0": 1500.0, "1": 250.0}
    assert counter({"a_total": 3.0}, "a") == 3.0
    assert counter({"a": 4.0}, "a_total") == 4.0


def test_counter_delta_other_prefix_sums_series_across_engine_labels() -> None:
    """vLLM under data parallel exports one series per engine; the delta is their sum."""
    def page(scale: float) -> str:
        lines = []
        for eng in ("0", "1"):
            lab = f'engine="{eng}",model_name="m"'
            lines += [
                f"vllm:spec_decode_num_drafts_total{{{lab}}} {10 * scale}",
                f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {30 * scale}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {15 * scale}",
            ]
            for pos, v in enumerate((8, 5, 2)):
                lines.append("vllm:spec_decode_num_accepted_tokens_per_pos_total"
                             f'{{{lab},position="{pos}"}} {v * scale}')
        return "\n".join(lines) + "\n"

    d = counter_delta(parse_samples(page(1)), parse_samples(page(3)), "vllm:spec_decode_")
    assert d.present
    assert (d.drafts, d.draft_tokens, d.accepted) == (40.0, 120.0, 60.0)
    assert d.per_position == [32.0, 20.0, 8.0]
    acc = compute(d, [])
    assert acc.draft_acceptance_rate == 0.5
    assert acc.mean_acceptance_length == 2.5
    # without per-request draft counts the counters alone show that drafting happened
    names = {c.name: c.passed for c in integrity(acc, d, 3, True)}
    assert names["spec_configured_and_drafting"]
    assert "per_request_sums_equal_counters" not in names
    assert counter_delta(parse_samples(page(1)), parse_samples(page(3))).present is False
