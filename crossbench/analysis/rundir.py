"""Reading run directories for analysis: a matrix run, a single ``crossbench run``, or an
imported directory (``crossbench import``), all as a list of cells.

- A matrix (or import) directory has ``state.json`` listing cells with their coordinates,
  their baseline cell and their folder, each folder a run directory.
- A single run directory has ``manifest.json`` and is one cell; its coordinates come from
  its config.

Records are read when first needed by the one JSONL reader, ``store.atomic.scan_jsonl`` (a
torn last line is ignored; a damaged line before it is a one-line error naming the file and
the line), using orjson with the garbage collector paused (:func:`paused_gc`). A request
recorded twice in a cell (one ``trial`` and ``request_index`` on two lines) is refused, naming
the file and the lines: crossbench writes each request once (the client sends each record to
the sink once, and a trial run again has its old records removed first), so a duplicate means
a file appended to or merged by hand, and no rule could say which copy to trust. Manifests and
states of a newer format version than this crossbench reads are refused
(``store.formats``). Once a cell's chunk-level figures are computed,
:meth:`CellData.release_chunks` frees its chunk lists, so a large run is held in memory
one cell at a time.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from crossbench.analysis import acceptance as acc_mod
from crossbench.analysis.metrics import (
    RequestFigures,
    StatusCounts,
    pooled_rate,
    request_figures,
)
from crossbench.analysis.summary import finished_trials, metric_prefix
from crossbench.confounds.provenance import SCHEMA_VERSION as PROVENANCE_SCHEMA
from crossbench.engines.prometheus import parse_samples
from crossbench.errors import UserError
from crossbench.store.atomic import JsonlScan, scan_jsonl
from crossbench.store.formats import (
    IMPORT_KIND,
    MANIFEST_SCHEMA,
    MATRIX_KIND,
    check_state,
    check_version,
)

COORDS = ("engine", "target", "arm", "method", "n", "workload", "concurrency")
"""Coordinates of a cell (those of a matrix cell; a single run derives them)."""


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


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a ``requests.jsonl`` (module docstring: a torn last line is
    ignored; a damaged line, or a request recorded twice, is a :class:`UserError`)."""
    if not path.exists():
        return []
    with paused_gc():  # the duplicate check allocates too: a collection would scan every chunk
        scan = scan_jsonl(path)
        check_unique_requests(path, scan)
    return scan.records


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


def coords_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """Cell coordinates of a single run, from its config."""
    ec = config.get("engine_config") or {}
    spec = ec.get("spec") or {}
    load = config.get("load") or {}
    refs = config.get("model_refs") or {}
    method = str(spec.get("type", "none"))
    model = refs.get("model") or Path(str(ec.get("model", "model"))).name
    return {"engine": config.get("engine", "unknown"), "target": model, "arm": method,
            "method": method, "n": spec.get("n"), "workload": load.get("workload"),
            "concurrency": load.get("concurrency", 1)}


@dataclass
class CellData:
    """One cell: its coordinates, baseline, manifest and (read on first use) raw records."""

    id: str
    coords: dict[str, Any]
    baseline: str | None
    root: Path
    manifest: dict[str, Any]

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        """The raw records of ``requests.jsonl`` of trials with a recorded outcome (a trial
        killed mid-way leaves records that never enter statistics)."""
        records = read_records(self.root / "requests.jsonl")
        done = finished_trials(self.manifest)
        if done is None:
            return records
        return [r for r in records if int(r.get("trial", 0)) in done]

    def release_chunks(self) -> None:
        """Free the records' chunk arrivals once everything chunk-level is computed; per-request
        figures, trial rates and acceptance are kept."""
        _ = self.figures, self.trial_rates, self.acceptance
        for r in self.records:
            r["chunks"] = None

    @property
    def config(self) -> dict[str, Any]:
        """The run config recorded in the manifest."""
        return dict(self.manifest.get("config") or {})

    @property
    def spec(self) -> dict[str, Any]:
        """The engine's speculative settings (``type: none`` for a baseline)."""
        return dict((self.config.get("engine_config") or {}).get("spec") or {"type": "none"})

    @property
    def load(self) -> dict[str, Any]:
        """The load settings (workload, sampling, request shape)."""
        return dict(self.config.get("load") or {})

    @property
    def speculative(self) -> bool:
        """Whether the cell runs a speculative method."""
        return str(self.spec.get("type", "none")) != "none"

    @property
    def synthetic(self) -> bool:
        """Synthetic acceptance (``synth_rates``/``synth_len``): output text is not valid."""
        return bool(self.spec.get("synth_rates") or self.spec.get("synth_len"))

    @property
    def imported(self) -> dict[str, Any] | None:
        """The manifest's ``imported`` block (source tool and files), if imported."""
        imp = self.manifest.get("imported")
        return imp if isinstance(imp, dict) else None

    @cached_property
    def _figures(self) -> tuple[list[RequestFigures], StatusCounts]:
        return request_figures(self.records)

    @property
    def figures(self) -> list[RequestFigures]:
        """Measured, completed requests."""
        return self._figures[0]

    @property
    def status(self) -> StatusCounts:
        """Requests by outcome."""
        return self._figures[1]

    @cached_property
    def trial_rates(self) -> dict[int, float]:
        """Pooled decode rate of each trial that has one (``metrics.pooled_rate``)."""
        by_trial: dict[int, list[RequestFigures]] = {}
        for f in self.figures:
            by_trial.setdefault(f.trial, []).append(f)
        rates = {t: pooled_rate(by_trial[t]) for t in sorted(by_trial)}
        return {t: r for t, r in rates.items() if r is not None}

    def trials(self) -> list[int]:
        """Trials that have records, in run order (trial k ran in round k)."""
        return sorted({int(r.get("trial", 0)) for r in self.records})

    @cached_property
    def counters(self) -> acc_mod.CounterDelta | None:
        """Speculative counters over the measured windows of every trial, or None.

        Summed over trials from the ``/metrics`` snapshots, as ``summarize_run_dir`` does;
        an imported cell may carry the counts its source tool reported instead.
        """
        imported = (self.imported or {}).get("acceptance")
        if isinstance(imported, dict):
            return acc_mod.CounterDelta(
                float(imported.get("drafts", 0.0)), float(imported.get("draft_tokens", 0.0)),
                float(imported.get("accepted", 0.0)),
                [float(x) for x in imported.get("per_position", [])], True)
        total = acc_mod.CounterDelta()
        trials = self.trials()
        for t in trials:
            b = self.root / "metrics" / f"t{t}-before.prom"
            a = self.root / "metrics" / f"t{t}-after.prom"
            if not (b.exists() and a.exists()):
                return None
            total.add(acc_mod.counter_delta(parse_samples(b.read_text()),
                                            parse_samples(a.read_text()),
                                            metric_prefix(self.manifest)))
        return total if trials else None

    @cached_property
    def acceptance(self) -> acc_mod.Acceptance:
        """Acceptance figures of the measured requests (``acceptance.compute``)."""
        measured = [r for r in self.records if not r.get("warmup")]
        return acc_mod.compute(self.counters, measured)


