"""Careless and hostile input to run directories: a torn journal, damaged or duplicated
records, an ``--out`` that is not a place for a new run, a damaged ``state.json``, files of a
future format version. Every refusal is one line naming the file (or ``--out``) and the fix,
exit code 2, and never changes what it refuses.

Real runs use crossbench's stand-in ``vllm serve`` (not vLLM); analysis inputs are
``standins.study`` studies.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from standins.study import Arm, study
from standins.vllm import write_launcher

from crossbench import __version__
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.runner.config import RunConfig
from crossbench.runner.matrix_run import STATE_FIX, run_matrix
from crossbench.runner.single import RunSession
from crossbench.store.atomic import (
    DAMAGED_FIX,
    TAIL_BLOCK,
    JsonlAppender,
    cut_torn_tail,
    read_jsonl,
    scan_jsonl,
    torn_tail,
)
from crossbench.store.rundir import SUMMARY_SCHEMA, check_new_out

FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0")
CELL = "v/m/none/builtin-code/c1"
CELL_DIR = "cells/v__m__none__builtin-code__c1"


def invoke(*args: str | Path) -> Result:
    """The CLI in-process; an exception other than SystemExit fails the test (no traceback
    ever reaches a user)."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def error(message: str) -> str:
    """The exact stderr of a user error."""
    return f"crossbench: error: {message}\n"


class Finished:
    """A finished matrix on the stand-in (one baseline cell, two trials), copied per test."""

    def __init__(self, root: Path) -> None:
        self.binary = write_launcher(root / "vllm", *FAST)
        self.matrix = root / "m.yaml"
        self.matrix.write_text(yaml.safe_dump({
            "schema_version": 1,
            "study": {"name": "hostile", "notes": "stand-in, not vLLM"},
            "engines": {"v": {"kind": "vllm", "binary": str(self.binary)}},
            "models": {"m": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                             "quant": "BF16", "role": "target"}},
            "load": {"requests": 2, "warmup": 0, "max_tokens": 8},
            "arms": [{"method": "none"}],
            "axes": {"engine": ["v"], "target": ["m"], "workload": ["builtin:code"]},
            "trials": 2,
        }))
        self.out = root / "run"
        totals = run_matrix(self.matrix, self.out)["totals"]
        assert totals == {"done": 2, "failed": 0, "missing": 0}

    def copy(self, dest: Path) -> Path:
        shutil.copytree(self.out, dest)
        return dest


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    return Finished(tmp_path_factory.mktemp("finished"))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (to show that a refusal changed nothing)."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def synthetic(out: Path) -> Path:
    """An import directory: a baseline and an ngram arm, 4 prompts, 2 trials (8 records per
    cell: line 2 is trial 0's request 1)."""
    study(out, [(f"p{i}", "code") for i in range(4)],
          [Arm("base"), Arm("spec", method="ngram", n=2)],
          lambda arm, pid, t, occ: 100.0 if arm.method == "none" else 120.0, trials=2)
    return out


def cell_of(root: Path, index: int = 0) -> Path:
    state = json.loads((root / "state.json").read_text())
    return root / str(state["cells"][index]["dir"])


def standin_config(binary: Path) -> RunConfig:
    return RunConfig.model_validate({
        "engine": "vllm", "trials": 1, "load": {"requests": 2, "max_tokens": 8, "warmup": 0},
        "engine_config": {"binary": str(binary), "model": "Qwen/Qwen3-8B"}})


# -- 1. torn journal, damaged and duplicated lines ------------------------------------------

