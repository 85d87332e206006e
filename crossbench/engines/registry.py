"""Lazy engine registry: names map to ``"module:Class"`` so heavy adapters load only when asked.

Built-in engines register exactly as a third party would, with :func:`register`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from crossbench.engines.base import EngineServer
from crossbench.errors import UserError, first_validation_error

_ENGINES: dict[str, tuple[str, str]] = {}
_PREFIXES: dict[str, str] = {}
_DECODE_HISTOGRAMS: dict[str, tuple[str, str] | None] = {}
_PLANNING_STARTUP: dict[str, float | None] = {}


def register(name: str, server: str, config: str,
             spec_metric_prefix: str = "llamacpp:spec_decode_",
             decode_histograms: tuple[str, str] | None = None,
             planning_startup_s: float | None = None) -> None:
    """Register an engine: ``server`` and ``config`` are ``"module:Class"`` paths.

    ``spec_metric_prefix`` starts the names of the engine's speculative counters
    (``<prefix>num_drafts_total`` and its siblings; see crossbench.analysis.acceptance).
    ``decode_histograms`` names the engine's per-request histograms of (generated tokens,
    decode seconds from the first token to the last), when its metrics have them: their
    ``_sum``/``_count`` deltas over a trial give the server's own decode rate
    (see crossbench.analysis.summary.server_decode).
    ``planning_startup_s`` is the server start (launch until ready) that
    ``crossbench plan`` assumes when no run measured the engine: an assumption, always
    labelled as one (crossbench.runner.plan); None leaves the start-up to ``--startup``.
    """
    _ENGINES[name] = (server, config)
    _PREFIXES[name] = spec_metric_prefix
    _DECODE_HISTOGRAMS[name] = decode_histograms
    _PLANNING_STARTUP[name] = planning_startup_s


# planning_startup_s: the H200 cross-engine round 1 (examples/h200-cross/round1, 8B F16
# target) measured 2.7-4.6 s for llama-server and 63-143 s for vLLM 0.26 (CUDA graph capture
# and compilation): the assumptions round those up, for plans made before any measurement.
register("llama-server", "crossbench.engines.llamacpp.server:LlamaServer",
         "crossbench.engines.llamacpp.config:LlamaServerConfig", planning_startup_s=5.0)
register("vllm", "crossbench.engines.vllm.server:VllmServer",
         "crossbench.engines.vllm.config:VllmServerConfig", spec_metric_prefix="vllm:spec_decode_",
         decode_histograms=("vllm:request_generation_tokens", "vllm:request_decode_time_seconds"),
         planning_startup_s=120.0)


def spec_metric_prefix(name: str) -> str:
    """The prefix of an engine's speculative counters (read without loading the adapter)."""
    _entry(name)
    return _PREFIXES[name]


def decode_histograms(name: str) -> tuple[str, str] | None:
    """(generated-tokens histogram, decode-seconds histogram) of an engine, or None."""
    _entry(name)
    return _DECODE_HISTOGRAMS[name]


def planning_startup_s(name: str) -> float | None:
    """Seconds of server start and stop that a plan assumes for an engine nothing measured
    (None: the engine registered no figure)."""
    _entry(name)
    return _PLANNING_STARTUP[name]


def names() -> list[str]:
    """Registered engine names."""
    return sorted(_ENGINES)


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry(name: str) -> tuple[str, str]:
    try:
        return _ENGINES[name]
    except KeyError:
        raise UserError(f"unknown engine {name!r}",
                        f"use one of: {', '.join(names())}") from None


def config_class(name: str) -> type[BaseModel]:
    """The strict config model of an engine."""
    cls: type[BaseModel] = _load(_entry(name)[1])
    return cls


def create(name: str, config: dict[str, Any], log_path: Path) -> EngineServer:
    """Validate ``config`` against the engine's model and build its server (not started)."""
    cfg_cls = config_class(name)
    try:
        cfg = cfg_cls.model_validate(config)
    except ValidationError as e:
        raise UserError(*_describe(e)) from None
    server: EngineServer = _load(_entry(name)[0])(cfg, log_path)
    return server


def reuse_settings(name: str, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """An engine config with what its cache reset needs when trials reuse a server
    (:meth:`EngineServer.reuse_settings`)."""
    server_cls: type[EngineServer] = _load(_entry(name)[0])
    return server_cls.reuse_settings(config, run_dir)


def _describe(e: ValidationError) -> tuple[str, str]:
    field, kind, msg = first_validation_error(e)
    if kind == "extra_forbidden":
        return f"{field}: unknown field", "remove it or check its spelling"
    return f"{field}: {msg}", f"fix `{field}`"