@dataclass
class RunData:
    """A run directory as cells, with the matrix (or import) state where there is one."""

    root: Path
    kind: str  # "matrix", "import" or "run"
    cells: list[CellData]
    state: dict[str, Any] | None = None
    matrix: dict[str, Any] | None = None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; a user error names the file when it is not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}", "point at a complete run directory") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object", "point at a complete run directory")
    return data


STATE_FIX = ("restore state.json from a copy; each folder under cells/ is a run directory "
             "that `crossbench analyze` reads on its own")
"""The fix of a state.json the analysis cannot use."""


def read_state(root: Path) -> dict[str, Any]:
    """``root/state.json`` of a matrix or an import, checked (``store.formats.check_state``)."""
    path = root / "state.json"
    state = read_json(path)
    check_state(path, state, (MATRIX_KIND, IMPORT_KIND), ("cells",), STATE_FIX)
    return state


def read_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json``, refused when of a newer format than this crossbench reads (its
    own version, and that of every trial's provenance)."""
    path = root / "manifest.json"
    manifest = read_json(path)
    check_version(path, manifest, MANIFEST_SCHEMA, "run manifest")
    trials = manifest.get("trials")
    for entry in trials if isinstance(trials, list) else []:
        prov = entry.get("provenance") if isinstance(entry, dict) else None
        if isinstance(prov, dict):
            check_version(path, prov, PROVENANCE_SCHEMA,
                          f"provenance of trial {entry.get('trial')}")
    return manifest


def load_cell_dir(root: Path, cell_id: str = "run", coords: dict[str, Any] | None = None,
                  baseline: str | None = None) -> CellData:
    """One run directory (``manifest.json`` + ``requests.jsonl``) as a cell."""
    manifest = read_manifest(root)
    return CellData(cell_id, coords or coords_from_config(manifest.get("config") or {}),
                    baseline, root, manifest)


def matrix_cell(root: Path, cell_id: str) -> CellData:
    """One cell of a matrix or import directory, read alone."""
    state = read_state(root)
    ids = [c["id"] for c in state["cells"]]
    for c in state["cells"]:
        if c["id"] == cell_id:
            if not (root / c["dir"] / "manifest.json").exists():
                raise UserError(f"cell {cell_id} of {root} has not run",
                                "run it (`crossbench matrix ... --resume`) or pick another")
            return load_cell_dir(root / c["dir"], cell_id, dict(c["coords"]),
                                 c.get("baseline"))
    raise UserError(f"{root} has no cell {cell_id!r}", f"use one of: {', '.join(ids)}")


def load_run(root: Path) -> RunData:
    """A matrix, import or single run directory; a user error names what is missing."""
    if (root / "state.json").exists():
        state = read_state(root)
        cells = []
        for c in state["cells"]:
            d = root / c["dir"]
            if not (d / "manifest.json").exists():
                continue  # a cell that never ran: matrix status lists it as missing
            cells.append(load_cell_dir(d, c["id"], dict(c["coords"]), c.get("baseline")))
        matrix = None
        if (root / "matrix.yaml").exists():
            loaded = yaml.safe_load((root / "matrix.yaml").read_text())
            matrix = loaded if isinstance(loaded, dict) else None
        kind = "import" if state.get("kind") == "crossbench.import" else "matrix"
        return RunData(root, kind, cells, state, matrix)
    if (root / "manifest.json").exists():
        return RunData(root, "run", [load_cell_dir(root)])
    raise UserError(f"{root} is not a run directory (no state.json or manifest.json)",
                    "point RUN_DIR at the --out of `crossbench matrix`, `crossbench run` or "
                    "`crossbench import`")
