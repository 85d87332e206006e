"""Careless and hostile input, round two, items 9 and 11 of issue 37: imported times faster
than any engine decodes (``predicted_ms`` 1e-300 or 0.001 for 16 tokens, ``itls`` and
``latencies`` near 0, llama-bench samples of 1 ns), a vLLM latency of 0 without an error, a
FIFO or a link to ``/dev/zero`` among response bodies; and the small things: ``--server-arg
"--api-key KEY"`` as one string, pack ``env`` values with shell syntax, ``--out`` under a
file or in an unwritable place for ``archive build`` and ``start-spread``, ``run --trials
1001``, UTF-32 files, ``arms.1.n.int``, a study name with CR/LF and the ``failed_requests``
advice. Every case is the exact input; every refusal is one line (exit code 2)."""

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
from test_engine_pack import packed, run_launcher, world  # noqa: F401  (fixtures: a vLLM pack)
from test_hostile_input import (
    BENCH,
    BROKEN,
    RAW,
    VLLM,
    _import_raw,
    _raw_with,
    _set,
    _vllm_with,
)
from test_hostile_input2 import BASE, PROMPTS, _hostile_pack, _install, _rate

from crossbench.analysis.stability import WarningKind, _failed
from crossbench.cli.main import cli
from crossbench.errors import field_name

FAST = ("faster than 0.05 ms a token (20,000 tokens/s for one sequence), which no engine "
        "decodes")


def refused(r: Result) -> str:
    """The one stderr line of a refusal (exit code 2, no traceback)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _state(out: Path) -> dict[str, Any]:
    return json.loads((out / "state.json").read_text())


# -- 9. imports: no decode faster than a physical ceiling; every excluded file listed ---------

@pytest.mark.parametrize(("value", "shown"), [(1e-300, "1e-300"), (0.001, "0.001"),
                                              (0, "0"), (0.7, "0.7")])
def test_a_body_decoding_faster_than_the_ceiling_is_listed_and_left_out(tmp_path, value, shown):
    """BROKEN holds 16 tokens: 15 after the first need at least 0.75 ms."""
    raw = _raw_with(tmp_path, _set("timings", "predicted_ms", value=value))
    r = _import_raw(raw, tmp_path / "imp")
    assert r.exit_code == 0, r.output
    reason = f"timings.predicted_ms is {shown} ms for 15 tokens after the first: {FAST}"
    assert f"crossbench: not imported: {BROKEN}: {reason}" in r.stderr.splitlines()
    assert {"file": BROKEN, "reason": reason} in _state(tmp_path / "imp")["not_imported"]


def test_a_body_at_the_ceiling_is_imported(tmp_path):
    raw = _raw_with(tmp_path, _set("timings", "predicted_ms", value=0.75))
    r = _import_raw(raw, tmp_path / "imp")
    assert r.exit_code == 0, r.output
    assert BROKEN not in r.stderr


def test_a_fifo_and_a_link_to_a_device_among_bodies_are_listed(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(RAW, raw)
    os.mkfifo(raw / "tiny_baseline_t0_pfifo.json")
    (raw / "tiny_baseline_t0_pzero.json").symlink_to("/dev/zero")
    (raw / "tiny_baseline_t0_pgone.json").symlink_to(tmp_path / "nowhere")
    r = _import_raw(raw, tmp_path / "imp")  # a FIFO read would hang, /dev/zero fill memory
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    for line in ("tiny_baseline_t0_pfifo.json: is a named pipe (FIFO), not a response body file",
                 "tiny_baseline_t0_pzero.json: is a character device, not a response body file"):
        assert f"crossbench: not imported: {line}" in lines
    assert any(x.startswith("crossbench: not imported: tiny_baseline_t0_pgone.json: is "
                            "unreadable (") for x in lines)
    files = {x["file"] for x in _state(tmp_path / "imp")["not_imported"]}
    assert {"tiny_baseline_t0_pfifo.json", "tiny_baseline_t0_pzero.json",
            "tiny_baseline_t0_pgone.json"} <= files


def _import_vllm(tmp_path: Path, bad: Path) -> Result:
    return CliRunner().invoke(cli, ["import", "vllm-bench", "--engine", "vllm",
                                    str(VLLM / "baseline.json"),
                                    str(bad), "--out", str(tmp_path / "imp")])


def test_a_vllm_latency_of_0_without_an_error_is_listed_and_kept_as_a_failure(tmp_path):
    bad = _vllm_with(tmp_path, lambda r: r["latencies"].__setitem__(0, 0))
    r = _import_vllm(tmp_path, bad)
    assert r.exit_code == 0, r.output
    reason = ("latencies[0] is 0 with no error: imported as a failed request (vLLM writes 0 "
              "only for one)")
    assert r.stderr.splitlines()[0] == (
        f"crossbench: not imported: eagle3-n3.json request 0: {reason}")
    state = _state(tmp_path / "imp")
    assert {"file": "eagle3-n3.json request 0", "reason": reason} in state["not_imported"]
    cell = next(c for c in state["cells"] if c["coords"]["arm"] != "baseline")
    records = [json.loads(x) for x in
               (tmp_path / "imp" / cell["dir"] / "requests.jsonl").read_text().splitlines()]
    assert records[0]["status"] == "error" and records[0]["request_index"] == 0  # never dropped


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda r: r["itls"].__setitem__(0, [1e-9] * len(r["itls"][0])),
     "itls[0] (their sum) is 5e-05 ms for 127 tokens after the first"),
    (lambda r: r["itls"].__setitem__(0, [1e-300] * len(r["itls"][0])),
     "itls[0] (their sum) is 5e-296 ms for 127 tokens after the first"),
    (lambda r: [r.pop("ttfts"), r.pop("itls"), r["latencies"].__setitem__(0, 1e-6)],
     "latencies[0] is 0.001 ms for 127 tokens after the first"),
])
def test_a_vllm_request_decoding_faster_than_the_ceiling_leaves_its_result_out(tmp_path, edit,
                                                                              reason):
    def widen(r: dict[str, Any]) -> None:  # 50 gaps for 128 tokens: chunks of several
        r["itls"][0] = r["itls"][0][:50] + [0.0125] * (50 - len(r["itls"][0]))
        edit(r)
    r = _import_vllm(tmp_path, _vllm_with(tmp_path, widen))
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == f"crossbench: not imported: eagle3-n3.json: {reason}: {FAST}"
    assert [c["coords"]["arm"] for c in _state(tmp_path / "imp")["cells"]] == ["baseline"]


def test_a_llama_bench_sample_faster_than_the_ceiling_leaves_its_test_out(tmp_path):
    tests = json.loads(BENCH.read_text())
    tests[1]["samples_ns"][0] = 1  # a tg test of 16 tokens
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(tests))
    r = CliRunner().invoke(cli, ["import", "llama-bench", str(path), "--out",
                                 str(tmp_path / "imp")])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == (
        "crossbench: not imported: bench.json test 1: samples_ns[0] (scaled) is 9.375e-07 ms "
        f"for 15 tokens after the first: {FAST}")


# -- 11. small things ---------------------------------------------------------------------------

def test_an_api_key_given_with_its_flag_in_one_string_is_not_echoed(tmp_path, fake_binary,
                                                                    gguf_stub):
    binary = fake_binary(body='echo "--port N  --api-key KEY  --host H"')
    key = "sk-SECRET-0123456789"
    r = CliRunner().invoke(cli, ["run", "--model", str(gguf_stub), "--binary", str(binary),
                                 "--server-arg", f"--api-key {key}",
                                 "--out", str(tmp_path / "out")])
    assert refused(r) == (
        "crossbench: error: extra_args: `--api-key` and what follows it were given as one "
        "argument (not shown: it may be a key) (fix: give them as two: --server-arg "
        "--api-key --server-arg VALUE, or --server-arg=--api-key=VALUE)")
    assert key not in r.output and not (tmp_path / "out").exists()


@pytest.fixture
def vllm_pack(request: pytest.FixtureRequest) -> Any:
    """test_engine_pack's ``packed``: a vLLM pack of a fake wheelhouse (module-scoped)."""
    return request.getfixturevalue("packed")


