"""vLLM start-up, the next cut (issue 33 item 5): the engine core forked instead of spawned
(``engine_process: fork``), a given KV cache size instead of vLLM's memory profiling
(``kv_cache_memory_bytes``), the phase lines timed from the spawn (``log_marks_s``), their
confound rules and the benchmark's variants, against vLLM 0.26.0's recorded names and a
recorded H200 start, and crossbench's stand-in ``vllm serve`` (not vLLM)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from bench_loader import load_benchmark
from standins.vllm import write_launcher

from crossbench.confounds.diff import Kind, diff
from crossbench.confounds.rules import check_pair, check_trial
from crossbench.engines import registry
from crossbench.engines.vllm import startup_log
from crossbench.engines.vllm.profile import profile_for
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import UserError

DATA = Path(__file__).parent / "data" / "vllm"
MODEL = "Qwen/Qwen3-8B"
FAST = ("--standin-step-ms", "0", "--standin-prefill-ms", "0", "--standin-version", "0.26.0")
GIB = 2**30


def _server(tmp_path: Path, **cfg: Any) -> VllmServer:
    srv = registry.create("vllm", {"model": MODEL, "version": "0.26.0", **cfg},
                          tmp_path / "server.log")
    assert isinstance(srv, VllmServer)
    return srv


def _refused(tmp_path: Path, **cfg: Any) -> str:
    with pytest.raises(UserError) as e:
        _server(tmp_path, **cfg)
    return e.value.one_line()


# -- argv and environment, by vLLM 0.26.0's names -----------------------------------------------


def test_kv_cache_memory_bytes_is_the_recorded_flag(tmp_path: Path) -> None:
    # engine/arg_utils.py:1166 of the 0.26.0 wheel; the profile's serve_flags record it
    assert "--kv-cache-memory-bytes" in profile_for("0.26.0").flags
    srv = _server(tmp_path, kv_cache_memory_bytes=110_037_665_546)
    argv = srv.argv(srv.profile, "vllm")
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "110037665546"
    plain = _server(tmp_path)
    assert "--kv-cache-memory-bytes" not in plain.argv(plain.profile, "vllm")


def test_fork_sets_the_start_method_and_spawn_leaves_it_to_vllm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM 0.26.0: envs.py:913 (choices spawn, fork); `vllm serve` sets spawn when it is unset
    # (entrypoints/serve/utils/api_utils.py:165), so crossbench's spawn passes nothing
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")  # inherited: not the config's
    fork = _server(tmp_path, engine_process="fork", compile_cache="vllm")
    spawn = _server(tmp_path, compile_cache="vllm")
    assert fork.base_environment()["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in spawn.base_environment()
    # the start method changes no flag: the two argv are the same
    assert fork.argv(fork.profile, "vllm") == spawn.argv(spawn.profile, "vllm")


# -- validation ---------------------------------------------------------------------------------


def test_settings_refuse_what_would_blur_them(tmp_path: Path) -> None:
    assert _refused(tmp_path, env={"VLLM_WORKER_MULTIPROC_METHOD": "fork"}) == (
        "env: VLLM_WORKER_MULTIPROC_METHOD is set through engine_process (spawn or fork), "
        "which the start record keeps; drop it from env and set engine_process "
        "(fix: fix `env`)")
    assert _refused(tmp_path, engine_process="fork", data_parallel_size=2).startswith(
        "engine_process: fork is examined for one engine only (data_parallel_size 1)")
    assert _refused(tmp_path, engine_process="forkserver").startswith(
        "engine_process: Input should be 'spawn' or 'fork'")
    assert _refused(tmp_path, kv_cache_memory_bytes=0).startswith(
        "kv_cache_memory_bytes: Input should be greater than or equal to 1")
    for flag in ("--num-gpu-blocks-override", "--kv-cache-memory-bytes"):
        srv = _server(tmp_path, kv_cache_memory_bytes=GIB, extra_args=[flag, "100"])
        with pytest.raises(UserError) as e:
            srv.argv(srv.profile, "vllm")
        assert e.value.one_line() == (f"extra_args: {flag} would resize the KV cache that "
                                      "kv_cache_memory_bytes sets (fix: drop it)")
    free = _server(tmp_path, extra_args=["--num-gpu-blocks-override", "100"])
    assert "--num-gpu-blocks-override" in free.argv(free.profile, "vllm")  # not ours to refuse


# -- the phase lines of a recorded start --------------------------------------------------------


def test_marks_of_round_4s_warm_start() -> None:
    """The H200's warm start of the cut (round 4): its telemetry's first sample at 20:12:09.36,
    ready 72.83 s later (``phase_s.startup``); the stamps are the server's own."""
    text = (DATA / "startup-0.26.0-h200-cut-warm.log").read_text()
    spawn = dt.datetime(2026, 12, 4, 20, 12, 9, 362000).timestamp()
    marks = startup_log.log_marks(text, spawn, 72.83)
    assert marks == {"first_line": 18.6, "resolved": 18.6, "engine_core": 43.6,
                     "model_load": 46.6, "weights_loaded": 50.6, "compiled": 56.6,
                     "kv_cache": 66.6, "init_done": 68.6, "api_start": 71.6}
    # where the 73 s go: 19 s to vLLM's first line, 25 s to the engine core's, 25 s of engine
    assert marks["engine_core"] - marks["first_line"] == pytest.approx(25.0)
    assert marks["init_done"] - marks["engine_core"] == pytest.approx(25.0)
    # a clock or time zone that is not crossbench's gives no marks rather than wrong ones
    assert startup_log.log_marks(text, spawn + 3600, 72.83) == {}
    assert startup_log.log_marks(text, spawn - 3600, 72.83) == {}
    assert startup_log.log_marks("no stamps here", spawn, 72.83) == {}
    assert startup_log.spawn_forced(text) is None


