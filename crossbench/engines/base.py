"""The engine interface: a server process with an explicit lifecycle.

Every adapter follows the same five steps, and the base never branches on engine names::

    server = registry.create("llama-server", config)   # typed, validated config
    server.validate()     # checks every input; raises UserError before anything starts
    server.start()        # spawns the process (own process group, log captured to a file)
    server.wait_ready()   # blocks until the server answers, or raises RunError with the log tail
    ...                   # the load client talks to server.base_url (OpenAI-compatible)
    snap = server.scrape()  # engine counters (Prometheus text), parsed
    server.stop()         # SIGTERM, then SIGKILL of the whole group; the port is free afterwards

Servers are context managers: ``with server: ...`` runs start/wait_ready and always stop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

from crossbench.engines.auth import ApiKey


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of an engine's metrics endpoint: the raw text and the parsed samples.

    ``samples`` maps a sample name (labels rendered in sorted order, e.g.
    ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}``) to its value.
    """

    t_ns: int
    text: str
    samples: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SpecCounters:
    """Where an engine's ``/metrics`` count speculation: the names of its counters (with or
    without ``_total``; series are summed over their labels), registered with the engine and
    read by :func:`crossbench.analysis.acceptance.counter_delta`.

    ``drafts`` counts verification steps that carried drafted tokens, ``draft_tokens`` the
    tokens drafted, ``accepted`` the drafted tokens accepted and ``per_position`` (labelled
    ``position``) the drafts whose accepted prefix reached each position. An engine without
    an ``accepted`` counter may name ``generated`` (output tokens) and ``requests`` (finished
    requests) instead: every request's first token comes from its prefill and every later
    step is a verification step emitting its accepted drafts plus one token, so accepted =
    generated - requests - drafts. A name left None is a figure the engine does not count.

    Example (llama-server, vLLM): ``SpecCounters.standard("vllm:spec_decode_")``.
    """

    drafts: str
    draft_tokens: str | None
    accepted: str | None
    per_position: str | None = None
    generated: str | None = None
    requests: str | None = None

    @classmethod
    def standard(cls, prefix: str) -> SpecCounters:
        """The four counters of llama-server and vLLM: ``<prefix>num_drafts_total``,
        ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
        ``..._num_accepted_tokens_per_pos_total{position="k"}``."""
        return cls(prefix + "num_drafts_total", prefix + "num_draft_tokens_total",
                   prefix + "num_accepted_tokens_total",
                   prefix + "num_accepted_tokens_per_pos_total")


@dataclass(frozen=True)
class SyntheticDraws:
    """How an engine draws synthetic acceptance for one recorded spec config, as far as the
    analysis needs it to predict the counters (:mod:`crossbench.analysis.synthetic`).

    ``rates`` are the unconditional per-position rates the engine draws with (a draft reaches
    position k with probability ``rates[k]``, stopping at the first rejection). By default the
    engine limits each draft to the tokens the request has left, as llama-server does.
    ``unpredictable`` says why the counters cannot be predicted for this config, e.g. a drafter
    that may draft fewer tokens than the limit. Then ``rates`` stay for reference only.
    Example (llama-server, ``synth_rates: [0.9, 0.7]``): ``SyntheticDraws((0.9, 0.7))``.

    An engine that draws a whole step's length instead gives ``step_mean`` and ``step_max``
    (``rates`` empty): each verification step commits the floor or the ceiling of
    ``step_mean`` tokens, the target's own included, with the weights that make the mean
    ``step_mean``, at most ``step_max``, and the counters count the tokens a request keeps,
    so its last step stops at its token limit. Example (SGLang, ``synth_len: 4.0951, n: 4``):
    ``SyntheticDraws((), step_mean=4.0951, step_max=5)``.

    An engine that drafts n tokens at every step whatever the request has left, and counts
    every drafted position, gives ``clipped=False``: its counters estimate ``rates`` themselves.
    Example (vLLM 0.26.0, ``synth_rates: [0.9, 0.81]``): ``SyntheticDraws((0.9, 0.81),
    clipped=False)``.
    """

    rates: tuple[float, ...]
    unpredictable: str | None = None
    step_mean: float | None = None
    step_max: int | None = None
    clipped: bool = True


def synthetic_rates(spec: Mapping[str, Any], from_length: Callable[[float, int], list[float]],
                    ) -> tuple[float, ...] | str | None:
    """The per-position rates a recorded spec config sets: its ``synth_rates``, or its
    ``synth_len`` turned into rates by the engine's own rule ``from_length(length, n)``. None
    without either; a string saying why where ``synth_len`` comes without a recorded n."""
    if spec.get("synth_rates"):
        return tuple(float(r) for r in spec["synth_rates"])
    if spec.get("synth_len") is None:
        return None
    if not spec.get("n"):
        return "synth_len without a recorded n: the rates are unknown"
    return tuple(from_length(float(spec["synth_len"]), int(spec["n"])))


