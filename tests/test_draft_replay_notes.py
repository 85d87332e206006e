"""`crossbench validate` notes, before any engine starts, the cells the analysis's
``draft_replay`` warning would flag after the run: a method drafting from state every request
of its start feeds (SGLang's NGRAM, llama-server's ngram-mod), with real acceptance, whose
trial repeats prompts or follows other trials on a start no reset clears. Checked on the
study's own matrix, whose `sglang-rest` round measured such replay (2026-12-06)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from crossbench.runner.matrix import expand, load_matrix, validate_cells

ROOT = Path(__file__).resolve().parents[1]
METHODS = ROOT / "matrices" / "h200-methods.yaml"


def _notes(tmp_path: Path, **change: Any) -> dict[str, str]:
    """The replay notes of h200-methods.yaml with top-level keys changed, by cell id."""
    doc = yaml.safe_load(METHODS.read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    m = load_matrix(path)
    notes = validate_cells(m, expand(m, path), path)
    out = {}
    for note in notes:  # "cell ID: ..." or "cells ID, ID and K more: ..." (one per reason)
        if "draft_replay" in note:
            named = note.split(": ")[0].removeprefix("cells ").removeprefix("cell ")
            assert " more" not in named
            out.update(dict.fromkeys(named.split(", "), note))
    return out


def test_the_studys_matrix_notes_its_replaying_ngram_cells(tmp_path: Path) -> None:
    """c=16 sends 128 requests over the workload's 48 prompts: SGLang's NGRAM cells there are
    noted (its corpus is flushed between trials, so the shared start is no reason), and
    llama.cpp's ngram-mod at both concurrencies (no route clears its table, and c=1 and c=16
    share starts). vLLM's ngram keeps no such state; synthetic arms decide nothing by drafts."""
    notes = _notes(tmp_path)
    assert sorted(notes) == [
        "llama/t8b-f16/ngram/builtin-mixed/c1", "llama/t8b-f16/ngram/builtin-mixed/c16",
        "sglang/t8b-hf/ngram/n2/builtin-mixed/c16", "sglang/t8b-hf/ngram/n4/builtin-mixed/c16",
        "sglang/t8b-hf/ngram/n8/builtin-mixed/c16"]
    sg = notes["sglang/t8b-hf/ngram/n4/builtin-mixed/c16"]
    assert sg.startswith("cells sglang/t8b-hf/ngram/n2/builtin-mixed/c16, ")  # one note
    assert "its 128 requests a trial cycle 48 prompts (80 repeats)" in sg
    assert "shares its server start" not in sg and "fresh start" not in sg
    c1 = notes["llama/t8b-f16/ngram/builtin-mixed/c1"]
    assert "shares its server start with other cells (share_servers)" in c1
    assert "repeats" not in c1 and "share_servers: false" in c1


def test_requests_within_the_prompts_and_own_starts_leave_no_note(tmp_path: Path) -> None:
    """With c=16 sending 3 requests per slot (48, every prompt once) only llama.cpp's shared
    starts are left; with its own starts too, nothing."""
    load = {"requests_per_concurrency": 3}
    left = _notes(tmp_path, load=load)
    assert sorted(left) == ["llama/t8b-f16/ngram/builtin-mixed/c1",
                            "llama/t8b-f16/ngram/builtin-mixed/c16"]
    assert all("repeats" not in n for n in left.values())
    assert _notes(tmp_path, load=load, share_servers=False) == {}


def test_later_trials_on_one_start_are_noted_where_nothing_clears_the_table(
        tmp_path: Path) -> None:
    notes = _notes(tmp_path, load={"requests_per_concurrency": 3}, share_servers=False,
                   trials=2, trials_per_start=2)
    assert sorted(notes) == ["llama/t8b-f16/ngram/builtin-mixed/c1",
                             "llama/t8b-f16/ngram/builtin-mixed/c16"]
    assert "trials_per_start 2 puts later trials on a start that earlier ones fed" in \
        notes["llama/t8b-f16/ngram/builtin-mixed/c1"]
