"""What every engine config shares: the strict base model, and the checks of the canonical
speculative settings every adapter takes (see ``runner.matrix``): ``type``, ``n``,
``draft_model``, ``synth_rates``, ``synth_len``."""

from __future__ import annotations

import itertools
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

HF_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""A Hugging Face repository id, ``OWNER/REPO`` (what ``hf://OWNER/REPO@REVISION`` names)."""


class StrictModel(BaseModel):
    """Base of the strict config models (engines, the matrix, a run): unknown fields are errors,
    values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def check_synth_rates(rates: list[float] | None) -> list[float] | None:
    """Synthetic per-position acceptance: non-empty, fractions in [0, 1], non-increasing
    (unconditional rates: a draft reaches position k+1 only through position k)."""
    if rates is None:
        return rates
    if not rates:
        raise ValueError("synth_rates is empty; give one rate per drafted position")
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError("synth_rates must be fractions in [0, 1] (not percentages)")
    if any(b > a for a, b in itertools.pairwise(rates)):
        raise ValueError("synth_rates must be non-increasing (they are unconditional: "
                         "a draft reaches position k+1 only through position k)")
    return rates


SynthRates = Annotated[list[float] | None, AfterValidator(check_synth_rates)]
"""The type of a ``synth_rates`` field, checked by :func:`check_synth_rates`."""