def test_resume_cuts_a_torn_journal_tail_records_it_and_runs_that_trial_once(
        finished: Finished, tmp_path: Path) -> None:
    out = finished.copy(tmp_path / "run")
    journal = out / "journal.jsonl"
    whole = journal.read_bytes()
    last = whole[whole.rindex(b"\n", 0, len(whole) - 1) + 1:]
    torn = last[:-20]  # a kill during the last append: no newline, the object cut short
    journal.write_bytes(whole[:-len(last)] + torn)

    r = invoke("status", out, "--json")
    assert r.exit_code == 0
    warning = (f"{journal} ends in an incomplete line ({len(torn)} bytes without a newline, left "
               "by a crash during a write): it is not counted; `crossbench matrix MATRIX_FILE "
               f"--out {out} --resume` removes it and runs that trial again")
    assert r.stderr == f"crossbench: warning: {warning}\n"
    status = json.loads(r.stdout)
    assert status["totals"] == {"done": 1, "failed": 0, "missing": 1}
    assert status["warnings"] == [warning]

    r = invoke("matrix", finished.matrix, "--out", out, "--resume", "--progress", "plain")
    assert r.exit_code == 0, r.stderr
    assert (f"crossbench: warning: {journal} ended in an incomplete line ({len(torn)} bytes "
            "without a newline, left by a crash during a write); removed it before appending "
            "(recorded in state.json journal_repairs); the trial it was for runs again"
            in r.stderr.splitlines())
    assert journal.read_bytes() == whole  # the same trial, journaled again, whole
    repairs = json.loads((out / "state.json").read_text())["journal_repairs"]
    assert [{k: v for k, v in n.items() if k != "utc"} for n in repairs] == [
        {"offset": len(whole) - len(last), "bytes": len(torn), "text": torn.decode()}]
    records = read_jsonl(out / CELL_DIR / "requests.jsonl")
    assert sorted((r["trial"], r["request_index"]) for r in records) == [
        (0, 0), (0, 1), (1, 0), (1, 1)]  # the trial run again is recorded once
    r = invoke("status", out, "--json")
    assert r.exit_code == 0 and r.stderr == ""
    assert json.loads(r.stdout)["totals"] == {"done": 2, "failed": 0, "missing": 0}


@pytest.mark.parametrize(("line", "why"), [
    (b"{not json\n", "is not valid JSON (Expecting property name enclosed in double quotes at "
                     "column 2)"),
    (b"[1, 2]\n", "is a JSON array, not an object"),
    (b'{"cell": "x", "trial": "0", "status": "ok"}\n',
     "is not a journal entry (it needs a cell, a trial number and a status)"),
])
def test_a_damaged_journal_line_before_the_last_is_an_error_never_skipped(
        finished: Finished, tmp_path: Path, line: bytes, why: str) -> None:
    out = finished.copy(tmp_path / "run")
    journal = out / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(line + b"".join(lines[1:]))
    before = snapshot(out)
    fix = DAMAGED_FIX if "entry" not in why else (
        "a crash only ever tears the last line: restore journal.jsonl from a copy, or run the "
        "matrix again with a new --out")
    expected = error(f"{journal} line 1 {why} (fix: {fix})")
    for args in (("status", out), ("matrix", finished.matrix, "--out", out, "--resume")):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, expected)
    assert snapshot(out) == before


def test_the_appender_never_appends_after_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":')
    with pytest.raises(UserError) as e:
        JsonlAppender(path)
    assert str(e.value) == (
        f"{path} ends in an incomplete line (5 bytes without a newline, left by a crash during "
        "a write); crossbench never appends to it (fix: resume the run (a matrix --resume "
        "removes the incomplete line and records that it did), or remove that last line "
        "yourself)")
    assert path.read_bytes() == b'{"a":1}\n{"b":'
    scan = scan_jsonl(path)
    assert (scan.records, scan.lines, scan.torn) == ([{"a": 1}], [1], b'{"b":')
    assert cut_torn_tail(path) == b'{"b":'
    assert cut_torn_tail(path) == b""  # nothing more: complete lines are never touched
    with JsonlAppender(path) as sink:
        sink.write({"c": 2})
    assert path.read_bytes() == b'{"a":1}\n{"c":2}\n'
    # a torn line longer than one backwards read, and a file that is one torn line
    long = b"x" * (3 * TAIL_BLOCK + 5)
    path.write_bytes(b'{"a":1}\n' + long)
    assert torn_tail(path) == long
    path.write_bytes(long)
    assert torn_tail(path) == long and cut_torn_tail(path) == long
    assert path.read_bytes() == b""
    assert torn_tail(tmp_path / "missing.jsonl") == b""


