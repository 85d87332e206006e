"""The run directory and its one owner: layout, format versions, typed records, the writer
and the reader (docs/run-directory.md lists every file and its format history).

Every name of a file or folder crossbench writes into a run directory is spelled here and
nowhere else; other modules import the constants (or the :class:`RunLayout` and
:class:`MatrixLayout` paths). Records are written by :class:`RunWriter` and the matrix-level
functions (:func:`write_state`), and read by the reader part. **A reader never writes**
(docs/run-directory.md). A file newer than this crossbench reads, or not what its name says
(truncated, not a JSON object, keys missing), is refused with a one-line
:class:`~crossbench.errors.UserError` naming the file; never a traceback. ``requests.jsonl``
has one reader, :func:`read_records`, over ``store.atomic.scan_jsonl``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from crossbench import __version__
from crossbench.errors import UserError
from crossbench.store.atomic import (
    JsonlAppender,
    JsonlScan,
    json_error,
    json_type,
    read_jsonl,
    scan_jsonl,
    temp_name,
    write_bytes_atomic,
    write_json_atomic,
)
from crossbench.textfile import MIB, read_bytes

# -- layout ---------------------------------------------------------------------------------

MANIFEST = "manifest.json"
"""A run's configuration, engine identity and per-trial entries (kind ``crossbench.run``)."""
REQUESTS = "requests.jsonl"
"""A run's raw records, one JSON line per request."""
SUMMARY = "summary.json"
"""A run's summary (recomputed from the raw files), or a matrix's per-cell status."""
SERVER_LOG = "server.log"
"""The engine's own output, every trial."""
METRICS_DIR = "metrics"
"""Folder of a run's raw ``/metrics`` snapshots."""
TELEMETRY_DIR = "telemetry"
"""Folder of a run's GPU telemetry traces."""
STATE = "state.json"
"""A matrix's or an import's cells and schedule (kind ``crossbench.matrix`` or
``crossbench.import``)."""
JOURNAL = "journal.jsonl"
"""A matrix's finished trials, one line each (the resume point)."""
STOPS = "stops.jsonl"
"""A matrix's cells stopped by the sequential rule (``crossbench.runner.stopping``), one line
each, written by the driver alone."""
PREDICTIONS = "predictions.jsonl"
"""A matrix's probe-and-predict decisions (``crossbench.runner.probe``), one line per decided
cell (a later line replaces an earlier one of its cell), written by the driver alone."""
START_SPREAD = "start-spread.json"
"""A matrix's known start spread (its ``start_spread`` file, copied as run), which its
sequential and probe-and-predict decisions used and its analysis uses by default."""
MATRIX_FILE = "matrix.yaml"
"""The matrix file as run."""
CELLS_DIR = "cells"
"""Folder of a matrix's or an import's cells, a run directory each."""
ANALYSIS = "analysis.json"
"""The whole analysis (``crossbench analyze``)."""
ANALYSIS_DIR = "analysis"
"""Folder of the analysis tables (``<table>.md`` and ``.csv``)."""
REPORT_DIR = "report"
"""Default folder of ``crossbench report``."""
CHECK_BEFORE, CHECK_AFTER = "before.prom", "after.prom"
"""The two ``/metrics`` scrapes of an engine check's ``--out`` (``crossbench engines check``;
beside them its ``server.log`` and ``requests.jsonl``)."""

Snapshot = Literal["before", "after"]
"""Which ``/metrics`` snapshot of a trial: before or after its measured requests."""


SNAPSHOT_PATTERN = r"t\d+-(before|after)\.prom"
"""Regular expression of a snapshot's file name (:func:`snapshot_name`)."""
TELEMETRY_PATTERN = r"t\d+\.csv"
"""Regular expression of a telemetry trace's file name (:func:`telemetry_name`)."""


def snapshot_name(trial: int | str, which: str) -> str:
    """File name of a trial's ``/metrics`` snapshot (``t0-before.prom``)."""
    return f"t{trial}-{which}.prom"


def telemetry_name(trial: int | str) -> str:
    """File name of a trial's telemetry trace (``t0.csv``)."""
    return f"t{trial}.csv"


CELL_SEPARATOR = "__"
"""What stands for ``/`` of a cell id in its folder name: no part of a cell id (engine id,
target, arm name, workload) may hold it, so that folder names are as distinct as the ids."""


def cell_folder(cell_id: str) -> str:
    """A cell's folder, relative to its matrix or import directory (``cells/a__b``)."""
    return f"{CELLS_DIR}/{cell_id.replace('/', CELL_SEPARATOR)}"


class _Under:
    """A file or folder of a layout: ``layout.<attribute>`` is ``layout.root / name``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, layout: RunLayout | MatrixLayout, owner: type) -> Path:
        return layout.root / self.name


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (a ``crossbench run``, a matrix cell, an import cell)."""

    root: Path
    manifest = _Under(MANIFEST)
    requests = _Under(REQUESTS)
    summary = _Under(SUMMARY)
    server_log = _Under(SERVER_LOG)
    metrics_dir = _Under(METRICS_DIR)
    telemetry_dir = _Under(TELEMETRY_DIR)
    analysis = _Under(ANALYSIS)  # a single run analysed on its own

    def snapshot(self, trial: int, which: Snapshot) -> Path:
        """``metrics/tK-before.prom`` or ``metrics/tK-after.prom``."""
        return self.metrics_dir / snapshot_name(trial, which)

    def telemetry(self, trial: int) -> Path:
        """``telemetry/tK.csv``."""
        return self.telemetry_dir / telemetry_name(trial)


