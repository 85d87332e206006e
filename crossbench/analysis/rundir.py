"""Run directories as the analysis sees them: a matrix run, a single ``crossbench run``, or an
imported directory (``crossbench import``), all as a list of cells.

A matrix (or import) directory's ``state.json`` lists cells with their coordinates, baseline
and folder; a single run directory is one cell, its coordinates from its config. Every file
is read through :mod:`crossbench.store.rundir` (docs/run-directory.md); nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from crossbench.analysis import acceptance as acc_mod
from crossbench.analysis.metrics import (
    RequestFigures,
    StatusCounts,
    pooled_rate,
    request_figures,
)
from crossbench.analysis.summary import trial_windows
from crossbench.errors import UserError
from crossbench.store import rundir
from crossbench.store.rundir import paused_gc, read_json

__all__ = ["COORDS", "CellData", "RunData", "coords_from_config", "load_cell_dir", "load_run",
           "matrix_cell", "paused_gc", "read_json"]

COORDS = ("engine", "target", "arm", "method", "n", "workload", "concurrency")
"""Coordinates of a cell (those of a matrix cell; a single run derives them)."""


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
        return rundir.read_records(self.root, self.manifest)

    def release_chunks(self) -> None:
        """Free the records' chunk arrivals once everything chunk-level is computed, so a large
        run is held in memory one cell at a time; per-request figures, trial rates and
        acceptance are kept."""
        _ = self.figures, self.trial_rates, self.acceptance, self.expected_acceptance
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
        trials = self.trials()
        total = acc_mod.CounterDelta()
        for window in trial_windows(self.root, self.manifest, trials).values():
            if window is None:
                return None
            total.add(window.delta)
        return total if trials else None

    @cached_property
    def acceptance(self) -> acc_mod.Acceptance:
        """Acceptance figures of the measured requests (``acceptance.compute``)."""
        measured = [r for r in self.records if not r.get("warmup")]
        return acc_mod.compute(self.counters, measured)

    @cached_property
    def expected_acceptance(self) -> dict[str, Any]:
        """What the engine's counters should read under its synthetic acceptance for these
        requests (``analysis.synthetic.expected_for_run``: llama-server's clipped drafts,
        SGLang's step lengths, vLLM's configured rates);
        every key None for a cell without synthetic acceptance or an engine with no rule."""
        from crossbench.analysis.synthetic import expected_for_run

        return expected_for_run(self.config, self.records)


@dataclass
class RunData:
    """A run directory as cells, with the matrix (or import) state where there is one."""

    root: Path
    kind: str  # "matrix", "import" or "run"
    cells: list[CellData]
    state: dict[str, Any] | None = None
    matrix: dict[str, Any] | None = None


def load_cell_dir(root: Path, cell_id: str = "run", coords: dict[str, Any] | None = None,
                  baseline: str | None = None) -> CellData:
    """One run directory (``manifest.json`` + ``requests.jsonl``) as a cell."""
    manifest = rundir.read_manifest(root)
    return CellData(cell_id, coords or coords_from_config(manifest.get("config") or {}),
                    baseline, root, manifest)


def matrix_cell(root: Path, cell_id: str) -> CellData:
    """One cell of a matrix or import directory, read alone."""
    state = rundir.read_state(root)
    ids = [c["id"] for c in state["cells"]]
    for c in state["cells"]:
        if c["id"] == cell_id:
            if not rundir.is_run(root / c["dir"]):
                raise UserError(f"cell {cell_id} of {root} has not run",
                                "run it (`crossbench matrix ... --resume`) or pick another")
            return load_cell_dir(root / c["dir"], cell_id, dict(c["coords"]),
                                 c.get("baseline"))
    raise UserError(f"{root} has no cell {cell_id!r}", f"use one of: {', '.join(ids)}")


def load_run(root: Path) -> RunData:
    """A matrix, import or single run directory; a user error names what is missing."""
    if rundir.is_matrix(root):
        state = rundir.read_state(root)
        cells = [load_cell_dir(d, c["id"], dict(c["coords"]), c.get("baseline"))
                 for c, d in rundir.ran_cells(root, state)]
        _, matrix = rundir.read_matrix_file(root)
        return RunData(root, rundir.state_kind(state), cells, state, matrix)
    if rundir.is_run(root):
        return RunData(root, "run", [load_cell_dir(root)])
    raise rundir.not_a_run(root)
