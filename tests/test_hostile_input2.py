"""Careless and hostile input, round two (issue 37): a killed run keeps no secret, a
start-spread file cannot make verdicts bold, installs and exports never delete a user's
files, and cell ids name one cell each. Every case is the exact input; every refusal is one
line on stderr with exit code 2 (never a traceback)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from test_engine_pack import packed, world  # noqa: F401  (fixtures: a fake vLLM pack)

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


# -- 3. engines install: a user's folder and the cache's neighbours are never touched ----------

@pytest.fixture
def vllm_pack(request: pytest.FixtureRequest) -> Any:
    """test_engine_pack's ``packed``: a vLLM pack of a fake wheelhouse (module-scoped)."""
    return request.getfixturevalue("packed")


def _install(pack: Path, prefix: Path) -> Result:
    return CliRunner().invoke(cli, ["engines", "install", "vllm", "--from", str(pack),
                                    "--prefix", str(prefix)])


def test_an_unrelated_prefix_is_refused_and_keeps_its_files(tmp_path, vllm_pack):
    prefix = tmp_path / "home"
    (prefix / "site").mkdir(parents=True)
    (prefix / "site" / "mine.py").write_text("x = 1\n")
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").write_text("#!/bin/sh\necho mine\n")
    (prefix / "install.json").write_text('{"mine": true}\n')
    line = refused(_install(vllm_pack.out, prefix))
    assert line == (f"crossbench: error: --prefix {prefix} is not empty (bin, install.json, "
                    "site) and holds no crossbench install (install.json) (fix: give --prefix "
                    "a new or empty folder (crossbench never deletes or overwrites other "
                    "files))")
    assert (prefix / "site" / "mine.py").read_text() == "x = 1\n"
    assert (prefix / "bin" / "python").read_text() == "#!/bin/sh\necho mine\n"
    assert (prefix / "install.json").read_text() == '{"mine": true}\n'


def test_an_install_of_another_engine_is_refused(tmp_path, vllm_pack):
    prefix = tmp_path / "p"
    prefix.mkdir()
    (prefix / "install.json").write_text(json.dumps({"kind": "crossbench.engine_install",
                                                     "engine": "sglang"}))
    line = refused(_install(vllm_pack.out, prefix))
    assert line.endswith(f"--prefix {prefix} holds a crossbench install of sglang, not of vllm "
                         "(fix: give --prefix a new or empty folder for vllm)")


def test_the_same_engine_installs_again_and_a_killed_install_can_be_redone(tmp_path, vllm_pack):
    prefix = tmp_path / "p"
    assert _install(vllm_pack.out, prefix).exit_code == 0
    r = CliRunner().invoke(cli, ["engines", "install", "vllm", "--from", str(vllm_pack.out),
                                 "--prefix", str(prefix), "--force"])
    assert r.exit_code == 0, r.output
    # a kill between the first record and the last: the install.json says "installing"
    record = json.loads((prefix / "install.json").read_text())
    (prefix / "install.json").write_text(json.dumps(
        {"schema_version": record["schema_version"], "kind": record["kind"], "engine": "vllm",
         "state": "installing"}))
    assert _install(vllm_pack.out, prefix).exit_code == 0
    assert json.loads((prefix / "install.json").read_text())["release"] == "0.26.0"


def _hostile_pack(pack_out: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]
                  ) -> Path:
    pack = tmp_path / "pack"
    shutil.copytree(pack_out, pack)
    data = json.loads((pack / "pack.json").read_text())
    edit(data)
    (pack / "pack.json").write_text(json.dumps(data))
    return pack


@pytest.mark.parametrize(("edit", "field", "value"), [
    (lambda d: d.update(release="../../escape"), "release", "'../../escape'"),
    (lambda d: d.update(release=".."), "release", "'..'"),
    (lambda d: d.update(engine="a/b"), "engine", "'a/b'"),
    (lambda d: d["parts"][0].update(name="../x"), "parts[0].name", "'../x'"),
    (lambda d: d["wheels"][0].update(name="/etc/passwd"), "wheels[0].name", "'/etc/passwd'"),
])
def test_path_separators_in_pack_names_are_refused(tmp_path, vllm_pack, edit, field, value):
    pack = _hostile_pack(vllm_pack.out, tmp_path, edit)
    outside = tmp_path / "outside"
    line = refused(_install(pack, outside / "prefix"))
    assert line == (f"crossbench: error: --from {pack / 'pack.json'}: {field} {value} is not a "
                    "plain name (a path separator, '..' or an empty or hidden name would reach "
                    "outside the pack or the install folder) (fix: use the pack.json that "
                    "`crossbench engines pack` wrote, unedited)")
    assert not outside.exists()


def test_a_release_with_dot_dot_never_reaches_outside_the_cache(tmp_path, vllm_pack, monkeypatch):
    """Without --prefix the install goes to the cache; a release of ../../x went above it."""
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "cache"))
    pack = _hostile_pack(vllm_pack.out, tmp_path, lambda d: d.update(release="../../../../x"))
    before = sorted(tmp_path.iterdir())
    r = CliRunner().invoke(cli, ["engines", "install", "vllm", "--from", str(pack)])
    assert "release '../../../../x' is not a plain name" in refused(r)
    assert sorted(tmp_path.iterdir()) == before  # no x-py3.X beside the cache


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d.pop("parts"), "parts is missing or not a list of records"),
    (lambda d: d["parts"][0].update(size="big"), "parts[0].size 'big' is not a number"),
])
def test_a_pack_json_without_parts_or_sizes_is_one_line(tmp_path, vllm_pack, edit, problem):
    pack = _hostile_pack(vllm_pack.out, tmp_path, edit)
    assert problem in refused(_install(pack, tmp_path / "p"))