@dataclass(frozen=True)
class MatrixLayout:
    """The paths of a matrix (or import) directory."""

    root: Path
    state = _Under(STATE)
    journal = _Under(JOURNAL)
    stops = _Under(STOPS)
    predictions = _Under(PREDICTIONS)
    matrix = _Under(MATRIX_FILE)
    summary = _Under(SUMMARY)  # per-cell status
    analysis = _Under(ANALYSIS)

    def cell(self, cell_id: str) -> RunLayout:
        """The run directory of a cell, by id."""
        return RunLayout(self.root / cell_folder(cell_id))


# -- kinds and format versions --------------------------------------------------------------

RUN_KIND = "crossbench.run"
MATRIX_KIND = "crossbench.matrix"
EXPORT_KIND = "crossbench.export"
"""What an ``export --out`` folder holds (named by its :data:`OUTPUT_MARK`)."""
REPORT_KIND = "crossbench.report"
"""What a ``report --out`` folder holds (named by its :data:`OUTPUT_MARK`)."""
IMPORT_KIND = "crossbench.import"
SUMMARY_KIND = "crossbench.summary"
MATRIX_SUMMARY_KIND = "crossbench.matrix_summary"
ANALYSIS_KIND = "crossbench.analysis"
PROVENANCE_KIND = "crossbench.provenance"


@dataclass(frozen=True)
class Format:
    """One versioned file of a run directory: its name, kind, newest version and history.

    ``redefined``: fields whose meaning changed in a version (glob patterns, list items as
    ``*``); a file of an older version is not compared with a re-derivation on them
    (``archive verify``); fields a later version added are absent from older files and not
    compared either."""

    file: str
    kind: str
    version: int
    history: Mapping[int, str]
    redefined: Mapping[int, tuple[str, ...]]


