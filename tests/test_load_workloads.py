"""Workloads: the shipped prompt set, spec parsing, balance, determinism and digests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from crossbench.errors import UserError
from crossbench.load.workloads import (
    CATEGORIES,
    RANDOM_TOKEN_HIGH_CAP,
    RANDOM_TOKEN_LOW,
    builtin_bytes,
    category_counts,
    load_workload,
)


def test_builtin_file_has_eight_prompts_per_category() -> None:
    lines = [json.loads(line) for line in builtin_bytes().decode().splitlines()]
    assert len(lines) == 48
    assert {tuple(sorted(d)) for d in lines} == {("category", "id", "prompt")}
    assert category_counts(load_workload("builtin:mixed").prompts) == dict.fromkeys(CATEGORIES, 8)
    assert len({d["id"] for d in lines}) == 48
    assert len({d["prompt"] for d in lines}) == 48
    for d in lines:
        assert d["id"].startswith(d["category"] + "-")
        assert 20 < len(d["prompt"]) < 400


def test_mixed_every_prefix_is_balanced() -> None:
    prompts = load_workload("builtin:mixed").prompts
    assert [p.category for p in prompts[:6]] == list(CATEGORIES)
    for k in range(1, len(prompts) + 1):
        counts = category_counts(prompts[:k])
        full = [counts.get(c, 0) for c in CATEGORIES]
        assert max(full) - min(full) <= 1, (k, counts)


def test_one_category() -> None:
    w = load_workload("builtin:math")
    assert [p.id for p in w.prompts] == [f"math-{i:02d}" for i in range(1, 9)]
    assert all(p.text and p.token_ids is None for p in w.prompts)


def test_count_cycles_prompts_and_requests_get_own_index() -> None:
    w = load_workload("builtin:code", count=20)
    assert [p.id for p in w.prompts][7:10] == ["code-08", "code-01", "code-02"]
    reqs = w.requests()
    assert [r.request_index for r in reqs] == list(range(20))
    assert reqs[8].prompt.id == reqs[0].prompt.id == "code-01"
    assert load_workload("builtin:code").digest == w.digest


def test_random_exact_length_and_safe_range() -> None:
    w = load_workload("random:37", vocab_size=32_000, count=10)
    assert len(w.prompts) == 10
    for p in w.prompts:
        assert p.text is None and p.token_ids is not None
        assert len(p.token_ids) == 37
        assert all(RANDOM_TOKEN_LOW <= t < 32_000 for t in p.token_ids)
        assert p.category == "random"
    big = load_workload("random:500", vocab_size=262_144, count=4)
    assert max(t for p in big.prompts for t in p.token_ids or []) < RANDOM_TOKEN_HIGH_CAP


def test_random_is_deterministic_and_pinned() -> None:
    a = load_workload("random:8", vocab_size=32_000, seed=0, count=3)
    b = load_workload("random:8", vocab_size=32_000, seed=0, count=3)
    c = load_workload("random:8", vocab_size=32_000, seed=1, count=3)
    assert a == b
    assert a.prompts != c.prompts and a.digest != c.digest
    assert load_workload("random:8", vocab_size=32_001, seed=0, count=3).digest != a.digest
    # Pinned: the generator must not drift between Python versions or releases.
    assert a.prompts[0].token_ids == [28670, 13623, 25836, 30171, 14781, 2326, 9484, 17753]
    assert a.digest == "8f3e7978efca84d326ae58d4234dc00cf7083edc6d2fd879f4b4b53eb68551d1"
    assert len(load_workload("random:4", vocab_size=32_000).prompts) == 64


def test_digests_are_stable_and_distinct() -> None:
    mixed = load_workload("builtin:mixed")
    assert mixed.digest == hashlib.sha256(builtin_bytes()).hexdigest()
    assert load_workload("builtin:mixed").digest == mixed.digest
    per_cat = {load_workload(f"builtin:{c}").digest for c in CATEGORIES}
    assert len(per_cat) == 6 and mixed.digest not in per_cat


def test_random_needs_vocab_size() -> None:
    with pytest.raises(UserError) as e:
        load_workload("random:16")
    assert e.value.message == "workload spec 'random:16' needs the model's vocabulary size"
    assert e.value.hint is not None and "vocab_size" in e.value.hint
    with pytest.raises(UserError, match="no ids in the safe range"):
        load_workload("random:16", vocab_size=500)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("mixed", "not of the form kind:argument"),
        ("builtin:", "not of the form kind:argument"),
        ("builtin:poetry", "unknown category 'poetry'"),
        ("random:abc", "'abc' is not a whole number of tokens"),
        ("random:0", "the number of tokens must be at least 1"),
        ("sharegpt:foo", "unknown kind 'sharegpt'"),
    ],
)
def test_bad_spec_names_valid_forms(spec: str, why: str) -> None:
    with pytest.raises(UserError) as e:
        load_workload(spec, vocab_size=32_000)
    assert e.value.message == f"workload spec {spec!r}: {why}"
    assert e.value.hint == (
        "use one of: builtin:mixed; builtin:<category> with category one of code, math, "
        "creative, factual, analysis, howto; builtin:repeat; random:<N> (N tokens per prompt, needs the "
        "model's vocab_size); file:<path.jsonl>"
    )


def test_file_spec(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"id": "a", "category": "x", "prompt": "hello"}\n\n'
        '{"id": "b", "category": "y", "token_ids": [5, 6, 7]}\n'
    )
    w = load_workload(f"file:{f}", count=3)
    assert [p.id for p in w.prompts] == ["a", "b", "a"]
    assert w.prompts[1].token_ids == [5, 6, 7] and w.prompts[1].text is None
    assert w.digest == hashlib.sha256(f.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "category": "x", "prompt": "hi", "token_ids": [1]}', "exactly one of"),
        ('{"id": "a", "category": "x"}', "exactly one of"),
        ('{"id": "a", "prompt": "hi"}', "needs string fields 'id' and 'category'"),
        ("[1, 2]", "not a JSON object"),
        ("{nope", "not JSON"),
        (
            '{"id":"a","category":"x","prompt":"p"}\n{"id":"a","category":"x","prompt":"q"}',
            "line 2: duplicate id 'a'",
        ),
        ("", "no prompts"),
    ],
)
def test_file_spec_errors(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(UserError, match=message):
        load_workload(f"file:{f}")


def test_file_spec_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        load_workload(f"file:{tmp_path / 'nope.jsonl'}")
    assert "cannot be read" in e.value.message


def test_count_must_be_positive() -> None:
    with pytest.raises(UserError, match="at least 1"):
        load_workload("builtin:mixed", count=0)


def test_file_workload_as_a_json_array(tmp_path: Path) -> None:
    """A JSON array of the same objects as the JSONL format gives the same prompts."""
    rows = [{"id": "a", "category": "code", "prompt": "x"},
            {"id": "b", "category": "math", "prompt": "y"}]
    jsonl, arr = tmp_path / "p.jsonl", tmp_path / "p.json"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    arr.write_text(json.dumps(rows, indent=2))
    a, b = load_workload(f"file:{jsonl}"), load_workload(f"file:{arr}")
    assert [(p.id, p.category, p.text) for p in a.prompts] == \
        [(p.id, p.category, p.text) for p in b.prompts]
    arr.write_text(json.dumps([rows[0], "not an object"]))
    with pytest.raises(UserError, match=r"p\.json item 1: not a JSON object"):
        load_workload(f"file:{arr}")