def test_marks_take_the_last_compile_line_and_cross_the_year() -> None:
    """A draft-model arm compiles two modules (backbone, draft_model): ``compiled`` is the
    second's line (recorded warm start, 2026-12-01)."""
    text = (DATA / "startup-0.26.0-h200-draft-cache-hit.log").read_text()
    spawn = dt.datetime(2026, 12, 1, 14, 25, 50).timestamp()
    marks = startup_log.log_marks(text, spawn, 70.0)
    assert (marks["first_line"], marks["compiled"], marks["api_start"]) == (21.0, 56.0, 68.0)
    new_year = dt.datetime(2026, 12, 31, 23, 59, 50).timestamp()
    line = "(APIServer pid=1) INFO 01-01 00:00:05 [api_server.py:677] Starting vLLM server on x"
    assert startup_log.log_marks(line, new_year, 30.0) == {"first_line": 15.0,
                                                          "api_start": 15.0}


def test_a_fork_vllm_overrode_is_reported() -> None:
    # vLLM 0.26.0 utils/system_utils.py:157-164, as the API server logs it
    line = ("(APIServer pid=9428) WARNING 12-04 20:12:28 [system_utils.py:157] We must use "
            "the `spawn` multiprocessing start method. Overriding VLLM_WORKER_MULTIPROC_METHOD "
            "to 'spawn'. See https://docs.vllm.ai/en/latest/usage/troubleshooting.html"
            "#python-multiprocessing for more information. Reasons: CUDA is initialized")
    assert startup_log.spawn_forced("x\n" + line + "\ny") == "CUDA is initialized"


# -- the start record, with the stand-in --------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cbcache"
    monkeypatch.setenv("CROSSBENCH_CACHE", str(root))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    return root


def test_the_start_record_keeps_both_settings_and_the_marks(tmp_path: Path,
                                                            cache: Path) -> None:
    binary = write_launcher(tmp_path / "vllm", *FAST)
    srv = _server(tmp_path, binary=str(binary), max_num_seqs=4, cudagraph_sizes="decode",
                  engine_process="fork", kv_cache_memory_bytes=3 * GIB)
    srv.start()
    try:
        srv.wait_ready(60)
        rec = srv.props()["startup_cut"]
        argv = srv.command()
    finally:
        srv.stop()
    assert (rec["engine_process"], rec["kv_cache_memory_bytes"]) == ("fork", 3 * GIB)
    assert rec["spawn_forced"] is None
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(3 * GIB)
    marks = rec["log_marks_s"]
    assert {"first_line", "engine_core", "init_done", "api_start"} <= set(marks)
    assert all(-1.0 <= s <= rec["ready_s"] + 1.0 for s in marks.values())
    assert marks["first_line"] <= marks["init_done"] <= marks["api_start"]
    plain = _server(tmp_path, binary=str(binary))
    plain.start()
    try:
        plain.wait_ready(60)
        rec = plain.props()["startup_cut"]
    finally:
        plain.stop()
    assert (rec["engine_process"], rec["kv_cache_memory_bytes"]) == ("spawn", None)


# -- confounds ----------------------------------------------------------------------------------