FORMATS: dict[str, Format] = {
    "manifest": Format(MANIFEST, RUN_KIND, 1, {
        1: "first version (runs, matrix cells and imported cells); its requests.jsonl lines "
           "are read by the manifest's version. Added since without a version change (older "
           "readers ignore the keys): records' retries and failed_attempts, trials' "
           "load.retries"}, {}),
    "provenance": Format(f"{MANIFEST} trials[].provenance", PROVENANCE_KIND, 1, {
        1: "first version. Added since without a version change (older readers ignore the "
           "key): crossbench.code_sha256"}, {}),
    "state": Format(STATE, MATRIX_KIND, 1, {
        1: "first version; its journal.jsonl lines carry no version of their own and are "
           "read by the state's. Added since without a version change (older readers ignore "
           "the key): journal_repairs, the torn journal tails `--resume` cut (utc, offset, "
           "bytes, text); merged_from, the sources of a `crossbench merge` (dir, "
           "state_sha256, cells, first_started_utc)"}, {}),
    "import": Format(STATE, IMPORT_KIND, 1, {
        1: "first version (cells with coords, baseline and dir; source; not_imported)"}, {}),
    "summary": Format(SUMMARY, SUMMARY_KIND, 5, {
        1: "first version (throughput, latency_ms, acceptance, integrity, requests, "
           "per_trial)",
        2: "server_pooled_tok_s over the client's window (predicted_n - 1, or vLLM's request "
           "histograms); adds server_rate_source, client_vs_server, engine_reported_tok_s, "
           "engine_rate_definition and acceptance.mean_acceptance_length_estimate / mal_note",
        3: "acceptance.expected_per_position, expected_mean_acceptance_length, "
           "expected_draft_acceptance_rate and expected_note: under llama-server's synthetic "
           "acceptance, the figures its counters should give with every draft clipped to the "
           "tokens a request has left (analysis/synthetic.py); None elsewhere",
        4: "acceptance.expected_mean_acceptance_length and expected_note under SGLang's "
           "simulated acceptance too: each step commits the floor or the ceiling of the mean "
           "length and a request's last step stops at its token limit (None before)",
        5: "acceptance.expected_per_position, expected_mean_acceptance_length, "
           "expected_draft_acceptance_rate and expected_note under vLLM's synthetic "
           "acceptance too: the configured rates, since vLLM drafts n tokens at every step and "
           "counts them all (None before)"},
        {2: ("throughput.server_pooled_tok_s", "per_trial.*.throughput.server_pooled_tok_s"),
         4: ("acceptance.expected_mean_acceptance_length", "acceptance.expected_note"),
         5: ("acceptance.expected_per_position", "acceptance.expected_mean_acceptance_length",
             "acceptance.expected_draft_acceptance_rate", "acceptance.expected_note")}),
    "analysis": Format(ANALYSIS, ANALYSIS_KIND, 16, {
        1: "first version (cells, pairs, sweeps, stability)",
        2: "options.strata and each interval's design; cost-model intervals (d_ci95, v_ci95) "
           "and tau estimated from per-request counts where no counter exists; server rates "
           "over the client's window and the engine's own figure; imports compared as "
           "recorded (no defaults), their layout-made figures dropped; verdict_caveats; new "
           "warning kinds (trial_warnings, few_clusters, split_occasion)",
        3: "the single_start warning and its verdict caveat: a pair whose trials all ran on "
           "one server start per side",
        4: "speedup.start_ci95 (Student's t over the trials' or server starts' mean ratios) "
           "and the starts_disagree warning and verdict caveat: a decisive verdict whose "
           "starts, each one sample, give an interval that holds 1; cells.*.host_time (GPU "
           "work against the GPU waiting on the host, per output token) and the host_bound "
           "warning",
        5: "options.start_spread and speedup.start_prior: with a known start spread "
           "(`analyze --start-spread FILE`) ci95 and the verdict come from the union of the "
           "bootstrap's interval and the one that adds the starts' known spread "
           "(start_prior.bootstrap_ci95 keeps the bootstrap's alone), and a verdict caveat "
           "says where the spread changed the verdict",
        6: "start_prior's spec_starts and baseline_starts are effective counts, (sum n)^2 / "
           "sum n^2 over each start's pairs, so starts of unequal shares count as fewer and "
           "their intervals widen; pairing.ended_early, the baseline requests left unpaired "
           "because the speculative trial ended early by design (sequential.look_every), is "
           "no longer counted by the unpaired_requests warning",
        7: "options.equivalence (a practical-equivalence band, +-2 % by default: an interval "
           "wholly inside it reads indistinguishable; older files had none and are "
           "re-derived without one) and speedup.within_band; speedup_e2e compares latency per "
           "output token where a pair's lengths differ, pairs.*.lengths counts such pairs and "
           "the length_mismatch warning names them; the acceptance_counter warning and "
           "acceptance.counter_suspect (accepted equals drafted in every request); output "
           "parity compares reasoning and content",
        8: "cells.*.host_time.per_trial.*.host (the trial's CPU and load); the host_bound "
           "warning also fires where a speculative arm waits on the host at least a quarter "
           "of a baseline token's time longer per token than its baseline, and names the "
           "CPUs, the load and other busy processes; the different_cpus confound finding (a "
           "pair whose arms ran on different CPUs reads confounded)",
        9: "cells.*.host_time.decode: GPU work and host time per token over the decode alone "
           "(prefill and the gaps between requests left out; needs the trials' clock "
           "anchor)",
        10: "the single_trial warning's verdict caveat: a pair of one trial per cell rests on "
            "one server start per side, which a datapoint's caveats now say beside its "
            "verdict",
        11: "cells.*.acceptance.expected_per_position, expected_mean_acceptance_length, "
            "expected_draft_acceptance_rate and expected_note, and pairs.*.acceptance."
            "expected_per_position and expected_note: under llama-server's synthetic "
            "acceptance, what its counters should read with every draft clipped to the tokens "
            "a request has left (analysis/synthetic.py; summary.json version 3 has them too)",
        12: "the speculative axis of a pair's confound check holds SGLang's KV pool "
            "(engine.startup.max_total_num_tokens), which the drafter's memory shrinks as it "
            "shrinks vLLM's KV cache: an SGLang pair differing only there no longer reads "
            "confounded",
        13: "cells.*.acceptance.expected_mean_acceptance_length and expected_note, and "
            "pairs.*.acceptance.expected_note, under SGLang's simulated acceptance too "
            "(summary.json version 4)",
        14: "the draft_replay warning and its verdict caveat: a method that drafts from "
            "state every request of a start feeds (SGLang's NGRAM, llama.cpp's ngram-mod) "
            "with prompts repeated in a trial or a trial after others on its start without "
            "a reset that clears the state",
        15: "cells.*.acceptance.expected_* and pairs.*.acceptance.expected_per_position and "
            "expected_note under vLLM's synthetic acceptance too: its configured rates "
            "(summary.json version 5)",
        16: "where a sweep turns negative: sweeps.*.loses_from (the smallest measured n from "
            "which every measured n reads slower) and sweeps.*.cost_model."
            "predicted_negative_from with predicted_negative_from_ci95"},
        {2: ("cells.*.throughput.server_pooled_tok_s", "cells.*.latency_ms.chunk_gap",
             "cells.*.latency_ms.token_itl", "cells.*.throughput.wall_output_tok_s",
             "pairs.*.warnings", "pairs.*.confounds", "pairs.*.verdict", "stability",
             "sweeps.*.cost_model.fitted", "sweeps.*.cost_model.reason",
             "sweeps.*.cost_model.predicted", "sweeps.*.cost_model.points"),
         3: ("pairs.*.warnings", "pairs.*.verdict_caveats", "stability"),
         4: ("pairs.*.warnings", "pairs.*.verdict_caveats", "stability"),
         5: ("pairs.*.speedup.ci95", "pairs.*.verdict", "pairs.*.verdict_caveats"),
         6: ("pairs.*.speedup.ci95", "pairs.*.speedup.start_prior", "pairs.*.speedup_e2e.ci95",
             "pairs.*.speedup_e2e.start_prior", "pairs.*.verdict", "pairs.*.verdict_caveats",
             "pairs.*.warnings", "sweeps.*.cost_model.predicted"),
         7: ("pairs.*.speedup_e2e", "pairs.*.per_category.*.speedup_e2e",
             "sweeps.*.points.*.speedup_e2e", "pairs.*.parity", "pairs.*.warnings",
             "stability"),
         8: ("pairs.*.warnings", "pairs.*.confounds", "pairs.*.verdict",
             "pairs.*.verdict_caveats", "stability"),
         10: ("pairs.*.verdict_caveats",),
         12: ("pairs.*.warnings", "pairs.*.confounds", "pairs.*.verdict",
              "pairs.*.verdict_caveats"),
         13: ("cells.*.acceptance.expected_mean_acceptance_length",
              "cells.*.acceptance.expected_note", "pairs.*.acceptance.expected_note"),
         14: ("pairs.*.warnings", "pairs.*.verdict_caveats", "stability"),
         15: ("cells.*.acceptance.expected_per_position",
              "cells.*.acceptance.expected_mean_acceptance_length",
              "cells.*.acceptance.expected_draft_acceptance_rate",
              "cells.*.acceptance.expected_note", "pairs.*.acceptance.expected_per_position",
              "pairs.*.acceptance.expected_note")}),
}
"""Every versioned file of a run directory, with its format history: the one place a format
version changes (bump ``version``, add a line to ``history``, list redefined fields)."""

