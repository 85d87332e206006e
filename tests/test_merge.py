"""``crossbench merge``: pieces of one matrix run (the same matrix file, other ``--only``
filters, other ``--out``) as one run directory that analyze, status, archive and resume take
as one run. The pieces are real matrix runs on the vLLM stand-in, made once for the module."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.runner.matrix_run import matrix_status, run_matrix
from crossbench.runner.merge import merge_runs

BASE = "v/t/none/builtin-code/c1"
SPEC = "v/t/ngram/n2/builtin-code/c1"
OPTS = StatsOptions(resamples=200, min_samples=2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A matrix of four cells (baseline and n-gram at concurrency 1 and 2, two trials each)
    on the vLLM stand-in, run three times at concurrency 1: whole (``full``), and in two
    pieces, the baseline (``base``) and the n-gram arm (``spec``), each into its own --out."""
    from standins.vllm import write_launcher

    root = tmp_path_factory.mktemp("merge")
    binary = write_launcher(root / "vllm", "--standin-step-ms", "2", "--standin-prefill-ms", "1")
    doc = {
        "schema_version": 1, "study": {"name": "pieces"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary),
                          "server": {"max_num_seqs": 2}}},
        "models": {"t": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 2, "warmup": 1, "max_tokens": 8},
        "arms": [{"method": "none"}, {"method": "ngram", "n": 2}],
        "axes": {"engine": ["v"], "target": ["t"], "workload": ["builtin:code"],
                 "concurrency": [1, 2]},
        "telemetry_hz": 0, "trials": 2,
    }
    matrix = root / "m.yaml"
    matrix.write_text(yaml.safe_dump(doc))
    run_matrix(matrix, root / "full", only=("concurrency=1",))
    run_matrix(matrix, root / "base", only=("method=none,concurrency=1",))
    run_matrix(matrix, root / "spec", only=("method=ngram,concurrency=1",))
    return {"matrix": matrix, "full": root / "full", "base": root / "base",
            "spec": root / "spec"}


