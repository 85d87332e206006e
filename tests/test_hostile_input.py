"""Careless and hostile input, part 2: matrix ranges and files, imports with impossible values,
and where a server listens. Every case is the exact input; every refusal is one line on stderr
with exit code 2 (never a traceback), and nothing is expanded or read in full before it is
checked."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.cli.main import cli
from crossbench.engines.bind import exposure_warning, is_loopback
from crossbench.engines.llamacpp.config import DRAFT_N_CAP, LlamaServerConfig
from crossbench.errors import UserError
from crossbench.runner.axes import MAX_AXIS_VALUES, parse_int_axis

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "import"
RAW = DATA / "llama_server_raw"
PATTERN = "{model}_{arm}_t{trial}_p{prompt}.json"
BROKEN = "tiny_draft-n2_t0_pcode-01.json"  # the body each import case breaks
VLLM = DATA / "vllm_bench"
BENCH = DATA / "llama_bench" / "llama-bench.json"

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
AXIS_FIX = "sweep fewer values, e.g. with a step (1-64+4) or a factor (1-64*2)"


def matrix(tmp_path: Path, **over: Any) -> Path:
    """A matrix file of BASE with top-level fields replaced."""
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({**BASE, **over}))
    return p


def with_arm(tmp_path: Path, arm: dict[str, Any], **over: Any) -> Path:
    return matrix(tmp_path, arms=[{"method": "none"}, arm], **over)


def validate(path: Path | str) -> Result:
    return CliRunner().invoke(cli, ["validate", str(path)])


def refused(r: Result) -> str:
    """The one stderr line of a refusal (exit code 2, no traceback)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- 1. n and concurrency ranges --------------------------------------------------------------

def test_a_long_n_range_is_refused_at_once_naming_the_field_and_the_cap(tmp_path):
    p = with_arm(tmp_path, {"method": "ngram-mod", "n": "1-100000"})
    start = time.perf_counter()
    line = refused(validate(p))
    assert time.perf_counter() - start < 1.0  # the quadratic check took minutes here
    assert line == (f"crossbench: error: {p}: arms[1].n: range '1-100000' has 100000 values, "
                    f"more than the {MAX_AXIS_VALUES} an axis may hold (fix: {AXIS_FIX})")


def test_a_range_of_a_trillion_values_needs_neither_time_nor_memory(tmp_path):
    """The exact input that built a list until MemoryError, in a process limited to 2 GiB of
    address space and 60 s: it must end at once with the one-line refusal."""
    p = with_arm(tmp_path, {"method": "draft-simple", "draft": "dft", "n": "1-999999999999"})
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            "from crossbench.cli.main import cli; sys.argv = ['crossbench', 'validate', "
            f"{str(p)!r}]; cli()")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env, check=False)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr == (f"crossbench: error: {p}: arms[1].n: range '1-999999999999' has "
                        f"999999999999 values, more than the {MAX_AXIS_VALUES} an axis may "
                        f"hold (fix: {AXIS_FIX})\n")


def test_a_long_concurrency_range_is_refused_under_its_name(tmp_path):
    p = matrix(tmp_path, axes={**BASE["axes"], "concurrency": "1-5000"})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: axes.concurrency: range '1-5000' has 5000 values, more than "
        f"the {MAX_AXIS_VALUES} an axis may hold (fix: {AXIS_FIX})")


@pytest.mark.parametrize(("n", "shown"), [
    pytest.param(999999999999, "999999999999", id="12-digits"),
    pytest.param("1-" + "9" * 5000, "99999999999999999999... (5000 digits)", id="5000-digits"),
])
def test_an_axis_value_beyond_32_bits_is_refused(tmp_path, n, shown):
    p = with_arm(tmp_path, {"method": "draft-simple", "draft": "dft", "n": n})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: arms[1].n: {shown} is larger than 2147483647 in magnitude "
        "(fix: use a value an engine can take (n is a few drafted tokens, concurrency a "
        "number of requests in flight))")


def test_a_digit_python_cannot_convert_is_unreadable_not_a_traceback(tmp_path):
    p = with_arm(tmp_path, {"method": "draft-simple", "draft": "dft", "n": "\u00b2"})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: arms[1].n: cannot read '\u00b2' (fix: write a list such as "
        "1,2,4 or a range such as 1-15+2 (step) or 1-16*2 (factor))")


