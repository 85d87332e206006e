"""Typed configuration of ``crossbench run`` (one engine configuration, N trials)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LoadSettings(BaseModel):
    """What the client sends: workload, sampling and load shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str = Field("builtin:mixed", description="builtin:mixed | builtin:<category> | "
                          "random:<N tokens> | file:<path.jsonl>.")
    requests: int = Field(20, ge=1, description="Measured requests per trial.")
    warmup: int = Field(1, ge=0, description="Warm-up requests per trial (recorded, excluded).")
    max_tokens: int = Field(256, ge=1, description="Tokens to generate per request.")
    warmup_max_tokens: int | None = Field(None, ge=1, description="Tokens per warm-up "
                                          "request (default: max_tokens); warm-up only has "
                                          "to load caches and kernels, a few dozen suffice.")
    ignore_eos: bool = Field(True, description="Generate exactly max_tokens (comparable work).")
    endpoint: Literal["completions", "chat"] = Field(
        "completions", description="/v1/completions (raw prompt) or /v1/chat/completions.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling cut.")
    seed: int = Field(0, description="Request seed and workload seed.")
    thinking: bool | None = Field(None, description="Chat endpoint: sent as "
                                  "chat_template_kwargs.enable_thinking (Qwen3-style templates); "
                                  "None leaves the template's default. Ignored by raw "
                                  "completions, which apply no template.")
    cache_prompt: bool = Field(False, description="Allow the server's prompt cache (off: every "
                               "request pays its prefill, so arms compare alike).")
    concurrency: int = Field(1, ge=1, description="Requests in flight (closed loop).")
    rate: float | None = Field(None, gt=0, description="Poisson arrivals per second instead of "
                               "a closed loop (open loop); concurrency then caps in-flight.")
    request_timeout_s: float = Field(600.0, gt=0, description="Per-request time limit.")


class RunConfig(BaseModel):
    """A whole ``crossbench run``: engine, load, trials."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str = Field("llama-server", description="Registered engine name.")
    engine_config: dict[str, Any] = Field(description="The engine's own strict config.")
    load: LoadSettings = Field(default_factory=LoadSettings,
                               description="Workload and load shape.")
    trials: int = Field(3, ge=1, description="Repeats, each on a fresh server by default.")
    fresh_server: bool = Field(True, description="Start a new server for every trial "
                               "(false: one server for all trials).")
    trials_per_start: int = Field(
        1, ge=1, description="Trials run back to back on one server start, with the engine's "
        "cache reset and a warm-up before each (1: a fresh server per trial).")
    gpu_busy: Literal["warn", "refuse"] = Field(
        "warn", description="Other processes on the GPU (or a busy GPU) before a trial: warn "
        "and record it, or refuse the trial (recorded as failed with the processes named).")
    telemetry_hz: float = Field(10.0, ge=0, description="GPU telemetry samples per second "
                                "into telemetry/tK.csv (NVML; 0 turns it off; without a GPU "
                                "the trace records why it is empty).")
    model_refs: dict[str, str] = Field(
        default_factory=dict,
        description="How each model was named before resolution (e.g. an hf:// reference).")

    @property
    def block(self) -> int:
        """Trials per server start in effect (``fresh_server: false`` is all of them)."""
        return self.trials if not self.fresh_server else min(self.trials_per_start, self.trials)
