"""A run directory read once for every report: its analysis, cells, manifests and traces.

:func:`load_study` accepts what ``crossbench analyze`` accepts (a matrix run, an import, a
single ``crossbench run``) and runs the analysis first when ``analysis.json`` is missing, so
a report never shows numbers that were not derived from the raw records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench.analysis.analyze import ANALYSIS_SCHEMA
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import COORDS, coords_from_config, read_json
from crossbench.errors import UserError

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

    def cell(self, cell_id: str) -> Cell | None:
        """The cell with this id, if recorded."""
        return next((c for c in self.cells if c.id == cell_id), None)

    def label(self, coords: dict[str, Any]) -> str:
        """A short name for a cell: only the coordinates that vary across the study."""
        keys = [k for k in LABEL_ORDER if k in self.varying] or ["arm"]
        parts = []
        for k in keys:
            v = coords.get(k)
            if v is None:
                continue
            parts.append({"n": f"n={v}", "concurrency": f"c={v}"}.get(k, str(v)))
        return " ".join(parts) or str(coords.get("arm", "cell"))

    def failed_trials(self) -> list[dict[str, Any]]:
        """Every trial recorded as failed: cell, trial, error."""
        return [{"cell": c.id, "trial": int(e.get("trial", 0)), "error": e.get("error")}
                for c in self.cells for e in c.trials if e.get("status") != "ok"]

    def traces(self) -> list[tuple[Cell, int, Path]]:
        """Telemetry traces (``telemetry/tK.csv``) of every cell: (cell, trial, path)."""
        out = []
        for c in self.cells:
            for path in sorted((c.dir / "telemetry").glob("t*.csv")):
                stem = path.stem[1:]
                if stem.isdigit():
                    out.append((c, int(stem), path))
        return out

    @property
    def options(self) -> StatsOptions:
        """The statistics options the analysis was made with."""
        return StatsOptions.from_record(self.analysis.get("options"))


def ensure_analysis(root: Path, opts: StatsOptions | None = None) -> dict[str, Any]:
    """``root/analysis.json``, written first (as ``crossbench analyze`` does) when missing."""
    path = root / "analysis.json"
    if not path.exists():
        from crossbench.analysis.analyze import analyze, write_outputs

        write_outputs(root, analyze(root, opts))
    result = read_json(path)
    version = result.get("schema_version")
    if version != ANALYSIS_SCHEMA:  # a report draws the current format's fields
        raise UserError(f"{path} has schema_version {version!r}; this crossbench reads "
                        f"{ANALYSIS_SCHEMA}",
                        f"re-run `crossbench analyze {root}` with this crossbench")
    return result


def load_study(root: Path, opts: StatsOptions | None = None) -> Study:
    """Read a run directory for reporting (see the module docstring)."""
    analysis = ensure_analysis(root, opts)
    if (root / "state.json").exists():
        state = read_json(root / "state.json")
        cells = [Cell(c["id"], root / c["dir"], dict(c["coords"]), c.get("baseline"),
                      read_json(root / c["dir"] / "manifest.json"))
                 for c in state.get("cells", []) if (root / c["dir"] / "manifest.json").exists()]
        kind = "import" if state.get("kind") == "crossbench.import" else "matrix"
        matrix_text = None
        matrix: dict[str, Any] | None = None
        if (root / "matrix.yaml").exists():
            matrix_text = (root / "matrix.yaml").read_text()
            loaded = yaml.safe_load(matrix_text)
            matrix = loaded if isinstance(loaded, dict) else None
        study_block = (matrix or {}).get("study") or {}
        name = str(state.get("study") or study_block.get("name") or root.name)
        notes = study_block.get("notes")
    elif (root / "manifest.json").exists():
        manifest = read_json(root / "manifest.json")
        cells = [Cell("run", root, coords_from_config(manifest.get("config") or {}), None,
                      manifest)]
        kind, name, notes, state, matrix, matrix_text = "run", root.name, None, None, None, None
    else:
        raise UserError(f"{root} is not a run directory (no state.json or manifest.json)",
                        "point RUN_DIR at the --out of `crossbench matrix`, `crossbench run` "
                        "or `crossbench import`")
    varying = tuple(k for k in COORDS
                    if len({json.dumps(c.coords.get(k)) for c in cells}) > 1)
    return Study(root, kind, name, str(notes).strip() if notes else None, analysis, cells,
                 state, matrix, matrix_text, varying)
