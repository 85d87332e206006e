"""Run directories with known figures, for tests and the analysis scale benchmark.

:func:`request` makes a record whose TTFT, decode rate and chunking are given, so every
figure the analysis derives from it is known in advance; :func:`study` writes cells of such
records as an import directory (``source: synthetic``) that ``crossbench analyze`` reads like
any other. Nothing here runs an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.importers.records import ImportedCell, run_config, write_import

NS_PER_S = 1_000_000_000


def request(*, trial: int, index: int, prompt_id: str, category: str, t_sent_ns: int,
            rate_tok_s: float, tokens: int = 64, ttft_ms: float = 10.0,
            chunk_tokens: int = 1, **extra: Any) -> dict[str, Any]:
    """A completed record: first token ``ttft_ms`` after sending, then ``tokens - 1`` more at
    ``rate_tok_s``, in chunks of ``chunk_tokens`` evenly spaced (the last may be shorter)."""
    first = t_sent_ns + round(ttft_ms * 1e6)
    decode_ns = round((tokens - 1) / rate_tok_s * NS_PER_S)
    chunks = [[first, 1]]
    for start in range(0, tokens - 1, chunk_tokens):
        end = min(start + chunk_tokens, tokens - 1)
        chunks.append([first + round(decode_ns * end / (tokens - 1)), end - start])
    rec: dict[str, Any] = {
        "trial": trial, "request_index": index, "prompt_id": prompt_id, "category": category,
        "warmup": False, "t_sent_ns": t_sent_ns, "t_first_chunk_ns": first,
        "t_done_ns": chunks[-1][0], "chunks": chunks, "n_chunks": len(chunks),
        "text": f"output of {prompt_id}", "finish_reason": "length",
        "usage": {"completion_tokens": tokens}, "max_tokens": tokens, "status": "ok",
        "error": None,
    }
    rec.update(extra)
    return rec


@dataclass
class Arm:
    """One arm of a synthetic study: its method, n, spec settings and acceptance counts."""

    name: str
    method: str = "none"
    n: int | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    acceptance: dict[str, Any] | None = None
    """Counters over all trials: drafts, draft_tokens, accepted, per_position (counts);
    spread over the records' ``timings`` too."""
    model: str | None = None
    """The arm's target where it is not the study's ``model`` (a run of several targets, each
    with its own baseline arm)."""


Rate = Callable[[Arm, str, int, int], float]
"""Decode rate (tok/s) of an arm's request: (arm, prompt id, trial, occurrence)."""


def study(out: Path, prompts: list[tuple[str, str]], arms: list[Arm], rate: Rate, *,
          trials: int = 3, occurrences: int = 1, tokens: int = 64, chunk_tokens: int = 1,
          load: dict[str, Any] | None = None, model: str = "synthetic-model",
          extra: Callable[[Arm, str, int, int], dict[str, Any]] | None = None
          ) -> dict[str, Any]:
    """Write a study of ``arms`` (the ``none`` arm is the baseline) over ``prompts`` (id,
    category), each sent ``occurrences`` times per trial; returns the directory's state."""
    cells = []
    for arm in arms:
        records = []
        for t in range(trials):
            clock = 0
            index = 0
            for occ in range(occurrences):
                for pid, cat in prompts:
                    rec = request(trial=t, index=index, prompt_id=pid, category=cat,
                                  t_sent_ns=clock, rate_tok_s=rate(arm, pid, t, occ),
                                  tokens=tokens, chunk_tokens=chunk_tokens,
                                  **(extra(arm, pid, t, occ) if extra else {}))
                    records.append(rec)
                    clock = rec["t_done_ns"] + 1_000_000
                    index += 1
        if arm.acceptance is not None:
            _spread_timings(records, arm.acceptance)
        spec = {"type": arm.method, **({"n": arm.n} if arm.n is not None else {}), **arm.spec}
        cell_load = {"workload": "synthetic", "max_tokens": tokens, "temperature": 0.0,
                     "ignore_eos": True, "cache_prompt": False, "concurrency": 1,
                     **(load or {})}
        target = arm.model or model
        coords = {"engine": "synthetic", "target": target, "arm": arm.name,
                  "method": arm.method, "n": arm.n, "workload": "synthetic", "concurrency": 1}
        imported: dict[str, Any] = {"trials": list(range(trials))}
        if arm.acceptance is not None:
            imported["acceptance"] = arm.acceptance
        cells.append(ImportedCell(coords, run_config(engine="synthetic", model=target,
                                                     spec=spec, load=cell_load,
                                                     trials=trials),
                                  {"kind": "synthetic", "version": None, "sha256": None},
                                  records, imported))
    return write_import(out, cells, {"tool": "synthetic"}, [])


def _spread_timings(records: list[dict[str, Any]], acceptance: dict[str, Any]) -> None:
    """Per-request ``timings.draft_n``/``draft_n_accepted`` that sum to the arm's counters
    (as llama-server's do), so the acceptance integrity checks hold."""
    drafted, accepted = int(acceptance["draft_tokens"]), int(acceptance["accepted"])
    count = len(records)
    for i, rec in enumerate(records):
        timings = dict(rec.get("timings") or {})
        timings["draft_n"] = drafted // count + (1 if i < drafted % count else 0)
        timings["draft_n_accepted"] = accepted // count + (1 if i < accepted % count else 0)
        rec["timings"] = timings