# the newest version of each file, written and read (a matrix's summary.json carries
# STATE_SCHEMA too)
MANIFEST_SCHEMA = FORMATS["manifest"].version
PROVENANCE_SCHEMA = FORMATS["provenance"].version
STATE_SCHEMA = FORMATS["state"].version
IMPORT_SCHEMA = FORMATS["import"].version
SUMMARY_SCHEMA = FORMATS["summary"].version
ANALYSIS_SCHEMA = FORMATS["analysis"].version


# -- typed records --------------------------------------------------------------------------


class RequestRecord(TypedDict, total=False):
    """One line of ``requests.jsonl``: a request as the client saw it (times in ns of the
    client's monotonic clock; ``chunks``: ``[arrival_ns, tokens]`` per content chunk). The
    runner adds ``trial`` (and ``server_start`` when trials share a server); an import adds
    ``source``. Readers return plain dicts of this shape."""

    trial: int
    server_start: int
    request_index: int
    prompt_id: str
    category: str
    warmup: bool
    endpoint: str
    max_tokens: int
    t_scheduled_ns: int
    t_sent_ns: int
    t_first_chunk_ns: int | None
    t_done_ns: int
    chunks: list[list[int]] | None
    n_chunks: int
    text: str
    chunk_chars: list[int]
    finish_reason: str | None
    usage: dict[str, Any] | None
    timings: dict[str, Any] | None
    metrics: dict[str, Any] | None
    status: str
    error: str | None
    http_status: int | None
    retries: int
    """Times the client sent the request again after a stale keep-alive connection (0 or 1;
    absent in records written before it, read as 0)."""
    failed_attempts: list[dict[str, Any]]
    """The sends that were retried (``t_sent_ns``, ``t_done_ns``, ``error``), oldest first;
    the record's own times are those of the last send."""
    source: str


class TrialEntry(TypedDict, total=False):
    """One entry of a manifest's ``trials``: the outcome of a trial (``status`` ``ok`` or
    ``failed``) with its server command, provenance, phases and warnings."""

    trial: int
    status: str
    error: str | None
    argv: list[str]
    started_utc: str
    ended_utc: str
    phase_s: dict[str, float]
    provenance: dict[str, Any]
    server_props: dict[str, Any]
    load: dict[str, Any]
    reuse: dict[str, Any]
    ended_early: dict[str, Any]
    """A look inside the trial ended it (``sequential.look_every``): ``after_requests``,
    ``of`` and ``reason``."""
    warnings: list[str]
    other_engines: list[dict[str, Any]]
    host: dict[str, Any]
    """The host side of the measured window (:class:`crossbench.host.HostWindow`): CPU model
    and count, governor, load before and after, CPU busy and steal shares, the cores the
    server, crossbench and other busy processes used."""
    stop_report: dict[str, Any]
    vram_release: dict[str, Any]
    telemetry: dict[str, Any]


def duration_s(value: Any) -> float | None:
    """A recorded duration (a ``phase_s`` value, a start-up figure): a finite, non-negative
    number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


@dataclass(frozen=True)
class TrialStart:
    """The server start a trial made, as its manifest entry records it: crossbench's time from
    launch to ready (``phase_s.startup``) and, where the engine logs them (vLLM's
    ``server_props.startup_cut``), whether it found its compile cache (vLLM's; SGLang's kernel
    caches) and its engine init and torch.compile seconds."""

    startup_s: float
    cache: str | None
    """``cold``, ``warm`` or ``partial`` (some of its compiled graphs found); None where the
    engine does not say."""
    engine_init_s: float | None
    compile_s: float | None


def trial_start(entry: Any) -> TrialStart | None:
    """The server start a manifest trial entry made, or None for a trial on a running server
    (or an entry of another shape)."""
    phases = entry.get("phase_s") if isinstance(entry, dict) else None
    up = duration_s(phases.get("startup")) if isinstance(phases, dict) else None
    if up is None:
        return None
    props = entry.get("server_props")
    cut = props.get("startup_cut") if isinstance(props, dict) else None
    cut = cut if isinstance(cut, dict) else {}
    kind = cut.get("start")
    return TrialStart(up, kind if kind in ("cold", "warm", "partial") else None,
                      duration_s(cut.get("engine_init_s")), duration_s(cut.get("compile_s")))


class CellEntry(TypedDict):
    """One entry of a state.json's ``cells``: a cell's id, coordinates, baseline cell (None for
    a baseline) and folder relative to the directory."""

    id: str
    coords: dict[str, Any]
    baseline: str | None
    dir: str


class JournalEntry(TypedDict, total=False):
    """One line of ``journal.jsonl``: a finished trial of a cell."""

    cell: str
    trial: int
    status: str
    error: str | None
    thermal_gate: dict[str, Any]


def cell_entry(cell_id: str, coords: Mapping[str, Any], baseline: str | None) -> CellEntry:
    """The state.json entry of a cell, its folder made by :func:`cell_folder`."""
    return {"id": cell_id, "coords": dict(coords), "baseline": baseline,
            "dir": cell_folder(cell_id)}


# -- checks of versioned files --------------------------------------------------------------

DAMAGED = ("restore it from a copy or an archive of the run, or start again with a new --out "
           "(crossbench never guesses what a damaged file said)")
"""The fix of a versioned file that cannot be read."""

UPGRADE = "upgrade crossbench"
"""The fix of a file newer than this crossbench."""


def read_json_object(path: Path, fix: str = DAMAGED) -> dict[str, Any]:
    """A JSON object from a file; a :class:`UserError` names the file and ``fix`` when it
    cannot be read, is not JSON (truncated, say) or is not an object."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {path} ({e.strerror or e})", fix) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.start + 1})", fix) from None
    except (ValueError, RecursionError) as e:
        why = (f"{json_error(e)} at line {e.lineno} column {e.colno}"
               if isinstance(e, json.JSONDecodeError) else " ".join(str(e).split()))
        raise UserError(f"{path} is not valid JSON ({why})", fix) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is a JSON {json_type(data)}, not an object", fix)
    return data


