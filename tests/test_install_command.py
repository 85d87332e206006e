"""The report's "how to get the same engine build" line comes from the engine's registration
(shared code never branches on engine names): a pinned llama.cpp build gives its install
command, CUDA builds with their architecture; engines without an install hook, unpinned
binaries and an import's engine label give none."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from crossbench.engines import registry
from crossbench.report.commands import install_command
from crossbench.report.study import Cell


def _cell(engine: str, engine_config: dict[str, Any]) -> Cell:
    return Cell("c", Path("."), {}, None,
                {"config": {"engine": engine, "engine_config": engine_config}})


@pytest.mark.parametrize(("config", "expected"), [
    ({"pin": "b11312", "variant": "cpu"},
     "crossbench engines install llama.cpp --pin b11312"),
    ({"pin": "b11312", "variant": "cuda-sm90"},
     "crossbench engines install llama.cpp --pin b11312 --cuda --cuda-arch 90"),
    ({"binary": "/opt/llama-server"}, None),
])
def test_a_pinned_llama_cpp_build_names_its_install_command(
        config: dict[str, Any], expected: str | None) -> None:
    assert install_command(_cell("llama-server", config)) == expected


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama-bench", "vllm-bench"])
def test_engines_without_an_install_hook_give_none(engine: str) -> None:
    assert install_command(_cell(engine, {"pin": "b11312"})) is None


def test_a_third_party_engine_registers_its_own_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    toy = types.ModuleType("toy_engine")
    toy.install = lambda config: ["pip", "install", f"toy=={config['version']}"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toy_engine", toy)
    monkeypatch.setitem(registry._ENGINES, "toy", registry.Registration(
        "toy_engine:Server", "toy_engine:Config", "toy:", registry.SpecCounters.standard("toy:"),
        None, None, (), None, {}, "toy_engine:install"))
    assert install_command(_cell("toy", {"version": "1.2"})) == "pip install toy==1.2"
