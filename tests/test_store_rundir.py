"""store.rundir: the one owner of the run directory (layout, formats, writer, reader)."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, request, study

import crossbench
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.store import rundir
from crossbench.store.rundir import MatrixLayout, RunLayout, RunWriter

PACKAGE = Path(crossbench.__file__).parent
PROMPTS = [(f"p{i}", ("code", "math")[i % 2]) for i in range(6)]
ACC = {"drafts": 300, "draft_tokens": 600, "accepted": 400, "per_position": [250, 150]}


def invoke(*args: object):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 120.0 + int(pid[1:])


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` with its bytes and modification time."""
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_the_layout_spells_the_names_on_disk(tmp_path: Path) -> None:
    run = RunLayout(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in (
        run.manifest, run.requests, run.summary, run.server_log, run.analysis,
        run.snapshot(3, "before"), run.snapshot(3, "after"), run.telemetry(3))] == [
        "manifest.json", "requests.jsonl", "summary.json", "server.log", "analysis.json",
        "metrics/t3-before.prom", "metrics/t3-after.prom", "telemetry/t3.csv"]
    m = MatrixLayout(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in (
        m.state, m.journal, m.stops, m.matrix, m.summary, m.analysis)] == [
        "state.json", "journal.jsonl", "stops.jsonl", "matrix.yaml", "summary.json",
        "analysis.json"]
    assert m.cell("llama/t/none/c1").root == tmp_path / "cells" / "llama__t__none__c1"
    assert rundir.cell_entry("a/b", {"x": 1}, None) == {
        "id": "a/b", "coords": {"x": 1}, "baseline": None, "dir": "cells/a__b"}


def test_every_format_has_a_history_line_per_version() -> None:
    for name, f in rundir.FORMATS.items():
        assert sorted(f.history) == list(range(1, f.version + 1)), name
        assert all(v <= f.version for v in f.redefined), name


def test_the_writers_and_readers_use_the_same_versions() -> None:
    from crossbench.analysis import analyze, summary
    from crossbench.confounds import provenance
    from crossbench.importers import records
    from crossbench.runner import matrix_run, single

    assert rundir.FORMATS["summary"].version == summary.SUMMARY_SCHEMA
    assert rundir.FORMATS["analysis"].version == analyze.ANALYSIS_SCHEMA
    assert provenance.SCHEMA_VERSION == rundir.PROVENANCE_SCHEMA
    assert records.MANIFEST_SCHEMA == single.MANIFEST_SCHEMA == rundir.MANIFEST_SCHEMA
    assert records.IMPORT_SCHEMA == rundir.IMPORT_SCHEMA
    assert matrix_run.STATE_SCHEMA == rundir.STATE_SCHEMA


def test_the_request_record_type_names_every_key_writers_write() -> None:
    from crossbench.load.client import RECORD_KEYS

    keys = set(rundir.RequestRecord.__annotations__)
    assert set(RECORD_KEYS) <= keys
    made = request(trial=0, index=0, prompt_id="p", category="c", t_sent_ns=0, rate_tok_s=10.0)
    assert set(made) <= keys
    assert set(rundir.CellEntry.__annotations__) == {"id", "coords", "baseline", "dir"}


def test_writer_and_reader_round_trip(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "run")
    manifest = {"schema_version": rundir.MANIFEST_SCHEMA, "kind": rundir.RUN_KIND,
                "config": {}, "engine": {"sha256": "x"}, "trials": []}
    rundir.make_out_dir(w.root)
    w.create(manifest)
    assert w.layout.metrics_dir.is_dir()
    recs = [{"trial": t, "request_index": i, "status": "ok", "text": "é"}
            for t in range(3) for i in range(2)]
    with w.append_records() as sink:
        for r in recs[:4]:
            sink.write(r)
    w.write_snapshot(0, "before", "a 1\n")
    w.write_snapshot(0, "after", "a 2\n")
    manifest["trials"] = [{"trial": 0, "status": "ok", "error": None},
                          {"trial": 1, "status": "failed", "error": "boom"}]
    w.write_manifest(manifest)
    w.write_summary({"schema_version": rundir.SUMMARY_SCHEMA, "kind": rundir.SUMMARY_KIND})

    assert rundir.is_run(w.root) and not rundir.is_matrix(w.root)
    assert rundir.read_manifest(w.root) == manifest
    assert rundir.read_resume_manifest(w.root) == manifest
    assert rundir.read_records(w.root) == recs[:4]
    assert rundir.read_snapshots(w.root, 0) == ("a 1\n", "a 2\n")
    assert rundir.read_snapshots(w.root, 1) is None
    assert rundir.read_summary(w.layout.summary, "fix")["kind"] == rundir.SUMMARY_KIND
    # records of a trial the manifest does not record (killed mid-way) are not read
    with w.append_records() as sink:
        sink.write(recs[4])
    assert rundir.read_records(w.root, manifest) == recs[:4]
    w.keep_trials({0})
    assert rundir.read_records(w.root) == recs[:2]
    w.write_records(recs)
    assert rundir.read_records(w.root) == recs
    assert w.layout.requests.read_text().splitlines()[0] == rundir.record_line(recs[0]).strip()


