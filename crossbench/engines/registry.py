"""Lazy engine registry: names map to ``"module:Class"`` so heavy adapters load only when asked.

Built-in engines register exactly as a third party would, with :func:`register`: one call
names the adapter and its config model and declares what shared code needs from the engine
without loading it (its speculative counters, its process names, its own confound rules, the
``crossbench run`` options its config takes). Shared code asks here and never branches on
engine names.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ValidationError

from crossbench.engines.base import EngineServer, SpecCounters, SyntheticDraws
from crossbench.errors import UserError, first_validation_error

#: ``crossbench run`` options that map to an engine config field of the same meaning: option
#: name -> field name; an engine takes the option when its config model has the field
RUN_OPTION_FIELDS: dict[str, str] = {
    "binary": "binary", "pin": "pin", "variant": "variant", "ctx_size": "ctx_size",
    "ngl": "n_gpu_layers", "threads": "threads", "port": "port",
    "server_args": "extra_args", "api_key_env": "api_key_env",
    "api_key_file": "api_key_file",
}


@dataclass(frozen=True)
class Registration:
    """What one :func:`register` call declared about an engine."""

    server: str
    config: str
    spec_metric_prefix: str
    counters: SpecCounters
    decode_histograms: tuple[str, str] | None
    planning_startup_s: float | None
    process_names: tuple[str, ...]
    rules: str | None
    run_options: Mapping[str, str] = field(default_factory=dict)
    install: str | None = None
    synthetic: str | None = None
    shared_drafts: Mapping[str, SharedDrafts] = field(default_factory=dict)
    cold_start: Literal["config", "machine"] = "config"


@dataclass(frozen=True)
class SharedDrafts:
    """A speculative method that drafts from state every request of a server start feeds (an
    n-gram table of all prompts and outputs): a request can draft from another's output, so
    a prompt sent again replays its earlier output under greedy decoding."""

    kept_in: str
    """What keeps the state, where in the engine's source."""
    cleared_by: tuple[str, ...] = ()
    """The ``reset_cache`` methods that clear it (none: only a fresh start does)."""


_ENGINES: dict[str, Registration] = {}


def register(name: str, server: str, config: str,
             spec_metric_prefix: str = "llamacpp:spec_decode_",
             decode_histograms: tuple[str, str] | None = None,
             planning_startup_s: float | None = None,
             spec_counters: SpecCounters | None = None,
             process_names: tuple[str, ...] = (),
             rules: str | None = None,
             run_options: Mapping[str, str] | None = None,
             install: str | None = None,
             synthetic: str | None = None,
             shared_drafts: Mapping[str, SharedDrafts] | None = None,
             cold_start: Literal["config", "machine"] = "config") -> None:
    """Register an engine: ``server`` and ``config`` are ``"module:Class"`` paths; what shared
    code reads from each other argument is docs/engines.md "The registration".

    ``spec_counters`` names the speculative counters when they are not the standard four under
    ``spec_metric_prefix`` (:meth:`SpecCounters.standard`); ``decode_histograms`` are (generated
    tokens, decode seconds) histograms; ``planning_startup_s`` is the start a plan assumes,
    labelled as an assumption; ``process_names`` begin the engine's ``/proc/PID/comm`` names;
    ``rules`` is ``"module:attr"`` of its own :class:`crossbench.engines.confound_rule.Rule` s;
    ``run_options`` are ``crossbench run`` options beyond :data:`RUN_OPTION_FIELDS`;
    ``install`` is ``"module:function"`` giving the argv that installs the build a recorded
    engine config names (:func:`install_argv`); ``synthetic`` is ``"module:function"`` giving,
    for a recorded spec config, how the engine draws synthetic acceptance
    (:class:`SyntheticDraws`, None where the config sets none), for an engine that limits
    every draft to the tokens a request has left as llama-server does
    (:func:`synthetic_draws`); ``shared_drafts`` names the ``spec.type`` values that draft
    from state shared by every request of a start (:class:`SharedDrafts`); ``cold_start``
    says which start a recorded ``cold`` start stands for in a plan: a server
    configuration's first (``config``: vLLM's compile cache is keyed by configuration) or the
    machine's first of the engine (``machine``: SGLang's kernel caches serve every later
    configuration, which adds to them at most).
    """
    _ENGINES[name] = Registration(
        server, config, spec_metric_prefix,
        spec_counters or SpecCounters.standard(spec_metric_prefix), decode_histograms,
        planning_startup_s, tuple(process_names), rules, dict(run_options or {}), install,
        synthetic, dict(shared_drafts or {}), cold_start)