def _view(**over: Any) -> dict[str, Any]:
    v = {"engine.kind": "vllm", "engine.version": "0.26.0", "server.max_num_seqs": 16,
         "server.engine_process": "spawn", "load.temperature": 0.0}
    v.update({k.replace("__", "."): x for k, x in over.items()})
    return v


def _hits(a: dict[str, Any], b: dict[str, Any], rule: str) -> list[Any]:
    return [f for f in check_pair(a, b, labels=("spec", "baseline")) if f.rule == rule]


def test_a_pair_differing_in_the_engine_process_is_confounded() -> None:
    a, b = _view(server__engine_process="fork"), _view()
    hits = _hits(a, b, "vllm-engine-process")
    assert [f.severity for f in hits] == ["confounding"]
    assert hits[0].message.startswith("spec started vLLM's engine core by fork, baseline by "
                                      "spawn")
    assert hits[0].action == "give both arms the same engine_process"
    assert [(x.field, x.kind) for x in diff(a, b).differences] == [
        ("server.engine_process", Kind.CONFOUNDING)]
    assert not _hits(a, dict(a), "vllm-engine-process")
    assert not [f for f in check_trial(a) if f.rule == "vllm-engine-process"]  # pairs only


def test_a_pair_differing_in_the_kv_cache_size_is_confounded() -> None:
    fixed = _view(server__kv_cache_memory_bytes=110 * GIB)
    hits = _hits(fixed, _view(), "vllm-kv-cache-memory")
    assert [f.severity for f in hits] == ["confounding"]
    assert hits[0].message.startswith(f"spec's KV cache was set to {110 * GIB} bytes, "
                                      "baseline's profiled")
    other = _view(server__kv_cache_memory_bytes=100 * GIB)
    assert len(_hits(fixed, other, "vllm-kv-cache-memory")) == 1
    assert not _hits(fixed, dict(fixed), "vllm-kv-cache-memory")
    assert not _hits(_view(), _view(), "vllm-kv-cache-memory")
    assert diff(fixed, _view()).confounded


# -- the benchmark ------------------------------------------------------------------------------


def _bench() -> Any:
    return load_benchmark("vllm_startup_cut.py")


def test_the_variants_pass_the_settings_the_cut_does_not() -> None:
    v = _bench().VARIANTS
    assert v["fork"] == {"cudagraph_sizes": "decode", "engine_process": "fork"}
    assert v["kv"] == {"cudagraph_sizes": "decode", "kv_cache_memory_bytes": "auto"}
    assert v["next"] == {**v["fork"], **v["kv"]}
    assert v["trace"]["env"] == {"VLLM_LOGGING_LEVEL": "DEBUG", "PYTHONPROFILEIMPORTTIME": "1"}
    assert _bench().REFERENCE == {"cut": "default", "fork": "cut", "kv": "cut", "next": "cut"}


def test_the_kv_size_comes_from_a_profiled_start_of_the_same_graphs() -> None:
    bench = _bench()
    starts = [{"variant": "default", "cache_group": "default", "kv_cache_gib": 102.0,
               "kv_cache_memory_bytes": None, "round": 0, "intended": "cold"},
              {"variant": "kv", "cache_group": "decode", "kv_cache_gib": 1.0,
               "kv_cache_memory_bytes": GIB, "round": 0, "intended": "warm"},
              {"variant": "cut", "cache_group": "decode", "kv_cache_gib": 101.98,
               "kv_cache_memory_bytes": None, "round": 0, "intended": "cold",
               "start": "cold"}]
    assert bench.kv_bytes(starts, "decode") == (round(101.98 * GIB),
                                                "cut round 0 cold (101.98 GiB)")
    warm = {**starts[2], "kv_cache_gib": 102.48, "intended": "warm", "start": "warm"}
    assert bench.kv_bytes([*starts, warm], "decode") == (round(102.48 * GIB),
                                                         "cut round 0 warm (102.48 GiB)")
    assert bench.kv_bytes(starts[:2], "decode") is None


