"""Imports say what the data says and no more (issue 35 items 2, 3, 4, 5, 7 and 11).

The vLLM results are built here in the shape a published MTP study had: `vllm bench serve
--save-result --save-detailed` JSON of a chat run (``backend: openai-chat``), a baseline and
an MTP arm, 5 prompts sent 4 times each, at concurrency 1, 4 and 8, with per-request
``ttfts``/``itls``/``latencies`` but no ``start_times`` (vLLM before 0.10 did not write them),
and the study's own ``duration`` and ``output_throughput``. Requests run in ``c`` lanes, so
the true wall window is about a ``c``-th of the requests' summed latencies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from standins import study as synthetic

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.stability import WarningKind
from crossbench.cli.main import cli
from crossbench.report.datapoint import datapoint
from crossbench.report.study import load_study

OPTS = StatsOptions(resamples=1000, min_samples=4)
PROMPTS, REPEATS, OUT = 5, 4, 64
RAW = Path(__file__).parent / "data" / "import" / "llama_server_raw"
PATTERN = "{model}_{arm}_t{trial}_p{prompt}.json"


def vllm_result(label: str, tpot_s: float, concurrency: int, trial: int, *,
                meta: dict[str, str] | None = None, spec: bool = False,
                starts: bool = False, aggregates: bool = True,
                detailed: bool = True) -> dict[str, Any]:
    """One result of the study above; ``starts`` adds start_times, ``aggregates`` keeps the
    file's own duration and output_throughput, ``detailed`` the per-request lists."""
    n = PROMPTS * REPEATS
    lanes = [0.0] * concurrency
    ttfts, itls, lats, start = [], [], [], []
    for i in range(n):
        ttft = 0.030 + 0.001 * (i % PROMPTS) + 0.0005 * trial
        gaps = [tpot_s * (1 + 0.01 * (i % PROMPTS))] * (OUT - 1)
        lane = i % concurrency
        start.append(100.0 + lanes[lane])
        lats.append(ttft + sum(gaps))
        lanes[lane] += lats[-1]
        ttfts.append(ttft)
        itls.append(gaps)
    duration = max(lanes)
    res: dict[str, Any] = {
        "date": f"20261201-10000{trial}", "endpoint_type": "openai-chat",
        "backend": "openai-chat", "label": label, "model_id": "Qwen/Qwen3-8B",
        "tokenizer_id": "Qwen/Qwen3-8B", "num_prompts": n, **(meta or {}),
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency,
        "completed": n, "failed": 0, "total_input_tokens": 30 * n,
        "total_output_tokens": OUT * n, "latencies": lats,
        "mean_tpot_ms": tpot_s * 1000 * 1.02,
    }
    if aggregates:
        res.update(duration=duration, output_throughput=OUT * n / duration)
    if detailed:
        res.update(input_lens=[30] * n, output_lens=[OUT] * n, ttfts=ttfts, itls=itls,
                   generated_texts=[f"answer {i % PROMPTS}" for i in range(n)],
                   errors=[""] * n)
    if starts:
        res["start_times"] = start
    if spec:
        res.update(spec_decode_num_drafts=400, spec_decode_draft_tokens=1200,
                   spec_decode_accepted_tokens=700,
                   spec_decode_per_position_acceptance_rates=[0.8, 0.55, 0.4])
    return res


def write(path: Path, results: list[dict[str, Any]]) -> Path:
    """``--append-result`` lines: one result per trial."""
    path.write_text("".join(json.dumps(r) + "\n" for r in results))
    return path


def study(tmp_path: Path, concurrency: int = 1, trials: int = 1,
          base_meta: dict[str, str] | None = None, mtp_meta: dict[str, str] | None = None,
          **kw: Any) -> list[Path]:
    """The baseline and MTP files of one concurrency."""
    base = write(tmp_path / f"base-c{concurrency}.json",
                 [vllm_result("baseline", 0.010, concurrency, t, meta=base_meta, **kw)
                  for t in range(trials)])
    mtp = write(tmp_path / f"mtp-c{concurrency}.json",
                [vllm_result("mtp", 0.007, concurrency, t, spec=True,
                             meta={"method": "mtp", "n": "3", **(mtp_meta or {})}, **kw)
                 for t in range(trials)])
    return [base, mtp]


def run_import(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["import", *[str(a) for a in args]])


