"""Careless and hostile input, round two (issue 37): a killed run keeps no secret, a
start-spread file cannot make verdicts bold, installs and exports never delete a user's
files, and cell ids name one cell each. Every case is the exact input; every refusal is one
line on stderr with exit code 2 (never a traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from crossbench.cli.main import cli
from crossbench.importers.synthetic import Arm, study
from crossbench.store.rundir import OUTPUT_MARK

BASE: dict[str, Any] = {
    "schema_version": 1,
    "study": {"name": "t"},
    "engines": {"llama": {"kind": "llama-server", "pin": "llama-cpp-python==0.3.36"}},
    "models": {"tgt": {"path": "fixture:target", "quant": "F16", "role": "target"},
               "dft": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
    "arms": [{"method": "none"}, {"method": "draft-simple", "draft": "dft", "n": "2,4"}],
    "axes": {"engine": ["llama"], "target": ["tgt"], "workload": ["builtin:code"],
             "concurrency": 1},
}


def matrix(tmp_path: Path, **over: Any) -> Path:
    """A matrix file of BASE with top-level fields replaced."""
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({**BASE, **over}))
    return p


def refused(r: Result) -> str:
    """The one stderr line of a refusal (exit code 2, no traceback)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- 5. cell ids name one cell folder each ----------------------------------------------------

def test_a_target_and_an_arm_that_meet_at_the_separator_are_refused(tmp_path):
    """target m__a with arm b and target m with arm a__b were one folder: cells/..__m__a__b__"""
    models = {"m__a": {"path": "fixture:target", "quant": "F16", "role": "target"},
              "m": {"path": "fixture:target", "quant": "F16", "role": "target"}}
    arms = [{"method": "none"}, {"method": "ngram-mod", "name": "b", "n": 2},
            {"method": "ngram-mod", "name": "a__b", "n": 2}]
    p = matrix(tmp_path, models=models, arms=arms,
               axes={**BASE["axes"], "target": ["m__a", "m"]})
    line = refused(CliRunner().invoke(cli, ["validate", str(p)]))
    assert line == (f"crossbench: error: {p}: models: 'm__a' holds '__', which stands for / in "
                    "cell folder names (two cells could share a folder) (fix: rename it without "
                    "'__')")


@pytest.mark.parametrize(("over", "field"), [
    ({"arms": [{"method": "none"}, {"method": "ngram-mod", "name": "a__b", "n": 2}]},
     "arms[1].name: 'a__b'"),
    ({"engines": {"l__x": {"kind": "llama-server"}}, "axes": {**BASE["axes"],
                                                              "engine": ["l__x"]}},
     "engines: 'l__x'"),
])
def test_the_separator_in_a_name_is_refused_naming_the_field(tmp_path, over, field):
    line = refused(CliRunner().invoke(cli, ["validate", str(matrix(tmp_path, **over))]))
    assert f": {field} holds '__'" in line


def test_names_that_differ_in_punctuation_only_share_a_folder_and_are_refused(tmp_path):
    arms = [{"method": "none"}, {"method": "ngram-mod", "name": "a b", "n": 2},
            {"method": "ngram-mod", "name": "a-b", "n": 2}]
    line = refused(CliRunner().invoke(cli, ["validate", str(matrix(tmp_path, arms=arms))]))
    assert "two cells share the id llama/tgt/a-b/n2/builtin-code/c1" in line


# -- 4. export --out and report --out never write among other files --------------------------

PROMPTS = [(f"p{i}", ("code", "math")[i % 2]) for i in range(6)]


def _rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 50.0 if arm.method == "none" else 60.0


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A synthetic study: a baseline and one draft arm, 2 trials."""
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2)], _rate, trials=2)
    return tmp_path / "s"


def _foreign(folder: Path, *names: str) -> dict[str, bytes]:
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"the user's own " + name.encode())
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize(("command", "names"), [
    (["export", "--format", "csv"], ("requests.csv", "notes.txt")),
    (["export", "--format", "parquet"], ("requests.parquet", "notes.txt")),
    (["report"], ("report.html", "notes.txt")),
])
def test_a_foreign_out_folder_is_refused_and_left_as_it_was(tmp_path, sweep, command, names):
    out = tmp_path / "mine"
    before = _foreign(out, *names)
    args = [command[0], str(sweep), *command[1:], "--out", str(out)]
    line = refused(CliRunner().invoke(cli, args))
    what = command[0]
    assert line == (f"crossbench: error: --out {out} is not empty ({', '.join(sorted(names))}) "
                    f"and holds no earlier crossbench {what} (fix: choose a new or empty --out "
                    "(crossbench never writes among other files))")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("command", [["export", "--format", "csv"], ["report"]])
def test_an_out_that_is_the_run_itself_is_refused(tmp_path, sweep, command):
    before = sorted(p.name for p in sweep.iterdir())
    line = refused(CliRunner().invoke(cli, [command[0], str(sweep), *command[1:], "--out",
                                            str(sweep)]))
    assert line.startswith(f"crossbench: error: --out {sweep} holds a crossbench run (")
    assert sorted(p.name for p in sweep.iterdir()) == before


@pytest.mark.parametrize("command", [["export", "--format", "csv"], ["report"]])
def test_an_earlier_export_or_report_folder_is_written_again(tmp_path, sweep, command):
    out = tmp_path / "again"
    for _ in range(2):
        r = CliRunner().invoke(cli, [command[0], str(sweep), *command[1:], "--out", str(out)])
        assert r.exit_code == 0, r.output
    assert (out / OUTPUT_MARK).is_file()
