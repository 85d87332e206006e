"""Typed configuration of a llama-server run (strict: unknown fields are errors).

The adapter checks n (most tokens drafted per step) against every build with
:func:`n_limit`; docs/matrix.md "Limits on careless and hostile input" gives each
method's bound and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from crossbench.engines.affinity import CpuSettings
from crossbench.engines.auth import ApiKeySettings
from crossbench.engines.bind import host_warnings
from crossbench.engines.llamacpp.pins import DEFAULT_PIN
from crossbench.engines.spec import StrictModel, SynthRates

SpecType = Literal[
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
]

DRAFT_N_CAP = 64
"""Most tokens crossbench lets a ``--spec-draft-n-max`` method draft per step, where llama.cpp
sets no upper bound: 64 is llama.cpp's own default for the longest draft of its n-gram drafter
(``--spec-ngram-mod-n-max``, ``common/common.h``); a larger n is a typo (docs/matrix.md)."""

NGRAM_N_CAP = 1024
"""llama.cpp's own bound on ``--spec-ngram-*-size-m`` and ``--spec-ngram-mod-n-max``
(``common/arg.cpp`` refuses a value above 1024)."""


def n_limit(rules: Mapping[str, Any]) -> tuple[int | None, str]:
    """(most n, where the bound comes from) for a method's rules from ``options.yaml``.

    The rules' own ``n_max`` first (its ``note`` says why), else llama.cpp's bound on the
    method's n flag, else crossbench's :data:`DRAFT_N_CAP`; (None, "") for a method without n.
    """
    if "n_max" in rules:
        return int(rules["n_max"]), str(rules.get("note", "the method's limit"))
    option = rules.get("n_option")
    if option is None:
        return None, ""
    if option == "draft_n_max":
        return DRAFT_N_CAP, (f"crossbench caps --spec-draft-n-max at {DRAFT_N_CAP}, which "
                             "llama.cpp leaves unbounded (docs/matrix.md says why)")
    return NGRAM_N_CAP, f"llama.cpp refuses an n-gram draft length above {NGRAM_N_CAP}"


class LlamaSpecConfig(StrictModel):
    """Speculative decoding settings of llama-server."""

    type: SpecType = Field("none", description="`--spec-type`: the drafting method, or none.")
    n: int | None = Field(
        None, ge=0,
        description="Most tokens drafted per step (n). Maps to the method's own flag: "
        "--spec-draft-n-max for draft-*, --spec-ngram-mod-n-max for ngram-mod, "
        "--spec-ngram-*-size-m for the other n-gram types.",
    )
    n_min: int | None = Field(None, ge=0,
                              description="`--spec-draft-n-min`: fewest drafted tokens.")
    p_min: float | None = Field(None, ge=0, le=1,
                                description="`--spec-draft-p-min`: greedy draft probability cut.")
    draft_model: Path | None = Field(None, description="`-md`: draft GGUF (draft-* methods).")
    draft_ngl: str | None = Field(None, description="`-ngld`: draft layers on GPU (N|auto|all).")
    draft_sampling: Literal["greedy", "probabilistic"] | None = Field(
        None, description="`--spec-draft-sampling` (b11434 and later): greedy argmax drafts, or "
        "sampled drafts verified by rejection sampling.")
    ngram_mod_n_min: int | None = Field(None, ge=0, description="`--spec-ngram-mod-n-min`.")
    ngram_mod_n_match: int | None = Field(None, ge=1, description="`--spec-ngram-mod-n-match`.")
    synth_rates: SynthRates = Field(
        None,
        description="`--spec-synth-rates`: unconditional per-position acceptance probabilities, "
        "non-increasing, one per drafted position (benchmarking only: output is not valid text).",
    )
    synth_len: float | None = Field(
        None, ge=1, description="`--spec-synth-len`: target mean acceptance length (incl. the "
        "target token); exclusive with synth_rates.")

    @model_validator(mode="after")
    def _exclusive(self) -> LlamaSpecConfig:
        if self.synth_rates is not None and self.synth_len is not None:
            raise ValueError("synth_rates and synth_len are mutually exclusive; keep one")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any speculative method is configured."""
        return self.type != "none"


class LlamaServerConfig(StrictModel, ApiKeySettings, CpuSettings):
    """One llama-server configuration: binary, model, server settings and speculation (and,
    for a server behind an API key, where the key is: ``api_key_env`` or ``api_key_file``)."""

    binary: Path | None = Field(
        None, description="Your own llama-server; default: the build of `pin` made by "
        "`crossbench engines install llama.cpp`.")
    pin: str = Field(DEFAULT_PIN, description="Source pin of the crossbench-built engine.")
    variant: str = Field("cpu", description="Build variant of the pin: cpu or cuda-smNN.")
    model: Path = Field(description="Target model GGUF.")
    host: str = Field("127.0.0.1", description="Bind address; loopback unless told otherwise.")
    port: int | None = Field(None, ge=1, le=65535, description="Port; default: a free one.")
    ctx_size: int = Field(4096, ge=64, description="`-c`: context size in tokens.")
    n_gpu_layers: str | None = Field(None, description="`-ngl`: layers on GPU (N|auto|all).")
    flash_attn: Literal["on", "off", "auto"] | None = Field(None, description="`-fa`.")
    cache_type_k: str | None = Field(None, description="`-ctk`: KV cache type for K.")
    cache_type_v: str | None = Field(None, description="`-ctv`: KV cache type for V.")
    parallel: int = Field(1, ge=1, description="`-np`: parallel slots.")
    split_mode: Literal["none", "layer", "row", "tensor"] | None = Field(
        None, description="`-sm`: how the model is split across the visible GPUs (llama.cpp's "
        "default is layer; tensor is experimental in b11312/b11434).")
    tensor_split: list[float] | None = Field(
        None, min_length=2, description="`-ts`: proportion of the model per GPU, e.g. [1, 1].")
    threads: int | None = Field(None, ge=1, description="`-t`: generation threads.")
    threads_batch: int | None = Field(None, ge=1, description="`-tb`: prompt threads.")
    seed: int | None = Field(None, description="`-s`: server RNG seed.")
    slot_save_path: Path | None = Field(
        None, description="`--slot-save-path`: enables the slot actions; crossbench sets it "
        "(to the run directory) when trials reuse a server, to erase every slot between them.")
    spec: LlamaSpecConfig = Field(default_factory=LlamaSpecConfig,
                                  description="Speculative decoding settings.")
    extra_args: list[str] = Field(
        default_factory=list,
        description="Raw extra flags, checked against the detected build's flags.")
    ready_timeout_s: float = Field(300.0, gt=0, description="Seconds allowed to load and serve.")
    stop_timeout_s: float = Field(10.0, gt=0, description="Seconds between SIGTERM and SIGKILL.")

    def warnings(self) -> list[str]:
        """What is allowed but worth a warning before the server starts: a ``host`` that is
        not a loopback address (the server is then reachable from the network)."""
        return host_warnings(self.host)
