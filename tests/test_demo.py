"""`crossbench demo` teaches (issue 36, item 2): it exits 1 when a trial failed, says one line
per fixture, its n-gram cell has text to draft from, and it ends with a summary a newcomer can
act on (the fastest arm with its interval, synthetic acceptance measured against configured,
and a plain line when the host was too busy for the figures to mean anything)."""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from standins.vllm import write_launcher

from crossbench.analysis.analyze import analyze
from crossbench.cli import demo_cmd
from crossbench.cli.demo_cmd import closing_summary
from crossbench.cli.main import cli
from crossbench.engines.llamacpp import build
from crossbench.fixtures import resolve
from crossbench.load.workloads import builtin_bytes, load_workload
from crossbench.paths import data_root
from crossbench.runner.matrix import expand, load_matrix
from crossbench.runner.matrix_run import _resolve

RATES = [0.9, 0.6, 0.3]
"""Synthetic acceptance the stand-in matrix configures (one rate per drafted position)."""


def invoke_demo(*args: str | Path) -> Result:
    """`crossbench demo` in-process; any exception but SystemExit fails the test."""
    return CliRunner().invoke(cli, ["demo", *map(str, args)], catch_exceptions=False)


def standin_matrix(tmp_path: Path, **extra: Any) -> Path:
    """The demo's shape on the vLLM stand-in (it is not vLLM): a baseline, a synthetic arm
    with known rates, and an n-gram arm on builtin:repeat beside its own baseline."""
    binary = write_launcher(tmp_path / "vllm", "--standin-step-ms", "1",
                            "--standin-prefill-ms", "1")
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump({
        "schema_version": 1, "study": {"name": "demo-standin", "notes": "stand-in, not vLLM"},
        "engines": {"v": {"kind": "vllm", "binary": str(binary)}},
        "models": {"t": {"hf": {"repo": "Qwen/Qwen3-8B", "revision": "b" * 40},
                         "quant": "BF16", "role": "target"}},
        "load": {"requests": 6, "warmup": 1, "max_tokens": 48, "ignore_eos": True},
        "arms": [{"method": "none"},
                 {"name": "synthetic", "method": "ngram", "n": 3, "synth_rates": RATES},
                 {"method": "ngram", "n": 2}],
        "axes": {"engine": ["v"], "target": ["t"],
                 "workload": ["builtin:mixed", "builtin:repeat"]},
        "exclude": [{"arm": "synthetic", "workload": "builtin:repeat"},
                    {"arm": "ngram", "workload": "builtin:mixed"}],
        "trials": 2, "telemetry_hz": 0, **extra,
    }))
    return path


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in needs no llama-server: the demo's build step does nothing here."""
    monkeypatch.setattr(build, "install", lambda **_kw: None)


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Result, Path]]:
    """One demo run on the stand-in (result, run directory), shared by the tests that read it."""
    tmp = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build, "install", lambda **_kw: None)
        yield invoke_demo("--matrix", standin_matrix(tmp), "--out", tmp / "run"), tmp / "run"


# -- the n-gram cell has something to draft -----------------------------------------------

def test_builtin_repeat_asks_three_prompts_again_and_again() -> None:
    work = load_workload("builtin:repeat", count=9)
    ids = [p.id for p in work.prompts]
    assert ids == ["repeat-01", "repeat-02", "repeat-03"] * 3
    assert work.digest == hashlib.sha256(builtin_bytes("repeat")).hexdigest()
    assert {p.category for p in work.prompts} == {"repeat"}
    assert all(p.text and len(p.text.split()) >= 24 for p in work.prompts)  # > n_match 24


def test_the_default_demo_runs_ngram_on_repeated_prompts_beside_its_own_baseline() -> None:
    path = data_root() / demo_cmd.DEFAULT_MATRIX
    cells = {c.id: c for c in expand(load_matrix(path), path)}
    ngram = [c for c in cells.values() if c.coords["method"] == "ngram-mod"]
    assert [c.coords["workload"] for c in ngram] == ["builtin:repeat"]
    base = cells[str(ngram[0].baseline)]
    assert (base.coords["method"], base.coords["workload"]) == ("none", "builtin:repeat")
    others = [c for c in cells.values() if c.coords["method"] == "draft-simple"]
    assert len(others) == 3 and {c.coords["workload"] for c in others} == {"builtin:mixed"}
    assert len(cells) == 6


