"""Shared test fixtures: the real llama-server build and the project's fixture models.

Both are made by the project's own code and cached under ~/.cache/crossbench (CI runs
`crossbench engines install llama.cpp` and `crossbench fixtures make` first, so these only
look them up; on a fresh machine they build them, which takes minutes once).
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from standins import pythonpath

# child processes that run a stand-in (``python -m standins.load``) find it as the tests do
os.environ["PYTHONPATH"] = pythonpath()


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """crossbench's CPU build of llama-server (default pin), or ``CROSSBENCH_TEST_LLAMA_SERVER``.

    The variable lets a developer run the suite against their own build (used as is).
    """
    own = os.environ.get("CROSSBENCH_TEST_LLAMA_SERVER")
    if own:
        return Path(own)
    from crossbench.engines.llamacpp.build import install

    return install().binary()


@pytest.fixture(scope="session")
def fixture_models() -> tuple[Path, Path]:
    """(target, draft) GGUF fixture pair."""
    from crossbench.fixtures.resolve import ensure_fixtures

    return ensure_fixtures("tiny", 0)


@pytest.fixture
def vllm_standin_matrix(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """A maker of small matrices on the vLLM stand-in (named as one: it serves no model): a
    baseline and an n-gram arm at the given concurrency levels; other keys override. Its
    steps take 2 ms, so every request has a decode time and every pair gives a ratio."""
    from standins.vllm import write_launcher

    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "2",
                            "--standin-prefill-ms", "1")

    def make(name: str, concurrency: list[int], **extra: Any) -> dict[str, Any]:
        return {
            "schema_version": 1, "study": {"name": name},
            "engines": {"v": {"kind": "vllm", "binary": str(binary),
                              "server": {"max_num_seqs": 2}}},  # prefix caching on: reset
            "models": {"t": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                             "quant": "BF16", "role": "target"}},
            "load": {"requests": 2, "warmup": 1, "max_tokens": 8},
            "arms": [{"method": "none"}, {"method": "ngram", "n": 2}],
            "axes": {"engine": ["v"], "target": ["t"], "workload": ["builtin:code"],
                     "concurrency": concurrency},
            "telemetry_hz": 0, **extra,
        }

    return make


@pytest.fixture
def fake_binary(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Factory of executable stand-in scripts that pose as a llama-server binary.

    ``fake_binary(version="version: 0.5.0-dev (build 11312, commit 0c1e570)", body="sleep 600")`` -> Path. Used only
    for lifecycle failures (a server that hangs or dies), never for results.
    """
    def make(version: str = "version: 0.5.0-dev (build 11312, commit 0c1e570)", body: str = "exit 0",
             name: str = "llama-server") -> Path:
        p = tmp_path / name
        p.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = "--version" ]; then echo "{version}"; exit 0; fi\n'
            f"{body}\n"
        )
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
        return p

    return make


@pytest.fixture
def gguf_stub(tmp_path: Path) -> Path:
    """A file that stands where a model path is needed but the server never starts."""
    p = tmp_path / "model.gguf"
    p.write_bytes(b"GGUF")
    return p


def pytest_configure(config: pytest.Config) -> None:
    """Keep caches of test runs where the user's are, unless told otherwise (vLLM compile
    caches excepted: the stand-in's go to a temporary folder); count as
    "other inference processes" only the servers this test run started (its descendants),
    so a llama-server another program runs on the host changes no test."""
    from crossbench.engines.vllm.startup_cut import COMPILE_CACHE_ENV
    from crossbench.runner.single import OTHER_ENGINES_WITHIN

    os.environ.setdefault("CROSSBENCH_CACHE", str(Path.home() / ".cache" / "crossbench"))
    os.environ[OTHER_ENGINES_WITHIN] = str(os.getpid())
    # the vLLM stand-in's starts fill a compile cache per launcher (a new build key each):
    # keep them out of the user's ~/.cache/crossbench/vllm-compile, where `compile-cache
    # list` would show them as vLLM builds
    if not os.environ.get(COMPILE_CACHE_ENV):
        os.environ[COMPILE_CACHE_ENV] = tempfile.mkdtemp(prefix="crossbench-test-vllm-compile-")
        atexit.register(shutil.rmtree, os.environ[COMPILE_CACHE_ENV], ignore_errors=True)
