"""``crossbench archive RUN_DIR --out DIR``: a folder and a deterministic zip to deposit.

``DIR/<name>/`` and ``DIR/<name>.zip`` hold the same files (under ``<name>/`` in the zip):
``data/`` (the run directory as recorded, with its analysis), ``report/``, ``scripts/`` and
the metadata files; docs/report.md "Archive" lists them. Server logs over
``split_logs_over`` bytes go to ``DIR/<name>-logs.zip`` instead (same paths).

Same inputs, same bytes (:func:`deterministic_zip`; the archive's date is the study's, or
``--date``). Nothing secret-looking (``crossbench.archive.secrets``) is ever written: the run
directory is scanned before anything is copied, the generated files before the zip is made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossbench import __version__
from crossbench.analysis.analyze import markdown as md_table
from crossbench.analysis.analyze import write_outputs
from crossbench.archive import metadata
from crossbench.archive.metadata import ArchiveMeta
from crossbench.archive.secrets import SecretFinding, scan_files, scan_tree
from crossbench.errors import UserError
from crossbench.report import commands
from crossbench.report.build import write_report
from crossbench.report.html import headline, verdict_table
from crossbench.report.study import Study, load_study
from crossbench.store import rundir
from crossbench.store.atomic import sha256_file, write_bytes_atomic

ARCHIVE_SCHEMA = 1
# Format history of MANIFEST.json (kind crossbench.archive):
#   1: first version (files with bytes, sha256 and role; licences; side archives)
ARCHIVE_KIND = "crossbench.archive"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
"""The earliest date a zip can hold: every entry gets it."""
ZIP_LEVEL = 6
"""Deflate level: zlib's default, several times faster than 9 on large logs for ~1 % size."""
FILE_MODE = 0o644
DATA, REPORT, SCRIPTS = "data", "report", "scripts"
CODE_PATHS = (f"{SCRIPTS}/",)
"""Paths the code licence covers; everything else is data."""
MANIFEST, SUMS, CRATE = "MANIFEST.json", "SHA256SUMS", "ro-crate-metadata.json"
LOGS_SUFFIX = "-logs"


def _anywhere(name: str, what: str) -> tuple[str, str, str]:
    """A role for a run-directory file at any depth of ``data/`` (a run's or a cell's)."""
    return rf"{DATA}/(.+/)?{re.escape(name)}", f"{DATA}/**/{name}", what


def _top(name: str, what: str) -> tuple[str, str, str]:
    """A role for a file at the top of ``data/`` (a matrix's or an import's)."""
    return rf"{DATA}/{re.escape(name)}", f"{DATA}/{name}", what


ROLES: tuple[tuple[str, str, str], ...] = (
    # (regex on the archive path, pattern shown in README, what the file is)
    _anywhere(rundir.REQUESTS,
              "raw records: one JSON line per request with send time, every chunk's arrival "
              "and the server's timings"),
    _anywhere(rundir.SERVER_LOG, "the engine's own output, every trial"),
    (rf"{DATA}/(.+/)?{rundir.METRICS_DIR}/{rundir.SNAPSHOT_PATTERN}",
     f"{DATA}/**/{rundir.METRICS_DIR}/{rundir.snapshot_name('K', '{before,after}')}",
     "raw /metrics snapshots around each trial's measured requests"),
    (rf"{DATA}/(.+/)?{rundir.TELEMETRY_DIR}/{rundir.TELEMETRY_PATTERN}",
     f"{DATA}/**/{rundir.TELEMETRY_DIR}/{rundir.telemetry_name('K')}",
     "GPU telemetry traces (NVML samples; header only without a GPU)"),
    (rf"{DATA}/(.+/)?{rundir.TELEMETRY_DIR}/t\d+\.note\.txt",
     f"{DATA}/**/{rundir.TELEMETRY_DIR}/tK.note.txt", "why a telemetry trace has no samples"),
    _anywhere(rundir.MANIFEST, "a cell's configuration, engine identity and per-trial "
                               "provenance"),
    (rf"{DATA}/{rundir.CELLS_DIR}/.+/{re.escape(rundir.SUMMARY)}",
     f"{DATA}/{rundir.CELLS_DIR}/*/{rundir.SUMMARY}",
     "a cell's summary, recomputed from its raw files"),
    _top(rundir.MATRIX_FILE, "the matrix file as run"),
    _top(rundir.STATE, "cells, pairs and the schedule of the study"),
    _top(rundir.JOURNAL, "one line per finished trial"),
    _top(rundir.STOPS, "cells the sequential rule stopped early: look, interval, reason and "
                       "the rule"),
    _top(rundir.PREDICTIONS, "probe-and-predict decisions: each cell measured, held out or "
                             "predicted, and why"),
    _top(rundir.SUMMARY, "trials done, failed and missing per cell"),
    _top(rundir.ANALYSIS, "the analysis (`crossbench analyze`): every derived number"),
    (rf"{DATA}/{rundir.ANALYSIS_DIR}/.+", f"{DATA}/{rundir.ANALYSIS_DIR}/*.md|csv",
     "the analysis tables"),
    (r"report/plots/.+", "report/plots/*.png|svg", "the report's figures"),
    (r"report/.+", "report/*", "the report (self-contained HTML, Markdown twin, datapoint)"),
    (r"scripts/.+", "scripts/*.sh", "commands that re-run the analysis or the study"),
    (r"data/.+", "data/* (other)", "other files of the run directory"),
)
_META_ROLES = {"README.md": "this description", "CITATION.cff": "how to cite the archive",
               ".zenodo.json": "Zenodo deposition metadata",
               CRATE: "RO-Crate 1.1 metadata", MANIFEST: "every file with its sha256 and role",
               SUMS: "sha256 of every file (sha256sum -c SHA256SUMS)"}