def check_version(path: Path, data: dict[str, Any], newest: int, what: str,
                  fix: str = DAMAGED) -> None:
    """Refuse a file whose ``schema_version`` is newer than ``newest`` (``what``: the kind of
    file, in words) or not a version at all; a file without one (hand-made, or written before
    versions) is read as the first version."""
    if "schema_version" not in data:
        return
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path} has schema_version {version!r}, which is not a format "
                        "version", fix)
    if version > newest:
        raise UserError(f"{path} has schema_version {version} ({what}), newer than this "
                        f"crossbench ({__version__}) reads: up to {newest}", UPGRADE)


def _bad_cell(c: Any) -> str | None:
    """What is wrong with one ``cells`` entry of a state.json, or None."""
    if not isinstance(c, dict):
        return f"a {json_type(c)} where a cell object belongs"
    cid = c.get("id")
    if not isinstance(cid, str) or not cid:
        return "a cell without an id"
    if not isinstance(c.get("coords"), dict):
        return f"cell {cid}: coords"
    where = c.get("dir")
    if not isinstance(where, str) or not where or Path(where).is_absolute() \
            or ".." in Path(where).parts:
        return f"cell {cid}: dir {where!r} (a folder inside the run directory)"
    if not isinstance(c.get("baseline"), str | None):
        return f"cell {cid}: baseline"
    return None


STATE_KEYS: dict[str, Any] = {"schema_version": int, "kind": str, "study": str, "trials": int,
                              "cells": list, "matrix_sha256": str, "order": list}
"""What each key of a state.json must be (``matrix_sha256`` and ``order``: a matrix's only)."""


def check_state(path: Path, data: dict[str, Any], kinds: tuple[str, ...], need: tuple[str, ...],
                fix: str = DAMAGED) -> None:
    """Refuse a ``state.json`` that is not of one of ``kinds``, is of a newer version, or
    lacks (or has malformed) any key of ``need`` (see :data:`STATE_KEYS`); ``cells`` is
    checked entry by entry, ``order`` pair by pair."""
    kind = data.get("kind")
    # a newer file may lack what this version needs: say so first
    check_version(path, data, IMPORT_SCHEMA if kind == IMPORT_KIND else STATE_SCHEMA,
                  kind_words(data), fix)
    if isinstance(kind, str) and kind not in kinds:
        raise UserError(f"{path} is the state of a {kind}, not of a "
                        f"{' or '.join(kinds)}", fix)
    bad = [k for k in need if not _is(data.get(k), STATE_KEYS[k])]
    if not bad and "cells" in need:
        bad = [why for why in map(_bad_cell, data["cells"]) if why][:1]
    if not bad and "order" in need:
        ids = {c["id"] for c in data["cells"]}
        bad = [f"order entry {e!r}" for e in data["order"]
               if not (isinstance(e, list) and len(e) == 2 and e[0] in ids
                       and _is(e[1], int))][:1]
    if bad:
        raise UserError(f"{path} is not a complete {kind_words(data)} (missing or malformed: "
                        f"{', '.join(bad)})", fix)


def kind_words(data: dict[str, Any]) -> str:
    """A state's kind in words."""
    return "import state" if data.get("kind") == IMPORT_KIND else "matrix state"


def _is(value: Any, want: Any) -> bool:
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


# -- --out ----------------------------------------------------------------------------------

_TEMP = re.compile(r"^\..+\.\d+\.tmp$")
"""Names of crossbench's own temporary files (``store.atomic.temp_name``): a kill during an
atomic write leaves one behind; it is no content of the directory."""


def _kind_of(path: Path) -> Any:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


OUTPUT_MARK = ".crossbench-output.json"
"""The file ``export`` and ``report`` leave in an ``--out`` folder they write (its ``kind``:
:data:`EXPORT_KIND` or :data:`REPORT_KIND`), so that a later export or report may write
there again while any other non-empty folder is refused."""
_OUTPUT_KINDS = {EXPORT_KIND: "export", REPORT_KIND: "report"}


def mark_output(out: Path, kind: str) -> None:
    """Leave :data:`OUTPUT_MARK` of ``kind`` in ``out`` (a folder an export or a report
    wrote)."""
    write_json_atomic(out / OUTPUT_MARK, {"schema_version": 1, "kind": kind})


def check_new_out(out: Path, kind: str, flag: str = "--out") -> None:
    """Refuse an ``--out`` that a new run of ``kind`` (:data:`RUN_KIND` or
    :data:`MATRIX_KIND`), an export (:data:`EXPORT_KIND`) or a report (:data:`REPORT_KIND`)
    must not write into: a file, a path under a file, a directory that holds a crossbench run
    (each refusal says how to go on with it) or other files. A missing or empty directory
    passes, and so does an export's or a report's own earlier folder (:data:`OUTPUT_MARK`);
    nothing is created (see :func:`make_out_dir`)."""
    try:
        _check_new_out(out, kind, flag)
    except OSError as e:
        raise UserError(f"{flag} {out} cannot be read ({e.strerror or e})",
                        f"choose a {flag} you can read and write") from None


