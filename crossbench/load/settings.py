"""What the client sends in a run: workload, sampling and load shape (the ``load`` section of
a run or a matrix)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LoadSettings(BaseModel):
    """What the client sends: workload, sampling and load shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str = Field("builtin:mixed", description="builtin:mixed | builtin:<category> | "
                          "builtin:repeat | random:<N tokens> | file:<path.jsonl>.")
    # the caps catch typos (10**15): a million requests is days of one trial, and no model
    # has a context of ten million tokens
    requests: int = Field(20, ge=1, le=1_000_000, description="Measured requests per trial "
                          "(with requests_per_concurrency: the least).")
    requests_per_concurrency: int | None = Field(
        None, ge=1, le=1_000_000, description="Measured requests per request in flight: a "
        "trial at concurrency c measures max(requests, c x this), so a high-concurrency cell "
        "measures a window as long as a low one's rather than a few waves (unset: requests at "
        "every concurrency).")
    warmup: int = Field(1, ge=0, le=1_000_000, description="Warm-up requests per trial "
                        "(recorded, excluded).")
    max_tokens: int = Field(256, ge=1, le=10_000_000,
                            description="Tokens to generate per request.")
    warmup_max_tokens: int | None = Field(None, ge=1, le=10_000_000,
                                          description="Tokens per warm-up request (default: "
                                          "max_tokens); warm-up only has to load caches and "
                                          "kernels, a few dozen suffice.")
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

    @model_validator(mode="before")
    @classmethod
    def _requests_per_concurrency(cls, data: Any) -> Any:
        """``requests`` becomes max(requests, concurrency x requests_per_concurrency)."""
        if not isinstance(data, dict) or data.get("requests_per_concurrency") is None:
            return data
        try:
            want = int(data.get("concurrency", 1)) * int(data["requests_per_concurrency"])
            least = int(data.get("requests", cls.model_fields["requests"].default))
        except (TypeError, ValueError):
            return data  # the fields' own checks name the bad value
        return {**data, "requests": max(least, want)} if want > least else data