@pytest.fixture
def pieces(runs: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """Copies of the module's runs that a test may change."""
    out = {"matrix": runs["matrix"]}
    for name in ("full", "base", "spec"):
        out[name] = tmp_path / name
        shutil.copytree(runs[name], out[name])
    return out


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def edit_state(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change a run's state.json in place (a source that is not a piece of the same run)."""
    path = run / "state.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state, indent=2))


def split(run: Path, ids: set[str], dest: Path) -> Path:
    """A copy of the matrix run ``run`` holding only the cells ``ids``: what a run of the same
    schedule with --only those cells would have written, records and all."""
    shutil.copytree(run, dest)
    state = json.loads((dest / "state.json").read_text())
    for c in state["cells"]:
        if c["id"] not in ids:
            shutil.rmtree(dest / c["dir"])
    state["cells"] = [c for c in state["cells"] if c["id"] in ids]
    state["order"] = [e for e in state["order"] if e[0] in ids]
    (dest / "state.json").write_text(json.dumps(state, indent=2))
    lines = (dest / "journal.jsonl").read_text().splitlines(keepends=True)
    (dest / "journal.jsonl").write_text("".join(
        x for x in lines if json.loads(x)["cell"] in ids))
    (dest / "summary.json").write_text(json.dumps(matrix_status(dest), indent=2))
    return dest


def pairs(run: Path) -> dict[str, dict[str, Any]]:
    """The analysis's pairs of a run, by speculative cell."""
    return {p["cell"]: p for p in analyze(run, OPTS)["pairs"]}


def test_a_merged_run_pairs_a_cell_with_the_baseline_of_another_piece(
        pieces: dict[str, Path], tmp_path: Path) -> None:
    for name in ("base", "spec"):
        assert pairs(pieces[name]) == {}  # no piece pairs alone
    before = {name: tree(pieces[name]) for name in ("base", "spec")}
    said: list[str] = []
    out = tmp_path / "merged"
    summary = merge_runs([pieces["spec"], pieces["base"]], out, progress=said.append)
    assert {name: tree(pieces[name]) for name in ("base", "spec")} == before  # untouched
    got = pairs(out)
    assert list(got) == [SPEC] and got[SPEC]["baseline_cell"] == BASE
    assert got[SPEC]["speedup"]["geomean"] > 0
    # the merged run holds both pieces: cells, schedule and journal, in start order
    state = json.loads((out / "state.json").read_text())
    firsts = {n: json.loads((pieces[n] / "state.json").read_text()) for n in ("base", "spec")}
    starts = {rec["dir"]: rec["first_started_utc"] for rec in state["merged_from"]}
    first, second = sorted(("base", "spec"), key=lambda n: (starts[n], n != "spec"))
    assert [rec["dir"] for rec in state["merged_from"]] == [first, second]
    assert said[0].startswith("sources in the order their first trial started: "
                              f"{pieces[first]} (")
    assert state["cells"] == firsts[first]["cells"] + firsts[second]["cells"]
    assert state["order"] == firsts[first]["order"] + firsts[second]["order"]
    assert (out / "journal.jsonl").read_bytes() == \
        (pieces[first] / "journal.jsonl").read_bytes() + \
        (pieces[second] / "journal.jsonl").read_bytes()
    for rec in state["merged_from"]:
        src = pieces[rec["dir"]]
        assert rec["state_sha256"] == hashlib.sha256(
            (src / "state.json").read_bytes()).hexdigest()
        assert rec["cells"] == [c["id"] for c in firsts[rec["dir"]]["cells"]]
    assert (out / "matrix.yaml").read_bytes() == pieces["matrix"].read_bytes()
    for c in state["cells"]:  # every cell folder copied as it was
        src = next(pieces[n] for n in ("base", "spec") if (pieces[n] / c["dir"]).exists())
        assert tree(out / c["dir"]) == tree(src / c["dir"])
    # summary.json: recomputed as `crossbench status` computes it; totals are the sum
    assert json.loads((out / "summary.json").read_text()) == summary == matrix_status(out)
    totals = [json.loads((pieces[n] / "summary.json").read_text())["totals"]
              for n in ("base", "spec")]
    assert summary["totals"] == {k: sum(t[k] for t in totals) for k in totals[0]} == \
        {"done": 4, "failed": 0, "missing": 0}
    assert not list(tmp_path.glob(".merged.*"))  # the temporary folder is gone


def test_a_merge_of_a_runs_parts_analyses_as_the_run(pieces: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """The same records in one run and in two pieces merged: the same analysis."""
    full = pieces["full"]
    a = split(full, {BASE}, tmp_path / "a")
    b = split(full, {SPEC}, tmp_path / "b")
    merge_runs([b, a], tmp_path / "merged")
    one, merged = pairs(full), pairs(tmp_path / "merged")
    assert list(one) == list(merged) == [SPEC]
    for key in ("speedup", "speedup_e2e", "verdict", "pairing", "baseline_cell"):
        assert merged[SPEC][key] == one[SPEC][key], key


def test_the_cli_merges_and_status_and_archive_verify_read_the_result(
        pieces: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    r = CliRunner().invoke(cli, ["merge", str(pieces["base"]), str(pieces["spec"]),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["cell", "done", "fail", "miss", "tok/s", "accept",
                                "integrity"]
    assert sorted(x.split()[0] for x in lines[1:3]) == sorted([BASE, SPEC])
    assert lines[-1] == "trials: 4 done, 0 failed, 0 missing"
    assert r.stderr.splitlines()[-1] == f"crossbench: merged 2 run directories into {out}"
    status = CliRunner().invoke(cli, ["status", str(out), "--json"])
    assert status.exit_code == 0 and json.loads(status.stdout)["totals"]["done"] == 4
    arch = tmp_path / "arch"
    built = CliRunner().invoke(cli, ["archive", "build", str(out), "--out", str(arch),
                                     "--creator", "Doe, Jane", "--date", "2026-12-05"])
    assert built.exit_code == 0, built.output
    state = json.loads((arch / "pieces" / "data" / "state.json").read_text())
    assert [rec["dir"] for rec in state["merged_from"]] != []
    verified = CliRunner().invoke(cli, ["archive", "verify", str(arch / "pieces.zip")])
    assert verified.exit_code == 0, verified.output
    assert "analysis re-derives: 1 pair, 2 cells" in verified.output


def test_resume_continues_the_merged_cells_and_refuses_others(
        pieces: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    merge_runs([pieces["base"], pieces["spec"]], out)
    before = tree(out / "cells")
    # filters that select the merged cells (or fewer): nothing is left to run
    for only in (("concurrency=1",), ("method=none,concurrency=1",)):
        s = run_matrix(pieces["matrix"], out, resume=True, only=only)
        assert s["totals"] == {"done": 4, "failed": 0, "missing": 0}
    assert json.loads((out / "journal.jsonl").read_text().splitlines()[0])["trial"] == 0
    assert len((out / "journal.jsonl").read_text().splitlines()) == 4
    assert tree(out / "cells").keys() == before.keys()
    # the whole matrix holds two cells more: refused before anything runs or is written
    state = (out / "state.json").read_bytes()
    with pytest.raises(UserError) as e:
        run_matrix(pieces["matrix"], out, resume=True)
    assert e.value.message == (
        f"--out {out} holds 2 cell(s) and this resume selects 2 it does not hold "
        "(v/t/none/builtin-code/c2, v/t/ngram/n2/builtin-code/c2); a resume only continues "
        "the cells its state.json lists")
    assert "crossbench merge" in (e.value.hint or "")
    assert (out / "state.json").read_bytes() == state
    assert sorted(p.name for p in (out / "cells").iterdir()) == sorted(
        {Path(k).parts[0] for k in before})


def test_a_missing_or_failed_trial_is_kept_and_a_torn_tail_left_out(
        pieces: dict[str, Path], tmp_path: Path) -> None:
    journal = pieces["spec"] / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    failed = json.loads(lines[1]) | {"status": "failed", "error": "server died"}
    journal.write_text(lines[0] + json.dumps(failed) + "\n" + '{"cell": "v/t/ngr')
    said: list[str] = []
    out = tmp_path / "merged"
    summary = merge_runs([pieces["base"], pieces["spec"]], out, progress=said.append)
    row = next(r for r in summary["cells"] if r["id"] == SPEC)
    assert (row["done"], row["failed"], row["errors"]) == (1, 1, ["server died"])
    assert not (out / "journal.jsonl").read_text().count('"v/t/ngr"')
    assert (out / "journal.jsonl").read_bytes().endswith(b"\n")
    assert any(f"{journal} ends in an incomplete line (17 bytes" in s for s in said), said
    rec = json.loads((out / "state.json").read_text())["merged_from"]
    assert [r.get("torn_tails_left_out") for r in rec if r["dir"] == "spec"] == \
        [{"journal.jsonl": 17}]
    # a trial the journal lacks counts as missing
    journal.write_text(lines[0])
    summary = merge_runs([pieces["base"], pieces["spec"]], tmp_path / "merged2")
    assert summary["totals"] == {"done": 3, "failed": 0, "missing": 1}


def test_start_spread_copies_must_agree(pieces: dict[str, Path], tmp_path: Path) -> None:
    (pieces["base"] / "start-spread.json").write_text('{"kind": "a"}\n')
    merge_runs([pieces["base"], pieces["spec"]], tmp_path / "one")
    assert (tmp_path / "one" / "start-spread.json").read_text() == '{"kind": "a"}\n'
    (pieces["spec"] / "start-spread.json").write_text('{"kind": "b"}\n')
    with pytest.raises(UserError) as e:
        merge_runs([pieces["base"], pieces["spec"]], tmp_path / "two")
    assert e.value.message.startswith("start-spread.json differs between the sources")
    assert not (tmp_path / "two").exists()


def _refusal(case: str, p: dict[str, Path], tmp: Path) -> tuple[list[Path], Path]:
    """Sources and --out of one refused merge, the sources prepared for it."""
    out = tmp / "merged"
    base, spec = p["base"], p["spec"]
    if case == "one source":
        return [base], out
    if case == "twice":
        return [base, spec, base], out
    if case == "same cell":
        shutil.copytree(base, tmp / "again")
        return [base, tmp / "again"], out
    if case in ("matrix_sha256", "study", "trials", "schedule"):
        value = {"matrix_sha256": "0" * 64, "study": "other", "trials": 3,
                 "schedule": {"order": "sequential", "seed": 0}}[case]
        edit_state(spec, lambda s: s.update({case: value}))
        return [base, spec], out
    if case == "matrix.yaml":
        with (spec / "matrix.yaml").open("a") as f:
            f.write("# edited\n")
        return [base, spec], out
    if case == "not empty":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        return [base, spec], out
    if case == "import":
        edit_state(spec, lambda s: s.update({"kind": "crossbench.import"}))
        return [base, spec], out
    assert case == "no run"
    (tmp / "empty").mkdir()
    return [base, tmp / "empty"], out


REFUSALS = {
    "one source": ("merge needs at least 2 run directories, got 1", "give every piece"),
    "twice": ("is given twice", "give each piece once"),
    "same cell": (f"cell {BASE} is in two sources", "disjoint cells"),
    "matrix_sha256": ("matrix_sha256 differs between the sources", "one matrix file"),
    "study": ("study differs between the sources", "one matrix file"),
    "trials": ("trials differs between the sources", "one matrix file"),
    "schedule": ("schedule differs between the sources", "one matrix file"),
    "matrix.yaml": ("matrix.yaml differs between the sources", "one matrix file"),
    "not empty": ("already exists and is not empty", "choose a new --out"),
    "import": ("holds an import", "merge only `crossbench matrix` run directories"),
    "no run": ("holds no matrix run (no state.json)", "--out directories"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_name_the_field_and_write_nothing(case: str, pieces: dict[str, Path],
                                                  tmp_path: Path) -> None:
    sources, out = _refusal(case, pieces, tmp_path)
    before = {str(s): tree(s) for s in sources}
    had = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(UserError) as e:
        merge_runs(sources, out)
    what, fix = REFUSALS[case]
    assert what in e.value.message and fix in (e.value.hint or ""), e.value.one_line()
    assert sorted(p.name for p in tmp_path.iterdir()) == had  # no --out, no temporary folder
    assert {str(s): tree(s) for s in sources} == before
    if case in ("study", "trials"):  # the two values are named
        want = {"study": ("'pieces'", "'other'"), "trials": ("2", "3")}[case]
        assert f"has {want[0]}, " in e.value.message and e.value.message.endswith(
            f"has {want[1]}")


def test_the_cli_says_a_refusal_in_one_line(pieces: dict[str, Path], tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["merge", str(pieces["base"]), str(pieces["base"]),
                                 "--out", str(tmp_path / "m")])
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: {pieces['base']} is given twice (as "
                        f"{pieces['base']} and {pieces['base']}) (fix: give each piece once)\n")