def test_duplicates_are_found_in_linear_time():
    start = time.perf_counter()
    for value, dup in (([*range(MAX_AXIS_VALUES - 1), 7], 7), ("1-1000,3", 3)):
        with pytest.raises(UserError) as e:
            parse_int_axis(value, "n")
        assert e.value.message == f"n: [{dup}] listed twice"
    assert time.perf_counter() - start < 0.5


def test_n_beyond_the_profile_maximum_names_the_arm(tmp_path):
    p = with_arm(tmp_path, {"method": "draft-dflash", "draft": "dft", "n": "15-16"})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: arms[1].n: n=16 is outside what draft-dflash allows "
        "(n <= 15) (cell llama/tgt/draft-dflash/n16/builtin-code/c1) (fix: DFlash drafts a "
        "block of 16 = the target token + 15 drafted; use n <= 15)")


def test_draft_n_max_without_a_profile_bound_has_a_documented_cap(tmp_path):
    p = with_arm(tmp_path, {"method": "draft-simple", "draft": "dft", "n": [4, 100]})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: arms[1].n: n=100 is outside what draft-simple allows "
        f"(n <= {DRAFT_N_CAP}) (cell llama/tgt/draft-simple/n100/builtin-code/c1) (fix: "
        f"crossbench caps --spec-draft-n-max at {DRAFT_N_CAP}, which llama.cpp leaves "
        f"unbounded (docs/matrix.md says why); use n <= {DRAFT_N_CAP})")
    ok = with_arm(tmp_path, {"method": "draft-simple", "draft": "dft", "n": DRAFT_N_CAP})
    assert validate(ok).exit_code == 0
    ngram = with_arm(tmp_path, {"method": "ngram-simple", "n": 1025})
    assert "n=1025 is outside what ngram-simple allows (n <= 1024)" in refused(validate(ngram))


def test_a_large_study_gets_a_note_and_a_huge_one_is_refused(tmp_path):
    # ngram-simple: a method without a table shared across requests (ngram-mod's would add
    # validate's draft_replay note, the workload's 8 prompts cycled to 20 requests)
    p = with_arm(tmp_path, {"method": "ngram-simple", "n": "1-600"})
    r = validate(p)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        "crossbench: note: 601 cells x 3 trials = 1803 runs, each with its own server start: "
        "a long study (more than 500 cells); consider fewer n or concurrency values, or "
        "`exclude`"]
    # 600 ngram-mod cells with the same reason for draft_replay: one note, not 600
    said = validate(with_arm(tmp_path, {"method": "ngram-mod", "n": "1-600"})).stderr
    replay = [ln for ln in said.splitlines() if "draft_replay" in ln]
    assert len(replay) == 1 and replay[0].startswith(
        "crossbench: note: cells llama/tgt/ngram-mod/n1/builtin-code/c1, "
        "llama/tgt/ngram-mod/n2/builtin-code/c1, llama/tgt/ngram-mod/n3/builtin-code/c1 and "
        "597 more: ngram-mod drafts from one ngram-mod hash table per server")
    assert "its 20 requests a trial cycle 8 prompts (12 repeats)" in replay[0]
    p = with_arm(tmp_path, {"method": "ngram-simple", "n": "1-1000"},
                 axes={**BASE["axes"], "concurrency": "1-20"})
    start = time.perf_counter()
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: the matrix expands to more than 10000 cells (fix: sweep "
        "fewer values, exclude cells, or split the study into several matrices)")
    p = with_arm(tmp_path, {"method": "ngram-mod", "n": "1-1024"},
                 axes={**BASE["axes"], "concurrency": "1-1024"})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: the axes cross to more than 1000000 combinations (at most "
        "10000 cells may run) (fix: sweep fewer values, or split the study into several "
        "matrices)")
    assert time.perf_counter() - start < 10


def test_trials_are_capped_before_the_schedule_is_listed(tmp_path):
    p = matrix(tmp_path, trials=10**12)
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: trials: 1000000000000 is more than the 1000 trials a cell "
        "may run (fix: use a few trials per cell (3 is the default; at least 2 give a "
        "spread))")


# -- 2. matrix files: encodings, sizes, kinds ------------------------------------------------

