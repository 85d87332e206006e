"""Careless and hostile input, round two (issue 37): a killed run keeps no secret, a
start-spread file cannot make verdicts bold, installs and exports never delete a user's
files, and cell ids name one cell each. Every case is the exact input; every refusal is one
line on stderr with exit code 2 (never a traceback)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from standins.study import Arm, study
from test_engine_pack import packed, world  # noqa: F401  (fixtures: a fake vLLM pack)

from crossbench.analysis.start_spread import Prior, Spread, StartSpread, pair_spreads
from crossbench.archive.verify import check_secrets
from crossbench.cli.main import cli
from crossbench.errors import UserError
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


# -- 2. start-spread files cannot make verdicts bold --------------------------------------------

def _spread_doc(sigma: Any = 0.02, **over: Any) -> dict[str, Any]:
    doc = StartSpread((Spread("llama-server", "baseline", 0.02, 4, 2, 6),
                       Spread("llama-server", "draft-simple", 0.05, 4, 2, 6)),
                      ({"dir": "calibration", "gpu": None},)).to_record()
    doc["spreads"][1]["sigma_log"] = sigma
    doc.update(over)
    return doc


def _spread_file(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("sigma", [0, 0.0, 1e-300, 0.004, 1e300])
def test_a_spread_below_the_floor_or_absurd_is_refused(tmp_path, sweep, sigma):
    path = _spread_file(tmp_path, _spread_doc(sigma))
    line = refused(CliRunner().invoke(cli, ["analyze", str(sweep), "--start-spread",
                                            str(path)]))
    assert line == (f"crossbench: error: --start-spread {path}: spreads[1] has sigma_log "
                    f"{float(sigma)} (llama-server draft-simple), outside [0.005, 2.0]: no "
                    "measurement of fresh starts gives it (docs/analysis.md, \"Known start "
                    "spread\") (fix: make the file with `crossbench start-spread RUN... -o "
                    "FILE`)")
    assert not (sweep / "analysis.json").exists()


def test_a_matrix_with_a_zero_spread_is_refused_by_validate(tmp_path):
    path = _spread_file(tmp_path, _spread_doc(0))
    r = CliRunner().invoke(cli, ["validate", str(matrix(tmp_path, start_spread=str(path)))])
    assert "spreads[1] has sigma_log 0.0 (llama-server draft-simple), outside" in refused(r)


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d["spreads"].append(dict(d["spreads"][1])),
     "spreads[2] repeats llama-server draft-simple"),
    (lambda d: d["sources"].append(dict(d["sources"][0])), "sources lists one run twice"),
    (lambda d: d["spreads"][1].update(df=12), "spreads[1] has df 12 from 6 starts"),
    (lambda d: d["spreads"][1].update(df=2.9),
     "spreads[1] lacks or mistypes df: 2.9 (a whole number"),
    (lambda d: d["spreads"][1].update(sigma_log="0.05"),
     "spreads[1] lacks or mistypes sigma_log: '0.05' (a finite number)"),
    (lambda d: d["spreads"][1].update(sigma_log=True),
     "spreads[1] lacks or mistypes sigma_log: True (a finite number)"),
    (lambda d: d.update(sources="x"), "spreads and sources must be lists of objects"),
])
def test_a_doubled_or_mistyped_spread_file_is_refused(tmp_path, sweep, edit, problem):
    doc = _spread_doc()
    edit(doc)
    path = _spread_file(tmp_path, doc)
    line = refused(CliRunner().invoke(cli, ["analyze", str(sweep), "--start-spread",
                                            str(path)]))
    assert problem in line


def test_the_same_run_given_twice_to_start_spread_is_refused(tmp_path, sweep):
    r = CliRunner().invoke(cli, ["start-spread", str(sweep), str(sweep / "." ), "-o",
                                 str(tmp_path / "s.json")])
    assert refused(r) == (f"crossbench: error: {sweep}: the same run as {sweep} (given twice, "
                          "its starts would count twice in df) (fix: give each run once)")
    assert not (tmp_path / "s.json").exists()


def test_an_import_has_no_start_spread(tmp_path, sweep):
    r = CliRunner().invoke(cli, ["start-spread", str(sweep), "-o", str(tmp_path / "s.json")])
    assert refused(r).startswith(f"crossbench: error: {sweep}: an import has no server starts")
    assert not (tmp_path / "s.json").exists()


def test_a_borrowed_spread_names_the_role_it_was_measured_for(tmp_path):
    """A method without its own spread takes its engine's largest speculative one, recorded as
    borrowed: the interval names the role the spread was measured for."""
    known = StartSpread.from_record(_spread_doc())
    spec, base, matched = pair_spreads(known, "llama-server", "ngram-mod")  # type: ignore[misc]
    assert (spec.role, base.role, matched) == ("draft-simple", "baseline", False)
    got = Prior(spec, base, matched, 2, 2).interval_se(0.0, 0.01, 0.95)
    assert (got["spec_role"], got["role_matched"]) == ("draft-simple", False)


# -- 1. a killed run keeps no API key ---------------------------------------------------------

def _records(run_dir: Path) -> int:
    path = run_dir / "requests.jsonl"
    return path.read_bytes().count(b"\n") if path.is_file() else 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_run_killed_mid_trial_leaves_no_key_in_server_log(tmp_path, sig):
    """`crossbench run --server-arg --api-key KEY` on the vLLM stand-in (which prints its
    non-default args as vLLM does), killed once requests flow: the key went to the server as
    VLLM_API_KEY, so no log line ever held it, and the run's declared key is what
    `archive verify` looks for (a salted hash in the manifest)."""
    from standins.vllm import write_launcher

    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "5",
                            "--standin-prefill-ms", "1")
    key = "k3y-" + secrets.token_hex(12)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbench", "run", "--engine", "vllm", "--binary", str(binary),
         "--model", "Qwen/Qwen3-8B", "--server-arg=--api-key", f"--server-arg={key}",
         "--requests", "400", "--max-tokens", "32", "--trials", "2", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 120
    while _records(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
    proc.send_signal(sig)
    proc.wait(timeout=60)
    time.sleep(1.0)  # the server dies with crossbench (PR_SET_PDEATHSIG)
    log = (out / "server.log").read_bytes()
    assert b"non-default args: {'model_tag': 'Qwen/Qwen3-8B'}" in log  # it did echo its args
    assert key.encode() not in log
    assert [p.name for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()
            ] == []
    manifest = json.loads((out / "manifest.json").read_text())
    declared = manifest["secret_hashes"]
    assert declared["sha256"] == [hashlib.sha256(bytes.fromhex(declared["salt"])
                                                 + key.encode()).hexdigest()]


def test_archive_verify_finds_a_declared_key_that_no_pattern_knows(tmp_path):
    """A key the run declared (its salted hash in the manifest) is found by `verify` in any
    file, though it looks like no token and sits behind no secret flag or variable."""
    run_dir = tmp_path / "deposit"
    run_dir.mkdir()
    key = "plainword-" + secrets.token_hex(4)
    salt = secrets.token_bytes(16)
    (run_dir / "manifest.json").write_text(json.dumps({"secret_hashes": {
        "salt": salt.hex(), "sha256": [hashlib.sha256(salt + key.encode()).hexdigest()]}}))
    (run_dir / "server.log").write_text(f"INFO started\nINFO header check: '{key}' ok\n")
    check = check_secrets(run_dir)
    assert [(p.path, p.line, p.message) for p in check.problems] == [
        ("server.log", 2, "a key the run declared (its hash is in manifest.json)")]


# -- 6. files a user names: a size cap and a type check ---------------------------------------

@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: Path("/dev/zero"), "/dev/zero is a character device, not a file"),
    (lambda d: _fifo(d / "fifo"), "fifo is a named pipe (FIFO), not a file"),
    (lambda d: d, "is a directory, not a file"),
    (lambda d: _write(d / "k", b"\xff\xfekey\n"), "is not UTF-8: byte 0xff at offset 0"),
    (lambda d: _write(d / "k", b"x" * (64 * 1024 + 1)), "over the 64.0 KiB limit"),
    (lambda d: _write(d / "k", b"abc\x1b[2Jdef\n"), "the key holds a control character"),
])
def test_an_api_key_file_that_is_no_key_file_is_one_line(tmp_path, make, problem):
    from crossbench.engines.auth import ApiKeySettings, resolve_key

    path = make(tmp_path)
    with pytest.raises(UserError) as e:
        resolve_key(ApiKeySettings(api_key_file=path), [], None, {})
    assert e.value.message.startswith("api_key_file")
    assert problem in e.value.message and "\x1b" not in e.value.one_line()


@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: Path("/dev/zero"), "/dev/zero is a character device, not a file"),
    (lambda d: _fifo(d / "fifo"), "is a named pipe (FIFO), not a file"),
    (lambda d: _write(d / "s.json", b"\xff\xfe{}"), "is not UTF-8: byte 0xff at offset 0"),
    (lambda d: _write(d / "s.json", b"[" * 100_000), "nested too deeply"),
])
def test_a_spread_file_that_is_no_file_is_one_line(tmp_path, sweep, make, problem):
    r = CliRunner().invoke(cli, ["analyze", str(sweep), "--start-spread", str(make(tmp_path))])
    assert problem in refused(r)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- 10. matrix fields: no silent coercion, no overflow -----------------------------------------

@pytest.mark.parametrize(("over", "problem"), [
    ({"arms": [{"method": "none"}, {"method": "ngram-mod", "n": True}]},
     "arms[1].n: true is a yes/no value, not a number"),
    ({"axes": {**BASE["axes"], "concurrency": [1, True]}},
     "axes.concurrency: [1, true] is a yes/no value, not a number"),
    ({"arms": [{"method": "none"}, {"method": "ngram-mod", "n": "1,,2"}]},
     "arms[1].n: '1,,2' has an empty item between commas"),
    ({"cooldown_s": 1e308}, "cooldown_s"),
    ({"estimate_tok_s": float("inf")}, "estimate_tok_s"),
])
def test_matrix_values_that_were_coerced_or_overflowed_are_refused(tmp_path, over, problem):
    line = refused(CliRunner().invoke(cli, ["validate", str(matrix(tmp_path, **over))]))
    assert problem in line


def test_a_key_given_twice_in_a_matrix_is_refused_naming_the_line(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(BASE) + "trials: 3\ntrials: 30\n")
    line = refused(CliRunner().invoke(cli, ["validate", str(p)]))
    assert line.startswith(f"crossbench: error: {p} is not valid YAML: the key 'trials' is "
                           "given twice in one mapping at line ")


def test_a_merge_key_may_still_be_overridden(tmp_path):
    p = tmp_path / "m.yaml"
    doc = yaml.safe_dump({k: v for k, v in BASE.items() if k != "engines"})
    p.write_text(doc + "x-base: &base {kind: llama-server, pin: 'llama-cpp-python==0.3.36'}\n"
                 "engines:\n  llama:\n    <<: *base\n    pin: 'llama-cpp-python==0.3.36'\n")
    r = CliRunner().invoke(cli, ["validate", str(p)])
    assert "given twice" not in r.output


def test_plan_refuses_a_startup_for_an_unknown_engine(tmp_path):
    r = CliRunner().invoke(cli, ["plan", str(matrix(tmp_path)), "--startup", "vlm=5"])
    assert refused(r) == ("crossbench: error: --startup 'vlm=5': 'vlm' is no engine kind "
                          "(fix: use one of: llama-server, sglang, vllm)")


@pytest.mark.parametrize(("workload", "problem"), [
    ("random:0", "axes.workload[0]: workload spec 'random:0': the number of tokens must be at "
                 "least 1"),
    ("random:-5", "the number of tokens must be at least 1"),
    ("/etc/passwd", "workload spec '/etc/passwd': not of the form kind:argument"),
    ("builtin:../..", "workload spec 'builtin:../..': unknown category '../..'"),
    ("file:/no/such.jsonl", "workload file '/no/such.jsonl' cannot be read"),
])
def test_a_bad_workload_is_refused_by_validate_before_any_run_folder(tmp_path, workload,
                                                                      problem):
    p = matrix(tmp_path, axes={**BASE["axes"], "workload": [workload]})
    assert problem in refused(CliRunner().invoke(cli, ["validate", str(p)]))
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["matrix", str(p), "--out", str(out)])
    assert problem in refused(r)
    assert not out.exists()


@pytest.mark.parametrize("field", ["requests", "max_tokens"])
def test_a_load_of_ten_to_the_fifteen_is_refused(tmp_path, field):
    p = matrix(tmp_path, load={field: 10**15})
    assert f"load.{field}" in refused(CliRunner().invoke(cli, ["validate", str(p)]))


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.server
def test_a_real_llama_server_run_killed_mid_trial_keeps_no_key(llama_server, fixture_models,
                                                               tmp_path):
    """The CPU llama-server with `--server-arg --api-key KEY`: while it serves, its command
    line holds no key (LLAMA_API_KEY does); after a kill -9 of crossbench mid-trial neither
    server.log nor any file of the run holds it."""
    target, _ = fixture_models
    key = "k3y-" + secrets.token_hex(12)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_API_KEY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbench", "run", "--model", str(target), "--binary",
         str(llama_server), "--ctx-size", "2048", "--server-arg=--api-key",
         f"--server-arg={key}", "--requests", "400", "--max-tokens", "64", "--trials", "2",
         "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 300
    while _records(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None
    (server,) = [c for c in _children(proc.pid)
                 if Path(f"/proc/{c}/comm").read_text().strip() == "llama-server"]
    assert key.encode() not in Path(f"/proc/{server}/cmdline").read_bytes()
    assert f"LLAMA_API_KEY={key}".encode() in Path(f"/proc/{server}/environ").read_bytes()
    proc.kill()
    proc.wait(timeout=60)
    time.sleep(1.0)
    assert not Path(f"/proc/{server}").exists() or b"zombie" in Path(
        f"/proc/{server}/status").read_bytes()
    assert [p.name for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()
            ] == []


@pytest.mark.parametrize("name", ["requests.jsonl", "manifest.json"])
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_run_file_that_is_a_device_or_a_fifo_is_one_line(tmp_path, sweep, name, kind):
    """A run whose requests.jsonl or manifest.json is a link to /dev/zero (a MemoryError) or a
    FIFO (a hang): `analyze` names the file."""
    cell = next(p for p in (sweep / "cells").iterdir() if (p / name).is_file())
    (cell / name).unlink()
    if kind == "fifo":
        os.mkfifo(cell / name)
    else:
        (cell / name).symlink_to(kind)
    line = refused(CliRunner().invoke(cli, ["analyze", str(sweep)]))
    shown = "a named pipe (FIFO)" if kind == "fifo" else "a character device"
    assert f"run file {cell / name} is {shown}, not a file" in line


def test_a_pair_on_a_borrowed_spread_says_so_in_its_caveats(tmp_path, sweep):
    """The synthetic study's draft-simple pair with a file that only has ngram-mod: the
    verdict names the borrowed role and its spread."""
    doc = StartSpread((Spread("synthetic", "baseline", 0.02, 4, 2, 6),
                       Spread("synthetic", "ngram-mod", 0.05, 4, 2, 6)), ()).to_record()
    engine = json.loads(next((sweep / "cells").glob("*/manifest.json")).read_text())
    kind = str(engine["config"].get("engine"))
    for s in doc["spreads"]:
        s["engine"] = kind
    path = _spread_file(tmp_path, doc)
    r = CliRunner().invoke(cli, ["analyze", str(sweep), "--start-spread", str(path)])
    assert r.exit_code == 0, r.output
    (pair,) = json.loads((sweep / "analysis.json").read_text())["pairs"]
    assert (f"the start spread is borrowed: the file has no spread for draft-simple on {kind}, "
            "so the spread measured for ngram-mod (sigma_log 0.05) stands for it: measure "
            "this method's own with `crossbench start-spread`") in pair["verdict_caveats"]
    assert pair["speedup"]["start_prior"]["spec_role"] == "ngram-mod"


def test_a_missing_binary_is_refused_before_the_matrix_folder_is_written(tmp_path):
    p = matrix(tmp_path, engines={"llama": {"kind": "llama-server",
                                            "binary": "/no/such/llama-server"}})
    want = (f"crossbench: error: {p}: engines.llama.binary: /no/such/llama-server does not "
            "exist (fix: fix the path, or drop `binary` to use a crossbench build (pin))")
    assert refused(CliRunner().invoke(cli, ["validate", str(p)])) == want
    out = tmp_path / "out"
    assert refused(CliRunner().invoke(cli, ["matrix", str(p), "--out", str(out)])) == want
    assert not out.exists()


@pytest.mark.parametrize(("make", "problem"), [
    (lambda d: Path("/dev/zero"), "workload file /dev/zero is a character device, not a file"),
    (lambda d: _fifo(d / "fifo"), "is a named pipe (FIFO), not a file"),
    (lambda d: d, "is a directory, not a file"),
])
def test_a_workload_file_that_is_no_file_is_one_line(tmp_path, make, problem):
    """`file:/dev/zero` was a MemoryError, a FIFO a hang: in validate and in `run --prompts`."""
    path = make(tmp_path)
    p = matrix(tmp_path, axes={**BASE["axes"], "workload": [f"file:{path}"]})
    assert problem in refused(CliRunner().invoke(cli, ["validate", str(p)]))
    from crossbench.load.workloads import load_workload

    with pytest.raises(UserError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_workload(f"file:{path}")