def the_pair(out: Path) -> dict[str, Any]:
    (pair,) = analyze(out, OPTS)["pairs"]
    return pair


def rules_of(pair: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in pair["confounds"]["findings"]]


# -- item 3: the engine is the server, not the client protocol ---------------------------------


def test_a_chat_run_without_an_engine_is_refused_in_one_line(tmp_path: Path) -> None:
    r = run_import("vllm-bench", *study(tmp_path), "--out", tmp_path / "o")
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        "crossbench: error: base-c1.json does not say which server ran it (backend "
        "'openai-chat' is the client's protocol, not the engine) (fix: pass --engine vllm (or "
        "sglang, llama-server: the server the study ran), or run vllm bench serve with "
        "--metadata engine=vllm)"]
    assert not (tmp_path / "o").exists()


def test_the_engine_comes_from_the_option_or_the_metadata(tmp_path: Path) -> None:
    r = run_import("vllm-bench", *study(tmp_path), "--engine", "vllm", "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    pair = the_pair(tmp_path / "a")
    assert pair["engine"] == "vllm"
    # vLLM's own rule now applies: MTP with prefix caching left at vLLM's default
    assert "vllm-prefix-caching-mtp" in rules_of(pair)
    assert pair["verdict"] == "confounded"
    (tmp_path / "m").mkdir()
    files = study(tmp_path / "m", base_meta={"engine": "vllm"}, mtp_meta={"engine": "vllm"})
    r = run_import("vllm-bench", *files, "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    assert the_pair(tmp_path / "b")["engine"] == "vllm"
    r = run_import("vllm-bench", *files, "--engine", "tgi", "--out", tmp_path / "c")
    assert r.exit_code == 2 and "--engine 'tgi' is not an engine crossbench knows" in r.stderr


# -- item 2: settings per arm reach the confound rules ----------------------------------------


def test_serve_flags_in_metadata_that_differ_confound_the_pair(tmp_path: Path) -> None:
    files = study(tmp_path, base_meta={"gpu_memory_utilization": "0.9", "max_num_seqs": "8",
                                       "enable_prefix_caching": "false"},
                  mtp_meta={"gpu_memory_utilization": "0.8", "max_num_seqs": "2",
                            "enable_prefix_caching": "false"})
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    pair = the_pair(tmp_path / "o")
    assert "serve-memory-or-seqs-differ" in rules_of(pair)
    assert "vllm-prefix-caching-mtp" not in rules_of(pair)  # declared off on both arms
    assert pair["verdict"] == "confounded"
    assert {"server.gpu_memory_utilization", "server.max_num_seqs"} <= set(
        pair["confounds"]["confounding_fields"])


def test_declared_settings_confound_a_differing_pair_and_clear_an_aligned_one(
        tmp_path: Path) -> None:
    files = study(tmp_path)
    common = ("--arm-setting", "*:enable_prefix_caching=false",
              "--arm-setting", "*:gpu_memory_utilization=0.9")
    r = run_import("vllm-bench", *files, "--engine", "vllm", *common,
                   "--arm-setting", "baseline:max_num_seqs=8",
                   "--arm-setting", "mtp:max_num_seqs=2", "--out", tmp_path / "differ")
    assert r.exit_code == 0, r.output
    differ = the_pair(tmp_path / "differ")
    assert rules_of(differ) == ["serve-memory-or-seqs-differ"]
    assert differ["verdict"] == "confounded"
    r = run_import("vllm-bench", *files, "--engine", "vllm", *common,
                   "--arm-setting", "*:max_num_seqs=8", "--out", tmp_path / "aligned")
    assert r.exit_code == 0, r.output
    aligned = the_pair(tmp_path / "aligned")
    assert aligned["confounds"]["confounded"] is False, aligned["confounds"]
    assert rules_of(aligned) == []
    assert aligned["verdict"] == "faster"


def test_settings_from_a_yaml_file_beside_the_data(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("'*': {enable_prefix_caching: false, max_num_seqs: 8}\n"
                        "mtp: {gpu_memory_utilization: 0.8}\n"
                        "baseline: {gpu_memory_utilization: 0.9}\n")
    r = run_import("vllm-bench", *study(tmp_path), "--engine", "vllm", "--settings", settings,
                   "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert rules_of(the_pair(tmp_path / "o")) == ["serve-memory-or-seqs-differ"]


@pytest.mark.parametrize(("item", "message"), [
    ("mtp-max_num_seqs=2", "--arm-setting 'mtp-max_num_seqs=2' is not ARM:KEY=VALUE"),
    ("mtp:spec.n=4", "--arm-setting 'mtp:spec.n=4': 'spec.n' is the arm's method or n"),
    ("mtp:max_num_seqs=[1, 2]", "--arm-setting 'mtp:max_num_seqs=[1, 2]': value '[1, 2]' is "
     "not a single setting"),
    ("eagle:max_num_seqs=2", "--arm-setting names arm 'eagle', which the import has not"),
])
def test_a_bad_arm_setting_is_one_line(tmp_path: Path, item: str, message: str) -> None:
    r = run_import("vllm-bench", *study(tmp_path), "--engine", "vllm", "--arm-setting", item,
                   "--out", tmp_path / "o")
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"crossbench: error: {message}"), line


# -- item 4: never invent a figure --------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 4, 8])
def test_concurrent_results_without_start_times_keep_the_files_throughput(
        tmp_path: Path, concurrency: int) -> None:
    files = study(tmp_path, concurrency=concurrency, trials=2)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert "wall throughput imported with the file's own total_output_tokens / duration" \
        in r.stderr
    result = analyze(tmp_path / "o", OPTS)
    for path, cell in zip(files, sorted(result["cells"], key=lambda c: c["method"] != "none"),
                          strict=True):
        own = [json.loads(x) for x in path.read_text().splitlines()]
        want = sum(x["total_output_tokens"] for x in own) / sum(x["duration"] for x in own)
        assert cell["throughput"]["wall_output_tok_s"] == pytest.approx(want)


def test_concurrent_results_without_start_times_or_aggregates_print_no_throughput(
        tmp_path: Path) -> None:
    files = study(tmp_path, concurrency=4, aggregates=False)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert ("no per-request start_times at concurrency 4 and no duration or output_throughput:"
            " imported with no wall throughput") in r.stderr
    result = analyze(tmp_path / "o", OPTS)
    assert [c["throughput"]["wall_output_tok_s"] for c in result["cells"]] == [None, None]
    summary = json.loads(next((tmp_path / "o").glob("cells/*/summary.json")).read_text())
    assert summary["throughput"]["wall_output_tok_s"] is None


def test_start_times_still_measure_the_window(tmp_path: Path) -> None:
    files = study(tmp_path, concurrency=4, starts=True)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    for c in analyze(tmp_path / "o", OPTS)["cells"]:
        assert "from_source_aggregates" not in c
        assert c["throughput"]["wall_output_tok_s"] > 0


def test_aggregate_only_results_print_the_files_own_throughput(tmp_path: Path) -> None:
    files = study(tmp_path, concurrency=4, detailed=False)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["analyze", str(tmp_path / "o"), "--resamples", "1000"])
    assert r.exit_code == 0, r.output
    own = json.loads(files[0].read_text().splitlines()[0])
    table = (tmp_path / "o" / "analysis" / "cells.md").read_text()
    assert f"{own['output_throughput']:.2f}" in table
    assert "| 0.00 |" not in table


def test_an_imported_speculative_cell_without_counters_is_no_integrity_failure(
        tmp_path: Path) -> None:
    base, mtp = study(tmp_path)
    plain = [{k: v for k, v in json.loads(x).items() if not k.startswith("spec_decode_")}
             for x in mtp.read_text().splitlines()]  # an older vLLM: no spec_decode_* fields
    write(mtp, plain)
    r = run_import("vllm-bench", base, mtp, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    result = analyze(tmp_path / "o", OPTS)
    (pair,) = result["pairs"]
    assert pair["method"] == "mtp"
    kinds = [w["kind"] for w in result["stability"]] + [w["kind"] for w in pair["warnings"]]
    assert WarningKind.INTEGRITY not in kinds
    assert not any("nothing was drafted" in w["message"] for w in result["stability"])


# -- item 5: server starts and prompt identity -------------------------------------------------


def test_trials_from_one_start_carry_the_one_start_caveat(tmp_path: Path) -> None:
    files = study(tmp_path, trials=3)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "fresh")
    assert r.exit_code == 0, r.output
    assert WarningKind.SINGLE_START not in [w["kind"] for w in
                                            the_pair(tmp_path / "fresh")["warnings"]]
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--trials-per-start", "3",
                   "--out", tmp_path / "one")
    assert r.exit_code == 0, r.output
    pair = the_pair(tmp_path / "one")
    assert WarningKind.SINGLE_START in [w["kind"] for w in pair["warnings"]]
    assert pair["speedup"]["n_server_starts"] == 1


def test_a_start_field_in_the_metadata_names_the_start(tmp_path: Path) -> None:
    base = write(tmp_path / "b.json", [vllm_result("baseline", 0.01, 1, t,
                                                   meta={"server_start": "0"})
                                       for t in range(2)])
    mtp = write(tmp_path / "m.json", [vllm_result("mtp", 0.007, 1, t, spec=True, meta={
        "method": "mtp", "server_start": "0"}) for t in range(2)])
    r = run_import("vllm-bench", base, mtp, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert the_pair(tmp_path / "o")["speedup"]["n_server_starts"] == 1


def test_prompts_repeated_count_once(tmp_path: Path) -> None:
    files = study(tmp_path)
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--out", tmp_path / "by-index")
    assert r.exit_code == 0, r.output
    assert the_pair(tmp_path / "by-index")["speedup"]["n_prompts"] == PROMPTS * REPEATS
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{k}", "category": "chat",
                                           "prompt": f"question {k}"}) + "\n"
                               for k in range(PROMPTS)))
    r = run_import("vllm-bench", *files, "--engine", "vllm", "--prompts", prompts,
                   "--out", tmp_path / "by-prompt")
    assert r.exit_code == 0, r.output
    sp = the_pair(tmp_path / "by-prompt")["speedup"]
    assert sp["n_prompts"] == PROMPTS and sp["n_samples"] == PROMPTS * REPEATS