def test_a_latin1_matrix_names_the_byte_offset(tmp_path):
    p = tmp_path / "latin1.yaml"
    text = yaml.safe_dump({**BASE, "study": {"name": "t", "notes": "caf\u00e9"}},
                          allow_unicode=True)
    p.write_bytes(text.encode("latin-1"))
    offset = text.encode("latin-1").index(b"\xe9")
    assert refused(validate(p)) == (
        f"crossbench: error: matrix {p} is not UTF-8: byte 0xe9 at offset {offset} "
        "(fix: save it as UTF-8)")


def test_a_utf16_matrix_is_named_as_such(tmp_path):
    p = tmp_path / "utf16.yaml"
    p.write_bytes(yaml.safe_dump(BASE).encode("utf-16"))  # with its byte-order mark
    assert refused(validate(p)) == (
        f"crossbench: error: matrix {p} is not UTF-8: byte 0xff at offset 0 (a UTF-16 "
        "byte-order mark: the file is UTF-16) (fix: save it as UTF-8)")


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "bom.yaml"
    p.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(BASE).encode())
    assert validate(p).exit_code == 0


def test_dev_zero_a_directory_and_a_large_file_are_one_line(tmp_path):
    assert refused(validate("/dev/zero")) == (
        "crossbench: error: matrix /dev/zero is a character device, not a file (fix: save the "
        "matrix to a regular file and pass that file)")
    assert refused(validate(tmp_path)) == (
        f"crossbench: error: matrix {tmp_path} is a directory, not a file (fix: give the path "
        "of the matrix file itself)")
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(10 << 30)  # 10 GiB, sparse: read, it would exhaust memory
    assert refused(validate(big)) == (
        f"crossbench: error: matrix {big} is 10.0 GiB, over the 1.0 MiB limit (fix: pass the "
        "matrix's YAML file (matrices are a few KiB); split a larger study into several "
        "matrices)")


def test_a_fifo_as_the_matrix_does_not_block(tmp_path):
    fifo = tmp_path / "m.yaml"
    os.mkfifo(fifo)

    def release() -> None:  # unblocks a reader that waits for a writer (the old behaviour)
        time.sleep(3)
        with contextlib.suppress(OSError):  # no reader left: nothing waited
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=release, daemon=True).start()
    start = time.perf_counter()
    line = refused(validate(fifo))
    assert time.perf_counter() - start < 2
    assert line == (f"crossbench: error: matrix {fifo} is a named pipe (FIFO), not a file "
                    "(fix: save the matrix to a regular file and pass that file)")


@pytest.mark.parametrize(("text", "problem", "fix"), [
    ("x: " + "[" * 100_000, "nested too deeply", "fix the syntax (a matrix nests a few levels)"),
    ("trials: " + "9" * 5000, "Exceeds the limit (4300 digits) for integer string "
     "conversion: value has 5000 digits", "fix the value (a matrix holds small numbers)"),
    ("a: [1, 2\nb: }", "expected ',' or ']', but got ':' at line 2, column 2", "fix the syntax"),
])
def test_yaml_that_breaks_the_parser_is_one_line(tmp_path, text, problem, fix):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    assert refused(validate(p)) == (
        f"crossbench: error: {p} is not valid YAML: {problem} (fix: {fix})")


def test_an_alias_bomb_in_extra_args_is_refused_without_expanding_it(tmp_path):
    anchors = "".join(f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
                      for i in range(1, 9))
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({k: v for k, v in BASE.items()}) + "server:\n  anchors:\n"
                 "    a0: &a0 [--x, --x, --x, --x, --x, --x, --x, --x, --x, --x]\n" + anchors
                 + "  extra_args: *a8\n")
    start = time.perf_counter()
    line = refused(validate(p))
    assert time.perf_counter() - start < 5  # str() of 10**9 flags would never end
    assert line.startswith(f"crossbench: error: {p}: cell llama/tgt/none/builtin-code/c1: ")


# -- 3. imports with impossible values -------------------------------------------------------

def _raw_with(tmp_path: Path, edit: Any) -> Path:
    """The captured bodies with BROKEN edited by ``edit(body)``."""
    raw = tmp_path / "raw"
    shutil.copytree(RAW, raw)
    body = json.loads((raw / BROKEN).read_text())
    edit(body)
    (raw / BROKEN).write_text(json.dumps(body))  # NaN and Infinity as Python writes them
    return raw