def test_each_variant_is_judged_against_its_reference() -> None:
    bench = _bench()

    def start(variant: str, kind: str, ready: float, rate: float) -> dict[str, Any]:
        return {"variant": variant, "start": kind, "ready_s": ready, "decode_tok_s": rate,
                "kv_cache_tokens": 746_240, "log_marks_s": {"engine_core": ready - 29}}

    starts = [start("default", "cold", 124, 140.0), start("cut", "cold", 125, 144.0),
              start("cut", "warm", 73, 145.0), start("fork", "warm", 50, 144.5),
              start("fork", "warm", 52, 145.5), start("kv", "warm", 39, 150.0),
              start("next", "warm", 35, 144.8)]
    s = bench.summarize(starts)
    v = s["decode_verdicts"]
    assert set(v) == {"cut", "fork", "kv", "next"}
    assert (v["fork"]["reference"], v["fork"]["verdict"]) == ("cut", "unchanged")
    assert v["kv"]["verdict"] == "changed"  # 5.5 tok/s above the cut, spread 1 tok/s
    assert v["kv"]["difference_tok_s"] == pytest.approx(5.5)
    assert s["decode_verdict"]["verdict"] == v["cut"]["verdict"]  # the first cut's, as before
    assert s["warm_targets"] == {"cut": {"warm_ready_max_s": 73, "met": False},
                                 "fork": {"warm_ready_max_s": 52, "met": False},
                                 "kv": {"warm_ready_max_s": 39, "met": True},
                                 "next": {"warm_ready_max_s": 35, "met": True}}
    assert s["marks"]["fork/warm"]["engine_core"]["mean"] == pytest.approx(22.0)
    text = bench.render(s, False, starts)
    assert "decode rate changed: kv - cut = +5.50 tok/s" in text
    assert "warm start of next: at most 35.0 s to ready, target 40 s: met" in text