def role(path: str) -> str:
    """What a file of the archive is, by its path."""
    if path in _META_ROLES:
        return _META_ROLES[path]
    for pattern, _, what in ROLES:
        if re.fullmatch(pattern, path):
            return what
    return "file"


def role_pattern(path: str) -> str:
    """The README's name for the group of files ``path`` belongs to."""
    for pattern, shown, _ in ROLES:
        if re.fullmatch(pattern, path):
            return shown
    return path


def slug(name: str) -> str:
    """A file-name-safe form of a study name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "study"


def parse_size(text: str) -> int:
    """``50MB``, ``1.5GiB``, ``200000`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", text, re.IGNORECASE)
    if not m:
        raise UserError(f"{text!r} is not a size", "write e.g. 50MB, 2GiB or 1000000")
    unit = (m.group(2) or "").upper().rstrip("B")
    base = 1024 if unit.endswith("I") else 1000
    power = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit.rstrip("I")]
    return int(float(m.group(1)) * base ** power)


def deterministic_zip(entries: list[tuple[str, Path]], out: Path) -> None:
    """Write ``(arcname, source)`` entries sorted by name, each dated 1980-01-01 with mode
    0644 and deflated at level :data:`ZIP_LEVEL`, so the same files always give the same
    bytes (with the same zlib)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=ZIP_LEVEL) as zf:
            for arcname, src in sorted(entries):
                info = zipfile.ZipInfo(arcname, date_time=ZIP_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3  # unix, so the mode below is read
                info.external_attr = (0o100000 | FILE_MODE) << 16
                info.file_size = src.stat().st_size
                with src.open("rb") as fh, zf.open(info, "w") as dest:
                    shutil.copyfileobj(fh, dest, 1 << 20)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class Built:
    """What ``build_archive`` wrote."""

    folder: Path
    zip: Path
    side: list[Path]
    files: int


def source_files(run_dir: Path, exclude: list[Path]) -> list[Path]:
    """Files of the run directory to archive, relative to it: regular files only, without
    hidden files, an earlier ``report/`` and anything under ``exclude``."""
    excluded = [e.resolve() for e in exclude]
    out = []
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir)
        if path.is_symlink() or not path.is_file() or rel.parts[0] == REPORT:
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue
        resolved = path.resolve()
        if any(e == resolved or e in resolved.parents for e in excluded):
            continue
        out.append(rel)
    return out


def study_date(study: Study) -> str | None:
    """The day the study ended (its last trial), as YYYY-MM-DD."""
    stamps = [str(e.get("ended_utc") or e.get("started_utc") or "") for c in study.cells
              for e in c.trials] + [str(c.manifest.get("created_utc") or "") for c in study.cells]
    days = sorted(s[:10] for s in stamps if re.match(r"\d{4}-\d{2}-\d{2}", s))
    return days[-1] if days else None


def default_keywords(study: Study) -> list[str]:
    """speculative decoding, LLM inference, benchmark, crossbench, engines and methods."""
    kinds = {str((c.manifest.get("engine") or {}).get("kind") or "") for c in study.cells}
    methods = {str(c.coords.get("method")) for c in study.cells}
    extra = sorted((kinds | methods) - {"", "none", "None"})
    return ["speculative decoding", "LLM inference", "benchmark", "crossbench", *extra]


def abstract(study: Study) -> str:
    """A plain-text summary of the study for citation metadata."""
    text = f"{study.name}: {headline(study)}"
    if study.notes:
        text += f" {study.notes.rstrip('.')}."
    return (text + f" Raw per-request records, /metrics snapshots, server logs, telemetry, "
            f"manifests with provenance, the analysis and the report, made with crossbench "
            f"{__version__}; every derived number re-derives from the raw records "
            "(crossbench archive verify).")


def default_description(study: Study) -> str:
    """The Zenodo description (HTML allowed there)."""
    return "".join(f"<p>{part}</p>" for part in abstract(study).split("\n") if part)


def _scripts(study: Study) -> dict[str, str]:
    reanalyze = [f"cp -r {DATA} reanalysis  # the analysis writes into the folder it reads",
                 commands.analyze_command(study, "reanalysis"), "crossbench report reanalysis"]
    reproduce = commands.reproduce(study, here=DATA)
    head = "#!/bin/sh\n# Run from the archive's folder: sh {}\nset -eu\n"
    return {"reanalyze.sh": head.format("scripts/reanalyze.sh") + "\n".join(reanalyze) + "\n",
            "reproduce.sh": head.format("scripts/reproduce.sh") + "\n".join(reproduce) + "\n"}


def _licence_text(meta: ArchiveMeta) -> str:
    if meta.data_license == meta.code_license:
        return f"Everything in this archive is licensed {meta.data_license} (SPDX identifier)."
    return (f"- Data (`{DATA}/`, `{REPORT}/` and the metadata files): "
            f"{meta.data_license}\n- Code (`{SCRIPTS}/`): {meta.code_license}\n\n"
            "(SPDX identifiers; texts at spdx.org/licenses.)")


def _file_table(entries: list[dict[str, Any]]) -> str:
    groups: dict[str, list[Any]] = {}  # bytes, None for files written after the table
    whats: dict[str, str] = {}
    for f in entries:
        key = role_pattern(f["path"])
        groups.setdefault(key, []).append(f["bytes"])
        whats[key] = f["role"]
    rows = [[f"`{k}`", whats[k], str(len(v)), "-" if None in v else f"{sum(map(int, v)):,}"]
            for k, v in groups.items()]
    return md_table(["files", "what", "count", "bytes"], rows).rstrip("\n")


def _refuse_secrets(found: list[SecretFinding], where: Path) -> None:
    if found:
        listed = "; ".join(str(f) for f in found[:5])
        raise UserError(f"secret-looking values in {where}: {listed}"
                        + (f" (+{len(found) - 5} more)" if len(found) > 5 else ""),
                        "remove them from those files (crossbench redacts the secrets it "
                        "records; these came from elsewhere) and build the archive again")


class _Listing:
    """The files of a folder with size, sha256 and role; each file hashed once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sha: dict[str, str] = {}

    def __call__(self) -> list[dict[str, Any]]:
        paths = sorted(p.relative_to(self.folder).as_posix() for p in self.folder.rglob("*")
                       if p.is_file())
        for p in paths:
            if p not in self._sha:
                self._sha[p] = sha256_file(self.folder / p)
        return [{"path": p, "bytes": (self.folder / p).stat().st_size, "sha256": self._sha[p],
                 "role": role(p)} for p in paths]


def _copy_data(run_dir: Path, sources: list[Path], folder: Path,
               split_logs_over: int | None) -> list[tuple[str, Path]]:
    """Copy the run directory's files under ``data/``; returns the logs left for the side
    archive as (archive path, source)."""
    side: list[tuple[str, Path]] = []
    for rel in sources:
        src = run_dir / rel
        arc = f"{DATA}/{rel.as_posix()}"
        if split_logs_over is not None and src.suffix == ".log" and \
                src.stat().st_size > split_logs_over:
            side.append((arc, src))
            continue
        dest = folder / arc
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    return side


def _readme_values(study: Study, meta: ArchiveMeta, side_text: str) -> dict[str, str]:
    vt = verdict_table(study)
    return {
        "title": meta.title, "summary": abstract(study), "version": meta.version,
        "date": meta.date,
        "creators": "; ".join(c.name + (f" ({c.affiliation})" if c.affiliation else "")
                              for c in meta.creators),
        "crossbench_version": __version__, "study_name": study.name,
        "study_kind": study.kind, "cells": str(len(study.cells)),
        "doi": "assigned by Zenodo when the deposit is published (see the record)",
        "licences": _licence_text(meta), "files": "", "side_archives": side_text,
        "reanalyze": _scripts(study)["reanalyze.sh"].split("set -eu\n", 1)[1].rstrip("\n"),
        "reproduce": "\n".join(commands.reproduce(study, here=DATA)),
        "verdicts": md_table(vt.header, vt.rows).rstrip("\n") if vt.rows
        else "No speculative cell was paired with a baseline."}


def _fill(folder: Path, study: Study, meta: ArchiveMeta, tpl: Path, name: str,
          side_archives: list[dict[str, Any]], side_text: str) -> None:
    """Write report, scripts and metadata files into a folder that already holds data/."""
    write_report(study, folder / REPORT, here=DATA)
    for fname, text in _scripts(study).items():
        write_bytes_atomic(folder / SCRIPTS / fname, text.encode())
    summary = abstract(study)
    write_bytes_atomic(folder / "CITATION.cff",
                       metadata.render_citation(tpl, meta, summary).encode())
    write_bytes_atomic(folder / ".zenodo.json", metadata.render_zenodo(
        tpl, meta, f"Made with crossbench {__version__}.").encode())
    listing = _Listing(folder)
    values = _readme_values(study, meta, side_text)
    # the README lists every file, itself and the files written after it included
    later = [{"path": p, "bytes": None, "role": role(p)}
             for p in ("README.md", MANIFEST, CRATE, SUMS)]
    side_files = [f for s in side_archives for f in s["files"]]
    values["files"] = _file_table([*listing(), *later, *side_files])
    write_bytes_atomic(folder / "README.md", metadata.render_readme(tpl, values).encode())
    manifest = {
        "schema_version": ARCHIVE_SCHEMA, "kind": ARCHIVE_KIND, "name": name,
        "title": meta.title, "version": meta.version, "date": meta.date,
        "crossbench_version": __version__,
        "study": {"name": study.name, "kind": study.kind, "cells": len(study.cells)},
        "analysis_options": study.analysis.get("options"),
        "licences": {"data": meta.data_license, "code": meta.code_license,
                     "code_paths": list(CODE_PATHS)},
        "files": listing(), "side_archives": side_archives,
    }
    write_bytes_atomic(folder / MANIFEST,
                       (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    crate_files = [*listing(), {"path": SUMS, "bytes": None, "role": role(SUMS)}]
    write_bytes_atomic(folder / CRATE, metadata.render_crate(
        tpl, meta, summary, crate_files, CODE_PATHS).encode())
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in listing())
    write_bytes_atomic(folder / SUMS, sums.encode())
    for p in folder.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else FILE_MODE)


def build_archive(run_dir: Path, out: Path, meta: ArchiveMeta, *, name: str | None = None,
                  templates: Path | None = None, split_logs_over: int | None = None,
                  study: Study | None = None) -> Built:
    """Write the archive of ``run_dir`` into ``out`` (see the module docstring). The folder
    is assembled under a hidden name and renamed when complete, so a failure leaves nothing
    that looks like an archive."""
    study = study or load_study(run_dir)
    name = slug(name or study.name)
    folder, main_zip = out / name, out / f"{name}.zip"
    side_zip = out / f"{name}{LOGS_SUFFIX}.zip"
    for p in (folder, main_zip, side_zip):
        if p.exists():
            raise UserError(f"{p} already exists", "choose a new --out directory, or remove it")
    tpl = metadata.template_dir(templates)
    sources = source_files(run_dir, [out])
    _refuse_secrets(scan_files(run_dir, sources), run_dir)
    staging = out / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        side = _copy_data(run_dir, sources, staging, split_logs_over)
        if not study.analysis_recorded:  # computed for this read: the archive holds it
            write_outputs(staging / DATA, study.analysis)
        side_archives: list[dict[str, Any]] = []
        side_text = ""
        if side:
            deterministic_zip([(f"{name}/{arc}", src) for arc, src in side], side_zip)
            side_archives.append({
                "name": side_zip.name, "bytes": side_zip.stat().st_size,
                "sha256": sha256_file(side_zip),
                "files": [{"path": arc, "bytes": src.stat().st_size,
                           "sha256": sha256_file(src), "role": role(arc)} for arc, src in side]})
            side_text = (f"Server logs over {split_logs_over:,} bytes are in the side archive "
                         f"`{side_zip.name}` (sha256 {side_archives[0]['sha256']}), same "
                         "paths; MANIFEST.json lists each with its sha256.")
        _fill(staging, study, meta, tpl, name, side_archives, side_text)
        _refuse_secrets(scan_tree(staging), folder)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        side_zip.unlink(missing_ok=True)
        raise
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    deterministic_zip([(f"{name}/{p.relative_to(folder).as_posix()}", p) for p in files],
                      main_zip)
    return Built(folder, main_zip, [side_zip] if side_archives else [], len(files))