# planning_startup_s: the H200 cross-engine round 1 (examples/h200-cross/round1, 8B F16
# target) measured 2.7-4.6 s for llama-server and 63-143 s for vLLM 0.26 (CUDA graph capture
# and compilation): the assumptions round those up, for plans made before any measurement.
register("llama-server", "crossbench.engines.llamacpp.server:LlamaServer",
         "crossbench.engines.llamacpp.config:LlamaServerConfig", planning_startup_s=5.0,
         process_names=("llama-server", "llama-cli", "llama-bench"),
         rules="crossbench.engines.llamacpp.rules:RULES",
         install="crossbench.engines.llamacpp.pins:install_argv",
         synthetic="crossbench.engines.llamacpp.synthetic:synthetic_draws",
         shared_drafts={"ngram-mod": SharedDrafts(
             "one ngram-mod hash table per server, fed by every slot's prompt and output "
             "(common_speculative_impl_ngram_mod in common/speculative.cpp of b11312; emptied "
             "only when a quarter full)")})
register("vllm", "crossbench.engines.vllm.server:VllmServer",
         "crossbench.engines.vllm.config:VllmServerConfig", spec_metric_prefix="vllm:spec_decode_",
         decode_histograms=("vllm:request_generation_tokens", "vllm:request_decode_time_seconds"),
         planning_startup_s=120.0, process_names=("vllm",),
         rules="crossbench.engines.vllm.rules:RULES",
         synthetic="crossbench.engines.vllm.synthetic:synthetic_draws")
register("sglang", "crossbench.engines.sglang.server:SglangServer", "crossbench.engines.sglang.config:SglangServerConfig", spec_metric_prefix="sglang:spec_", spec_counters=SpecCounters("sglang:spec_verify_calls_total", None, None, generated="sglang:generation_tokens_total", requests="sglang:num_requests_total"), planning_startup_s=120.0, process_names=("sglang::",), synthetic="crossbench.engines.sglang.synthetic:synthetic_draws", shared_drafts={"NGRAM": SharedDrafts("one NgramCorpus per server, fed by every request's tokens (speculative/ngram_worker.py of 0.5.17)", ("flush_cache",))}, cold_start="machine")  # noqa: E501


def shared_drafts(name: str, spec_type: str) -> SharedDrafts | None:
    """How ``spec_type`` of engine ``name`` shares its draft state across requests, or None
    (an unknown engine: None)."""
    reg = _ENGINES.get(name)
    return reg.shared_drafts.get(spec_type) if reg is not None else None


def registration(name: str) -> Registration:
    """Everything registered for an engine (UserError listing the names for an unknown one)."""
    try:
        return _ENGINES[name]
    except KeyError:
        raise UserError(f"unknown engine {name!r}",
                        f"use one of: {', '.join(names())}") from None


def spec_metric_prefix(name: str) -> str:
    """The prefix of an engine's speculative counters (read without loading the adapter)."""
    return registration(name).spec_metric_prefix


def spec_counters(name: str) -> SpecCounters:
    """The names of an engine's speculative counters."""
    return registration(name).counters


def counters_for_prefix(prefix: str) -> SpecCounters:
    """The counters of the engine registered with ``prefix`` (the form manifests record);
    the standard four names under ``prefix`` when no engine registered it."""
    for entry in _ENGINES.values():
        if entry.spec_metric_prefix == prefix:
            return entry.counters
    return SpecCounters.standard(prefix)


def decode_histograms(name: str) -> tuple[str, str] | None:
    """(generated-tokens histogram, decode-seconds histogram) of an engine, or None."""
    return registration(name).decode_histograms