def test_the_reader_refuses_a_request_recorded_twice(tmp_path: Path) -> None:
    w = RunWriter(tmp_path)
    w.write_records([{"trial": 0, "request_index": 1}, {"trial": 0, "request_index": 1}])
    with pytest.raises(UserError, match=r"records 1 request\(s\) twice \(trial 0 request 1 on "
                                        r"lines 1 and 2\)"):
        rundir.read_records(tmp_path)


def test_the_reader_refuses_newer_formats(tmp_path: Path) -> None:
    w = RunWriter(tmp_path)
    w.write_manifest({"schema_version": rundir.MANIFEST_SCHEMA + 1, "trials": []})
    with pytest.raises(UserError, match="newer than this crossbench"):
        rundir.read_manifest(tmp_path)
    (tmp_path / rundir.ANALYSIS).write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(UserError, match="re-run `crossbench analyze"):
        rundir.read_analysis(tmp_path)
    with pytest.raises(UserError, match="is not a run directory"):
        raise rundir.not_a_run(tmp_path / "nothing")


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=2)
    return out


def _read_only(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        os.chmod(p, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        os.chmod(p, p.stat().st_mode | stat.S_IWUSR)


def test_a_read_only_run_is_analysed_reported_and_archived_unchanged(
        sweep: Path, tmp_path: Path) -> None:
    from crossbench.analysis.analyze import analyze
    from crossbench.report.study import load_study

    before = snapshot(sweep)
    _read_only(sweep)
    try:
        result = analyze(sweep)
        assert len(result["pairs"]) == 1
        s = load_study(sweep)
        assert not s.analysis_recorded
        assert s.analysis == json.loads(json.dumps(result, sort_keys=True))
        r = invoke("report", sweep, "--out", tmp_path / "rep")
        assert r.exit_code == 0, r.output
        assert (tmp_path / "rep" / "report.html").exists()
        r = invoke("datapoint", sweep)
        assert r.exit_code == 0, r.output
        cell = sweep / json.loads((sweep / "state.json").read_text())["cells"][1]["dir"]
        r = invoke("summarize", cell, "--check")
        assert r.exit_code == 0, r.output
        r = invoke("archive", sweep, "--out", tmp_path / "dep", "--creator", "Doe, Jane",
                   "--date", "2024-01-02")
        assert r.exit_code == 0, r.output
    finally:
        _writable(sweep)
    assert snapshot(sweep) == before  # a reader never writes
    # the archive holds the analysis made for it, and it verifies
    assert (tmp_path / "dep" / "import-synthetic" / "data" / "analysis.json").exists()
    r = invoke("archive", "verify", tmp_path / "dep" / "import-synthetic.zip")
    assert r.exit_code == 0, r.output


def _crossbench_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m == "crossbench" or m.startswith("crossbench.")}


@pytest.mark.parametrize(("package", "forbidden"), [
    ("store", ("crossbench.analysis", "crossbench.runner", "crossbench.cli",
               "crossbench.report", "crossbench.archive", "crossbench.confounds",
               "crossbench.engines", "crossbench.importers")),
    ("archive", ("crossbench.runner", "crossbench.cli")),
    ("analysis", ("crossbench.runner", "crossbench.cli")),
])
def test_no_upward_imports(package: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{p.relative_to(PACKAGE)}: {m}" for p in (PACKAGE / package).rglob("*.py")
                 for m in _crossbench_imports(p) if m.startswith(forbidden))
    assert bad == []


RUN_DIR_NAMES = ("manifest.json", "requests.jsonl", "summary.json", "server.log",
                 "state.json", "journal.jsonl", "stops.jsonl", "analysis.json", "matrix.yaml")


def test_run_directory_names_are_spelled_in_one_module() -> None:
    """Only store.rundir spells a run directory's file names as string literals (an engine
    install's own manifest.json, in engines/llamacpp/build.py, is no run directory's)."""
    allowed = {Path("store/rundir.py"): RUN_DIR_NAMES,
               Path("engines/llamacpp/build.py"): ("manifest.json",)}
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in RUN_DIR_NAMES \
                    and node.value not in allowed.get(rel, ()):
                spelled.append(f"{rel}:{node.lineno}: {node.value}")
    assert spelled == []