DUPLICATE_FIX = ("crossbench writes each trial's request once, so the file was appended to or "
                 "merged by hand: remove the duplicate lines, or restore the file from a copy")


def test_a_request_recorded_twice_is_refused_by_analyze_and_summarize(tmp_path: Path) -> None:
    root = synthetic(tmp_path / "imp")
    cell = cell_of(root, 1)
    path = cell / "requests.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 8
    path.write_bytes(b"".join(lines) + lines[1])  # an exact copy of trial 0's request 1
    expected = error(f"{path} records 1 request(s) twice (trial 0 request 1 on lines 2 and 9) "
                     f"(fix: {DUPLICATE_FIX})")
    for args in (("analyze", root, "--resamples", "200"), ("summarize", cell)):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, expected)
    # the same request with other figures is no better: which copy would be the truth?
    other = json.loads(lines[5])
    other["t_done_ns"] += 1
    path.write_bytes(b"".join(lines) + json.dumps(other).encode() + b"\n")
    r = invoke("analyze", root, "--resamples", "200")
    assert (r.exit_code, r.stderr) == (2, error(
        f"{path} records 1 request(s) twice (trial 1 request 1 on lines 6 and 9) "
        f"(fix: {DUPLICATE_FIX})"))


@pytest.mark.parametrize(("line", "why"), [
    (b'{"trial": 0, "request_index"\n',
     "is not valid JSON (Expecting ':' delimiter at column 29)"),
    (b"[]\n", "is a JSON array, not an object"),
    (b'"text"\n', "is a JSON string, not an object"),
    (b'{"trial": 0, "text": "caf\xe9"}\n', "is not UTF-8 text (byte 26)"),
])
def test_a_damaged_record_line_is_one_line_in_analyze_and_summarize(
        tmp_path: Path, line: bytes, why: str) -> None:
    root = synthetic(tmp_path / "imp")
    cell = cell_of(root)
    path = cell / "requests.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([lines[0], line, *lines[2:]]))
    expected = error(f"{path} line 2 {why} (fix: {DAMAGED_FIX})")
    for args in (("analyze", root, "--resamples", "200"), ("summarize", cell)):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, expected)


def test_a_torn_last_record_line_is_still_skipped(tmp_path: Path) -> None:
    """Only the last line can be torn by a crash: it was never committed, and is skipped."""
    root = synthetic(tmp_path / "imp")
    path = cell_of(root) / "requests.jsonl"
    whole = path.read_bytes()
    last = whole[whole.rindex(b"\n", 0, len(whole) - 1) + 1:]
    path.write_bytes(whole + last[:30])
    r = invoke("analyze", root, "--resamples", "200", "--json")
    assert r.exit_code == 0, r.stderr
    assert len(scan_jsonl(path).records) == 8


# -- 2. --out ------------------------------------------------------------------------------