def planning_startup_s(name: str) -> float | None:
    """Seconds of server start and stop that a plan assumes for an engine nothing measured
    (None: the engine registered no figure)."""
    return registration(name).planning_startup_s


def cold_start(name: str) -> Literal["config", "machine"]:
    """Which start a recorded ``cold`` start of engine ``name`` is: a server configuration's
    first (``config``) or the machine's first of the engine (``machine``)."""
    return registration(name).cold_start


def process_names() -> tuple[str, ...]:
    """Beginnings of the command names of every registered engine's processes."""
    return tuple(dict.fromkeys(n for e in _ENGINES.values() for n in e.process_names))


def engine_rules() -> list[Any]:
    """Every registered engine's own known-interaction rules, in registration order (loads
    the rule modules, not the adapters)."""
    out: list[Any] = []
    for entry in _ENGINES.values():
        if entry.rules is not None:
            out.extend(_load(entry.rules))
    return out


def run_options(name: str) -> dict[str, str]:
    """``crossbench run`` options the engine takes (option name -> config field): those of
    :data:`RUN_OPTION_FIELDS` whose field its config model has, and its own."""
    fields = config_class(name).model_fields
    out = {opt: f for opt, f in RUN_OPTION_FIELDS.items() if f in fields}
    return {**out, **registration(name).run_options}


def spec_methods(name: str) -> tuple[str, ...] | None:
    """The speculative methods an engine's config model admits (``none`` included) when its
    ``spec.type`` is a closed set; None when the adapter checks the method itself (against
    the release's profile)."""
    spec = config_class(name).model_fields.get("spec")
    model = spec.annotation if spec is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    kind = model.model_fields.get("type")
    values = get_args(kind.annotation) if kind is not None else ()
    return tuple(str(v) for v in values) if values and all(isinstance(v, str)
                                                           for v in values) else None


def install_argv(name: str, config: Mapping[str, Any]) -> list[str] | None:
    """The command that installs the engine build a recorded ``config`` names (a pinned
    llama.cpp), or None where the engine registered none or the config names no build;
    unknown engines (an import's label) give None."""
    entry = _ENGINES.get(name)
    if entry is None or entry.install is None:
        return None
    argv: list[str] | None = _load(entry.install)(config)
    return argv


def synthetic_draws(name: str, spec: Mapping[str, Any]) -> SyntheticDraws | None:
    """How an engine draws synthetic acceptance for a recorded spec config, where it
    registered its rule (``synthetic``); None for a config without synthetic acceptance, an
    engine that registered no rule, or an unknown engine (an import's label)."""
    entry = _ENGINES.get(name)
    if entry is None or entry.synthetic is None:
        return None
    draws: SyntheticDraws | None = _load(entry.synthetic)(spec)
    return draws


def names() -> list[str]:
    """Registered engine names."""
    return sorted(_ENGINES)


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def config_class(name: str) -> type[BaseModel]:
    """The strict config model of an engine."""
    cls: type[BaseModel] = _load(registration(name).config)
    return cls


def create(name: str, config: dict[str, Any], log_path: Path) -> EngineServer:
    """Validate ``config`` against the engine's model and build its server (not started)."""
    cfg_cls = config_class(name)
    try:
        cfg = cfg_cls.model_validate(config)
    except ValidationError as e:
        raise UserError(*_describe(e)) from None
    server: EngineServer = _load(registration(name).server)(cfg, log_path)
    return server


def reuse_settings(name: str, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """An engine config with what its cache reset needs when trials reuse a server
    (:meth:`EngineServer.reuse_settings`)."""
    server_cls: type[EngineServer] = _load(registration(name).server)
    return server_cls.reuse_settings(config, run_dir)


def _describe(e: ValidationError) -> tuple[str, str]:
    field, kind, msg = first_validation_error(e)
    if kind == "extra_forbidden":
        return f"{field}: unknown field", "remove it or check its spelling"
    return f"{field}: {msg}", f"fix `{field}`"