def test_a_start_in_llama_server_file_names_names_the_start(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in RAW.glob("*.json"):  # tiny_ARM_tT_pP.json -> tiny_ARM_tT_s0_pP.json
        (raw / f.name.replace("_p", "_s0_p")).write_bytes(f.read_bytes())
    r = run_import("llama-server", raw, "--pattern", "{model}_{arm}_t{trial}_s{start}_p{prompt}"
                   ".json", "--baseline-arm", "baseline", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    pairs = analyze(tmp_path / "o", OPTS)["pairs"]
    assert [p["speedup"]["n_server_starts"] for p in pairs] == [1, 1]
    assert all(WarningKind.SINGLE_START in [w["kind"] for w in p["warnings"]] for p in pairs)


# -- item 7: wrong files, several baselines and methods ----------------------------------------


def _copy_raw(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in RAW.glob("*.json"):
        (raw / f.name).write_bytes(f.read_bytes())
    return raw


def test_a_harness_result_file_among_bodies_is_refused_and_listed(tmp_path: Path) -> None:
    raw = _copy_raw(tmp_path)
    (raw / "tiny_baseline_t0_psummary.json").write_text(json.dumps(
        {"model": "tiny", "arm": "baseline", "mean_tok_s": 41.2, "runs": 6}))
    r = run_import("llama-server", raw, "--pattern", PATTERN, "--baseline-arm", "baseline",
                   "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    assert ("crossbench: not imported: tiny_baseline_t0_psummary.json: not a llama-server "
            "response body (no content, choices, timings or error; its keys: arm, mean_tok_s, "
            "model, runs): another tool's file? Move it out of the folder or narrow --pattern"
            ) in r.stderr.splitlines()
    result = analyze(tmp_path / "o", OPTS)
    assert all(c["requests"].get("error", 0) == 0 for c in result["cells"])
    assert WarningKind.FAILED_REQUESTS not in [w["kind"] for w in result["stability"]]


def test_failed_requests_of_an_import_are_not_sent_to_matrix_resume(tmp_path: Path) -> None:
    base, mtp = study(tmp_path)
    res = json.loads(mtp.read_text())
    res["errors"][3] = "HTTP 500: engine overloaded"
    write(mtp, [res])
    r = run_import("vllm-bench", base, mtp, "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    (failed,) = [w for w in analyze(tmp_path / "o", OPTS)["stability"]
                 if w["kind"] == WarningKind.FAILED_REQUESTS]
    assert "matrix --resume" not in failed["action"]
    assert failed["action"].startswith("read the record errors (as vllm-bench recorded them)")


def test_several_baselines_and_methods_in_one_import(tmp_path: Path) -> None:
    r = run_import("llama-server", RAW, "--pattern", PATTERN, "--baseline-arm", "baseline",
                   "--arm-method", "draft-n2=none", "--arm-method", "draft-n4=draft-dflash",
                   "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    state = json.loads((tmp_path / "o" / "state.json").read_text())
    cells = {c["coords"]["arm"]: c for c in state["cells"]}
    base = cells["baseline"]["id"]
    assert cells["baseline"]["baseline"] is None
    # a rerun without speculation is paired against the baseline, as a null control
    assert cells["draft-n2"]["coords"]["method"] == "none"
    assert cells["draft-n2"]["baseline"] == base
    # the bodies name draft-n4's method (speculative.types): the data wins over the option
    assert cells["draft-n4"]["coords"]["method"] == "draft-simple"
    assert cells["draft-n4"]["baseline"] == base
    pairs = analyze(tmp_path / "o", OPTS)["pairs"]
    assert sorted(p["arm"] for p in pairs) == ["draft-n2", "draft-n4"]


def test_a_vllm_baseline_rerun_is_named_and_paired(tmp_path: Path) -> None:
    base, mtp = study(tmp_path)
    rerun = write(tmp_path / "rerun.json", [vllm_result("rerun", 0.010, 1, 0)])
    r = run_import("vllm-bench", base, rerun, mtp, "--engine", "vllm", "--out", tmp_path / "a")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "crossbench: error: arms baseline, rerun all ran without speculation (fix: name the "
        "baseline with --baseline-arm baseline (the others are paired with it as reruns))"]
    r = run_import("vllm-bench", base, rerun, mtp, "--engine", "vllm", "--baseline-arm",
                   "baseline", "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    pairs = {p["arm"]: p for p in analyze(tmp_path / "b", OPTS)["pairs"]}
    assert set(pairs) == {"rerun", "mtp"}
    assert pairs["rerun"]["baseline_cell"] == pairs["mtp"]["baseline_cell"]


def test_declared_settings_and_starts_reach_a_llama_server_import(tmp_path: Path) -> None:
    r = run_import("llama-server", RAW, "--pattern", PATTERN, "--baseline-arm", "baseline",
                   "--n-from-arm", r"n(\d+)", "--arm-setting", "draft:cache_type_k=q8_0",
                   "--trials-per-start", "2", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    pairs = analyze(tmp_path / "o", OPTS)["pairs"]
    assert len(pairs) == 2
    for p in pairs:
        assert "server.cache_type_k" in p["confounds"]["confounding_fields"]
        assert p["verdict"] == "confounded"
        assert p["speedup"]["n_server_starts"] == 1
    r = run_import("llama-server", RAW, "--pattern", PATTERN, "--baseline-arm", "baseline",
                   "--arm-method", "baseline=eagle3", "--out", tmp_path / "x")
    assert r.exit_code == 2
    assert "--arm-method gives the baseline arm 'baseline' method 'eagle3'" in r.stderr


# -- item 11: datapoint of an import ----------------------------------------------------------


def test_the_datapoint_of_an_import_names_its_source_and_only_known_settings(
        tmp_path: Path) -> None:
    r = run_import("vllm-bench", *study(tmp_path), "--engine", "vllm", "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    text = datapoint(load_study(tmp_path / "o", OPTS))
    assert "streaming client, driven by" not in text
    assert "None" not in text
    assert ("# source: vllm-bench results (vllm bench serve --save-result) from base-c1.json, "
            "mtp-c1.json, measured by the study's own tools and read with `crossbench import "
            "vllm-bench`") in text
    workload = next(x for x in text.splitlines() if x.startswith("- **Workload**"))
    assert workload == ("- **Workload**: vllm-bench-20-prompts (20 prompts), 20 requests x 1 "
                        "trials, concurrency 1")


def test_the_datapoint_of_a_synthetic_study_says_so(tmp_path: Path) -> None:
    synthetic.study(tmp_path / "s", [("a", "x"), ("b", "y"), ("c", "x"), ("d", "y")],
                    [synthetic.Arm("base"), synthetic.Arm("fast", "draft-simple", 2)],
                    lambda arm, *_: 100.0 if arm.method == "none" else 150.0, trials=3)
    text = datapoint(load_study(tmp_path / "s", OPTS))
    assert "# source: synthetic records with known figures (no engine, no client)" in text
    assert "streaming client" not in text