def _check_new_out(out: Path, kind: str, flag: str) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a directory",
                        f"give {flag} the path of a new directory")
    if not out.exists():
        above = next((p for p in out.parents if p.exists()), None)
        if above is not None and not above.is_dir():
            raise UserError(f"{flag} {out} is under {above}, which is a file",
                            f"give {flag} a path under a directory")
        return
    names = sorted(p.name for p in out.iterdir() if not _TEMP.match(p.name))
    if not names:
        return
    if kind in _OUTPUT_KINDS:
        _check_output_out(out, names, kind, flag)
        return
    if STATE in names:
        found = _kind_of(out / STATE)
        if found == MATRIX_KIND and kind == MATRIX_KIND:
            raise UserError(f"{flag} {out} already holds a matrix run",
                            f"add --resume to continue it, or choose a new {flag}")
        if found == MATRIX_KIND:
            raise UserError(f"{flag} {out} holds a matrix run ({STATE}), not a run",
                            f"continue it with `crossbench matrix MATRIX_FILE {flag} {out} "
                            f"--resume`, or choose a new {flag} for this run")
        if found == IMPORT_KIND:
            raise UserError(f"{flag} {out} holds an import ({STATE})",
                            f"choose a new {flag} (an import is never written into)")
    elif MANIFEST in names and kind == RUN_KIND:
        raise UserError(f"{flag} {out} already holds a run ({MANIFEST})",
                        f"choose a new {flag} directory (a `crossbench run` never resumes and "
                        "never overwrites)")
    elif MANIFEST in names:
        raise UserError(f"{flag} {out} holds a `crossbench run` ({MANIFEST}), not a matrix "
                        "run", f"choose a new {flag} for the matrix")
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{flag} {out} is not empty ({listed}) and holds no crossbench "
                    f"{'matrix run' if kind == MATRIX_KIND else 'run'}",
                    f"choose a new or empty {flag} (crossbench never writes among other "
                    "files)")


def _check_output_out(out: Path, names: list[str], kind: str, flag: str) -> None:
    """:func:`check_new_out` of an export or a report into the non-empty folder ``out``."""
    what = _OUTPUT_KINDS[kind]
    if STATE in names or MANIFEST in names:
        held = STATE if STATE in names else MANIFEST
        raise UserError(f"{flag} {out} holds a crossbench run ({held})",
                        f"give {flag} a new folder outside the run (the {what} never writes "
                        "among a run's files)")
    found = _kind_of(out / OUTPUT_MARK) if OUTPUT_MARK in names else None
    if found == kind:
        return
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{flag} {out} is not empty ({listed}) and holds no earlier crossbench "
                    f"{what}", f"choose a new or empty {flag} (crossbench never writes among "
                    "other files)")


def make_out_dir(out: Path, flag: str = "--out") -> None:
    """Create ``out`` (with its parents) and prove it writable with a probe file; a
    :class:`UserError` names ``flag`` when it cannot be (a read-only place, ``/proc``...)."""
    probe = temp_name(out / "probe")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"{flag} {out} cannot be written ({e.strerror or e})",
                        f"choose a {flag} directory you can write to") from None


def check_out_file(out: Path, flag: str = "--out") -> None:
    """Refuse a file ``out`` that cannot be written, before any work: a directory, a path
    under a file, a folder that does not exist, or one that cannot be written (a read-only
    place, ``/proc``...), each a :class:`UserError` naming ``flag``. Nothing is created."""
    fix = f"give {flag} a file path in a folder you can write to"
    if out.is_dir():
        raise UserError(f"{flag} {out} is a directory, not a file", fix)
    above = next((q for q in out.parents if q.exists()), Path("."))
    if not above.is_dir():
        raise UserError(f"{flag} {out} is under {above}, which is a file", fix)
    if above != out.parent:
        raise UserError(f"{flag} {out}: the folder {out.parent} does not exist", fix)
    if not os.access(above, os.W_OK | os.X_OK) or (out.exists()
                                                    and not os.access(out, os.W_OK)):
        raise UserError(f"{flag} {out} cannot be written (permission denied)", fix)


# -- the writer -----------------------------------------------------------------------------


def record_line(record: Mapping[str, Any]) -> str:
    """One ``requests.jsonl`` line (compact JSON and a newline), as the appender writes it."""
    return json.dumps(record, separators=(",", ":")) + "\n"