def _set(*path: str, value: Any) -> Any:
    def edit(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _import_raw(raw: Path, out: Path, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["import", "llama-server", str(raw), "--pattern", PATTERN,
                                    "--baseline-arm", "baseline", "--out", str(out), *extra])


@pytest.mark.parametrize(("edit", "reason"), [
    (_set("timings", "predicted_ms", value=float("nan")),
     "timings.predicted_ms is NaN, not a finite number"),
    (_set("timings", "predicted_ms", value=float("inf")),
     "timings.predicted_ms is Infinity, not a finite number"),
    (_set("timings", "predicted_ms", value=1e308),
     "timings.predicted_ms is 1e+308, above 1e+09 ms"),
    (_set("timings", "predicted_ms", value="69.89"),
     "timings.predicted_ms is '69.89' (a string), not a number"),
    (_set("timings", "predicted_ms", value=0),
     "timings.predicted_ms is 0 ms for 15 tokens after the first: faster than 0.05 ms a "
     "token (20,000 tokens/s for one sequence), which no engine decodes"),
    (_set("timings", "predicted_ms", value=-69.89),
     "timings.predicted_ms is -69.89: it cannot be negative"),
    (_set("timings", "prompt_ms", value=0),
     "timings.prompt_ms is 0: evaluating a prompt takes time"),
    (_set("timings", "prompt_ms", value=-8.95),
     "timings.prompt_ms is -8.95: it cannot be negative"),
    (_set("tokens_predicted", value=1e30), "tokens_predicted is 1e+30, above 2147483647"),
    (_set("tokens_predicted", value=0),
     "tokens_predicted is 0: a response without output cannot be timed"),
    (_set("tokens_predicted", value=-16), "tokens_predicted is -16, below 0"),
    (_set("tokens_predicted", value="16"),
     "tokens_predicted is '16' (a string), not a whole number"),
    (_set("timings", "draft_n_accepted", value=99),
     "timings.draft_n_accepted (99) is above timings.draft_n (13)"),
    (_set("timings", value=[1, 2]), "timings is a list of 2, not an object"),
    (_set("generation_settings", value="greedy"), "generation_settings is 'greedy', not an object"),
    (_set("generation_settings", "temperature", value={"t": 0}),
     "generation_settings.temperature is an object, not a number"),
    (_set("content", value={"text": "x"}), "content is an object, not a string"),
])
def test_a_body_with_an_impossible_value_is_listed_and_left_out(tmp_path, edit, reason):
    raw = _raw_with(tmp_path, edit)
    r = _import_raw(raw, tmp_path / "imp")
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[:2] == [
        f"crossbench: not imported: NOTES.txt: does not match --pattern '{PATTERN}'",
        f"crossbench: not imported: {BROKEN}: {reason}"]
    state = json.loads((tmp_path / "imp" / "state.json").read_text())
    assert {"file": BROKEN, "reason": reason} in state["not_imported"]
    run = load_run(tmp_path / "imp")
    sources = {rec["source"] for c in run.cells for rec in c.records}
    assert BROKEN not in sources and len(sources) == 17
    result = analyze(tmp_path / "imp", StatsOptions(resamples=200, min_samples=4))
    assert len(result["pairs"]) == 2  # draft-n2 (one body short) and draft-n4 vs baseline


def test_a_body_with_too_many_tokens_no_longer_reaches_analyze(tmp_path):
    """tokens_predicted 1e30 was imported and then crashed `crossbench analyze`."""
    raw = _raw_with(tmp_path, _set("tokens_predicted", value=1e30))
    assert _import_raw(raw, tmp_path / "imp").exit_code == 0
    r = CliRunner().invoke(cli, ["analyze", str(tmp_path / "imp"), "--resamples", "200",
                                 "--min-samples", "4"])
    assert r.exit_code == 0, r.output


def test_a_baseline_with_no_importable_body_is_a_one_line_error(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(RAW, raw)
    for p in raw.glob("tiny_baseline_*.json"):
        body = json.loads(p.read_text())
        body["timings"]["predicted_ms"] = float("nan")
        p.write_text(json.dumps(body))
    assert refused(_import_raw(raw, tmp_path / "imp")) == (
        "crossbench: error: --baseline-arm 'baseline': every file was left out (first: "
        "tiny_baseline_t0_pcode-01.json: timings.predicted_ms is NaN, not a finite number) "
        "(fix: fix or replace the baseline's bodies; nothing can be paired without them)")


def test_n_from_arm_that_is_not_a_number_stays_a_user_error(tmp_path):
    line = refused(_import_raw(RAW, tmp_path / "imp", "--n-from-arm", r"(draft)-n\d+"))
    assert line.startswith("crossbench: error: --n-from-arm: the group of ")
    assert "is not a whole number" in line


def _vllm_with(tmp_path: Path, edit: Any) -> Path:
    res = json.loads((VLLM / "eagle3-n3.json").read_text().splitlines()[0])
    edit(res)
    p = tmp_path / "eagle3-n3.json"
    p.write_text(json.dumps(res))
    return p


def _pop(key: str) -> Any:
    return lambda res: res[key].pop()


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda r: r["ttfts"].__setitem__(2, float("nan")), "ttfts[2] is NaN, not a finite number"),
    (lambda r: r["latencies"].__setitem__(0, -1.0), "latencies[0] is -1: it cannot be negative"),
    (lambda r: r["itls"].__setitem__(1, "fast"), "itls[1] is 'fast', not a list"),
    (lambda r: r["ttfts"].__setitem__(0, 0.0),
     "ttfts[0] is 0 for a completed request: the first token takes time"),
    (lambda r: r["start_times"].__setitem__(0, 1e308), "start_times[0] is 1e+308, above 1e+10 s"),
    (lambda r: r.__setitem__("n", "three"), "metadata n is 'three', not a whole number"),
    (_pop("output_lens"), "output_lens has 7 entries for 8 latencies"),
    (lambda r: r.__setitem__("spec_decode_accepted_tokens", 5000),
     "spec_decode_accepted_tokens (5000) is above spec_decode_draft_tokens (3000)"),
    (lambda r: r["spec_decode_per_position_acceptance_rates"].__setitem__(0, 1.5),
     "spec_decode_per_position_acceptance_rates[0] is 1.5, above 1"),
    (lambda r: r.__setitem__("model_id", {"name": "x"}), "model_id is an object, not a model name"),
    (lambda r: r.__setitem__("mean_tpot_ms", "fast"),
     "mean_tpot_ms is 'fast' (a string), not a number"),
    (lambda r: r.__setitem__("duration", float("inf")),
     "duration is Infinity, not a finite number"),
])
def test_a_vllm_result_with_an_impossible_value_is_listed_and_left_out(tmp_path, edit, reason):
    bad = _vllm_with(tmp_path, edit)
    r = CliRunner().invoke(cli, ["import", "vllm-bench", "--engine", "vllm",
                                 str(VLLM / "baseline.json"), str(bad),
                                 "--out", str(tmp_path / "imp")])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == f"crossbench: not imported: eagle3-n3.json: {reason}"
    state = json.loads((tmp_path / "imp" / "state.json").read_text())
    assert [c["coords"]["arm"] for c in state["cells"]] == ["baseline"]


