"""Server reuse in a matrix: blocks of a cell's trials share one server start, interleaved
between cells; the engines' cache reset between them; the analysis draws server starts."""

from __future__ import annotations

from types import SimpleNamespace

from crossbench.runner.matrix import schedule


def _cells(*ids: str) -> list:  # type: ignore[type-arg]
    return [SimpleNamespace(id=i) for i in ids]


def test_blocks_run_back_to_back_and_rounds_stay_interleaved() -> None:
    cells = _cells("a", "b", "c")
    order = schedule(cells, trials=6, order="interleaved", seed=0, block=3)  # type: ignore[arg-type]
    assert sorted(order) == sorted((c, t) for c in "abc" for t in range(6))
    # every block of three trials of a cell is contiguous, and round 0 precedes round 1
    for k in range(0, 18, 3):
        cid = order[k][0]
        assert [t for c, t in order[k:k + 3]] == [t for t in range(3 * (k // 9),
                                                                  3 * (k // 9) + 3)]
        assert all(c == cid for c, _ in order[k:k + 3])
    assert all(t < 3 for _, t in order[:9]) and all(t >= 3 for _, t in order[9:])


def test_block_one_is_the_plain_interleaving() -> None:
    cells = _cells("a", "b", "c", "d")
    plain = schedule(cells, 3, "interleaved", 7)  # type: ignore[arg-type]
    assert schedule(cells, 3, "interleaved", 7, block=1) == plain  # type: ignore[arg-type]
    assert [t for _, t in plain] == [0] * 4 + [1] * 4 + [2] * 4


def test_a_last_block_may_be_short() -> None:
    order = schedule(_cells("a", "b"), trials=5, order="interleaved", seed=1, block=2)  # type: ignore[arg-type]
    assert [t for c, t in order if c == "a"] == [0, 1, 2, 3, 4]
    assert len(order) == 10 and [t for _, t in order[8:]] == [4, 4]