class RunWriter:
    """Writes one run directory: the manifest, the records, the ``/metrics`` snapshots and the
    summary. Used by ``crossbench run`` (every matrix cell) and by the importers; every write
    is atomic or an fsynced append (``store.atomic``)."""

    def __init__(self, root: Path) -> None:
        self.layout = RunLayout(root)

    @property
    def root(self) -> Path:
        """The run directory."""
        return self.layout.root

    def create(self, manifest: Mapping[str, Any]) -> None:
        """Write the first manifest and make ``metrics/`` (the directory exists already)."""
        self.write_manifest(manifest)
        self.layout.metrics_dir.mkdir(exist_ok=True)

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Replace ``manifest.json`` atomically."""
        write_json_atomic(self.layout.manifest, manifest)

    def append_records(self) -> JsonlAppender:
        """An appender to ``requests.jsonl`` (one fsynced line per record; a ``with`` block)."""
        return JsonlAppender(self.layout.requests)

    def write_records(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace ``requests.jsonl`` with these records, atomically (an import, or a resume
        that drops the records of unfinished trials)."""
        write_bytes_atomic(self.layout.requests,
                           "".join(record_line(r) for r in records).encode())

    def keep_trials(self, trials: set[int]) -> None:
        """Drop the records of every trial not in ``trials`` (a resumed run: records of a
        trial without a manifest entry never enter statistics); nothing without records."""
        if self.layout.requests.exists():
            self.write_records(r for r in read_records(self.root)
                               if int(r.get("trial", -1)) in trials)

    def write_snapshot(self, trial: int, which: Snapshot, text: str) -> None:
        """A trial's raw ``/metrics`` text, before or after its measured requests."""
        write_bytes_atomic(self.layout.snapshot(trial, which), text.encode())

    def log_header(self, trial: int, argv: Iterable[str]) -> None:
        """The line that opens a trial's part of ``server.log``."""
        with self.layout.server_log.open("a") as log:
            log.write(f"\n===== crossbench trial {trial}: {' '.join(argv)} =====\n")

    def log_shared(self, trial: int, cell: str, started: int) -> None:
        """The line of ``server.log`` of a trial that ran on another cell's server start
        (a matrix's ``share_servers``): where the server's output is."""
        with self.layout.server_log.open("a") as log:
            log.write(f"\n===== crossbench trial {trial} ran on a shared server start: trial "
                      f"{started} of cell {cell} started it, and that cell's server.log holds "
                      "the server's output =====\n")

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Replace ``summary.json``."""
        write_json_atomic(self.layout.summary, summary)


def write_state(root: Path, state: Mapping[str, Any]) -> None:
    """Replace a matrix's or an import's ``state.json`` atomically."""
    write_json_atomic(root / STATE, state)


def write_analysis(root: Path, result: Mapping[str, Any],
                   tables: Mapping[str, str]) -> list[Path]:
    """Write ``analysis.json`` and the tables (``{"verdicts.md": text, ...}``) under
    ``analysis/``; returns the paths, ``analysis.json`` first. Only ``crossbench analyze``
    writes these: readers compute an analysis and keep it."""
    written = [root / ANALYSIS]
    write_json_atomic(written[0], result)
    for name, text in tables.items():
        path = root / ANALYSIS_DIR / name
        write_bytes_atomic(path, text.encode())
        written.append(path)
    return written


# -- the reader -----------------------------------------------------------------------------

DirKind = Literal["matrix", "import", "run"]
"""What a directory holds: a matrix run, an import, or a single run."""

def is_run(root: Path) -> bool:
    """Whether ``root`` holds a single run (``manifest.json``), a cell of a matrix included."""
    return (root / MANIFEST).exists()


def is_matrix(root: Path) -> bool:
    """Whether ``root`` holds a matrix run or an import (``state.json``)."""
    return (root / STATE).exists()


def not_a_run(root: Path) -> UserError:
    """The error for a directory that holds no run (no state.json or manifest.json)."""
    return UserError(f"{root} is not a run directory (no {STATE} or {MANIFEST})",
                     "point RUN_DIR at the --out of `crossbench matrix`, `crossbench run` or "
                     "`crossbench import`")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object of a run directory for reading (analysis, report); a user error names
    the file when it is not one."""
    fix = "point at a complete run directory"
    try:  # a regular file (a link to /dev/zero or a FIFO is one line), of at most 1 GiB
        data = json.loads(read_bytes(path, "run file", 1024 * MIB, fix))
    except (OSError, ValueError, RecursionError) as e:
        raise UserError(f"cannot read {path}: {e}", fix) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object", fix)
    return data


