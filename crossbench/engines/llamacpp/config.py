"""Typed configuration of a llama-server run (strict: unknown fields are errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crossbench.engines.auth import ApiKeySettings
from crossbench.engines.llamacpp.pins import DEFAULT_PIN
from crossbench.engines.spec import check_synth_rates

SpecType = Literal[
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
]
SPEC_TYPES: tuple[str, ...] = SpecType.__args__  # type: ignore[attr-defined]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LlamaSpecConfig(_Strict):
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
    synth_rates: list[float] | None = Field(
        None,
        description="`--spec-synth-rates`: unconditional per-position acceptance probabilities, "
        "non-increasing, one per drafted position (benchmarking only: output is not valid text).",
    )
    synth_len: float | None = Field(
        None, ge=1, description="`--spec-synth-len`: target mean acceptance length (incl. the "
        "target token); exclusive with synth_rates.")

    @field_validator("synth_rates")
    @classmethod
    def _rates(cls, v: list[float] | None) -> list[float] | None:
        return check_synth_rates(v)

    @model_validator(mode="after")
    def _exclusive(self) -> LlamaSpecConfig:
        if self.synth_rates is not None and self.synth_len is not None:
            raise ValueError("synth_rates and synth_len are mutually exclusive; keep one")
        return self

    @property
    def enabled(self) -> bool:
        """Whether any speculative method is configured."""
        return self.type != "none"


class LlamaServerConfig(_Strict, ApiKeySettings):
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
    threads: int | None = Field(None, ge=1, description="`-t`: generation threads.")
    threads_batch: int | None = Field(None, ge=1, description="`-tb`: prompt threads.")
    seed: int | None = Field(None, description="`-s`: server RNG seed.")
    spec: LlamaSpecConfig = Field(default_factory=LlamaSpecConfig,
                                  description="Speculative decoding settings.")
    extra_args: list[str] = Field(
        default_factory=list,
        description="Raw extra flags, checked against the detected build's flags.")
    ready_timeout_s: float = Field(300.0, gt=0, description="Seconds allowed to load and serve.")
    stop_timeout_s: float = Field(10.0, gt=0, description="Seconds between SIGTERM and SIGKILL.")
