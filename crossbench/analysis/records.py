"""What one request record (a line of ``requests.jsonl``,
:class:`crossbench.store.rundir.RequestRecord`) says, whichever of its fields says it.

The bottom of :mod:`crossbench.analysis`: it imports no other analysis module, so every
other one (the acceptance figures, the summary, the stability checks) can read records
through it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def output_tokens(r: Mapping[str, Any]) -> int | None:
    """Generated tokens of a request: usage, else server timings, else summed chunk counts;
    None when the record says none of them."""
    usage = r.get("usage") or {}
    if isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    timings = r.get("timings") or {}
    if isinstance(timings.get("predicted_n"), int):
        return int(timings["predicted_n"])
    counts = [c[1] for c in r.get("chunks") or []]
    if counts and all(isinstance(c, int) for c in counts):
        return int(sum(counts))
    return None