def test_benchmark_new_variants_on_the_standin(tmp_path: Path, cache: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    out, shared = tmp_path / "out", tmp_path / "cc"
    common = ["--standin", "--concurrency", "2", "--requests", "2", "--max-tokens", "8",
              "--out", str(out), "--cache", str(shared)]
    assert bench.main([*common, "--variants", "kv"]) == 2  # nothing profiled to copy yet
    assert "--variants kv: no profiled start of cudagraph_sizes decode" in \
        capsys.readouterr().err
    assert bench.main([*common, "--variants", "cut,fork,kv", "--round", "0"]) == 0
    capsys.readouterr()
    rec = json.loads((out / "startup_cut.json").read_text())
    got = {(s["variant"], s["intended"]): s for s in rec["starts"]}
    # one compile cache per round for the graph sizes: the later variants start warm only
    assert set(got) == {("cut", "cold"), ("cut", "warm"), ("fork", "warm"), ("kv", "warm")}
    assert {s["start"] for k, s in got.items() if k != ("cut", "cold")} == {"warm"}
    assert (shared / "decode" / "round0").is_dir() and not (out / "cache").exists()
    assert got["fork", "warm"]["engine_process"] == "fork"
    kv = got["kv", "warm"]
    assert kv["kv_cache_memory_bytes"] == round(1.25 * GIB)  # the stand-in logs 1.25 GiB
    assert kv["kv_source"] == "cut round 0 warm (1.25 GiB)"
    assert all(s["log_marks_s"].get("api_start") is not None for s in rec["starts"])
    assert set(rec["summary"]["decode_verdicts"]) == {"fork", "kv"}  # no default: no cut's
    assert bench.main([*common, "--variants", "cut,nope"]) == 2
    assert capsys.readouterr().err.startswith("vllm_startup_cut: --variants 'cut,nope'")


def test_the_round_measures_the_matrix_cut_cell() -> None:
    """ROUND=startup-next writes the vllm-cut engine's server settings of
    matrices/h200-methods.yaml (the cell round 4 started in 72.8 s warm) as the benchmark's
    cell, and keeps the compile caches out of the run directory that comes back."""
    study = load_benchmark("study/study.py", "study_for_next")
    r = study.get_round(study.load_rounds(), "startup-next")
    first, trace = (s.command for s in r.steps)
    words = shlex.split(first[:first.index(">$dir/cell.yaml")])
    assert words[:2] == ["printf", "%s\\n"]
    cell = yaml.safe_load("\n".join(w for w in words[2:] if not w.startswith("model:")))
    matrix = yaml.safe_load((Path(__file__).resolve().parents[1] / "matrices/h200-methods.yaml").read_text())
    server = dict(matrix["engines"]["vllm-cut"]["server"])
    assert server.pop("cudagraph_sizes") == "decode"  # the benchmark's variants set it
    assert cell.pop("ready_timeout_s") == 300 < server.pop("ready_timeout_s")  # a hang: 5 min
    assert cell == server
    for cmd in (first, trace):
        argv = shlex.split(cmd[cmd.index("python3 benchmarks/vllm_startup_cut.py"):])
        assert argv[argv.index("--out") + 1] == "$dir/startup-next"
        assert not argv[argv.index("--cache") + 1].startswith("$dir")
        assert argv[argv.index("--concurrency") + 1] == "16"
    assert "--variants cut,fork,kv,next" in first and "--variants trace" in trace


def _landed(tmp_path: Path, name: str) -> tuple[Path, list[dict[str, Any]]]:
    """A landed start-up round's records (examples/h100-methods/NAME/NAME.tgz), unpacked."""
    import tarfile

    repo = Path(__file__).resolve().parents[1]
    with tarfile.open(repo / f"examples/h100-methods/{name}/{name}.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = tmp_path / name
    return out, [json.loads(p.read_text()) for p in sorted((out / "starts").glob("*.json"))]


def _section(start: str, end: str) -> str:
    """The part of docs/vllm.md from the heading ``start`` to ``end``."""
    doc = (Path(__file__).resolve().parents[1] / "docs/vllm.md").read_text()
    i = doc.index(start)
    return doc[i:doc.index(end, i)]


def _rows_are_the_records(section: str, starts: list[dict[str, Any]], s: dict[str, Any],
                          variants: tuple[str, ...]) -> None:
    """Each variant's row states its warm starts, its decode mean and range over its starts
    and its warm engine init; the text states each decode verdict's difference and spread."""
    for variant in variants:
        warm = sorted(x["ready_s"] for x in starts
                      if x["variant"] == variant and x["start"] == "warm")
        row = next(line for line in section.splitlines()
                   if line.startswith(f"| `{variant}`"))
        assert all(f"{r:.1f}" in row for r in warm), (variant, warm, row)
        d = s["decode"][variant]
        assert f"{d['mean']:.2f} ({d['n']}: {d['min']:.2f}-{d['max']:.2f})" in row, row
        assert f"{s['phases'][f'{variant}/warm']['engine_init_s']['mean']:.1f}" in row
    flat = " ".join(section.split())
    for variant, v in s["decode_verdicts"].items():
        said = (f"{variant} {v['difference_tok_s']:.2f} tok/s against a spread of "
                f"{v['spread_tok_s']:.2f}", f"{variant} {v['difference_tok_s']:.2f} against "
                f"{v['spread_tok_s']:.2f}", f"{variant} - cut = {v['difference_tok_s']:+.1f} "
                f"tok/s against a start-to-start spread of {v['spread_tok_s']:.1f}")
        assert any(x in flat for x in said), variant


def _logs_are_the_records(out: Path, starts: list[dict[str, Any]]) -> None:
    """Each real server log, re-parsed, gives its start's recorded engine init, compile time
    and KV cache size, and no forked start was forced back to spawn."""
    for x in starts:
        log = out / f"{x['variant']}-{x['round']}-{x['intended']}.log"
        facts = startup_log.parse(log.read_text(errors="replace"))
        assert (facts.engine_init_s, facts.torch_compile_s, facts.kv_cache_tokens) == \
            (x["engine_init_s"], x["torch_compile_s"], x["kv_cache_tokens"]), log.name
        if x["engine_process"] == "fork":
            assert startup_log.spawn_forced(log.read_text(errors="replace")) is None


def test_the_h100_round_met_the_target_and_the_docs_say_what_its_records_do(
        tmp_path: Path) -> None:
    """ROUND=startup-next on an H100 (2026-12-06, examples/h100-methods/startup-next): the
    records re-summarized give the figures docs/vllm.md states (warm starts per variant, the
    decode verdicts against the start-to-start spread, the 40 s target met by fork and next
    only), and each real server log re-parsed gives the start's recorded engine init, compile
    time, KV cache size and, for the forked starts, no spawn vLLM forced."""
    out, starts = _landed(tmp_path, "startup-next")
    assert len(starts) == 11 and all(s["n_ok"] == 48 and not s["n_error"] for s in starts)
    s = _bench().summarize(starts)
    assert {v: t["met"] for v, t in s["warm_targets"].items()} == \
        {"cut": False, "fork": True, "kv": False, "next": True}
    assert {v: d["verdict"] for v, d in s["decode_verdicts"].items()} == \
        {"fork": "unchanged", "kv": "unchanged", "next": "unchanged"}  # no default started
    section = _section("### The next cut, measured", "\n### The fork with a drafter")
    _rows_are_the_records(section, starts, s, ("cut", "fork", "kv", "next"))
    _logs_are_the_records(out, starts)


def test_the_fork_held_with_eagle3_and_the_docs_say_what_its_records_do(
        tmp_path: Path) -> None:
    """ROUND=startup-spec on an H100 (2026-12-07, examples/h100-methods/startup-spec, cut
    short after 5 of 6 starts): every start served all its requests with the EAGLE-3 head
    loaded, the fork's decode rate is unchanged by the script's rule, its worst warm start
    misses the 40 s target (the docs say one of two met it), and docs/vllm.md's rows and
    verdict are the records'."""
    out, starts = _landed(tmp_path, "startup-spec")
    assert len(starts) == 5 and all(s["n_ok"] == 48 and not s["n_error"] for s in starts)
    s = _bench().summarize(starts)
    assert {v: t["met"] for v, t in s["warm_targets"].items()} == {"cut": False, "fork": False}
    assert {v: d["verdict"] for v, d in s["decode_verdicts"].items()} == {"fork": "unchanged"}
    fork_warm = sorted(x["ready_s"] for x in starts
                       if x["variant"] == "fork" and x["start"] == "warm")
    assert fork_warm[0] <= 40 < fork_warm[-1]  # "met by one warm fork start, missed by the other"
    section = _section("### The fork with a drafter, measured", "\n## Methods")
    _rows_are_the_records(section, starts, s, ("cut", "fork"))
    for variant in ("cut", "fork"):
        (cold,) = [x["ready_s"] for x in starts
                   if x["variant"] == variant and x["start"] == "cold"]
        row = next(line for line in section.splitlines() if line.startswith(f"| `{variant}`"))
        assert f"| {cold:.1f} |" in row, row
    _logs_are_the_records(out, starts)


def test_the_spec_round_measures_the_matrix_eagle3_arm_on_the_cut_engine(
        tmp_path: Path) -> None:
    """ROUND=startup-spec writes, by its own shell line, the vllm-cut engine's settings with the
    study's EAGLE-3 arm at alpha 0.9 and n = 4 (the cell the fork must not change), a config
    crossbench's vLLM adapter accepts, and compares only cut and fork."""
    import subprocess

    study = load_benchmark("study/study.py", "study_for_spec")
    r = study.get_round(study.load_rounds(), "startup-spec")
    (step,) = r.steps
    cmd = step.command
    printf = cmd[:cmd.index(" >$dir/cell-spec.yaml")]
    for role in ("target", "eagle3"):
        printf = printf.replace(
            f"$(python3 -m crossbench fixtures path {role} --shape qwen3-8b --format hf)",
            f"/m/{role}")
    assert "$(" not in printf
    cell = yaml.safe_load(subprocess.run(["bash", "-c", printf], capture_output=True,
                                         text=True, check=True).stdout)
    root = Path(__file__).resolve().parents[1]
    matrix = yaml.safe_load((root / "matrices/h200-methods.yaml").read_text())
    server = dict(matrix["engines"]["vllm-cut"]["server"])
    assert server.pop("cudagraph_sizes") == "decode"  # the benchmark's variants set it
    assert cell.pop("ready_timeout_s") == 300 < server.pop("ready_timeout_s")
    spec = cell.pop("spec")
    assert cell == {**server, "model": "/m/target"}
    (arm,) = [a for a in matrix["arms"] if a.get("name") == "eagle3-a0.9" and
              a.get("engines") == ["vllm"]]
    assert (spec["type"], spec["draft_model"]) == (arm["method"], "/m/eagle3")
    assert spec["n"] == 4 and 4 in [int(x) for x in str(arm["n"]).split(",")]
    assert spec["synth_rates"] == pytest.approx([arm["synth_alpha"] ** k for k in range(1, 5)],
                                                abs=1e-4)
    srv = _server(tmp_path, **{k: v for k, v in cell.items() if k != "version"},
                  spec=spec, engine_process="fork", cudagraph_sizes="decode")
    argv = srv.argv(srv.profile, "vllm")
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["method"] == "eagle3" and config["num_speculative_tokens"] == 4
    assert srv.base_environment()["VLLM_WORKER_MULTIPROC_METHOD"] == "fork"
    args = shlex.split(cmd[cmd.index("python3 benchmarks/vllm_startup_cut.py"):])
    assert args[args.index("--variants") + 1] == "cut,fork"
    assert args[args.index("--out") + 1] == "$dir/startup-spec"  # land packs startup-spec/
    assert not args[args.index("--cache") + 1].startswith("$dir")
    assert (r.vllm, r.drafters, r.build) == (True, True, False)
