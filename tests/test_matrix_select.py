"""`--only`/`--skip` cell selection (matrix and plan): one key given twice is either value,
comma-joined pairs match together, a bad selector is one line naming the keys."""
from pathlib import Path

import pytest

from crossbench.errors import UserError
from crossbench.runner.matrix import expand, load_matrix
from crossbench.runner.matrix_run import select

METHODS = Path(__file__).resolve().parents[1] / "matrices" / "h200-methods.yaml"


@pytest.fixture(scope="module")
def cells():  # type: ignore[no-untyped-def]
    return expand(load_matrix(METHODS), METHODS)


def groups(chosen) -> set[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {(str(c.coords["arm"]), str(c.coords["n"])) for c in chosen}


def test_one_key_twice_is_either_value(cells) -> None:  # type: ignore[no-untyped-def]
    chosen = select(cells, ("engine=vllm", "arm=eagle3-a0.9", "n=2", "n=8"), ())
    assert groups(chosen) == {("eagle3-a0.9", "2"), ("eagle3-a0.9", "8")}
    assert {c.coords["concurrency"] for c in chosen} == {1, 16}
    assert all(c.coords["engine"] == "vllm" for c in chosen)


def test_comma_joined_skip_leaves_out_only_that_combination(cells) -> None:  # type: ignore[no-untyped-def]
    chosen = select(cells, ("engine=vllm",),
                    ("arm=draft-a0.7", "arm=eagle3-a0.7", "arm=dflash-a0.7", "n=1",
                     "arm=dflash-a0.9,n=2", "arm=draft-a0.9,n=2", "arm=draft-a0.9,n=8"))
    got = groups(chosen)
    assert ("dflash-a0.9", "2") not in got and ("draft-a0.9", "8") not in got
    assert ("eagle3-a0.9", "2") in got  # n=2 of another arm stays
    assert got - {("none", "None"), ("none", "0")} == {
        ("eagle3-a0.9", "2"), ("eagle3-a0.9", "4"), ("eagle3-a0.9", "8"),
        ("dflash-a0.9", "4"), ("dflash-a0.9", "8"), ("dflash-a0.9", "15"),
        ("draft-a0.9", "4"), ("ngram", "4")}
    assert any(c.coords["arm"] == "none" for c in chosen)  # the baseline stays


def test_different_keys_must_all_match(cells) -> None:  # type: ignore[no-untyped-def]
    assert select(cells, ("engine=llama", "arm=ngram", "concurrency=16"), ())
    assert not select(cells, ("engine=llama", "n=15", "arm=eagle3-a0.9"), ())


@pytest.mark.parametrize("bad", ["arm", "size=3", "arm=x,,n=2", "arm=x,colour=red"])
def test_a_bad_selector_names_the_known_keys(cells, bad: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError) as e:
        select(cells, (), (bad,))
    assert "--skip" in str(e.value) and bad in str(e.value)


def test_requests_scale_with_concurrency_where_the_load_says_so() -> None:
    from crossbench.load.settings import LoadSettings
    from crossbench.runner.matrix import trial_work

    path = Path(__file__).resolve().parents[1] / "matrices" / "h200-methods.yaml"
    cells = expand(load_matrix(path), path)
    by_c = {c.coords["concurrency"]: trial_work(c.load).requests for c in cells}
    assert by_c == {1: 32, 16: 128}  # requests 32, requests_per_concurrency 8
    # requests stays the floor; unset, every concurrency measures `requests`
    assert LoadSettings(requests=40, requests_per_concurrency=2, concurrency=4).requests == 40
    assert LoadSettings(requests=40, concurrency=16).requests == 40


def test_the_studys_rounds_run_their_baselines_first(cells) -> None:  # type: ignore[no-untyped-def]
    """h200-methods.yaml orders each round's baseline starts before its speculative ones, so
    a round cut short keeps a baseline for what finished (sglang-methods PART=3 on 2026-12-06
    lost its machine with three speculative trials back and no baseline): that round's
    selection, in run order, starts with its baseline cells."""
    from crossbench.runner.matrix import run_order

    m = load_matrix(METHODS)
    chosen = select(cells, ("engine=sglang,target=t8b-hf",),
                    ("arm=draft-real", "arm=dflash-real", "arm=eagle3-real", "arm=eagle3-a0.9",
                     "arm=ngram", "arm=draft-a0.9,n=4", "arm=dflash-a0.9,n=4",
                     "arm=dflash-a0.9,n=15"))
    by_id = {c.id: c for c in chosen}
    methods = [str(by_id[cid].coords["method"]) for cid, _ in run_order(m, chosen)]
    assert len(methods) == 10 and methods.count("none") == 2
    assert methods[:2] == ["none", "none"]