def read_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json``, refused when of a newer format than this crossbench reads (its
    own version, and that of every trial's provenance)."""
    path = root / MANIFEST
    manifest = read_json(path)
    check_version(path, manifest, MANIFEST_SCHEMA, "run manifest")
    trials = manifest.get("trials")
    for entry in trials if isinstance(trials, list) else []:
        prov = entry.get("provenance") if isinstance(entry, dict) else None
        if isinstance(prov, dict):
            check_version(path, prov, PROVENANCE_SCHEMA,
                          f"provenance of trial {entry.get('trial')}")
    return manifest


MANIFEST_FIX = ("restore it from a copy, or run again with a new --out (a cell's records "
                "are kept beside it)")
"""The fix of a manifest a resume cannot use."""


def read_resume_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json`` of a run to continue, checked: a :class:`UserError` names the
    file when it cannot be read, is of a newer format, is not a run's, or lacks what a resume
    reads (the trial list and the engine)."""
    path = root / MANIFEST
    manifest = read_json_object(path, MANIFEST_FIX)
    check_version(path, manifest, MANIFEST_SCHEMA, "run manifest", MANIFEST_FIX)
    kind = manifest.get("kind")
    trials = manifest.get("trials")
    bad = [] if kind in (RUN_KIND, None) else [f"kind {kind!r}"]
    if not (isinstance(trials, list) and all(isinstance(e, dict) and type(e.get("trial")) is int
                                              and isinstance(e.get("status"), str)
                                              for e in trials)):
        bad.append("trials")
    if not isinstance(manifest.get("engine"), dict) or "sha256" not in manifest["engine"]:
        bad.append("engine")
    if bad:
        raise UserError(f"{path} is not a complete run manifest (missing or malformed: "
                        f"{', '.join(bad)})", MANIFEST_FIX)
    return manifest


def finished_trials(manifest: Mapping[str, Any]) -> set[int] | None:
    """Trials the manifest records an outcome for (ok or failed); None when it keeps no trial
    list (imports). Records of a trial without one (killed mid-way, never resumed) never enter
    statistics; a failed trial's records stay, errors counted in their own group."""
    entries = manifest.get("trials")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return None
    return {int(e["trial"]) for e in entries if "trial" in e}


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (records are acyclic: reference counting frees
    them; a collection scans every live chunk list, which dominated large analyses)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_records(root: Path, manifest: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every complete record of ``root/requests.jsonl`` (module docstring: a torn last line is
    ignored; a damaged line, or a request recorded twice, is a :class:`UserError`); none
    without the file. With ``manifest``, only the records of trials it records an outcome for
    (:func:`finished_trials`)."""
    path = root / REQUESTS
    if not path.exists():
        return []
    with paused_gc():  # the duplicate check allocates too: a collection would scan every chunk
        scan = scan_jsonl(path)
        check_unique_requests(path, scan)
    done = finished_trials(manifest) if manifest is not None else None
    if done is None:
        return scan.records
    return [r for r in scan.records if int(r.get("trial", 0)) in done]


def check_unique_requests(path: Path, scan: JsonlScan) -> None:
    """Refuse records that repeat a (``trial``, ``request_index``), naming the lines."""
    seen: dict[tuple[int, int], int] = {}
    twice: list[tuple[int, int, int, int]] = []
    for rec, line in zip(scan.records, scan.lines, strict=True):
        trial, index = rec.get("trial", 0), rec.get("request_index")
        if type(trial) is int and type(index) is int:
            first = seen.setdefault((trial, index), line)
            if first != line:
                twice.append((trial, index, first, line))
    if twice:
        listed = "; ".join(f"trial {t} request {i} on lines {a} and {b}"
                           for t, i, a, b in twice[:3])
        more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        raise UserError(f"{path} records {len(twice)} request(s) twice ({listed}{more})",
                        "crossbench writes each trial's request once, so the file was appended "
                        "to or merged by hand: remove the duplicate lines, or restore the file "
                        "from a copy")


def read_snapshots(root: Path, trial: int) -> tuple[str, str] | None:
    """The raw ``/metrics`` texts (before, after) of a trial's measured window; None when
    either is missing."""
    layout = RunLayout(root)
    b, a = layout.snapshot(trial, "before"), layout.snapshot(trial, "after")
    if not (b.exists() and a.exists()):
        return None
    return b.read_text(), a.read_text()


def telemetry_traces(root: Path) -> list[tuple[int, Path]]:
    """(trial, path) of a run's telemetry traces (``telemetry/tK.csv``), in name order."""
    return [(int(p.stem[1:]), p) for p in sorted((root / TELEMETRY_DIR).glob("t*.csv"))
            if p.stem[1:].isdigit()]


STATE_FIX = ("restore state.json from a copy; each folder under cells/ is a run directory "
             "that `crossbench analyze` reads on its own")
"""The fix of a state.json the analysis cannot use."""


def read_state(root: Path) -> dict[str, Any]:
    """``root/state.json`` of a matrix or an import for reading, checked
    (:func:`check_state`: its kind, version and cells)."""
    path = root / STATE
    state = read_json(path)
    check_state(path, state, (MATRIX_KIND, IMPORT_KIND), ("cells",), STATE_FIX)
    return state


def state_kind(state: Mapping[str, Any]) -> DirKind:
    """``import`` or ``matrix``, by a state's kind."""
    return "import" if state.get("kind") == IMPORT_KIND else "matrix"


def ran_cells(root: Path, state: Mapping[str, Any]) -> list[tuple[CellEntry, Path]]:
    """The cells of a state that ran (their folder holds a manifest), with their folders; a
    cell that never ran is left out (``crossbench status`` lists it as missing)."""
    return [(c, root / c["dir"]) for c in state.get("cells", [])
            if (root / c["dir"] / MANIFEST).exists()]


def read_matrix_file(root: Path) -> tuple[str | None, dict[str, Any] | None]:
    """(text, parsed mapping) of a matrix directory's ``matrix.yaml``; (None, None) without
    one, the mapping None when the file is not one."""
    import yaml

    path = root / MATRIX_FILE
    if not path.exists():
        return None, None
    text = path.read_text()
    loaded = yaml.safe_load(text)
    return text, loaded if isinstance(loaded, dict) else None


def read_summary(path: Path, fix: str) -> dict[str, Any]:
    """A run's ``summary.json``: any version up to this crossbench's, never a newer one; a
    :class:`UserError` names the file and ``fix`` when it cannot be used."""
    summary = read_json_object(path, fix)
    check_version(path, summary, SUMMARY_SCHEMA, "run summary", fix)
    return summary


def read_analysis(root: Path) -> dict[str, Any] | None:
    """``root/analysis.json`` as ``crossbench analyze`` wrote it (None without one); refused
    unless of this crossbench's format (a report draws the current format's fields)."""
    path = root / ANALYSIS
    if not path.exists():
        return None
    result = read_json(path)
    version = result.get("schema_version")
    if version != ANALYSIS_SCHEMA:
        raise UserError(f"{path} has schema_version {version!r}; this crossbench reads "
                        f"{ANALYSIS_SCHEMA}",
                        f"re-run `crossbench analyze {root}` with this crossbench")
    return result


def _by_cell(path: Path) -> dict[str, dict[str, Any]]:
    """The lines of a JSONL file by their ``cell``, a later line of a cell winning (empty
    without the file)."""
    if not path.exists():
        return {}
    return {str(r["cell"]): r for r in read_jsonl(path) if isinstance(r, dict) and "cell" in r}


def read_predictions(root: Path) -> dict[str, dict[str, Any]]:
    """Probe-and-predict decisions of the matrix run in ``root`` by cell id."""
    return _by_cell(root / PREDICTIONS)


def read_stops(root: Path) -> dict[str, dict[str, Any]]:
    """Stopped cells of the matrix run in ``root`` by id, as ``stops.jsonl`` records them."""
    return _by_cell(root / STOPS)