@dataclass(frozen=True)
class EngineIdentity:
    """What exactly ran: version string, build number and commit, hashes of binary and libraries."""

    kind: str
    version: str
    build_number: int | None
    commit: str | None
    binary: str
    sha256: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class EngineServer(ABC):
    """A speculative-decoding-capable inference server, driven through its lifecycle."""

    #: registry name, e.g. ``"llama-server"``
    kind: str = ""
    #: gauge of requests in flight in the metrics, if the engine exports one (the runner
    #: waits for it to reach 0 before the closing scrape)
    in_flight_metric: str | None = None
    #: outcome of the last :meth:`stop` (signals needed, leftover processes, GPU memory
    #: released), recorded with the trial when not empty; engines whose stop has nothing to
    #: report keep this empty default. Example (vLLM): ``{"sigkill": [], "leftover": [],
    #: "gpu": "released", "stop_s": 1.2}``
    stop_report: Mapping[str, Any] = MappingProxyType({})

    @property
    def pid(self) -> int | None:
        """Process id of the running server (its process group), None while none runs. The
        runner reads it to tell a running server from a stopped one and to attribute GPU
        memory to the server's processes. Default: None (no process of crossbench's own)."""
        return None

    def props(self) -> dict[str, Any]:
        """What the running server says about itself (llama-server's ``/props``, vLLM's
        served models and start-up facts, SGLang's server info), read once per trial after
        :meth:`wait_ready`; the runner records a fixed subset of its keys. Default: ``{}``."""
        return {}

    @abstractmethod
    def validate(self) -> None:
        """Check binary, model files, method and flags; raise UserError naming field and fix."""

    @abstractmethod
    def validate_static(self) -> None:
        """Check the configuration without the engine binary or model files (for matrices
        validated on another machine); raise UserError naming field and fix."""

    @abstractmethod
    def command(self) -> list[str]:
        """The exact argv that :meth:`start` will run (for manifests and ``--dry-run``)."""

    @abstractmethod
    def start(self) -> None:
        """Spawn the server in its own process group with its log captured to a file."""

    @abstractmethod
    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until the server serves requests; raise RunError (with log tail) otherwise."""

    @property
    @abstractmethod
    def base_url(self) -> str:
        """Root URL of the OpenAI-compatible API, e.g. ``http://127.0.0.1:8080``."""

    @abstractmethod
    def scrape(self) -> MetricsSnapshot:
        """Fetch and parse the engine's metrics endpoint."""

    @abstractmethod
    def identity(self) -> EngineIdentity:
        """Version, build and hashes of the engine actually run."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the whole process tree; safe to call twice."""

    @property
    @abstractmethod
    def log_path(self) -> Path:
        """The file that holds the server's captured stdout and stderr."""

    @property
    def api_key(self) -> ApiKey | None:
        """The key every request and scrape must carry as ``Authorization: Bearer KEY`` (see
        :mod:`crossbench.engines.auth`); None when the server takes requests without one."""
        return None

    def warnings(self) -> list[str]:
        """What the configuration allows but a user should hear before the server starts
        (e.g. a ``host`` reachable from the network); each a sentence naming the setting.
        None by default."""
        return []

    @property
    def served_model_name(self) -> str:
        """The ``model`` field requests must carry (engines that check it override this)."""
        return "default"

    def request_extras(self, cache_prompt: bool) -> dict[str, Any]:
        """Engine-specific fields of every streamed request: what makes the engine report
        tokens per chunk and per-request figures, and its prompt-cache switch if it has one
        per request. Example (llama-server): ``{"cache_prompt": False,
        "timings_per_token": True}``."""
        return {}

    @classmethod
    def reuse_settings(cls, config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
        """``config`` (an engine config as a dict) with what :meth:`reset_cache` needs when
        trials reuse a server (e.g. a flag that enables the engine's reset route), for a run
        in ``run_dir``. The default needs nothing."""
        return config

    def reset_cache(self) -> dict[str, Any]:
        """Empty what a running server keeps from earlier requests (its prompt or prefix
        cache), so that a trial on a reused server starts as a fresh one would. Returns a
        record for the trial: ``method`` (what was done, ``"none"`` when nothing could be),
        ``ok``, and the engine's own figures (e.g. tokens erased). The default does nothing
        and says so."""
        return {"method": "none", "ok": False,
                "reason": f"{self.kind or 'this engine'} has no cache reset in crossbench"}

    def __enter__(self) -> EngineServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