# -- one line per fixture -------------------------------------------------------------------

def test_a_matrix_resolving_the_fixture_pair_per_cell_announces_it_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(resolve, "_CHECKED", set())
    said: list[str] = []
    target, draft = resolve.ensure_fixtures(say=said.append)
    assert said  # made, or found up to date: either way it said so
    capsys.readouterr()
    for _ in range(4):  # the default demo resolves the pair 8 times: once per model of a cell
        assert _resolve("fixture:target") == str(target)
        assert _resolve("fixture:draft") == str(draft)
    assert capsys.readouterr().err == ""


# -- the run, its exit code and its summary ---------------------------------------------------

def test_the_demo_on_the_standin_ends_with_a_summary_and_no_fail(
        standin_run: tuple[Result, Path]) -> None:
    result, out = standin_run
    assert result.exit_code == 0, result.stderr
    assert "FAIL" not in result.stdout
    fixture_lines = [ln for ln in result.stderr.splitlines() if "fixture" in ln]
    assert [ln.split(":")[1] for ln in fixture_lines] == [" fixture target", " fixture draft"]
    summary = result.stdout[result.stdout.index("summary ("):].splitlines()
    analysis = analyze(out)
    pairs = sorted(analysis["pairs"], key=lambda p: -p["speedup"]["geomean"])
    assert summary[0] == ("summary (decode rate of each arm over its baseline's on the same "
                          "prompts, geometric mean with its 95 % interval):")
    lead = "  fastest: " if pairs[0]["verdict"] == "faster" else \
        "  no arm was shown faster than its baseline; the best: "
    assert summary[1].startswith(lead)
    lo, hi = pairs[0]["speedup"]["ci95"]
    assert f"{pairs[0]['speedup']['geomean']:.2f}x [{lo:.2f}, {hi:.2f}], " in summary[1]
    synth = [ln for ln in summary if ln.startswith("  synthetic acceptance of ")]
    assert len(synth) == 1
    assert synth[0].startswith(
        "  synthetic acceptance of synthetic n=3 on builtin:mixed: configured 0.90 0.60 0.30, "
        "measured ")
    assert ": recovered, every position within its sampling band (+-" in synth[0]
    ngram = [ln for ln in summary if ln.startswith("  ngram n=2 on builtin:repeat drafted ")]
    assert len(ngram) == 1 and "n-gram drafting copies text the server has seen" in ngram[0]
    assert summary[-1].startswith("  host: ")


def test_synthetic_rates_the_engine_did_not_honour_are_named_not_recovered(
        standin_run: tuple[Result, Path]) -> None:
    """The same run read against other configured rates: the summary says which position
    is off and by how much (an engine that ignores its synthetic rates looks like this)."""
    _, out = standin_run
    analysis = analyze(out)
    synth = next(p for p in analysis["pairs"] if p["arm"] == "synthetic")
    acc = next(c for c in analysis["cells"] if c["cell"] == synth["cell"])["acceptance"]
    drafts = int(acc["drafts"])
    measured = acc["per_position"][0]
    lines = closing_summary(analysis, {synth["cell"]: [0.5, 0.3, 0.1]})
    line = next(ln for ln in lines if ln.startswith("  synthetic acceptance of "))
    assert f"over {drafts} drafts: NOT recovered at position 0 ({measured:.3f} against " \
           "0.50 +- " in line
    assert line.endswith("): acceptance counting is off here")