def test_a_pack_env_value_reaches_the_engine_as_written_and_runs_nothing(tmp_path, vllm_pack):
    value = "a b;$(touch PWNED)`touch PWNED2` 'q\" $HOME"

    def edit(d: dict[str, Any]) -> None:
        d["env"]["VLLM_USE_FLASHINFER_SAMPLER"]["value"] = value
        d["env"]["VLLM_USE_FLASHINFER_SAMPLER"]["reason"] = "two\nlines; touch PWNED3"
    pack = _hostile_pack(vllm_pack.out, tmp_path, edit)
    prefix = tmp_path / "p"
    r = _install(pack, prefix)
    assert r.exit_code == 0, r.output
    got = run_launcher(prefix / "bin" / "python", "-c",
                       "import os; print(os.environ['VLLM_USE_FLASHINFER_SAMPLER'])")
    assert got.stdout == value + "\n"
    assert run_launcher(prefix / "bin" / "python", "-c", "print(1)",
                        VLLM_USE_FLASHINFER_SAMPLER="mine").returncode == 0
    assert not list(tmp_path.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


@pytest.mark.parametrize("name", ["A;touch X", "$(x)", "1A", ""])
def test_a_pack_env_name_that_is_no_variable_is_refused(tmp_path, vllm_pack, name):
    pack = _hostile_pack(vllm_pack.out, tmp_path, lambda d: d["env"].update(
        {name: {"value": "1", "reason": "r"}}))
    line = refused(_install(pack, tmp_path / "p"))
    assert line == (f"crossbench: error: --from {pack / 'pack.json'}: env {name!r} is not a "
                    "variable name with a string value and reason (fix: use the pack.json "
                    "that `crossbench engines pack` wrote, unedited)")
    assert not (tmp_path / "p").exists()


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A synthetic study: a baseline and one draft arm, 2 trials."""
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2)], _rate, trials=2)
    return tmp_path / "s"


@pytest.mark.parametrize("where", ["file-child", "proc"])
def test_archive_build_out_under_a_file_or_unwritable_is_one_line(tmp_path, sweep, where):
    (tmp_path / "afile").write_text("mine\n")
    out = tmp_path / "afile" / "x" if where == "file-child" else Path("/proc/nope/x")
    r = CliRunner().invoke(cli, ["archive", "build", str(sweep), "--creator", "A, B",
                                 "--out", str(out)])
    why = "Not a directory" if where == "file-child" else "No such file or directory"
    assert refused(r) == (f"crossbench: error: --out {out} cannot be written ({why}) (fix: "
                          "choose a --out directory you can write to)")
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize(("out", "problem"), [
    ("afile/x.json", "is under {tmp}/afile, which is a file"),
    ("s", "is a directory, not a file"),
    ("nodir/x.json", ": the folder {tmp}/nodir does not exist"),
    ("/proc/nope/x.json", ": the folder /proc/nope does not exist"),
])
def test_start_spread_out_under_a_file_or_unwritable_is_one_line(tmp_path, sweep, out, problem):
    (tmp_path / "afile").write_text("mine\n")
    path = Path(out) if out.startswith("/") else tmp_path / out
    r = CliRunner().invoke(cli, ["start-spread", str(sweep), "--out", str(path)])
    sep = "" if problem.startswith(":") else " "
    assert refused(r) == (f"crossbench: error: --out {path}{sep}"
                          f"{problem.format(tmp=tmp_path)} (fix: give --out a file path in a "
                          "folder you can write to)")


def test_run_trials_above_the_matrix_cap_is_refused(tmp_path, fake_binary, gguf_stub):
    binary = fake_binary(body='echo "--port N  --host H"')
    r = CliRunner().invoke(cli, ["run", "--model", str(gguf_stub), "--binary", str(binary),
                                 "--trials", "1001", "--out", str(tmp_path / "out")])
    assert refused(r) == ("crossbench: error: trials: Input should be less than or equal to "
                          "1000 (fix: fix --trials)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("data", "name"), [
    ("schema_version: 1\n".encode("utf-32"), "UTF-32"),
    (b"\x00\x00\xfe\xff" + "s".encode("utf-32-be"), "UTF-32"),
    ("schema_version: 1\n".encode("utf-16"), "UTF-16"),
])
def test_a_utf32_matrix_is_called_utf32(tmp_path, data, name):
    path = tmp_path / "m.yaml"
    path.write_bytes(data)
    line = refused(CliRunner().invoke(cli, ["validate", str(path)]))
    assert f"(a {name} byte-order mark: the file is {name})" in line


@pytest.mark.parametrize(("n", "message"), [
    (2.5, "Input should be a valid integer, got a number with a fractional part"),
    ({"a": 1}, "Input should be a valid integer"),
])
def test_a_field_inside_a_list_is_named_as_written(tmp_path, n, message):
    doc = {**BASE, "arms": [{"method": "none"},
                            {"method": "draft-simple", "draft": "dft", "n": n}]}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert refused(CliRunner().invoke(cli, ["validate", str(path)])) == (
        f"crossbench: error: {path}: arms[1].n: {message} (fix: fix `arms[1].n`)")


def test_field_name_drops_union_tags_and_brackets_indexes():
    assert field_name(("arms", 1, "n", "int")) == "arms[1].n"
    assert field_name(("arms", 1, "n", "list[int]", 0)) == "arms[1].n[0]"
    assert field_name(("models", "tgt", "quant")) == "models.tgt.quant"
    assert field_name(()) == ""


@pytest.mark.parametrize("name", ["ok\rFAKE: all verdicts faster", "two\nlines", "a\u2028b",
                                  "bell\x07"])
def test_a_study_name_with_a_line_break_is_refused(tmp_path, name):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**BASE, "study": {"name": name}}))
    line = refused(CliRunner().invoke(cli, ["validate", str(path)]))
    assert line.startswith(f"crossbench: error: {path}: study.name: holds the control "
                           "character \\")
    assert line.endswith("a name is printed on one line; use letters, digits, spaces and "
                         "punctuation (fix: fix `study.name`)")


def test_the_failed_requests_advice_says_what_resume_does(tmp_path, sweep):
    from crossbench.analysis.rundir import load_run

    cell = load_run(sweep).cells[0]
    cell.status.error = 2
    cell.manifest.pop("imported")  # as a matrix cell: an import has no journal to resume
    (finding,) = _failed(cell)
    assert finding.kind is WarningKind.FAILED_REQUESTS
    assert "--resume` runs only trials its journal lacks, never a finished trial with failed " \
           "requests" in finding.action
    assert "rerun the failed trials with" not in finding.action
