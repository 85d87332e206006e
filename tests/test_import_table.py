"""`crossbench import table`: a study's own per-request JSON, JSON Lines and CSV files.

The main study has the shape of a published vLLM MTP study: a baseline and an MTP arm at
concurrency 1, 4 and 8, three trials each, one JSON file per (arm, concurrency, trial) with
per-request TTFT, TPOT and output tokens and the trial's own duration and output_throughput.
Expected figures are computed from the files themselves, as the study computed its means.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from crossbench.analysis.analyze import cell_figures
from crossbench.analysis.rundir import load_run
from crossbench.cli.main import cli

ARMS = ("baseline", "mtp")
CONCURRENCY = (1, 4, 8)
TRIALS = 3
PROMPTS = 8
STUDY_MAPS = ["--map", "output_tokens=requests[].output_tokens",
              "--map", "ttft:ms=requests[].ttft_ms", "--map", "tpot:ms=requests[].tpot_ms",
              "--map", "input_tokens=requests[].input_tokens", "--map", "prompt=requests[].prompt"]
AGGREGATE_MAPS = ["--map", "wall:s=duration", "--map", "throughput=output_throughput"]


def _request(rng: random.Random, arm: str, c: int, prompt: int) -> dict[str, Any]:
    tokens = rng.randint(96, 256)
    tpot = round(rng.uniform(6.0, 9.0) * (0.6 if arm == "mtp" else 1.0) * (1 + c / 16), 4)
    ttft = round(rng.uniform(20.0, 60.0) * (1 + c / 8), 3)
    return {"prompt": f"q{prompt}", "input_tokens": rng.randint(40, 400),
            "output_tokens": tokens, "ttft_ms": ttft, "tpot_ms": tpot,
            "latency_s": round((ttft + tpot * (tokens - 1)) / 1000, 6)}


def write_study(folder: Path, seed: int = 7) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The study's files, as its harness wrote them: the trial's duration is the concurrent
    batch's wall time (about the sum of latencies / concurrency), and output_throughput its
    own total tokens / duration, rounded as it printed them."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for arm in ARMS:
        for c in CONCURRENCY:
            for t in range(TRIALS):
                reqs = [_request(rng, arm, c, p) for p in range(PROMPTS)]
                duration = round(sum(r["latency_s"] for r in reqs) / c * 1.07, 4)
                doc = {"config": {"arm": arm, "max_concurrency": c, "model": "Qwen3-8B"},
                       "duration": duration,
                       "output_throughput": round(sum(r["output_tokens"] for r in reqs)
                                                  / duration, 3),
                       "requests": reqs}
                (folder / f"{arm}_c{c}_t{t}.json").write_text(json.dumps(doc))
                out[(arm, c, t)] = doc
    return out


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["import", "table", *args], catch_exceptions=False)


def _study_cmd(src: Path, out: Path, *extra: str) -> Any:
    return invoke(*sorted(str(p) for p in src.glob("*.json")), "--engine", "vllm",
                  "--model", "Qwen3-8B", "--pattern", "{arm}_c{concurrency}_t{trial}.json",
                  "--baseline-arm", "baseline", "--method", "mtp", *STUDY_MAPS, *extra,
                  "--out", str(out))


def _cells(out: Path) -> dict[tuple[str, int], Any]:
    return {(c.coords["arm"], c.coords["concurrency"]): c for c in load_run(out).cells}


def test_json_study_reproduces_means_and_per_trial_throughput(tmp_path):
    study = write_study(tmp_path / "study")
    res = _study_cmd(tmp_path / "study", tmp_path / "imp", *AGGREGATE_MAPS)
    assert res.exit_code == 0, res.output
    assert "6 cells written" in res.output
    cells = _cells(tmp_path / "imp")
    assert set(cells) == {(a, c) for a in ARMS for c in CONCURRENCY}
    for (arm, c), cell in cells.items():
        docs = [study[(arm, c, t)] for t in range(TRIALS)]
        reqs = [r for d in docs for r in d["requests"]]
        figs = cell_figures(cell)
        # the study's per-request means, to the last digit it printed
        assert figs["latency_ms"]["tpot"]["mean"] == pytest.approx(
            sum(r["tpot_ms"] for r in reqs) / len(reqs), rel=1e-9)
        assert figs["latency_ms"]["ttft"]["mean"] == pytest.approx(
            sum(r["ttft_ms"] for r in reqs) / len(reqs), rel=1e-9)
        assert figs["requests"]["ok"] == TRIALS * PROMPTS
        # every trial's own aggregate, exactly as the file gives it
        agg = cell.imported["aggregate"]
        assert [p["output_tok_s"] for p in agg["per_trial"]] == [
            d["output_throughput"] for d in docs]
        assert [p["wall_s"] for p in agg["per_trial"]] == [d["duration"] for d in docs]
        # the cell's wall throughput is the trials' own, pooled over their durations: never
        # requests laid end to end (which would fall with concurrency)
        own = sum(d["output_throughput"] * d["duration"] for d in docs) / sum(
            d["duration"] for d in docs)
        assert figs["throughput"]["wall_output_tok_s"] == pytest.approx(own, rel=1e-12)
        assert cell.coords["method"] == ("none" if arm == "baseline" else "mtp")
        assert cell.config["engine"] == "vllm"
        if arm == "mtp":
            assert cell.baseline == cells[("baseline", c)].id
    # at c=8 the study's throughput is far above what back-to-back requests would give
    base8 = cells[("baseline", 8)]
    laid = sum(r["output_tokens"] for t in range(TRIALS)
               for r in study[("baseline", 8, t)]["requests"]) / sum(
        r["latency_s"] for t in range(TRIALS) for r in study[("baseline", 8, t)]["requests"])
    assert cell_figures(base8)["throughput"]["wall_output_tok_s"] > 5 * laid


def test_no_aggregates_and_no_start_times_print_no_throughput(tmp_path):
    write_study(tmp_path / "study")
    res = _study_cmd(tmp_path / "study", tmp_path / "imp")
    assert res.exit_code == 0, res.output
    assert ("note: mtp at concurrency 8: no wall throughput: the files give no per-trial "
            "wall time or throughput and no request start times (map wall, throughput or "
            "start); requests are never laid end to end for one") in res.output
    for cell in _cells(tmp_path / "imp").values():
        figs = cell_figures(cell)
        assert figs["throughput"]["wall_output_tok_s"] is None
        assert "throughput.wall_output_tok_s" in figs["not_from_source"]
        assert figs["latency_ms"]["tpot"]["mean"] is not None  # per-request figures stay


def test_wall_alone_divides_imported_tokens(tmp_path):
    study = write_study(tmp_path / "study")
    res = _study_cmd(tmp_path / "study", tmp_path / "imp", "--map", "wall:s=duration")
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "imp")[("mtp", 4)]
    docs = [study[("mtp", 4, t)] for t in range(TRIALS)]
    tokens = sum(r["output_tokens"] for d in docs for r in d["requests"])
    assert cell_figures(cell)["throughput"]["wall_output_tok_s"] == pytest.approx(
        tokens / sum(d["duration"] for d in docs))


def test_csv_variant(tmp_path):
    study = write_study(tmp_path / "study")
    path = tmp_path / "requests.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arm", "conc", "run", "prompt_id", "n_out", "ttft_s", "latency_s",
                    "duration_s"])
        for (arm, c, t), doc in study.items():
            for r in doc["requests"]:
                w.writerow([arm, c, t, r["prompt"], r["output_tokens"], r["ttft_ms"] / 1000,
                            r["latency_s"], doc["duration"]])
    res = invoke(str(path), "--engine", "vllm", "--model", "m", "--baseline-arm", "baseline",
                 "--map", "arm=arm", "--map", "concurrency=conc", "--map", "trial=run",
                 "--map", "prompt=prompt_id", "--map", "output_tokens=n_out",
                 "--map", "ttft:s=ttft_s", "--map", "elapsed:s=latency_s",
                 "--map", "wall:s=duration_s", "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    cells = _cells(tmp_path / "imp")
    assert len(cells) == 6
    for (arm, c), cell in cells.items():
        reqs = [r for t in range(TRIALS) for r in study[(arm, c, t)]["requests"]]
        tpot = [(r["latency_s"] * 1000 - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in reqs]
        figs = cell_figures(cell)
        assert figs["latency_ms"]["tpot"]["mean"] == pytest.approx(sum(tpot) / len(tpot),
                                                                   rel=1e-6)
        assert figs["latency_ms"]["ttft"]["mean"] == pytest.approx(
            sum(r["ttft_ms"] for r in reqs) / len(reqs), rel=1e-9)
        assert cell.trials() == [0, 1, 2]  # the run column, as written
        assert [p["wall_s"] for p in cell.imported["aggregate"]["per_trial"]] == [
            study[(arm, c, t)]["duration"] for t in range(TRIALS)]


def test_jsonl_rows_and_columnar_json(tmp_path):
    study = write_study(tmp_path / "study")
    lines = tmp_path / "rows.jsonl"
    with lines.open("w") as f:
        for (arm, c, t), doc in study.items():
            if c != 4:
                continue
            for r in doc["requests"]:
                f.write(json.dumps({"arm": arm, "c": c, "trial": t, "prompt": r["prompt"],
                                    "m": {"ttft_us": r["ttft_ms"] * 1000,
                                          "decode_ms": r["tpot_ms"] * (r["output_tokens"] - 1)},
                                    "n": r["output_tokens"],
                                    "trial_tok_s": doc["output_throughput"]}) + "\n")
    res = invoke(str(lines), "--engine", "vllm", "--model", "m", "--baseline-arm", "baseline",
                 "--map", "arm=arm", "--map", "concurrency=c", "--map", "trial=trial",
                 "--map", "prompt=prompt", "--map", "output_tokens=n",
                 "--map", "ttft:us=m.ttft_us", "--map", "decode:ms=m.decode_ms",
                 "--map", "throughput=trial_tok_s", "--out", str(tmp_path / "jl"))
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "jl")[("mtp", 4)]
    docs = [study[("mtp", 4, t)] for t in range(TRIALS)]
    reqs = [r for d in docs for r in d["requests"]]
    figs = cell_figures(cell)
    assert figs["latency_ms"]["tpot"]["mean"] == pytest.approx(
        sum(r["tpot_ms"] for r in reqs) / len(reqs), rel=1e-9)
    # throughput without wall times: the mean of the trials' own figures
    assert figs["throughput"]["wall_output_tok_s"] == pytest.approx(
        sum(d["output_throughput"] for d in docs) / TRIALS)
    # vLLM-style column lists, zipped by position; one file is one trial
    col = tmp_path / "cols"
    col.mkdir()
    for arm in ARMS:
        doc = study[(arm, 1, 0)]
        (col / f"{arm}.json").write_text(json.dumps({
            "ttfts": [r["ttft_ms"] / 1000 for r in doc["requests"]],
            "tpots": [r["tpot_ms"] for r in doc["requests"]],
            "output_lens": [r["output_tokens"] for r in doc["requests"]],
            "duration": doc["duration"]}))
    res = invoke(str(col / "baseline.json"), str(col / "mtp.json"), "--engine", "vllm",
                 "--model", "m", "--concurrency", "1", "--pattern", "{arm}.json",
                 "--baseline-arm", "baseline", "--map", "ttft:s=ttfts[]",
                 "--map", "tpot:ms=tpots[]", "--map", "output_tokens=output_lens[]",
                 "--map", "wall:s=duration", "--out", str(tmp_path / "cols-imp"))
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "cols-imp")[("mtp", 1)]
    reqs = study[("mtp", 1, 0)]["requests"]
    assert cell_figures(cell)["latency_ms"]["tpot"]["mean"] == pytest.approx(
        sum(r["tpot_ms"] for r in reqs) / len(reqs), rel=1e-9)
    assert [r["prompt_id"] for r in cell.records] == [f"r{i:05d}" for i in range(PROMPTS)]


@pytest.mark.parametrize(("maps", "message"), [
    (["--map", "ttft:ms=requests[].ttft"],
     "crossbench: error: --map 'ttft:ms=requests[].ttft': requests[].ttft is in none of the "
     "18 files (baseline_c1_t0.json: requests[] has no 'ttft' (it has: input_tokens, "
     "latency_s, output_tokens, prompt, tpot_ms, ttft_ms)) (fix: write the path to ttft as "
     "the files spell it)"),
    (["--map", "ttft:min=requests[].ttft_ms"],
     "crossbench: error: --map 'ttft:min=requests[].ttft_ms': unknown unit 'min' for ttft "
     "(fix: use one of s, ms, us, ns, e.g. --map ttft:ms=requests[].ttft_ms)"),
    (["--map", "ttft=requests[].ttft_ms"],
     "crossbench: error: --map 'ttft=requests[].ttft_ms': no unit for ttft (fix: declare "
     "it, e.g. --map ttft:ms=requests[].ttft_ms (units: s, ms, us, ns))"),
    ([],
     "crossbench: error: no ttft: the files' ttft is not mapped (fix: give --map "
     "ttft:ms=PATH)"),
    (["--map", "ttft:ms=" + ".".join(["a"] * 40)],
     "crossbench: error: --map 'ttft:ms=" + ".".join(["a"] * 40) + "': the path has 40 "
     "parts (fix: a table's path has at most 32 keys and [])"),
    (["--map", "ttft:ms=requests[].ttft_ms", "--map", "latency:s=requests[].latency_s"],
     "crossbench: error: --map 'latency:s=requests[].latency_s': unknown field 'latency' "
     "(fix: write --map FIELD[:UNIT]=PATH, e.g. --map ttft:ms=ttft_ms (fields: "
     "output_tokens, ttft, decode, tpot, elapsed, start, input_tokens, drafted, accepted, "
     "error, wall, throughput, arm, trial, prompt, category, concurrency, model, method, n, "
     "server_start))"),
])
def test_bad_maps_are_one_line_naming_field_and_fix(tmp_path, maps, message):
    write_study(tmp_path / "study")
    res = CliRunner().invoke(cli, ["import", "table",
                                   *sorted(str(p) for p in (tmp_path / "study").glob("*")),
                                   "--engine", "vllm", "--model", "m",
                                   "--pattern", "{arm}_c{concurrency}_t{trial}.json",
                                   "--baseline-arm", "baseline",
                                   "--map", "output_tokens=requests[].output_tokens",
                                   "--map", "tpot:ms=requests[].tpot_ms", *maps,
                                   "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2
    assert res.output.strip() == message
    assert not (tmp_path / "imp").exists()


def test_aggregate_that_varies_within_a_trial_names_the_fix(tmp_path):
    study = write_study(tmp_path / "study")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"arm": arm, "n": r["output_tokens"],
                                        "ttft": r["ttft_ms"], "tpot": r["tpot_ms"],
                                        "dur": doc["duration"]}) + "\n"
                            for (arm, c, t), doc in study.items() if c == 1
                            for r in doc["requests"]))
    res = CliRunner().invoke(cli, ["import", "table", str(rows), "--engine", "vllm",
                                   "--model", "m", "--concurrency", "1", "--baseline-arm",
                                   "baseline", "--map", "arm=arm", "--map", "output_tokens=n",
                                   "--map", "ttft:ms=ttft", "--map", "tpot:ms=tpot",
                                   "--map", "wall:s=dur", "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2
    assert res.output.startswith("crossbench: error: --map 'wall:s=dur' gives 3 values for "
                                 "trial 0 of arm baseline at concurrency 1")
    assert res.output.strip().endswith("(fix: map trial (--map trial=PATH or {trial} in "
                                       "--pattern) so that each trial has one wall)")


def test_bad_values_are_listed_not_imported(tmp_path):
    study = write_study(tmp_path / "study")
    doc = study[("mtp", 4, 1)]
    doc["requests"][2]["ttft_ms"] = -3.0
    doc["requests"][5]["tpot_ms"] = "fast"
    doc["requests"][6]["output_tokens"] = 12.5
    (tmp_path / "study" / "mtp_c4_t1.json").write_text(json.dumps(doc))
    res = _study_cmd(tmp_path / "study", tmp_path / "imp", *AGGREGATE_MAPS)
    assert res.exit_code == 0, res.output
    assert ("not imported: mtp_c4_t1.json request 2: requests[2].ttft_ms is -3: it cannot be "
            "negative") in res.output
    assert ("not imported: mtp_c4_t1.json request 5: requests[5].tpot_ms is 'fast' (a "
            "string), not a number") in res.output
    assert ("not imported: mtp_c4_t1.json request 6: requests[6].output_tokens is 12.5, not "
            "a whole number") in res.output
    cell = _cells(tmp_path / "imp")[("mtp", 4)]
    assert cell_figures(cell)["requests"]["ok"] == TRIALS * PROMPTS - 3


def _pairs(out: Path) -> dict[int, dict[str, Any]]:
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    return {p["concurrency"]: p for p in analyze(out, StatsOptions(resamples=200))["pairs"]}


def test_serve_flags_per_arm_reach_the_confound_rules(tmp_path):
    write_study(tmp_path / "study")
    common = ("--arm-setting", "*:enable_prefix_caching=false",
              "--arm-setting", "*:gpu_memory_utilization=0.9", *AGGREGATE_MAPS)
    res = _study_cmd(tmp_path / "study", tmp_path / "differ", *common,
                     "--arm-setting", "baseline:max_num_seqs=256",
                     "--arm-setting", "mtp:max_num_seqs=64")
    assert res.exit_code == 0, res.output
    differ = _pairs(tmp_path / "differ")
    assert sorted(differ) == list(CONCURRENCY)
    for p in differ.values():
        assert p["confounds"]["confounded"] is True, p["confounds"]
        assert p["verdict"] == "confounded"
    res = _study_cmd(tmp_path / "study", tmp_path / "aligned", *common,
                     "--arm-setting", "*:max_num_seqs=256")
    assert res.exit_code == 0, res.output
    for p in _pairs(tmp_path / "aligned").values():
        assert p["confounds"]["confounded"] is False, p["confounds"]


def test_trials_of_one_server_start(tmp_path):
    write_study(tmp_path / "study")
    res = _study_cmd(tmp_path / "study", tmp_path / "imp", "--trials-per-start", "3",
                     "--arm-method", "mtp=mtp")
    assert res.exit_code == 0, res.output
    for cell in _cells(tmp_path / "imp").values():
        assert {r["server_start"] for r in cell.records} == {0}
        assert cell.config["trials_per_start"] == 3
    # a start label in the file names says it per file instead
    src = tmp_path / "study"
    for p in src.glob("*.json"):
        p.rename(p.with_name(p.stem + "_s" + p.stem[-1] + ".json"))
    res = invoke(*sorted(str(p) for p in src.glob("*.json")), "--engine", "vllm",
                 "--model", "m", "--pattern", "{arm}_c{concurrency}_t{trial}_s{server_start}.json",
                 "--baseline-arm", "baseline", *STUDY_MAPS, "--out", str(tmp_path / "lab"))
    assert res.exit_code == 0, res.output
    cell = _cells(tmp_path / "lab")[("mtp", 4)]
    assert {(r["trial"], r["server_start"]) for r in cell.records} == {(0, 0), (1, 1), (2, 2)}