def test_a_quiet_host_and_a_busy_host_read_differently(
        standin_run: tuple[Result, Path]) -> None:
    _, out = standin_run
    analysis = analyze(out)
    quiet = copy.deepcopy(analysis)
    quiet["stability"] = [f for f in quiet["stability"]
                          if f["kind"] not in ("trial_warnings", "trial_spread")]
    for cell in quiet["cells"]:  # the worst cell sets the figure: 4 % whatever the run gave
        cell["trial_cv"] = 0.04
    assert closing_summary(quiet, {})[-1] == (
        "  host: quiet enough: no other inference process beside any trial, and each cell's "
        "trials agree within 4% (CV; the limit is 10 %)")
    busy = copy.deepcopy(quiet)
    worst = busy["cells"][1]
    worst["trial_cv"] = 0.84
    busy["stability"] += [
        {"kind": "trial_spread", "cell": worst["cell"], "message": "", "action": ""},
        {"kind": "trial_warnings", "cell": busy["cells"][0]["cell"], "message": "",
         "action": ""}]
    line = closing_summary(busy, {})[-1]
    assert line == (
        "  host: TOO BUSY for these figures to mean anything: other inference processes ran "
        f"beside trials of 1 cell(s); the trials of 1 cell(s) disagree by more than 10 % (CV; "
        f"{worst['cell']}: 84%). Stop other programs (other engines, builds, test runs) and "
        "run it again")
    assert "FAIL" not in line


def test_another_engine_running_beside_the_demo_makes_it_say_the_host_was_too_busy(
        tmp_path: Path, no_build: None) -> None:
    """A process named llama-server, started by this test (conftest counts only servers
    that descend from the test run), runs beside every trial."""
    fake = tmp_path / "llama-server"
    shutil.copy("/bin/sleep", fake)
    other = subprocess.Popen([str(fake), "600"])
    try:
        result = invoke_demo("--matrix", standin_matrix(tmp_path), "--out", tmp_path / "run")
    finally:
        other.kill()
        other.wait()
    assert result.exit_code == 0, result.stderr
    host = result.stdout.splitlines()[-1]
    assert host.startswith("  host: TOO BUSY for these figures to mean anything: other "
                           "inference processes ran beside trials of 4 cell(s)")


def test_a_failed_trial_makes_the_demo_exit_1_as_run_does(
        tmp_path: Path, no_build: None, fake_binary: Any, gguf_stub: Path) -> None:
    path = tmp_path / "dies.yaml"
    path.write_text(yaml.safe_dump({
        "schema_version": 1, "study": {"name": "dies"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(fake_binary())}},
        "models": {"t": {"path": str(gguf_stub), "quant": "F16", "role": "target"}},
        "load": {"requests": 2, "warmup": 0, "max_tokens": 8},
        "arms": [{"method": "none"}],
        "axes": {"engine": ["llama"], "target": ["t"]},
        "trials": 1, "telemetry_hz": 0,
    }))
    result = invoke_demo("--matrix", path, "--out", tmp_path / "run")
    assert result.exit_code == 1
    assert (f"crossbench: failed: 1 trial(s) failed (fix: see the cells' server.log and "
            f"`crossbench status {tmp_path / 'run'}`)") in result.stderr.splitlines()


def test_confounded_pairs_are_named_once_with_what_differed(
        standin_run: tuple[Result, Path]) -> None:
    _, out = standin_run
    analysis = copy.deepcopy(analyze(out))
    for pair in analysis["pairs"]:  # a commit landed between the trials, as on a shared tree
        pair["verdict"] = "confounded"
        pair["confounds"]["confounding_fields"] = ["crossbench.commit"]
    lines = closing_summary(analysis, {})
    ranked = sorted(analysis["pairs"], key=lambda p: -p["speedup"]["geomean"])
    labels = "; ".join(f"{p['arm']} n={p['n']} on {p['workload']}" for p in ranked)
    assert [ln for ln in lines if ln.startswith("  confounded (")] == [
        f"  confounded ({labels}): besides the method, crossbench.commit differed from the "
        "baseline's trials (`crossbench analyze` lists them)"]
    assert lines[1].startswith("  no arm was shown faster than its baseline; the best: ")