def test_run_refuses_a_directory_of_other_files_before_writing(
        tmp_path: Path, fake_binary: Any, gguf_stub: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text('{"my": "numbers"}\n')
    (out / "requests.jsonl").write_text('{"mine": 1}\n')
    before = snapshot(out)
    r = invoke("run", "--binary", fake_binary(), "--model", gguf_stub, "--out", out)
    assert (r.exit_code, r.stderr) == (2, error(
        f"--out {out} is not empty (requests.jsonl, summary.json) and holds no crossbench run "
        "(fix: choose a new or empty --out (crossbench never writes among other files))"))
    assert snapshot(out) == before and sorted(p.name for p in out.iterdir()) == [
        "requests.jsonl", "summary.json"]


def test_run_refuses_a_run_a_matrix_and_an_import_saying_what_to_do(
        finished: Finished, tmp_path: Path, fake_binary: Any, gguf_stub: Path) -> None:
    single = tmp_path / "single"
    RunSession(standin_config(finished.binary), single).finish()  # a run that ran no trial
    matrix = finished.copy(tmp_path / "matrix")
    imported = synthetic(tmp_path / "imp")
    expected = {
        single: (f"--out {single} already holds a run (manifest.json) (fix: choose a new --out "
                 "directory (a `crossbench run` never resumes and never overwrites))"),
        matrix: (f"--out {matrix} holds a matrix run (state.json), not a run (fix: continue it "
                 f"with `crossbench matrix MATRIX_FILE --out {matrix} --resume`, or choose a "
                 "new --out for this run)"),
        imported: (f"--out {imported} holds an import (state.json) (fix: choose a new --out "
                   "(an import is never written into))"),
    }
    for out, message in expected.items():
        before = snapshot(out)
        r = invoke("run", "--binary", fake_binary(), "--model", gguf_stub, "--out", out)
        assert (r.exit_code, r.stderr) == (2, error(message))
        assert snapshot(out) == before


def test_matrix_refuses_directories_that_are_not_its_run_before_writing(
        finished: Finished, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "matrix.yaml"):
        (other / name).write_text("mine\n")
    single = tmp_path / "single"
    RunSession(standin_config(finished.binary), single).finish()
    imported = synthetic(tmp_path / "imp")
    cases = [
        (other, (), f"--out {other} is not empty (a.txt, b.txt, c.txt and 1 more) and holds "
                    "no crossbench matrix run (fix: choose a new or empty --out (crossbench "
                    "never writes among other files))"),
        (other, ("--resume",), f"--out {other} is not empty (a.txt, b.txt, c.txt and 1 more) "
                               "and holds no crossbench matrix run (fix: choose a new or empty "
                               "--out (crossbench never writes among other files))"),
        (single, ("--resume",), f"--out {single} holds a `crossbench run` (manifest.json), not "
                                "a matrix run (fix: choose a new --out for the matrix)"),
        (imported, ("--resume",), f"--out {imported} holds an import (state.json), not a "
                                  "matrix run (fix: choose a new --out (an import is never "
                                  "written into))"),
        (finished.out, (), f"--out {finished.out} already holds a matrix run (fix: add "
                           "--resume to continue it, or choose a new --out)"),
    ]
    for out, extra, message in cases:
        before = snapshot(out)
        r = invoke("matrix", finished.matrix, "--out", out, *extra)
        assert (r.exit_code, r.stderr) == (2, error(message))
        assert snapshot(out) == before  # matrix.yaml not overwritten, nothing added


def out_cases(tmp_path: Path) -> list[tuple[Path, str]]:
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    return [
        (afile, f"--out {afile} is a file, not a directory (fix: give --out the path of a new "
                "directory)"),
        (afile / "sub", f"--out {afile / 'sub'} is under {afile}, which is a file (fix: give "
                        "--out a path under a directory)"),
        (Path("/proc/crossbench-hostile/x"), "--out /proc/crossbench-hostile/x cannot be "
         "written (No such file or directory) (fix: choose a --out directory you can write to)"),
    ]


def test_an_out_that_is_a_file_or_unwritable_is_one_line_for_run_and_matrix(
        finished: Finished, tmp_path: Path, fake_binary: Any, gguf_stub: Path) -> None:
    for out, message in out_cases(tmp_path):
        r = invoke("run", "--binary", fake_binary(), "--model", gguf_stub, "--out", out)
        assert (r.exit_code, r.stderr) == (2, error(message))
        r = invoke("matrix", finished.matrix, "--out", out)
        assert (r.exit_code, r.stderr) == (2, error(message))
    assert (tmp_path / "afile").read_text() == "not a directory\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_is_one_line(tmp_path: Path, fake_binary: Any,
                                     gguf_stub: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        r = invoke("run", "--binary", fake_binary(), "--model", gguf_stub, "--out", locked)
        assert (r.exit_code, r.stderr) == (2, error(
            f"--out {locked} cannot be written (Permission denied) (fix: choose a --out "
            "directory you can write to)"))
    finally:
        locked.chmod(0o755)


def test_a_kill_before_state_json_leaves_a_directory_a_new_run_accepts(tmp_path: Path) -> None:
    """An atomic write killed half-way leaves only crossbench's hidden temporary file."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".state.json.4242.tmp").write_text('{"schema_ver')
    check_new_out(out, "crossbench.matrix")
    check_new_out(out, "crossbench.run")
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(UserError, match="is not empty \\(notes.txt\\)"):
        check_new_out(out, "crossbench.matrix")


# -- 3. a damaged state.json ----------------------------------------------------------------

def _drop(*keys: str) -> Any:
    def edit(state: dict[str, Any]) -> bytes:
        return json.dumps({k: v for k, v in state.items() if k not in keys}).encode()
    return edit


def _outside(state: dict[str, Any]) -> bytes:
    state["cells"][0]["dir"] = "../../elsewhere"
    return json.dumps(state).encode()


@pytest.mark.parametrize(("edit", "resume_why", "status_why"), [
    (lambda s: json.dumps(s).encode()[:60],
     "is not valid JSON (Unterminated string starting at line 1 column 57)", None),
    (lambda s: b"{}", "is not a complete matrix state (missing or malformed: schema_version, "
                      "kind, study, trials, cells, matrix_sha256, order)",
     "is not a complete matrix state (missing or malformed: study, trials, cells)"),
    (lambda s: b"[]", "is a JSON array, not an object", None),
    (_drop("cells", "order"), "is not a complete matrix state (missing or malformed: cells, "
                              "order)",
     "is not a complete matrix state (missing or malformed: cells)"),
    (_outside, f"is not a complete matrix state (missing or malformed: cell {CELL}: dir "
               "'../../elsewhere' (a folder inside the run directory))", None),
])
def test_a_damaged_state_is_one_line_on_resume_and_status(
        finished: Finished, tmp_path: Path, edit: Any, resume_why: str,
        status_why: str | None) -> None:
    out = finished.copy(tmp_path / "run")
    path = out / "state.json"
    path.write_bytes(edit(json.loads(path.read_text())))
    before = snapshot(out)
    r = invoke("matrix", finished.matrix, "--out", out, "--resume")
    assert (r.exit_code, r.stderr) == (2, error(f"{path} {resume_why} (fix: {STATE_FIX})"))
    r = invoke("status", out)
    assert (r.exit_code, r.stderr) == (2, error(f"{path} {status_why or resume_why} "
                                                f"(fix: {STATE_FIX})"))
    assert snapshot(out) == before


# -- 4. format versions from the future, and from the past -----------------------------------

def _set(path: Path, *keys: str | int, value: Any = 999) -> None:
    data = json.loads(path.read_text())
    node = data
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    path.write_text(json.dumps(data))


def newer(path: Path, version: int, what: str, newest: int) -> str:
    return error(f"{path} has schema_version {version} ({what}), newer than this crossbench "
                 f"({__version__}) reads: up to {newest} (fix: upgrade crossbench)")


def test_a_matrix_state_from_the_future_is_refused(finished: Finished, tmp_path: Path) -> None:
    out = finished.copy(tmp_path / "run")
    _set(out / "state.json", "schema_version")
    expected = newer(out / "state.json", 999, "matrix state", 1)
    for args in (("matrix", finished.matrix, "--out", out, "--resume"), ("status", out),
                 ("analyze", out, "--resamples", "200")):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, expected)


def test_a_cell_manifest_from_the_future_is_refused(finished: Finished, tmp_path: Path) -> None:
    out = finished.copy(tmp_path / "run")
    manifest = out / CELL_DIR / "manifest.json"
    _set(manifest, "schema_version")
    expected = newer(manifest, 999, "run manifest", 1)
    for args in (("matrix", finished.matrix, "--out", out, "--resume"),
                 ("analyze", out, "--resamples", "200"), ("summarize", out / CELL_DIR)):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, expected)
    _set(manifest, "schema_version", value=1)
    _set(manifest, "trials", 1, "provenance", "schema_version")
    r = invoke("analyze", out, "--resamples", "200")
    assert (r.exit_code, r.stderr) == (2, newer(manifest, 999, "provenance of trial 1", 1))


def test_a_cell_summary_from_the_future_is_refused_an_older_one_read(
        finished: Finished, tmp_path: Path) -> None:
    out = finished.copy(tmp_path / "run")
    summary = out / CELL_DIR / "summary.json"
    stored = json.loads(summary.read_text())
    _set(summary, "schema_version")
    r = invoke("status", out)
    assert (r.exit_code, r.stderr) == (2, newer(summary, 999, "run summary", SUMMARY_SCHEMA))
    r = invoke("summarize", out / CELL_DIR, "--check")
    assert (r.exit_code, r.stderr) == (2, newer(summary, 999, "run summary", SUMMARY_SCHEMA))
    # schema 1 (before server_pooled_tok_s was redefined and client_vs_server added): read,
    # and --check compares it on what it defines as this crossbench does
    old = dict(stored, schema_version=1)
    old["throughput"] = {k: v for k, v in stored["throughput"].items()
                         if k not in ("client_vs_server", "server_rate_source")}
    summary.write_text(json.dumps(old))
    r = invoke("status", out, "--json")
    assert r.exit_code == 0, r.stderr
    row = json.loads(r.stdout)["cells"][0]
    assert (row["pooled_tok_s"], row["integrity_passed"]) == (
        stored["throughput"]["pooled_tok_s"], stored["integrity"]["passed"])
    r = invoke("summarize", out / CELL_DIR, "--check")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{out / CELL_DIR}: summary.json re-derives from the raw records\n"
    old["requests"]["ok"] += 1  # a figure both versions define: still checked
    summary.write_text(json.dumps(old))
    assert invoke("summarize", out / CELL_DIR, "--check").exit_code == 1


def test_an_import_state_and_a_run_manifest_from_the_future_are_refused(
        finished: Finished, tmp_path: Path) -> None:
    root = synthetic(tmp_path / "imp")
    _set(root / "state.json", "schema_version", value=7)
    r = invoke("analyze", root, "--resamples", "200")
    assert (r.exit_code, r.stderr) == (2, newer(root / "state.json", 7, "import state", 1))
    single = tmp_path / "single"
    RunSession(standin_config(finished.binary), single).finish()
    _set(single / "manifest.json", "schema_version")
    for args in (("analyze", single, "--resamples", "200"), ("summarize", single)):
        r = invoke(*args)
        assert (r.exit_code, r.stderr) == (2, newer(single / "manifest.json", 999,
                                                    "run manifest", 1))


def test_the_readers_versions_are_the_writers() -> None:
    """store.rundir names the newest versions read; the writers keep their own numbers."""
    from crossbench.importers import records
    from crossbench.runner import matrix_run, single
    from crossbench.store import rundir

    assert rundir.IMPORT_SCHEMA == records.IMPORT_SCHEMA
    assert rundir.MANIFEST_SCHEMA == records.MANIFEST_SCHEMA == single.MANIFEST_SCHEMA
    assert rundir.STATE_SCHEMA == matrix_run.STATE_SCHEMA
