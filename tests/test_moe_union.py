"""The expert-union prediction (crossbench.analysis.moe) against exact small cases and a seeded
Monte Carlo simulation of uniform top-k routing."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations, pairwise, product

import numpy as np
import pytest

from crossbench.analysis.moe import expected_distinct_experts, expert_union_ratio
from crossbench.errors import UserError


def simulate_distinct_experts(n_experts: int, top_k: int, k: int, trials: int,
                              seed: int = 0) -> float:
    """Monte Carlo mean of distinct experts for ``k`` tokens with uniform random top-k routing
    (seeded): the check of ``expected_distinct_experts``."""
    rng = np.random.default_rng(seed)
    total = 0
    for _ in range(trials):
        used = np.zeros(n_experts, dtype=bool)
        for _ in range(k):
            used[rng.choice(n_experts, size=top_k, replace=False)] = True
        total += int(used.sum())
    return total / trials


def _exact(n: int, top: int, k: int) -> Fraction:
    """Distinct experts averaged over every routing of k tokens (all top-subsets equally likely)."""
    subsets = list(combinations(range(n), top))
    total = sum(len(set().union(*pick)) for pick in product(subsets, repeat=k))
    return Fraction(total, len(subsets) ** k)


@pytest.mark.parametrize(("n", "top", "k"), [(4, 2, 1), (4, 2, 2), (4, 2, 3), (5, 2, 3),
                                             (6, 3, 2), (3, 1, 4)])
def test_formula_equals_exhaustive_enumeration(n: int, top: int, k: int) -> None:
    assert expected_distinct_experts(n, top, k) == pytest.approx(float(_exact(n, top, k)),
                                                                 rel=1e-12)


def test_hand_cases() -> None:
    assert expected_distinct_experts(8, 2, 1) == 2  # one token: exactly its top_k
    assert expected_distinct_experts(4, 2, 2) == 3  # 4 * (1 - 1/4)
    assert expected_distinct_experts(8, 8, 5) == 8  # every expert every token
    assert expected_distinct_experts(8, 2, 0) == 0
    assert expert_union_ratio(8, 2, 1) == 1


@pytest.mark.parametrize(("n", "top"), [(256, 8), (128, 8), (8, 2)])
def test_formula_matches_monte_carlo(n: int, top: int) -> None:
    for k in (2, 5, 16):
        sim = simulate_distinct_experts(n, top, k, trials=4000, seed=k)
        want = expected_distinct_experts(n, top, k)
        assert abs(sim - want) < 0.03 * want, (n, top, k, sim, want)


def test_qwen35_moe_routing_grows_sublinearly() -> None:
    """256 experts, top-8 (the published Qwen3.5/3.6 MoE routing): 16 tokens load about 100
    distinct experts, 12.6x one token's 8, well short of 16x."""
    r = expert_union_ratio(256, 8, 16)
    assert 12 < r < 13
    curve = [expected_distinct_experts(256, 8, k) for k in range(1, 17)]
    assert all(b > a for a, b in pairwise(curve))


def test_bad_input_names_the_field() -> None:
    with pytest.raises(UserError, match="top_k"):
        expected_distinct_experts(8, 9, 2)
    with pytest.raises(UserError, match="n_experts"):
        expected_distinct_experts(0, 1, 2)


def test_distinct_experts_in_windows_counts_each_window_of_consecutive_tokens() -> None:
    from crossbench.analysis.moe import distinct_experts_in_windows

    routes = [(0, 1), (1, 2), (0, 1), (3, 4)]
    assert distinct_experts_in_windows(routes, 1) == 2.0
    # windows of 2: {0,1,2}, {0,1,2}, {0,1,3,4}
    assert distinct_experts_in_windows(routes, 2) == pytest.approx((3 + 3 + 4) / 3)
    assert distinct_experts_in_windows(routes, 4) == 5.0
    with pytest.raises(UserError, match="no window of 5"):
        distinct_experts_in_windows(routes, 5)
    with pytest.raises(UserError, match="must be >= 1"):
        distinct_experts_in_windows(routes, 0)


def test_uniform_routing_meets_the_expected_union_in_windows() -> None:
    """Seeded uniform routing (top-8 of 256) over 4,000 tokens: the windows' mean distinct
    experts is the closed form's within 1 %."""
    import numpy as np

    from crossbench.analysis.moe import distinct_experts_in_windows, expected_distinct_experts

    rng = np.random.default_rng(7)
    routes = [tuple(rng.choice(256, 8, replace=False)) for _ in range(4000)]
    for k in (1, 2, 5, 16):
        got = distinct_experts_in_windows(routes, k)
        assert got == pytest.approx(expected_distinct_experts(256, 8, k), rel=0.01), k
