"""vLLM's formats rendered for the tests: the ``/metrics`` registry a release creates at
start-up (:class:`VllmMetrics`) and its startup-log lines (:func:`render_startup`), each from
the families and format strings the profile read from the wheel. The vLLM stand-in serves
them and ``tests/vllm_golden.py`` writes the format fixtures with them; crossbench itself
only reads these formats (``crossbench.engines.vllm.metrics`` and ``.startup_log``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from string import Template
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from crossbench.engines.vllm.metrics import SPEC_PREFIX
from crossbench.engines.vllm.profile import VllmProfile

#: families vLLM registers only under options or hardware crossbench does not use
CONDITIONAL = ("vllm:kv_block_", "vllm:watermark", "vllm:corrupted_requests",
                "vllm:lora_requests_info", "vllm:num_requests_kv_fetch", "vllm:diffusion_",
                "vllm:engine_sleep_state")
ENGINE_LABELS = ["model_name", "engine"]

@dataclass
class VllmMetrics:
    """A registry holding a release's metric families as vLLM creates them at start-up.

    Per-engine children exist from the start (zeros), as vLLM's ``create_metric_per_engine``
    makes them; the speculative families exist only with speculation, with one
    ``position`` child per drafted position. Used by the stand-in and by the fixture maker.
    """

    profile: VllmProfile
    model_name: str
    engines: int = 1
    num_spec_tokens: int | None = None
    process_collectors: bool = True
    registry: CollectorRegistry = field(init=False)
    families: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        if self.process_collectors:  # vLLM serves the default registry, which has these
            for c in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(c)
        for fam in self.profile.metrics:
            name, labels = str(fam["name"]), fam.get("labels")
            if labels is None or name.startswith(CONDITIONAL):
                continue
            if name.startswith(SPEC_PREFIX) and self.num_spec_tokens is None:
                continue  # SpecDecodingProm registers nothing without speculation
            kind, doc = fam["type"], str(fam.get("help") or name)
            metric: Any
            if kind == "counter":
                metric = Counter(name, doc, labels, registry=self.registry)
            elif kind == "gauge":
                metric = Gauge(name, doc, labels, registry=self.registry)
            else:
                buckets = fam.get("buckets") or Histogram.DEFAULT_BUCKETS
                metric = Histogram(name, doc, labels, registry=self.registry, buckets=buckets)
            self.families[name] = metric
            if list(labels) == ENGINE_LABELS:
                for e in range(self.engines):
                    metric.labels(self.model_name, str(e))
            elif list(labels) == [*ENGINE_LABELS, "position"]:
                for e in range(self.engines):
                    for pos in range(self.num_spec_tokens or 0):
                        metric.labels(self.model_name, str(e), str(pos))

    def child(self, name: str, engine: int, *extra: str) -> Any:
        """The series of family ``name`` (without ``_total``) for one engine."""
        return self.families[name].labels(self.model_name, str(engine), *extra)

    def has(self, name: str) -> bool:
        """Whether the release defines family ``name`` (and it is registered here)."""
        return name in self.families

    def text(self) -> str:
        """The exposition text, as vLLM's ``/metrics`` serves it."""
        return generate_latest(self.registry).decode()


#: where vLLM 0.33.0 logs each message from ([file:line] of the log prefix) and at what level
_ORIGIN: dict[str, tuple[str, str, str]] = {
    "version": ("APIServer", "INFO", "startup.py:40"),
    "version_logo": ("APIServer", "INFO", "startup.py:40"),
    "engine_config": ("EngineCore", "INFO", "core.py:140"),
    "model_runner": ("EngineCore", "INFO", "gpu_worker.py:513"),
    "model_runner_fallback": ("EngineCore", "WARNING", "vllm.py:758"),
    "attention_backend": ("EngineCore", "INFO", "cuda.py:509"),
    "kv_cache_memory": ("EngineCore", "INFO", "gpu_worker.py:772"),
    "kv_cache_tokens": ("EngineCore", "INFO", "kv_cache_utils.py:1147"),
    "graph_capture": ("EngineCore", "INFO", "gpu_model_runner.py:6517"),
    "max_num_scheduled_tokens": ("EngineCore", "WARNING", "vllm.py:2361"),
    "serve": ("APIServer", "INFO", "entry.py:139"),
    "compile": ("EngineCore", "INFO", "backends.py:1095"),  # 0.26.0's place
    "engine_init": ("EngineCore", "INFO", "core.py:331"),  # 0.26.0's place
}


