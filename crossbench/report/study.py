"""A run directory read once for every report: its analysis, cells, manifests and traces.

:func:`load_study` accepts what ``crossbench analyze`` accepts (a matrix run, an import, a
single ``crossbench run``) and reads through the one reader (``store.rundir``). It uses the
run's ``analysis.json`` when ``crossbench analyze`` wrote one, and otherwise computes the
analysis in memory (default options, or ``opts``) without writing it: a report never shows
numbers that were not derived from the raw records, and reading a run never changes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import COORDS, coords_from_config
from crossbench.store import rundir

#: coordinates in the order labels show them
LABEL_ORDER = ("target", "arm", "n", "workload", "concurrency", "engine")


@dataclass(frozen=True)
class Cell:
    """One cell as recorded: coordinates, baseline, folder and manifest."""

    id: str
    dir: Path
    coords: dict[str, Any]
    baseline: str | None
    manifest: dict[str, Any]

    @property
    def trials(self) -> list[dict[str, Any]]:
        """The manifest's trial entries, in trial order."""
        entries = self.manifest.get("trials") or []
        return sorted(entries, key=lambda e: int(e.get("trial", 0)))

    def provenance(self) -> dict[str, Any]:
        """The first trial's provenance record (empty for imports and older runs)."""
        for entry in self.trials:
            prov = entry.get("provenance")
            if isinstance(prov, dict):
                return prov
        prov = self.manifest.get("provenance")
        return prov if isinstance(prov, dict) else {}

    def argv(self) -> list[str]:
        """The server command of the first trial that started (empty when none did)."""
        for entry in self.trials:
            if entry.get("argv"):
                return [str(a) for a in entry["argv"]]
        return []

    def peak_vram_bytes(self) -> int | None:
        """The highest device memory peak over the cell's trials (None without a GPU trace)."""
        peaks = [((e.get("telemetry") or {}).get("totals") or {}).get("peak_bytes")
                 for e in self.trials]
        values = [int(p) for p in peaks if p is not None]
        return max(values) if values else None


@dataclass
class Study:
    """Everything a report shows, read from one run directory."""

    root: Path
    kind: str  # "matrix", "import" or "run"
    name: str
    notes: str | None
    analysis: dict[str, Any]
    cells: list[Cell]
    state: dict[str, Any] | None = None
    matrix: dict[str, Any] | None = None
    matrix_text: str | None = None
    varying: tuple[str, ...] = field(default=())
    analysis_recorded: bool = True
    """Whether ``analysis`` is the run's ``analysis.json`` (False: computed for this read)."""

    def cell(self, cell_id: str) -> Cell | None:
        """The cell with this id, if recorded."""
        return next((c for c in self.cells if c.id == cell_id), None)

    def label(self, coords: dict[str, Any]) -> str:
        """A short name for a cell: only the coordinates that vary across the study."""
        keys = [k for k in LABEL_ORDER if k in self.varying] or ["arm"]
        parts = [{"n": f"n={v}", "concurrency": f"c={v}"}.get(k, str(v))
                 for k in keys if (v := coords.get(k)) is not None]
        return " ".join(parts) or str(coords.get("arm", "cell"))

    def failed_trials(self) -> list[dict[str, Any]]:
        """Every trial recorded as failed: cell, trial, error."""
        return [{"cell": c.id, "trial": int(e.get("trial", 0)), "error": e.get("error")}
                for c in self.cells for e in c.trials if e.get("status") != "ok"]

    def traces(self) -> list[tuple[Cell, int, Path]]:
        """Telemetry traces (``telemetry/tK.csv``) of every cell: (cell, trial, path)."""
        return [(c, t, path) for c in self.cells for t, path in rundir.telemetry_traces(c.dir)]

    @property
    def run_warnings(self) -> list[str]:
        """What the matrix runner warned when the run began (``state.json``'s ``warnings``:
        a host without the GPUs the matrix's ``hardware`` expects), shown at the report's
        top, since the matrix's notes may name that hardware."""
        return [str(w) for w in (self.state or {}).get("warnings") or []]

    @property
    def options(self) -> StatsOptions:
        """The statistics options the analysis was made with."""
        return StatsOptions.from_record(self.analysis.get("options"))

    @property
    def level(self) -> str:
        """The intervals' confidence level as the report prints it (``95%``)."""
        return f"{self.options.level:.0%}"


def study_analysis(root: Path, opts: StatsOptions | None = None) -> tuple[dict[str, Any], bool]:
    """The analysis a report shows and whether the run directory holds it: its
    ``analysis.json`` as ``crossbench analyze`` wrote it, else computed now (as ``crossbench
    analyze`` would, never written into the run) and given as the JSON file would hold it."""
    recorded = rundir.read_analysis(root)
    if recorded is not None:
        return recorded, True
    from crossbench.analysis.analyze import analyze

    return json.loads(json.dumps(analyze(root, opts), sort_keys=True)), False


def load_study(root: Path, opts: StatsOptions | None = None) -> Study:
    """Read a run directory for reporting (see the module docstring); nothing is written."""
    if rundir.is_matrix(root):
        state = rundir.read_state(root)
        cells = [Cell(c["id"], d, dict(c["coords"]), c.get("baseline"), rundir.read_json(
            d / rundir.MANIFEST)) for c, d in rundir.ran_cells(root, state)]
        kind: str = rundir.state_kind(state)
        matrix_text, matrix = rundir.read_matrix_file(root)
        study_block = (matrix or {}).get("study") or {}
        name = str(state.get("study") or study_block.get("name") or root.name)
        notes = study_block.get("notes")
    elif rundir.is_run(root):
        manifest = rundir.read_json(root / rundir.MANIFEST)
        cells = [Cell("run", root, coords_from_config(manifest.get("config") or {}), None,
                      manifest)]
        kind, name, notes, state, matrix, matrix_text = "run", root.name, None, None, None, None
    else:
        raise rundir.not_a_run(root)
    analysis, recorded = study_analysis(root, opts)
    varying = tuple(k for k in COORDS
                    if len({json.dumps(c.coords.get(k)) for c in cells}) > 1)
    return Study(root, kind, name, str(notes).strip() if notes else None, analysis, cells,
                 state, matrix, matrix_text, varying, recorded)
