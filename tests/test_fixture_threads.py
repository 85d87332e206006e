"""The fixtures' writers and tensor checks run on threads: the bytes, digests and check results
do not depend on the thread count, the order is the input's, and the work ahead stays bounded
(what keeps an 8B-class target's setup short on a many-core GPU host without more memory)."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from crossbench.fixtures.make import in_order_ahead
from crossbench.fixtures.mtp import (
    _hf_tensors,
    _value,
    _write_safetensors,
    expected_gguf,
    mtp_spec,
    tensor_shapes,
)

VOCAB = 151936


def test_in_order_ahead_keeps_order_and_bounds_the_work_ahead() -> None:
    lock = threading.Lock()
    state = {"submitted": 0, "handed": 0, "most_ahead": 0}

    def work(i: int) -> int:
        time.sleep(0.02 * ((7 - i) % 4))  # later items often finish first
        return i * i

    def items():
        for i in range(12):
            with lock:
                state["submitted"] += 1
                state["most_ahead"] = max(state["most_ahead"],
                                          state["submitted"] - state["handed"])
            yield i

    out = []
    with ThreadPoolExecutor(4) as pool:
        for i, r in in_order_ahead(items(), work, pool, depth=3):
            with lock:
                state["handed"] += 1
            out.append((i, r))
    assert out == [(i, i * i) for i in range(12)]
    assert state["most_ahead"] == 3


def test_in_order_ahead_raises_the_failed_item_where_it_is_handed_out() -> None:
    def work(i: int) -> int:
        if i == 2:
            raise ValueError("item 2")
        return i

    seen = []
    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="item 2"):
        for i, _r in in_order_ahead(range(5), work, pool, depth=2):
            seen.append(i)
    assert seen == [0, 1]


@pytest.mark.parametrize("role", ["moe-target", "mtp-target"])
def test_the_safetensors_bytes_and_digest_do_not_depend_on_the_thread_count(
        role: str, tmp_path: Path) -> None:
    spec = mtp_spec("tiny", role)
    specs = tensor_shapes(spec, VOCAB)

    def value(n: str, s: tuple[int, ...], d: str, i: str) -> np.ndarray:
        return _value(n, s, d, i, spec, (0, 5), 0)

    one = _write_safetensors(tmp_path / "one.safetensors", specs, value, workers=1)
    four = _write_safetensors(tmp_path / "four.safetensors", specs, value, workers=4)
    data = (tmp_path / "one.safetensors").read_bytes()
    assert data == (tmp_path / "four.safetensors").read_bytes()
    assert one == four == hashlib.sha256(data).hexdigest()  # hashed as written, no re-read
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_tensor_check_does_not_depend_on_the_thread_count(tmp_path: Path) -> None:
    from safetensors import safe_open

    from crossbench.fixtures.drafters import check_tensors
    from crossbench.fixtures.resolve import ensure_mtp_target

    hf_dir, gguf = ensure_mtp_target("tiny", 0, "moe-target")
    spec = mtp_spec("tiny", "moe-target")

    def run(workers: int):
        with safe_open(str(hf_dir / "model.safetensors"), framework="np") as st:
            return check_tensors(gguf, ((name, *expected_gguf(spec, name, value))
                                        for name, value in _hf_tensors(spec, st)), workers)

    one, four = run(1), run(4)
    assert one == four
    assert len(one) == 96 and all(c.equal for c in one)
    assert all(len(c.sha256) == 64 for c in one if c.gguf_name)
