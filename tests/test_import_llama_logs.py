"""`crossbench import llama-logs`: llama-server print_timings lines and
llama_perf_context_print / common_perf_print blocks, written here with the pinned llama.cpp's
own printf formats (b11312: tools/server/server-context.cpp print_timings, SLT_INF's prefix
in server-common.h, src/llama-context.cpp, common/sampling.cpp)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from crossbench.analysis.analyze import cell_figures
from crossbench.analysis.rundir import load_run
from crossbench.cli.main import cli
from crossbench.importers.llama_logs import parse_log


def c_fmt(fmt: str, *args: Any) -> str:
    """printf as C does it for these formats (%10.2f, %5d, %0.5f: Python's % is the same)."""
    return fmt % args


def server_request(slot: int, task: int, prompt_ms: float, prompt_n: int, eval_ms: float,
                   n_gen: int, draft: tuple[int, int] | None, prefix: str = "") -> list[str]:
    head = prefix + c_fmt("slot %12.*s: id %2d | task %d | ", 12, "print_timings", slot, task)
    lines = [
        head + c_fmt("prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f "
                     "tokens per second)", prompt_ms, prompt_n, prompt_ms / prompt_n,
                     1e3 / prompt_ms * prompt_n),
        head + c_fmt("       eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f "
                     "tokens per second)", eval_ms, n_gen, eval_ms / n_gen,
                     1e3 / eval_ms * n_gen),
        head + c_fmt("      total time = %10.2f ms / %5d tokens", prompt_ms + eval_ms,
                     prompt_n + n_gen),
        head + c_fmt("   graphs reused = %10d", n_gen - 1),
    ]
    if draft is not None:
        drafted, accepted = draft
        lines.append(head + c_fmt("draft acceptance = %0.5f (%5d accepted / %5d generated), "
                                  "mean len = %5.2f", accepted / drafted, accepted, drafted,
                                  1 + accepted / max(1, drafted // 4)))
    return lines


def perf_block(fn: str, prompt_ms: float, prompt_n: int, eval_ms: float, runs: int
               ) -> list[str]:
    return [
        c_fmt("%s:        load time = %10.2f ms", fn, 812.4),
        c_fmt("%s: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens "
              "per second)", fn, prompt_ms, prompt_n, prompt_ms / prompt_n,
              1e3 / prompt_ms * prompt_n),
        c_fmt("%s:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens "
              "per second)", fn, eval_ms, runs, eval_ms / runs, 1e3 / eval_ms * runs),
        c_fmt("%s:       total time = %10.2f ms / %5d tokens", fn, prompt_ms + eval_ms + 3.1,
              prompt_n + runs),
        c_fmt("%s:    graphs reused = %10d", fn, runs - 1),
    ]


HEADER = ["version: 11312 (build 11312, commit 0c1e57098)",
          "built with cc (GCC) 13.2.0 for x86_64-linux-gnu",
          "print_info: general.name          = Qwen3 8B",
          "srv    load_model: loading model 'target.gguf'"]


def write_server_logs(folder: Path, seed: int = 3) -> dict[tuple[str, int], list[dict]]:
    """A baseline and a draft arm, 2 trials of 6 requests each, one log per (arm, trial);
    trial 1 is written with timestamps and colour codes as `--log-prefix --log-timestamps`
    prints them."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    truth: dict[tuple[str, int], list[dict]] = {}
    for arm in ("base", "draft"):
        for trial in (0, 1):
            lines, reqs = list(HEADER), []
            for k in range(6):
                r = {"prompt_ms": round(rng.uniform(15, 40), 2), "prompt_n": rng.randint(20, 90),
                     "eval_ms": round(rng.uniform(500, 1500) * (0.6 if arm == "draft" else 1), 2),
                     "n_gen": rng.randint(64, 200),
                     "draft": (rng.randint(60, 100), 0) if arm == "draft" else None}
                if r["draft"]:
                    r["draft"] = (r["draft"][0], rng.randint(20, r["draft"][0]))
                reqs.append(r)
                prefix = c_fmt("\x1b[34m0.%02d.%03d.%03d\x1b[0m \x1b[32mI \x1b[0m", k, 5, 7) \
                    if trial == 1 else ""
                lines.append("srv  params_from_: Chat format: peg-native")
                lines += server_request(0, 10 * trial + k, r["prompt_ms"], r["prompt_n"],
                                        r["eval_ms"], r["n_gen"], r["draft"], prefix)
                lines.append(f"slot      release: id  0 | task {k} | stop processing")
            (folder / f"{arm}_t{trial}.log").write_text("\n".join(lines) + "\n")
            truth[(arm, trial)] = reqs
    return truth


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["import", "llama-logs", *args], catch_exceptions=False)


def test_server_timing_lines_reproduce_the_server_figures(tmp_path):
    truth = write_server_logs(tmp_path / "logs")
    res = invoke(*sorted(str(p) for p in (tmp_path / "logs").glob("*.log")),
                 "--pattern", "{arm}_t{trial}.log", "--baseline-arm", "base",
                 "--method", "draft-simple", "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    assert "note: the logs carry no clock: no wall throughput" in res.output
    cells = {c.coords["arm"]: c for c in load_run(tmp_path / "imp").cells}
    assert set(cells) == {"base", "draft"}
    for arm, cell in cells.items():
        reqs = truth[(arm, 0)] + truth[(arm, 1)]
        figs = cell_figures(cell)
        assert figs["requests"]["ok"] == 12
        assert figs["latency_ms"]["ttft"]["mean"] == pytest.approx(
            sum(r["prompt_ms"] for r in reqs) / 12, rel=1e-9)
        assert figs["latency_ms"]["tpot"]["mean"] == pytest.approx(
            sum(r["eval_ms"] / (r["n_gen"] - 1) for r in reqs) / 12, rel=1e-9)
        assert figs["throughput"]["wall_output_tok_s"] is None  # no clock in a log
        assert cell.coords["target"] == "Qwen3 8B"  # general.name
        assert cell.manifest["engine"]["build_number"] == 11312
        assert cell.manifest["engine"]["commit"] == "0c1e57098"
        assert cell.trials() == [0, 1]
    draft = cells["draft"]
    assert draft.coords["method"] == "draft-simple"
    assert draft.baseline == cells["base"].id
    reqs = truth[("draft", 0)] + truth[("draft", 1)]
    assert draft.acceptance.draft_acceptance_rate == pytest.approx(
        sum(r["draft"][1] for r in reqs) / sum(r["draft"][0] for r in reqs))


def test_perf_blocks_of_llama_completion(tmp_path):
    rng = random.Random(5)
    truth = []
    lines = ["print_info: general.name          = Llama 3.1 8B"]
    for _ in range(4):
        r = (round(rng.uniform(30, 90), 2), rng.randint(10, 60), round(rng.uniform(900, 2000), 2),
             rng.randint(100, 255))
        truth.append(r)
        lines += ["", "> the model's answer ...", ""]
        lines.append(c_fmt("%s:    sampling time = %10.2f ms / %5d runs   (%8.2f ms per token, "
                           "%8.2f tokens per second)", "common_perf_print", 5.43, r[3] + 1,
                           0.04, 25782.69))
        lines += perf_block("common_perf_print", *r)
    (tmp_path / "base_0.txt").write_text("\n".join(lines) + "\n")
    one = perf_block("llama_perf_context_print", 41.5, 17, 1210.9, 127)
    (tmp_path / "base_1.txt").write_text("\n".join(one) + "\n")
    res = invoke(str(tmp_path / "base_0.txt"), str(tmp_path / "base_1.txt"),
                 "--pattern", "{arm}_{trial}.txt", "--baseline-arm", "base",
                 "--out", str(tmp_path / "imp"), "--model", "llama-3.1-8b")
    assert res.exit_code == 0, res.output
    (cell,) = load_run(tmp_path / "imp").cells
    assert cell.coords["engine"] == "llama-cli"
    assert cell.coords["target"] == "llama-3.1-8b"  # --model wins over the log's name
    figs = [f for f in cell.figures]
    assert [f.trial for f in figs] == [0, 0, 0, 0, 1]
    for f, (p_ms, _p_n, e_ms, runs) in zip(figs, [*truth, (41.5, 17, 1210.9, 127)],
                                           strict=True):
        assert f.ttft_ms == pytest.approx(p_ms)
        assert f.tokens == runs + 1  # the first token comes from the prompt's logits
        # crossbench's decode rate is the line's own tokens per second
        assert f.rate_tok_s == pytest.approx(1e3 / e_ms * runs, rel=1e-9)


def test_speculative_tool_perf_block_is_listed_not_read_as_decode(tmp_path):
    lines = ["decoded  200 tokens in    1.234 seconds, speed:  162.075 t/s", "",
             "n_draft   = 16", "n_predict = 200", "n_drafted = 160", "n_accept  = 120",
             "accept    = 75.000%", "", "target:", "",
             *perf_block("common_perf_print", 30.0, 40, 50.0, 12)]
    (tmp_path / "spec_0.log").write_text("\n".join(lines) + "\n")
    base = perf_block("common_perf_print", 30.0, 40, 1500.0, 199)
    (tmp_path / "base_0.log").write_text("\n".join(base) + "\n")
    res = invoke(str(tmp_path / "base_0.log"), str(tmp_path / "spec_0.log"),
                 "--pattern", "{arm}_{trial}.log", "--baseline-arm", "base", "--model", "m",
                 "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    assert ("not imported: spec_0.log request 0: a speculative tool's perf print counts "
            "verification batches as prompt eval: its eval line is not the decode time"
            ) in res.output
    assert [c.coords["arm"] for c in load_run(tmp_path / "imp").cells] == ["base"]


def test_prompt_cache_run_is_listed(tmp_path):
    # common_prompt_batch_decode with --prompt-cache: the last prompt token alone is a "run"
    lines = ["common_prompt_batch_decode: saved session before last token to cache.bin, "
             "n_new = 13", *perf_block("common_perf_print", 30.0, 12, 900.0, 100)]
    (tmp_path / "base_0.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(cli, ["import", "llama-logs", str(tmp_path / "base_0.log"),
                                   "--pattern", "{arm}_{trial}.log", "--baseline-arm", "base",
                                   "--model", "m", "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2
    assert res.output.strip() == (
        "crossbench: error: no request could be imported (first: base_0.log request 0: a "
        "--prompt-cache run decodes the prompt's last token alone, which the perf print "
        "counts as an eval run: its eval line is not the decode alone) (fix: fix or leave "
        "out the logs listed)")


def test_interleaved_slots_need_concurrency(tmp_path):
    a = server_request(0, 1, 20.0, 30, 800.0, 100, None)
    b = server_request(1, 2, 25.0, 35, 900.0, 120, None)
    lines = [a[0], b[0], a[1], b[1], b[2], a[2]]  # two slots finishing at once
    (tmp_path / "base_0.log").write_text("\n".join(HEADER + lines) + "\n")
    args = [str(tmp_path / "base_0.log"), "--pattern", "{arm}_{trial}.log",
            "--baseline-arm", "base"]
    res = CliRunner().invoke(cli, ["import", "llama-logs", *args, "--out",
                                   str(tmp_path / "x")])
    assert res.exit_code == 2
    assert res.output.strip() == (
        "crossbench: error: base_0.log: requests on 2 server slots, and the log does not say "
        "how many the client sent at once (fix: give --concurrency N (1 if it sent one "
        "request at a time) or {concurrency} in --pattern)")
    res = invoke(*args, "--concurrency", "2", "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    (cell,) = load_run(tmp_path / "imp").cells
    assert cell.coords["concurrency"] == 2
    assert [(f.ttft_ms, f.tokens) for f in cell.figures] == [(20.0, 100), (25.0, 120)]


def test_older_server_format_and_bad_values(tmp_path):
    # older builds: the slot prefix on a line of its own, the timing lines bare after it
    lines = list(HEADER)
    for task, (p_ms, e_ms, n) in enumerate([(18.46, 382.75, 38), (0.0, 400.0, 40),
                                            (20.0, 0.5, 60), (19.0, 300.0, 30)]):
        lines.append(f"slot print_timing: id  0 | task {task} | ")
        lines.append(c_fmt("prompt eval time = %10.2f ms / %5d tokens", p_ms, 12))
        lines.append(c_fmt("       eval time = %10.2f ms / %5d tokens", e_ms, n))
        lines.append(c_fmt("      total time = %10.2f ms / %5d tokens", p_ms + e_ms, 12 + n))
        if task == 3:
            lines.append("draft acceptance = 0.75000 (   15 accepted /    20 generated)")
    (tmp_path / "base_0.log").write_text("\n".join(lines) + "\n")
    res = invoke(str(tmp_path / "base_0.log"), "--pattern", "{arm}_{trial}.log",
                 "--baseline-arm", "base", "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    assert ("not imported: base_0.log request 1: prompt eval time is 0 ms for 12 tokens: "
            "evaluating a prompt takes time") in res.output
    assert "not imported: base_0.log request 2: eval time is 0.5 ms for 59 tokens after the " \
           "first" in res.output
    (cell,) = load_run(tmp_path / "imp").cells
    assert [(f.ttft_ms, f.tokens) for f in cell.figures] == [(18.46, 38), (19.0, 30)]
    assert cell.records[-1]["timings"]["draft_n"] == 20  # a bare acceptance line too
    assert cell.records[-1]["timings"]["draft_n_accepted"] == 15


def test_not_a_log_and_no_arm(tmp_path):
    (tmp_path / "base_0.log").write_text("hello\n")
    res = CliRunner().invoke(cli, ["import", "llama-logs", str(tmp_path / "base_0.log"),
                                   "--pattern", "{arm}_{trial}.log", "--baseline-arm", "base",
                                   "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2
    assert "holds no llama.cpp timing lines" in res.output
    res = CliRunner().invoke(cli, ["import", "llama-logs", str(tmp_path / "base_0.log"),
                                   "--pattern", "run_{trial}.log", "--baseline-arm", "base",
                                   "--out", str(tmp_path / "imp")])
    assert res.exit_code == 2
    assert res.output.strip() == (
        "crossbench: error: no arm: the logs do not say which arm ran (fix: name it in "
        "--pattern, e.g. --pattern '{arm}_t{trial}.log')")


def test_parse_log_keeps_slot_and_task_apart():
    a = server_request(0, 7, 20.0, 30, 800.0, 100, (40, 30))
    log = parse_log("\n".join(a))
    (block,) = log.blocks
    assert block.key == ("server", 0, 7)
    assert block.draft == (40, 30)
    assert block.values["eval time"][:2] == ("    800.00".strip(), "100")


def test_arm_settings_and_starts_reach_the_cells(tmp_path):
    from crossbench.analysis.analyze import analyze
    from crossbench.analysis.paired import StatsOptions

    write_server_logs(tmp_path / "logs")
    res = invoke(*sorted(str(p) for p in (tmp_path / "logs").glob("*.log")),
                 "--pattern", "{arm}_t{trial}.log", "--baseline-arm", "base",
                 "--arm-method", "draft=draft-simple", "--arm-setting", "draft:cache_type_k=q8_0",
                 "--trials-per-start", "2", "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    cells = {c.coords["arm"]: c for c in load_run(tmp_path / "imp").cells}
    assert cells["draft"].coords["method"] == "draft-simple"
    assert {r["server_start"] for r in cells["base"].records} == {0}
    (pair,) = analyze(tmp_path / "imp", StatsOptions(resamples=200))["pairs"]
    assert pair["confounds"]["confounded"] is True  # the KV-cache type differs


@pytest.mark.server
def test_real_llama_server_log_matches_its_response_bodies(tmp_path, llama_server,
                                                          fixture_models):
    """The pinned llama-server's own log, read by import llama-logs, gives each request the
    TTFT, decode time and tokens its response body's timings give (to the log's 0.01 ms)."""
    import json
    import subprocess
    import time
    import urllib.request

    from crossbench.engines.process import free_port

    target, _ = fixture_models
    port = free_port()
    log = tmp_path / "base_0.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(llama_server), "-m", str(target), "--port", str(port),
                                 "-t", "1", "-c", "512", "-np", "1"],
                                stdout=out, stderr=subprocess.STDOUT)
    bodies = []
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        for prompt in ("hello there", "count to ten", "the sky is"):
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/completion",
                data=json.dumps({"prompt": prompt, "n_predict": 24, "cache_prompt": False,
                                 "temperature": 0}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                bodies.append(json.load(r))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    res = invoke(str(log), "--pattern", "{arm}_{trial}.log", "--baseline-arm", "base",
                 "--out", str(tmp_path / "imp"))
    assert res.exit_code == 0, res.output
    (cell,) = load_run(tmp_path / "imp").cells
    assert cell.coords["target"] == target.stem  # from the 'loading model' line
    figs = cell.figures
    assert len(figs) == len(bodies) == 3
    for f, body in zip(figs, bodies, strict=True):
        t = body["timings"]
        assert f.tokens == t["predicted_n"]
        # the log prints milliseconds to 2 decimals: within half a unit of the last digit,
        # that half included (47.265 printed as 47.27 differs by 0.005 and a float's ulp)
        half = 0.005 + 1e-9
        assert f.ttft_ms == pytest.approx(t["prompt_ms"], abs=half)
        assert f.decode_ms == pytest.approx(t["predicted_ms"], abs=half)
