"""Typed configuration of ``crossbench run`` (one engine configuration, N trials)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from crossbench.engines.spec import StrictModel
from crossbench.load.settings import LoadSettings

__all__ = ["LoadSettings", "RunConfig"]


MAX_TRIALS = 1000
"""Most trials per cell (a run is one cell): each is a fresh server; the schedule lists cells
x trials."""


class RunConfig(StrictModel):
    """A whole ``crossbench run``: engine, load, trials."""

    engine: str = Field("llama-server", description="Registered engine name.")
    engine_config: dict[str, Any] = Field(description="The engine's own strict config.")
    load: LoadSettings = Field(default_factory=LoadSettings,
                               description="Workload and load shape.")
    trials: int = Field(3, ge=1, le=MAX_TRIALS,
                        description="Repeats, each on a fresh server by default.")
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
        """Trials per server start in effect (:func:`server_block`)."""
        return server_block(self.trials, self.fresh_server, self.trials_per_start)


def server_block(trials: int, fresh_server: bool, trials_per_start: int) -> int:
    """Trials per server start in effect: ``fresh_server: false`` is all of them, else
    ``trials_per_start`` (at most ``trials``)."""
    return trials if not fresh_server else min(trials_per_start, trials)


def several_starts_block(trials: int) -> int:
    """The largest ``trials_per_start`` that still gives a cell of ``trials`` trials two or
    more server starts (1 for fewer than 4 trials): what a one-start design is told to use."""
    return max(1, trials // 2)