def log_line(message: str, fact: str, pid: int, t: float | None = None) -> list[str]:
    """``message`` as vLLM's NewLineFormatter prints it (every line of it prefixed)."""
    proc, level, where = _ORIGIN.get(fact, ("APIServer", "INFO", "api_server.py:1"))
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime() if t is None else time.gmtime(t))
    prefix = f"({proc} pid={pid}) {level} {stamp} [{where}] "
    return [prefix + part for part in message.split("\n")]


def pick(formats: dict[str, tuple[str, ...]], fact: str, must: str = "") -> str | None:
    """The first format string of ``fact`` containing ``must`` (None when the release has
    none)."""
    return next((s for s in formats.get(fact, ()) if must in s), None)


def render_message(fmt: str, *args: Any) -> str:
    """A format string filled as vLLM fills it: ``%`` arguments, ``{}`` for f-string parts,
    and the logo's ``${colour}`` template variables emptied (a log file has no colours)."""
    if "${" in fmt:
        fmt = Template(fmt).safe_substitute(w="", o="", b="", r="")
    n_brace = fmt.count("{}")
    if n_brace:
        fmt = fmt.replace("%", "%%").replace("{}", "%s")
    return fmt % args if args else fmt


def render_startup(formats: dict[str, tuple[str, ...]], pid: int, *, version: str, model: str,
                   spec_repr: str, capture_sizes: list[int], kv_tokens: int, kv_gib: float,
                   max_model_len: int, attention: str, max_scheduled: int | None,
                   logo: bool = True, t: float | None = None,
                   capture_s: float | None = 3) -> list[str]:
    """Startup lines of one server, each from its release's own format string (facts the
    release does not log are left out); ``t`` fixes the time stamp (default: now). The
    version comes as vLLM 0.33 prints it through its own log handler, in the logo
    (``logo=False``: the plain message of ``VLLM_DISABLE_LOG_LOGO=1``). The ``[file:line]``
    of the prefix is where vLLM 0.33.0 logs each message; ``capture_s`` None leaves out the
    graph-capture line."""
    out: list[str] = []

    def add(fact: str, must: str, *args: Any, origin: str | None = None) -> None:
        fmt = pick(formats, fact, must)
        if fmt is not None:
            out.extend(log_line(render_message(fmt, *args), origin or fact, pid, t))

    if logo and pick(formats, "version_logo"):
        add("version_logo", "", version, model)
    else:
        add("version", "", *(version, model)[: 2 if "serving model" in
                                              (pick(formats, "version") or "") else 1])
    sizes = ", ".join(str(s) for s in capture_sizes)
    config = (f"model={model!r}, speculative_config={spec_repr}, tokenizer={model!r}, "
              f"dtype=torch.bfloat16, max_seq_len={max_model_len}, "
              f"compilation_config={{'cudagraph_capture_sizes': [{sizes}], "
              f"'max_cudagraph_capture_size': {max(capture_sizes, default=0)}}}")
    add("engine_config", "Initializing a V1", version, config)
    add("model_runner", "Using V2")
    add("attention_backend", "out of potential backends", attention,
        f"['{attention}', 'FLASHINFER', 'TRITON_ATTN']")
    if not any("out of potential" in s for s in formats.get("attention_backend", ())):
        add("attention_backend", "Flash Attention backend on V1")
    gib_fmt = pick(formats, "kv_cache_memory") or ""
    add("kv_cache_memory", "", round(kv_gib, 2) if "%s" in gib_fmt else kv_gib)
    tok_fmt = pick(formats, "kv_cache_tokens") or ""
    if "Maximum concurrency" in tok_fmt:
        add("kv_cache_tokens", "", "GPU", f"{kv_tokens:,}", f"{max_model_len:,}",
            kv_tokens / max_model_len)
    else:
        add("kv_cache_tokens", "", f"{kv_tokens:,}")
    if capture_s is not None:  # None: the caller logs the capture itself
        add("graph_capture", "", capture_s, 0.12)
    if max_scheduled is not None and max_scheduled < 8192:
        add("max_num_scheduled_tokens", "This may lead", max_scheduled)
    return out