def test_vllm_results_that_all_fail_and_a_latin1_file_are_one_line(tmp_path):
    bad = _vllm_with(tmp_path, lambda r: r.__setitem__("completed", -8))
    r = CliRunner().invoke(cli, ["import", "vllm-bench", "--engine", "vllm", str(bad), "--out",
                                 str(tmp_path / "o")])
    assert refused(r) == ("crossbench: error: no result could be imported (first: "
                          "eagle3-n3.json: completed is -8, below 0) (fix: fix or leave out the "
                          "files listed)")
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"model_id": "caf\u00e9", "completed": 1}'.encode("latin-1"))
    r = CliRunner().invoke(cli, ["import", "vllm-bench", "--engine", "vllm", str(latin), "--out",
                                 str(tmp_path / "o")])
    assert refused(r) == (f"crossbench: error: vllm bench JSON {latin} is not UTF-8: byte 0xe9 "
                          "at offset 17 (fix: save it as UTF-8)")


@pytest.mark.parametrize(("index", "key", "value", "reason"), [
    (1, "samples_ns", [float("nan"), 1, 2], "samples_ns[0] is NaN, not a finite number"),
    (1, "samples_ns", [0, 5, 6], "samples_ns[0] is 0: a repetition takes time"),
    (1, "samples_ns", "fast", "samples_ns is 'fast', not a list of repetitions"),
    (0, "n_prompt", "16", "n_prompt is '16' (a string), not a whole number"),
    (0, "n_prompt", -16, "n_prompt is -16, below 0"),
    (0, "avg_ts", float("inf"), "avg_ts is Infinity, not a finite number"),
    (0, "model_filename", ["a"], "model_filename is a list of 1, not a string"),
])
def test_a_llama_bench_test_with_an_impossible_value_is_listed(tmp_path, index, key, value,
                                                                reason):
    tests = json.loads(BENCH.read_text())
    tests[index][key] = value
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(tests))
    r = CliRunner().invoke(cli, ["import", "llama-bench", str(p), "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[0] == f"crossbench: not imported: bench.json test {index}: " \
                                       f"{reason}"
    state = json.loads((tmp_path / "o" / "state.json").read_text())
    assert len(state["cells"]) == 3  # the four tests but the broken one


def test_import_files_that_are_devices_or_empty_are_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["import", "llama-bench", "/dev/zero", "--out",
                                 str(tmp_path / "o")])
    assert refused(r) == ("crossbench: error: llama-bench JSON /dev/zero is a character device, "
                          "not a file (fix: save the llama-bench JSON to a regular file and pass "
                          "that file)")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    r = CliRunner().invoke(cli, ["import", "llama-bench", str(empty), "--out",
                                 str(tmp_path / "o")])
    assert refused(r) == (f"crossbench: error: {empty} holds no llama-bench test (fix: write it "
                          "with `llama-bench -o json` or `-o jsonl`)")


# -- 4. small things -------------------------------------------------------------------------

def test_concurrency_zero_names_the_axis(tmp_path):
    p = matrix(tmp_path, axes={**BASE["axes"], "concurrency": 0})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: axes.concurrency: 0 requests in flight runs nothing (fix: "
        "use 1 or more (a value, a list or a range such as 1-16*2))")


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host=0.0.0.0"], ["--host", "::"]])
def test_host_in_extra_args_is_refused(tmp_path, args):
    p = matrix(tmp_path, server={"extra_args": args})
    assert refused(validate(p)) == (
        f"crossbench: error: {p}: cell llama/tgt/none/builtin-code/c1: extra_args: --host is set "
        "by crossbench from `host` (fix: use the engine's `host` setting to expose a server "
        "knowingly)")


@pytest.mark.parametrize(("args", "flag", "setting"), [
    (["--port", "8080"], "--port", "port"), (["-m", "other.gguf"], "-m", "model")])
def test_other_managed_flags_in_extra_args_are_refused(tmp_path, args, flag, setting):
    p = matrix(tmp_path, server={"extra_args": args})
    assert f"extra_args: {flag} is set by crossbench from `{setting}`" in refused(validate(p))


def test_a_host_that_is_not_loopback_is_warned_about(tmp_path):
    warning = ("host 0.0.0.0 is not a loopback address: the server will be reachable from the "
               "network for the whole run (anyone who can reach this machine can send it "
               "requests and disturb the measurements); set host: 127.0.0.1 unless that is "
               "intended")
    r = validate(matrix(tmp_path, server={"host": "0.0.0.0"}))
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"crossbench: note: cells of engine llama: {warning}"]
    assert validate(matrix(tmp_path)).stderr == ""
    cfg = LlamaServerConfig(model=Path("t.gguf"), host="0.0.0.0")
    assert cfg.warnings() == [warning]
    assert LlamaServerConfig(model=Path("t.gguf")).warnings() == []


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("example.org", False),
])
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback
    assert (exposure_warning(host) is None) is loopback


def test_a_run_on_a_non_loopback_host_warns_before_the_server_starts(tmp_path):
    """The warning reaches the runner's progress before anything starts (the stand-in
    listens where it is told; the test only reads the warning)."""
    from standins.vllm import write_launcher

    from crossbench.runner.config import RunConfig
    from crossbench.runner.single import RunSession

    said: list[str] = []
    cfg = RunConfig.model_validate({
        "engine": "vllm", "trials": 1, "load": {"requests": 1, "max_tokens": 4},
        "engine_config": {"binary": str(write_launcher(tmp_path / "vllm")),
                          "model": "Qwen/Qwen3-8B", "host": "0.0.0.0"}})
    RunSession(cfg, tmp_path / "run", progress=said.append)
    assert any(s.startswith("warning: host 0.0.0.0 is not a loopback address") for s in said)
