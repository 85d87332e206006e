"""docs/cross-engine.md's cost-model table is what the published archives give: each d and v
with its interval is recomputed from the raw records in examples/h200-methods/ (the analysis's
defaults, as `crossbench analyze` and `crossbench fit` print them) and must appear in the
table's row for its method, so a re-analysis or a changed default cannot leave the page
behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crossbench.frames import open_run
from crossbench.store import rundir

ROOT = Path(__file__).resolve().parents[1]
METHODS = ROOT / "examples" / "h200-methods"
DOC = ROOT / "docs" / "cross-engine.md"

# (table row's method, archive, engine, arm, decimals the page prints for d and for v)
CELLS = [
    ("draft model (0.6B)", "round4/h200-methods-round4-llama.zip", "llama", "draft-a0.9",
     (3, 3)),
    ("EAGLE-3", "round1/h200-methods-round1.zip", "llama", "eagle3-a0.9", (2, 3)),
    ("draft model (0.6B)", "round5/h200-fits2-vllm-fits2.zip", "vllm", "draft-a0.9", (3, 3)),
    ("DFlash", "round1/h200-methods-round1.zip", "llama", "dflash-a0.9", (2, 3)),
    ("MTP (the Qwen3.5 target)", "round3/h200-methods-round3-llama.zip", "llama", "mtp-a0.9",
     (3, 3)),
    ("MTP (the Qwen3.5 target)", "round3/h200-methods-round3-vllm.zip", "vllm-q35", "mtp-a0.9",
     (3, 3)),
]


def table_row(method: str) -> str:
    """The cost-model table's row of ``method``."""
    text = DOC.read_text()
    start = text.index("| method | llama.cpp d |")  # the cost-model table (not "At a glance")
    table = text[start:text.index("\n\n", start)]
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {method} |")]
    return line


def doc_section(heading: str) -> str:
    """The page's section whose heading starts with ``heading`` (up to the next one)."""
    text = DOC.read_text()
    start = text.index(heading)
    return text[start:text.index("\n## ", start + 3)]


def interval(x: float, ci: list[float], places: int) -> str:
    return f"{x:.{places}f} [{ci[0]:.{places}f}, {ci[1]:.{places}f}]"


@pytest.fixture(scope="module")
def sweeps() -> dict[str, list[dict[str, Any]]]:
    """Each archive's c=1 sweeps, analysed once."""
    out = {}
    for archive in sorted({c[1] for c in CELLS}):
        with open_run(METHODS / archive) as frames:
            out[archive] = [s for s in frames.analysis["sweeps"] if s["concurrency"] == 1]
    return out


@pytest.mark.parametrize(("method", "archive", "engine", "arm", "places"), CELLS)
def test_each_fit_in_the_table_is_the_archives(sweeps: dict[str, list[dict[str, Any]]],
                                               method: str, archive: str, engine: str,
                                               arm: str, places: tuple[int, int]) -> None:
    (s,) = [s for s in sweeps[archive] if (s["engine"], s["arm"]) == (engine, arm)]
    cm = s["cost_model"]
    row = table_row(method)
    assert interval(cm["d"], cm["d_ci95"], places[0]) in row, (row, cm["d"], cm["d_ci95"])
    assert interval(cm["v"], cm["v_ci95"], places[1]) in row, (row, cm["v"], cm["v_ci95"])


@pytest.mark.parametrize(("method", "arm"), [("EAGLE-3", "eagle3-a0.9"),
                                             ("DFlash", "dflash-a0.9")])
def test_the_vllm_fits_across_rounds_are_crossbench_fits(method: str, arm: str,
                                                        tmp_path: Path) -> None:
    """vLLM's EAGLE-3 and DFlash lines: round 4's two n, round 5's third and its n = 4 start
    after the round (`crossbench fit`; the sources' order changes nothing)."""
    import json

    from click.testing import CliRunner

    from crossbench.cli.main import cli

    out = tmp_path / "fit.json"
    r = CliRunner().invoke(cli, ["fit", str(METHODS / "round5/h200-fits2-vllm-fits2.zip"),
                                 str(METHODS / "round5/h200-fits2-vllm-warm.zip"),
                                 str(METHODS / "round4/h200-methods-round4-vllm.zip"),
                                 "--arm", arm, "--engine", "vllm", "--json", str(out)])
    assert r.exit_code == 0, r.output
    fit = json.loads(out.read_text())["fit"]
    assert len(json.loads(out.read_text())["points"]) == 4
    row = table_row(method)
    assert interval(fit["d"], fit["d_ci95"], 3) in row, (row, fit)
    assert interval(fit["v"], fit["v_ci95"], 3) in row, (row, fit)


H100 = ROOT / "examples" / "h100-methods"


def h100_section() -> str:
    """The page's section on vLLM's H100 lease of 2026-12-05."""
    return doc_section("## vLLM's verdicts on fresh starts, its batch shapes and the other alpha")


def test_vllms_h100_verdicts_are_the_archives() -> None:
    """Each verdict row: the speedup, its request interval and its starts-as-samples interval,
    recomputed from the archive; the verdict word only where the start interval agrees."""
    section = h100_section()
    with open_run(H100 / "verdicts-part2/h100-verdicts-part2-vllm-verdicts.zip") as frames:
        pairs = {p["arm"]: p for p in frames.analysis["pairs"]}
    for arm, name in (("eagle3-a0.9", "EAGLE-3 n = 4"), ("dflash-a0.9", "DFlash n = 4")):
        sp = pairs[arm]["speedup"]
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| {name} |")]
        assert f"| {sp['geomean']:.3f} |" in row
        assert f"[{sp['ci95'][0]:.3f}, {sp['ci95'][1]:.3f}]" in row
        lo, hi = sp["start_ci95"]
        assert f"[{lo:.3f}, {hi:.3f}]" in row
        assert lo > 1 and "**faster**" in row, row
        tau = pairs[arm]["acceptance"]["mean_acceptance_length"]
        assert f"{tau / sp['geomean']:.3f}" in section  # C(4) = MAL / speedup


def test_vllms_step_split_by_batch_shape_is_decompose(tmp_path: Path) -> None:
    """The verification column: `crossbench decompose --verify-from` on the batch-shape run."""
    import json

    from click.testing import CliRunner

    from crossbench.cli.main import cli

    out = tmp_path / "split.json"
    r = CliRunner().invoke(cli, ["decompose", "--verify-from",
                                 str(H100 / "verdicts-part2/h100-verdicts-part2-vllm-shapes.zip"),
                                 "--n", "1,2,4,8,15", "--method", "draft-eagle3",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    said = "verification " + ", ".join(f"{row['verify_steps']:.2f}" for row in rows)
    assert said in " ".join(h100_section().split()), said
    assert f"plain step {rows[0]['plain_ms']:.2f} ms" in h100_section()


def test_the_eagle3_line_over_three_machines_is_a_crossbench_fit(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from crossbench.cli.main import cli

    out = tmp_path / "fit.json"
    r = CliRunner().invoke(cli, [
        "fit", str(METHODS / "round4/h200-methods-round4-vllm.zip"),
        str(METHODS / "round5/h200-fits2-vllm-fits2.zip"),
        str(METHODS / "round5/h200-fits2-vllm-warm.zip"),
        str(H100 / "verdicts-part2/h100-verdicts-part2-vllm-verdicts.zip"),
        str(H100 / "alpha-part1/h100-alpha-part1-vllm-alpha.zip"),
        "--arm", "eagle3-a0.9", "--engine", "vllm", "--json", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    fit = result["fit"]
    assert sorted(p["n"] for p in result["points"]) == [1, 2, 4, 4, 4, 8]
    section = " ".join(h100_section().split())
    assert f"d {interval(fit['d'], fit['d_ci95'], 3)}, v {interval(fit['v'], fit['v_ci95'], 4)}" \
        in section, fit


def h200_alpha_section() -> str:
    """The page's section on `alpha` part 2 (vLLM's heads at alpha 0.7, one H200)."""
    return doc_section("## vLLM at the other alpha, the rest (one H200")


ALPHA_REST = METHODS / "round6/h200-alpha-part2-vllm-alpha-rest.zip"


def _fit(tmp_path: Path, sources: list[Path], arm: str, engine: str = "vllm",
         concurrency: int = 1) -> dict[str, Any]:
    import json

    from click.testing import CliRunner

    from crossbench.cli.main import cli

    out = tmp_path / f"fit-{arm}-{len(sources)}-c{concurrency}.json"
    r = CliRunner().invoke(cli, ["fit", *map(str, sources), "--arm", arm, "--engine", engine,
                                 "--concurrency", str(concurrency), "--json", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_vllms_alpha_rest_rows_are_the_archive_and_carry_no_verdict(tmp_path: Path) -> None:
    """Each c=1 row: speedup, interval, MAL and C(n) from the archive; the predicted C(n) from
    the alpha 0.9 lines that hold none of its points; one start per arm, so no verdict word;
    the c=16 ratios from the trial windows' output rates."""
    section = h200_alpha_section()
    with open_run(ALPHA_REST) as frames:
        pairs = {(p["arm"], p["concurrency"]): p for p in frames.analysis["pairs"]}
        wall = {(c["arm"], c["concurrency"]): c["throughput"]["wall_output_tok_s"]
                for c in frames.analysis["cells"]}
    before = [METHODS / "round4/h200-methods-round4-vllm.zip",
              METHODS / "round5/h200-fits2-vllm-fits2.zip",
              METHODS / "round5/h200-fits2-vllm-warm.zip",
              H100 / "verdicts-part2/h100-verdicts-part2-vllm-verdicts.zip"]
    lines = {"eagle3": _fit(tmp_path, [*before, H100 / "alpha-part1/h100-alpha-part1-vllm-alpha.zip"],
                            "eagle3-a0.9")["fit"],
             "dflash": _fit(tmp_path, before, "dflash-a0.9")["fit"]}
    for arm, name, n in (("eagle3-a0.7", "EAGLE-3, alpha 0.7", 4),
                         ("dflash-a0.7", "DFlash, alpha 0.7", 4),
                         ("dflash-a0.9", "DFlash, alpha 0.9", 1)):
        p = pairs[(arm, 1)]
        sp = p["speedup"]
        assert sp["start_ci95"] is None  # one start per arm: no starts-as-samples interval
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| {name} | {n} |")]
        assert interval(sp["geomean"], sp["ci95"], 3) in row, row
        mal = p["acceptance"]["mean_acceptance_length"]
        assert f"| {mal:.3f} | {mal / sp['geomean']:.3f} |" in row, row
        line = lines[arm.split("-")[0]]
        c_pred = line["d"] + line["v"] * n
        assert f"| {c_pred:.3f}, {mal / c_pred:.3f} |" in row, row
        assert "faster" not in row and "slower" not in row
    base16 = wall[("none", 16)]
    assert f"baseline's {base16:,.1f} tok/s" in " ".join(section.split())
    for arm in ("eagle3-a0.7", "dflash-a0.7", "dflash-a0.9"):
        ratio = wall[(arm, 16)] / base16
        assert f"{wall[(arm, 16)]:,.1f} ({ratio:.2f})" in section, (arm, ratio)


def test_the_dflash_line_over_four_machines_is_a_crossbench_fit(tmp_path: Path) -> None:
    result = _fit(tmp_path, [METHODS / "round4/h200-methods-round4-vllm.zip",
                             METHODS / "round5/h200-fits2-vllm-fits2.zip",
                             METHODS / "round5/h200-fits2-vllm-warm.zip",
                             H100 / "verdicts-part2/h100-verdicts-part2-vllm-verdicts.zip",
                             ALPHA_REST], "dflash-a0.9")
    fit = result["fit"]
    assert sorted({p["n"] for p in result["points"]}) == [1, 4, 8, 15]
    said = f"d {interval(fit['d'], fit['d_ci95'], 3)}, v {interval(fit['v'], fit['v_ci95'], 4)}"
    assert said in " ".join(h200_alpha_section().split()).replace("**", ""), said


def llama_alpha_section() -> str:
    """The page's section on `methods` part 2 (llama.cpp at alpha 0.7 and n = 1, one H100)."""
    return doc_section("## llama.cpp at the other alpha and n = 1 (one H100")


METHODS_REST = H100 / "methods-part2/h100-methods-part2-llama-methods-rest.zip"
ARMS = {"draft": "draft model", "eagle3": "EAGLE-3", "dflash": "DFlash"}


def test_llamas_alpha_rows_fits_and_same_machine_costs_are_the_archive() -> None:
    """Each c=1 speedup with its interval, each fit over three or more n, the same-machine
    C(n) at both alphas and its ratio, the c=16 output ratios: all from the archive's raw
    records; one start per arm, so no starts-as-samples interval and no verdict word."""
    section = llama_alpha_section()
    flat = " ".join(section.split())
    with open_run(METHODS_REST) as frames:
        a = frames.analysis
    pairs = {(p["arm"], p["n"], p["concurrency"]): p for p in a["pairs"]}
    fits = {s["arm"]: s["cost_model"] for s in a["sweeps"] if s["concurrency"] == 1}
    wall = {(c["arm"], c.get("n"), c["concurrency"]): c["throughput"]["wall_output_tok_s"]
            for c in a["cells"]}
    assert f"over a {pairs[('draft-a0.7', 1, 1)]['baseline_tok_s']:.1f} tok/s baseline" in flat
    checked = 0
    for key, name in ARMS.items():
        for alpha in ("0.7", "0.9"):
            arm = f"{key}-a{alpha}"
            (row,) = [ln for ln in section.splitlines()
                      if ln.startswith(f"| {name}, alpha {alpha} |")]
            cells = row.split(" | ")[1:6]
            for n, cell in zip((1, 2, 4, 8, 15), cells, strict=True):
                p = pairs.get((arm, n, 1))
                if p is None:
                    assert cell == "-", (row, n)
                    continue
                sp = p["speedup"]
                assert sp["start_ci95"] is None  # one start per arm
                assert cell == interval(sp["geomean"], sp["ci95"], 3), (row, n)
                checked += 1
            cm = fits.get(arm)
            if cm is not None and cm["points"] >= 3:
                assert row.endswith(f"| {interval(cm['d'], cm['d_ci95'], 3)} | "
                                    f"{interval(cm['v'], cm['v_ci95'], 3)} |"), row
            else:  # one or two n: no line is given
                assert row.endswith("| - | - |"), row
            assert "faster" not in row and "slower" not in row
    assert checked == 18  # every c=1 pair of the run
    for key, n in (("draft", 1), ("eagle3", 1), ("dflash", 1), ("eagle3", 4), ("dflash", 4)):
        c9, c7 = (pairs[(f"{key}-a{al}", n, 1)] for al in ("0.9", "0.7"))
        cost = [p["acceptance"]["mean_acceptance_length"] / p["speedup"]["geomean"]
                for p in (c9, c7)]
        row = f"| {ARMS[key]} | {n} | {cost[0]:.3f} | {cost[1]:.3f} | " \
              f"{100 * (cost[0] / cost[1] - 1):+.1f} % |"
        assert row in section, row
    base16 = wall[("none", None, 16)]
    assert f"baseline's {base16:,.1f} tok/s" in flat
    for (arm, n, c), tok_s in wall.items():
        if c == 16 and arm != "none":
            assert f"n = {n}: {tok_s:,.1f} ({tok_s / base16:.2f})" in flat, (arm, n)


def test_llamas_48_token_acceptance_is_the_clipped_expectation() -> None:
    """The section's 48-token acceptance figures: the measured ones and the exact expectation
    under the configured rates with llama-server's clipped drafts (analysis format 11), both
    from the archive; every measured position lies within 3.02 binomial standard errors of
    the expectation over the cell's drafts (a joint 99 % band over four positions). One cell's
    drafts (about 370-550) cannot tell the expectation from the configured rates at 48 tokens;
    the CPU test of tests/test_server_llama.py, with 2,800 drafts, does."""
    flat = " ".join(llama_alpha_section().split())
    with open_run(METHODS_REST) as frames:
        a = frames.analysis
        table = frames.cells.set_index("cell")["expected_mean_acceptance_length"]
    cells = {c["cell"]: c for c in a["cells"]}
    for alpha in ("0.7", "0.9"):
        (pair,) = [p for p in a["pairs"] if p["arm"] == f"eagle3-a{alpha}" and p["n"] == 4
                   and p["concurrency"] == 1]
        acc = pair["acceptance"]
        measured, expected = acc["per_position"], acc["expected_per_position"]
        assert acc["expected_note"].startswith("expected as llama-server counts it")
        assert ", ".join(f"{x:.3f}" for x in measured) in flat, measured
        assert ", ".join(f"{x:.3f}" for x in expected) in flat, expected
        drafts = cells[pair["cell"]]["acceptance"]["drafts"]
        configured = [float(alpha) ** k for k in range(1, 5)]
        for got, want in zip(measured, expected, strict=True):
            band = 3.02 * (want * (1 - want) / drafts) ** 0.5
            assert abs(got - want) <= band, (alpha, measured, expected, drafts)
        assert expected[3] < configured[3] - 0.01  # the clipping, not the draws, moves it
        assert table[pair["cell"]] == pytest.approx(1 + sum(expected))  # the pandas column
    assert table.isna().sum() == sum(1 for c in a["cells"] if not c["synthetic_acceptance"])


SGLANG = [H100 / "sglang-methods-part1/h100-sglang-methods-part1-sglang-methods.zip",
          H100 / "sglang-methods-part2/h100-sglang-methods-part2-sglang-methods-b.zip"]
SGLANG_ROWS = {"draft-a0.9": "STANDALONE (the 0.6B draft model)", "eagle3-a0.9": "EAGLE3",
               "dflash-a0.9": "DFLASH", "eagle3-real": "EAGLE3, real acceptance"}


def sglang_section() -> str:
    """The page's section on SGLang's first live cells (`sglang-methods`, one H100)."""
    return doc_section("## SGLang joins: EAGLE3, DFLASH and STANDALONE live")


def test_sglangs_rows_line_and_c16_output_are_the_archives(tmp_path: Path) -> None:
    """SGLang's section: every c=1 row (speedup and interval, MAL, C(n) = MAL / speedup, the
    decode rate) and every c=16 row (the trial window's output rate, its ratio to its own
    part's baseline, the per-request speedup) from the two archives; EAGLE3's line is
    `crossbench fit` over both; one start per arm, so no verdict word in any row."""
    section = sglang_section()
    rows = 0
    for archive in SGLANG:
        with open_run(archive) as frames:
            pairs = {(p["arm"], p["n"], p["concurrency"]): p for p in frames.analysis["pairs"]}
            wall = {(c["arm"], c["n"], c["concurrency"]): c["throughput"]["wall_output_tok_s"]
                    for c in frames.analysis["cells"]}
        for (arm, n, conc), p in pairs.items():
            sp = p["speedup"]
            assert sp["start_ci95"] is None  # one start per arm
            assert p["verdict"] in ("faster", "slower")  # no confound left: the KV pool
            name = SGLANG_ROWS[arm]
            if conc == 1:
                c1 = section[:section.index("**c=16**")]
                (row,) = [ln for ln in c1.splitlines() if ln.startswith(f"| {name} | {n} |")]
                mal = p["acceptance"]["mean_acceptance_length"]
                assert (f"| {mal:.3f} | {interval(sp['geomean'], sp['ci95'], 3)} | "
                        f"{mal / sp['geomean']:.3f} | {p['spec_tok_s']:.1f} |") in row, row
            else:
                c16 = section[section.index("**c=16**"):]
                (row,) = [ln for ln in c16.splitlines()
                          if ln.startswith(f"| {name.split(' (')[0]} | {n} | ")]
                ratio = wall[(arm, n, 16)] / wall[("none", None, 16)]
                assert (f"| {wall[(arm, n, 16)]:,.1f} | {ratio:.2f} | {sp['geomean']:.3f} |"
                        in row), row
            assert "faster" not in row and "slower" not in row
            rows += 1
    assert rows == 14
    fit = _fit(tmp_path, SGLANG, "eagle3-a0.9", "sglang")
    assert sorted(q["n"] for q in fit["points"]) == [2, 4, 8]
    line = fit["fit"]
    said = f"d {interval(line['d'], line['d_ci95'], 3)}, v {interval(line['v'], line['v_ci95'], 4)}"
    assert said in " ".join(section.split()).replace("**", ""), said


def _steps_distribution(tokens: int, mean: float, longest: int) -> dict[int, float]:
    """P(a request of ``tokens`` tokens after its first takes k steps) under SGLang's draw
    (the floor or the ceiling of ``mean``), by a dynamic program over the tokens left."""
    lower = int(mean // 1)
    upper = min(lower + 1, longest)
    p_up = mean - lower if upper > lower else 0.0
    dist: dict[tuple[int, int], float] = {(tokens, 0): 1.0}
    done: dict[int, float] = {}
    while dist:
        nxt: dict[tuple[int, int], float] = {}
        for (left, k), p in dist.items():
            for size, q in ((lower, 1.0 - p_up), (upper, p_up)):
                if q == 0.0:
                    continue
                rest = left - size
                if rest <= 0:
                    done[k + 1] = done.get(k + 1, 0.0) + p * q
                else:
                    nxt[(rest, k + 1)] = nxt.get((rest, k + 1), 0.0) + p * q
        dist = nxt
    return done


def test_sglangs_mean_length_is_the_step_draws_expectation() -> None:
    """Every simulated SGLang cell's mean acceptance length against the expectation the
    analysis records (a step commits the floor or the ceiling of the mean; a request's last
    step stops at its 48th token): its verification steps within three standard deviations
    of the expected, counting a c=16 batch of 16 requests as one draw (SGLang draws one
    length per step for the whole batch)."""
    import math

    checked = 0
    for archive in SGLANG:
        with open_run(archive) as frames:
            cells = [c for c in frames.analysis["cells"]
                     if c["arm"].endswith("-a0.9")]
        for c in cells:
            acc = c["acceptance"]
            n, requests = int(c["n"]), int(c["requests"]["ok"])
            mean = sum(0.9 ** k for k in range(n + 1))
            dist = _steps_distribution(47, mean, n + 1)
            e = sum(k * p for k, p in dist.items())
            var = sum((k - e) ** 2 * p for k, p in dist.items())
            assert acc["expected_mean_acceptance_length"] == pytest.approx(47 / e, rel=1e-9)
            draws = requests if c["concurrency"] == 1 else requests // 16
            share = 1 if c["concurrency"] == 1 else 16
            sd = share * math.sqrt(draws * var)
            assert abs(acc["drafts"] - requests * e) <= 3 * sd + 1e-9, (c["cell"], acc["drafts"])
            assert acc["accepted_tokens"] + acc["drafts"] == 47 * requests  # kept tokens only
            checked += 1
    assert checked == 12


REST = H100 / "sglang-rest"


def _one_start_c1_rows(section: str, archive: Path, ns: tuple[int, ...]
                      ) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]]:
    """Check each c=1 row ``| n | MAL | speedup [interval] | C(n) |`` of a one-start-per-arm
    section against ``archive``; returns its pairs and cells keyed by (n, concurrency)."""
    with open_run(archive) as frames:
        pairs = {(p["n"], p["concurrency"]): p for p in frames.analysis["pairs"]}
        cells = {(c["n"], c["concurrency"]): c for c in frames.analysis["cells"]}
    for n in ns:
        p = pairs[(n, 1)]
        sp, mal = p["speedup"], p["acceptance"]["mean_acceptance_length"]
        assert sp["start_ci95"] is None  # one start per arm
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| {n} | ")]
        assert row == (f"| {n} | {mal:.3f} | {interval(sp['geomean'], sp['ci95'], 3)} | "
                       f"{mal / sp['geomean']:.3f} |")
    return pairs, cells


def test_sglangs_ngram_rows_fit_replay_and_failed_nextn_are_the_archives(
        tmp_path: Path) -> None:
    """`sglang-rest`'s section: each NGRAM c=1 row (MAL, speedup and interval, C(n)), the
    `crossbench fit` line, the c=16 output rates and ratios and their MAL (the replayed
    corpus), no verdict word in any row; NEXTN's archive holds its 8 starts, every one
    failed, each log with the conv-state error the page quotes."""
    section = doc_section("## SGLang's NGRAM live, its NEXTN refused at start")
    flat = " ".join(section.split()).replace("**", "")
    pairs, cells = _one_start_c1_rows(section, REST / "h100-sglang-rest-sglang-ngram.zip",
                                      (2, 4, 8))
    for n in (2, 4, 8):  # random weights: almost nothing accepted
        assert 1.0 < pairs[(n, 1)]["acceptance"]["mean_acceptance_length"] < 1.03
    base16 = cells[(None, 16)]["throughput"]["wall_output_tok_s"]
    assert f"against the baseline's {base16:,.1f}" in flat
    rates = [cells[(n, 16)]["throughput"]["wall_output_tok_s"] for n in (2, 4, 8)]
    assert ", ".join(f"{r:,.1f}" for r in rates[:2]) + f" and {rates[2]:,.1f}" in flat
    assert "(" + ", ".join(f"{r / base16:.2f}" for r in rates) + ")" in flat
    mals = [pairs[(n, 16)]["acceptance"]["mean_acceptance_length"] for n in (2, 4, 8)]
    assert f"MAL {mals[0]:.2f}, {mals[1]:.2f} and {mals[2]:.2f}" in flat
    assert min(mals) > 2  # the replay: every c=16 cell accepted far more than at c=1
    fit = _fit(tmp_path, [REST / "h100-sglang-rest-sglang-ngram.zip"], "ngram", "sglang")
    line = fit["fit"]
    said = f"d {interval(line['d'], line['d_ci95'], 3)}, v {interval(line['v'], line['v_ci95'], 4)}"
    assert said in flat, said
    for word in ("faster", "slower"):
        assert word not in section
    import json
    import zipfile

    with zipfile.ZipFile(REST / "h100-sglang-rest-sglang-mtp.zip") as z:
        names = z.namelist()
        logs = [z.read(m).decode() for m in names if m.endswith("/server.log")]
        (summary,) = [m for m in names if m.endswith("/data/summary.json")]
        cells = json.loads(z.read(summary))["cells"]
    assert len(logs) == 8 and all(
        "Mismatched type for col0 between then block (<['256'], bf16>) and else block "
        "(<['256'], fp16>)" in log for log in logs)
    assert len(cells) == 8 and {(c["done"], c["failed"]) for c in cells} == {(0, 1)}


NEXTN = H100 / "sglang-nextn/h100-sglang-nextn-sglang-nextn.zip"
ALPHA_SAME = H100 / "alpha-same-part1/h100-alpha-same-part1-llama-alpha-same.zip"


def nextn_section() -> str:
    """The page's section on `sglang-nextn` and `alpha-same PART=1` (one H100)."""
    return doc_section("## SGLang's NEXTN live, and llama.cpp's step at two alphas")


def test_sglangs_nextn_rows_fits_and_c16_output_are_the_archive(tmp_path: Path) -> None:
    """NEXTN's c=1 rows (MAL, speedup and interval, C(n)), its measured and expected MAL, the
    `crossbench fit` lines at c=1 and c=16, the c=16 output rates and ratios, and the KV pool
    sizes the server logs give; one start per arm, so no verdict word before the llama.cpp
    part."""
    import re
    import zipfile

    section = nextn_section()
    nextn = section[:section.index("**llama.cpp, does a step cost more")]
    flat = " ".join(nextn.split()).replace("**", "")
    pairs, cells = _one_start_c1_rows(nextn, NEXTN, (1, 2, 4))
    assert len(pairs) == 6
    mals = [pairs[(n, 1)]["acceptance"]["mean_acceptance_length"] for n in (1, 2, 4)]
    expected = [cells[(n, 1)]["acceptance"]["expected_mean_acceptance_length"]
                for n in (1, 2, 4)]
    assert "MAL " + ", ".join(f"{m:.3f}" for m in mals[:2]) + f" and {mals[2]:.3f}" in flat
    assert ", ".join(f"{m:.3f}" for m in expected[:2]) + f" and {expected[2]:.3f}" in flat
    base = cells[(None, 1)]["throughput"]["pooled_tok_s"]
    assert f"baseline of {base:.1f} tok/s ({1000 / base:.2f} ms a token)" in flat
    for conc in (1, 16):
        line = _fit(tmp_path, [NEXTN], "mtp-a0.9", "sglang-q35", conc)["fit"]
        d = interval(line["d"], line["d_ci95"], 3)
        v = interval(line["v"], line["v_ci95"], 4)
        assert (f"d {d}, v {v}" if conc == 1 else f"{d} + {v} n") in flat, (conc, d, v)
    base16 = cells[(None, 16)]["throughput"]["wall_output_tok_s"]
    rates = [cells[(n, 16)]["throughput"]["wall_output_tok_s"] for n in (1, 2, 4)]
    assert (", ".join(f"{r:,.1f}" for r in rates[:2]) + f" and {rates[2]:,.1f} tok/s at n = 1, "
            f"2, 4 against the baseline's {base16:,.1f} (" + ", ".join(
                f"{r / base16:.2f}" for r in rates) + ")") in flat
    per_request = [pairs[(n, 16)]["speedup"]["geomean"] for n in (1, 2, 4)]
    assert ("per request " + ", ".join(f"{s:.3f}" for s in per_request[:2])
            + f" and {per_request[2]:.3f}") in flat
    with zipfile.ZipFile(NEXTN) as z:
        pools = {m.split("/")[-2]: int(x) for m in z.namelist() if m.endswith("/server.log")
                 for x in re.findall(r"KV Cache is allocated\. dtype: \S+, #tokens: (\d+),",
                                     z.read(m).decode())[:1]}
    base_pool = pools.pop("sglang-q35__q35-hf__none__builtin-mixed__c16")
    assert f"{base_pool:,} tokens for the baseline" in flat
    assert f"{min(pools.values()):,}-{max(pools.values()):,} with NEXTN" in flat
    for word in ("faster", "slower"):
        assert word not in nextn


def _step_cost_rows_are_the_archive(text: str, archive: Path, names: dict[str, str],
                                    starts: int) -> dict[str, dict[str, Any]]:
    """Each alpha's row of ``text`` (MAL, speedup with its prompts' and starts' intervals,
    the verdict word only where the starts-as-samples interval agrees, C(n) with its
    interval) and each method's ratio of the two alphas, as
    benchmarks/step_cost_by_acceptance.py gives them; returns its output per method."""
    from bench_loader import load_benchmark

    mod = load_benchmark("step_cost_by_acceptance.py")
    flat = " ".join(text.split()).replace("**", "")
    with open_run(archive) as frames:
        analysis = frames.analysis
    pairs = {p["arm"]: p for p in analysis["pairs"]}
    assert len(pairs) == 2 * len(names)
    outs = {}
    for method, name in names.items():
        out = outs[method] = mod.compare(analysis, f"{method}-a0.9", f"{method}-a0.7")
        for alpha in ("0.9", "0.7"):
            arm = f"{method}-a{alpha}"
            p, cost = pairs[arm], out["arms"][arm]["cost"]
            sp = p["speedup"]
            assert cost["starts"] == starts and sp["start_ci95"] is not None
            word = "**faster** " if sp["start_ci95"][0] > 1 else ""
            (row,) = [ln for ln in text.splitlines() if ln.startswith(f"| {name}, alpha {alpha} |")]
            assert row == (f"| {name}, alpha {alpha} | "
                           f"{p['acceptance']['mean_acceptance_length']:.3f} | "
                           f"{word}{interval(sp['geomean'], sp['ci95'], 3)} | "
                           f"[{sp['start_ci95'][0]:.3f}, {sp['start_ci95'][1]:.3f}] | "
                           f"{interval(cost['geomean'], cost['ci'], 3)} |"), row
        r = out["ratio"]
        assert f"{name}" in flat and interval(r["geomean"], r["ci"], 3) in flat
    return outs


def test_llamas_step_cost_by_alpha_is_the_archive_on_fresh_starts() -> None:
    """`alpha-same PART=1`: each row and both alpha ratios are the archive's
    (:func:`_step_cost_rows_are_the_archive`), on 3 starts per arm, and both ratios exclude 1
    (the page's "costs more")."""
    section = nextn_section()
    llama = section[section.index("**llama.cpp, does a step cost more"):]
    outs = _step_cost_rows_are_the_archive(llama, ALPHA_SAME,
                                           {"eagle3": "EAGLE-3", "dflash": "DFlash"}, 3)
    for out in outs.values():
        assert out["ratio"]["ci"][0] > 1  # the page's "costs more" rests on this
    base = out["baseline_tok_s"]
    flat = " ".join(llama.split())
    assert f"the baseline {base:.1f} tok/s, {1000 / base:.2f} ms a token" in flat


ALPHA_SAME_VLLM = H100 / "alpha-same-part2/h100-alpha-same-part2-vllm-alpha-same.zip"


def test_vllms_step_cost_by_alpha_is_the_archive_and_not_settled() -> None:
    """`alpha-same PART=2`: vLLM's EAGLE-3 rows and ratio are the archive's on 2 starts per
    arm; the ratio's interval holds 1 (so the page says "not settled", no "costs more"), and
    the baseline's per-start rates are the archive's."""
    section = doc_section("## vLLM's step at two alphas on fresh starts")
    vllm = section[:section.index("**vLLM's forked engine core with a drafter**")]
    (out,) = _step_cost_rows_are_the_archive(vllm, ALPHA_SAME_VLLM,
                                             {"eagle3": "EAGLE-3"}, 2).values()
    lo, hi = out["ratio"]["ci"]
    assert lo < 1 < hi
    flat = " ".join(vllm.split()).replace("**", "")
    assert "not settled" in flat and "costs more" not in flat
    with open_run(ALPHA_SAME_VLLM) as frames:
        cells = {c["arm"]: c for c in frames.analysis["cells"]}
    rates = cells["none"]["per_trial_pooled_tok_s"]
    assert (f"The baseline gave {cells['none']['throughput']['pooled_tok_s']:.1f} tok/s "
            f"({rates['0']:.2f} and {rates['1']:.2f} on its two starts") in flat
    a07 = cells["eagle3-a0.7"]["per_trial_pooled_tok_s"]
    assert f"decoded {a07['0']:.1f} and {a07['1']:.1f} tok/s" in flat


SAME_LLAMA = H100 / "verdicts-same-part1/h100-verdicts-part1-llama-verdicts.zip"
SAME_VLLM = H100 / "verdicts-same-part2/h100-verdicts-part2-vllm-verdicts.zip"


def same_machine_section() -> str:
    """The page's section on `verdicts` parts 1 and 2 on one H100."""
    return doc_section("## Both engines' EAGLE-3 and DFlash on one machine")


def test_both_engines_on_one_machine_are_the_archives() -> None:
    """Each engine's row (MAL, per-start rates, speedup with both intervals, the verdict word
    only where the starts agree, C(4)) and each cross-engine ratio with its Welch interval,
    as benchmarks/cross_engine_step.py gives them; both runs on one GPU and one boot."""
    from bench_loader import load_benchmark

    mod = load_benchmark("cross_engine_step.py")
    section = same_machine_section()
    flat = " ".join(section.split())
    names = {"eagle3": "EAGLE-3", "dflash": "DFlash"}
    with open_run(SAME_LLAMA) as fl, open_run(SAME_VLLM) as fv:
        analyses = {"llama.cpp": fl.analysis, "vLLM": fv.analysis}
        trials = {"llama.cpp": fl.trials, "vLLM": fv.trials}
        machines = [mod.machines(fl.trials), mod.machines(fv.trials)]
    assert machines[0] == machines[1] and len(machines[0][0]) == 1  # one GPU, one boot
    assert "GPU-ee218442" in section and next(iter(machines[0][0])).startswith("GPU-ee218442")
    for method, name in names.items():
        out = mod.compare(analyses["llama.cpp"], analyses["vLLM"], f"{method}-a0.9", n=4)
        for engine, side in (("llama.cpp", out["a"]), ("vLLM", out["b"])):
            pairs = {p["arm"]: p for p in analyses[engine]["pairs"]}
            pair = pairs[f"{method}-a0.9"]
            sp = pair["speedup"]
            word = "**faster** " if sp["start_ci95"][0] > 1 else ""
            (row,) = [ln for ln in section.splitlines()
                      if ln.startswith(f"| {engine} | {name} |")]
            per = ", ".join(f"{v:.1f}" for v in side["tok_s"]["per_start"])
            assert f"| {side['mal']:.3f} |" in row
            assert f"| {pair['spec_tok_s']:.1f} ({per}) |" in row
            assert f"| {pair['baseline_tok_s']:.1f}" in row
            assert (f"| {word}{interval(sp['geomean'], sp['ci95'], 3)} | "
                    f"[{sp['start_ci95'][0]:.3f}, {sp['start_ci95'][1]:.3f}] | "
                    f"{interval(side['cost']['geomean'], side['cost']['ci'], 3)} |") in row
            assert side["tok_s"]["starts"] == (3 if engine == "llama.cpp" else 2)
            # where the step spends its time: the busy share's split, as the page gives it
            for cell, ms in ((side["cell"], side["step_ms"]), (side["baseline_cell"],
                                                             side["plain_ms"])):
                split = mod.step_split(trials[engine], cell, ms["geomean"])
                busy, host = f"{split['gpu_busy_ms']:.2f}", f"{split['host_ms']:.2f}"
                assert (f"{busy} + {host} ms" in flat or f"{busy} ms of GPU work and {host} ms"
                        in flat), (engine, cell)
        (row,) = [ln for ln in section.splitlines() if ln.startswith(f"| {name} | ")]
        for key in ("tok_s", "step_ms", "plain_ms", "cost"):
            r = out["ratios"][key]
            assert interval(r["ratio"], r["ci"], 3) in row, key
            assert r["ci"][1] < 1 or r["ci"][0] > 1  # the page's words rest on these
        steps = (out["b"]["step_ms"]["geomean"], out["a"]["step_ms"]["geomean"])
        assert f"{steps[0]:.2f} against {steps[1]:.2f} ms" in row


def test_the_draft_model_on_one_h200_has_no_ranking() -> None:
    """The 2026-12-01 draft-model study (both engines in one archive, 3 starts per arm): the
    page's step ratios at n = 2 and 4 and the plain-step ratio are the script's, the step
    intervals span 1 (so the page ranks neither engine), the plain step's does not."""
    from bench_loader import load_benchmark

    mod = load_benchmark("cross_engine_step.py")
    flat = " ".join(same_machine_section().split())
    with open_run(ROOT / "examples/h200-cross/round1/h200-cross-round1.zip") as frames:
        analysis = frames.analysis
        rates = frames.trials
    for n in (2, 4):
        out = mod.compare(analysis, analysis, "synth-a0.9", n=n, engines=("llama", "vllm"))
        r = out["ratios"]["step_ms"]
        assert r["ci"][0] < 1 < r["ci"][1]
        assert f"{interval(r['ratio'], r['ci'], 3)} at n = {n}" in flat.replace(
            "of llama.cpp's time at n = 2", "at n = 2")
        assert out["a"]["tok_s"]["starts"] == out["b"]["tok_s"]["starts"] == 3
    p = out["ratios"]["plain_ms"]
    assert p["ci"][0] > 1 and f"{interval(p['ratio'], p['ci'], 3)} of llama.cpp's" in flat
    plain = (out["b"]["plain_ms"]["geomean"], out["a"]["plain_ms"]["geomean"])
    assert f"({plain[0]:.2f} against {plain[1]:.2f} ms)" in flat  # vLLM's, then llama.cpp's
    arm = rates[rates["cell"].str.startswith("vllm/t8b-hf/synth-a0.9")]["pooled_tok_s"]
    assert f"from {arm.min():.0f} to {arm.max():.0f} tok/s" in flat


def test_compare_of_the_one_machine_cells_is_the_pages(tmp_path: Path) -> None:
    """`crossbench compare` of the two engines' EAGLE-3 cells (taken out of the archives):
    labelled multi-variable across engines, and its per-request decode ratio is the page's."""
    import json
    import subprocess
    import sys
    import zipfile

    cells = []
    for archive, cell in ((SAME_LLAMA, "llama__t8b-f16__eagle3-a0.9__n4__builtin-mixed__c1"),
                          (SAME_VLLM, "vllm__t8b-hf__eagle3-a0.9__n4__builtin-mixed__c1")):
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp_path)
        cells.append(tmp_path / archive.stem / "data" / "cells" / cell)
    done = subprocess.run([sys.executable, "-m", "crossbench", "compare", *map(str, cells),
                           "--json"], capture_output=True, text=True, check=True, cwd=ROOT)
    out = json.loads(done.stdout)
    assert out["label"].startswith("multi-variable")
    sp = out["speedup"]
    flat = " ".join(same_machine_section().split())
    assert (f"vLLM's decode {interval(sp['geomean'], sp['ci95'], 3)} times llama.cpp's "
            f"({sp['n_samples']} pairs over {sp['n_prompts']} prompts)") in flat


MTP2 = H100 / "mtp2-part1"
NGRAM2 = H100 / "ngram2-part1/h100-ngram2-part1-llama-ngram2.zip"


def mtp2_section() -> str:
    """The page's section on `mtp2 PART=1` and `ngram2 PART=1` (one H100, 2026-12-07)."""
    return doc_section("## llama.cpp's MTP at the other alpha and its step split")


def test_llamas_mtp_at_alpha_07_rows_line_and_c16_are_the_archive() -> None:
    """`mtp2 PART=1`: each c=1 row (MAL, speedup and interval, C(n)), the alpha 0.7 line with
    its intervals and R², the clipped expectation of each MAL, the alpha 0.9 step against the
    line's C(4), the c=16 outputs and per-request range, and which pairs are host-bound: all
    from the archive's raw records; one start per arm, so no verdict word in any row."""
    section = mtp2_section()
    flat = " ".join(section.split()).replace("**", "")
    with open_run(MTP2 / "h100-mtp2-part1-llama-mtp2.zip") as frames:
        a = frames.analysis
    pairs = {(p["arm"], p["n"], p["concurrency"]): p for p in a["pairs"]}
    cells = {(c["arm"], c["n"], c["concurrency"]): c for c in a["cells"]}
    cost = {}
    for (arm, n, c), p in pairs.items():
        if c != 1:
            continue
        sp, mal = p["speedup"], p["acceptance"]["mean_acceptance_length"]
        assert sp["start_ci95"] is None  # one start per arm
        cost[(arm, n)] = mal / sp["geomean"]
        row = (f"| MTP, alpha {arm[-3:]} | {n} | {mal:.3f} | "
               f"{interval(sp['geomean'], sp['ci95'], 3)} | {cost[(arm, n)]:.3f} |")
        assert row in section, row
    assert len(cost) == 5
    assert f"baseline {pairs[('mtp-a0.7', 1, 1)]['baseline_tok_s']:.1f} tok/s" in flat
    (line,) = [s["cost_model"] for s in a["sweeps"]
               if s["arm"] == "mtp-a0.7" and s["concurrency"] == 1]
    assert (f"d {interval(line['d'], line['d_ci95'], 3)}, "
            f"v {interval(line['v'], line['v_ci95'], 3)}") in flat
    assert f"R² {line['r2']:.3f}" in flat
    expected = [cells[("mtp-a0.7", n, 1)]["acceptance"]["expected_mean_acceptance_length"]
                for n in (1, 2, 4, 8)]
    assert "(" + ", ".join(f"{x:.3f}" for x in expected) in flat
    c4 = line["d"] + 4 * line["v"]
    mal09 = pairs[("mtp-a0.9", 4, 1)]["acceptance"]["mean_acceptance_length"]
    assert f"C(4) = {c4:.3f}" in flat and f"measured {cost[('mtp-a0.9', 4)]:.3f}" in flat
    assert f"predicted {mal09 / c4:.3f}x" in flat
    assert f"cost {cost[('mtp-a0.9', 4)] / cost[('mtp-a0.7', 4)]:.3f} times" in flat
    wall = {k: c["throughput"]["wall_output_tok_s"] for k, c in cells.items() if k[2] == 16}
    base = wall.pop(("none", None, 16))
    assert f"baseline's output {base:.1f} tok/s" in flat
    for (arm, n, _), tok_s in wall.items():
        assert f"n = {n}: {tok_s:.1f} ({tok_s / base:.2f})" in flat, (arm, n)
    per_request = [p["speedup"]["geomean"] for k, p in pairs.items() if k[2] == 16]
    assert f"{min(per_request):.2f}-{max(per_request):.2f} of the baseline's" in flat
    bound = {k for k, p in pairs.items() if any(w["kind"] == "host_bound" for w in p["warnings"])}
    assert bound == {("mtp-a0.7", 1, 16), ("mtp-a0.7", 2, 16), ("mtp-a0.7", 4, 16),
                     ("mtp-a0.9", 4, 16)}
    table = section[section.index("| arm | n | MAL |"):section.index("- **The alpha 0.7")]
    assert "faster" not in table and "slower" not in table


def test_llamas_mtp_step_split_is_decompose_and_not_settled() -> None:
    """The MTP step split: the plain step, each pass in ms and in plain steps, the share each
    n leaves unexplained, the repetitions' spread, all from decompose-mtp.json, whose line is
    the archive's; the page says the split is not settled, as no n but one is within 10 %."""
    import json

    flat = " ".join(mtp2_section().split()).replace("**", "")
    d = json.loads((MTP2 / "decompose-mtp.json").read_text())
    rows = d["rows"]
    assert f"a plain step costs {rows[0]['plain_ms']:.3f} ms" in flat
    ms = [f"{r['verify_ms']:.2f}" for r in rows]
    steps = [f"{r['verify_steps']:.2f}" for r in rows]
    assert f"{', '.join(ms[:-1])} and {ms[-1]} ms" in flat
    assert f"{', '.join(steps[:-1])} and {steps[-1]} plain steps" in flat
    shares = [round(100 * r["rest_share"]) for r in rows]
    assert f"over-explains n = 1 ({shares[0]} %), matches n = 2 (+{shares[1]} %)" in flat
    assert f"leaves {shares[2]} % and {shares[3]} % unexplained" in flat
    assert [r["explained"] for r in rows] == [False, True, False, False]
    samples = [x / 1e6 for t in d["raw"]["target"] if t["n_gen"] == 0 for x in t["samples_ns"]]
    assert f"spread {min(samples):.1f}-{max(samples):.1f} ms" in flat
    assert "Not settled" in flat
    with open_run(MTP2 / "h100-mtp2-part1-llama-mtp2.zip") as frames:
        (line,) = [s["cost_model"] for s in frames.analysis["sweeps"]
                   if s["arm"] == "mtp-a0.7" and s["concurrency"] == 1]
    assert (d["d"], d["v"]) == pytest.approx((line["d"], line["v"]))


def test_llamas_ngram_at_c16_free_of_replay_is_the_archive_and_not_settled() -> None:
    """`ngram2 PART=1`: each row (the baseline and its starts, the ratio with both intervals,
    the outputs) is the archive's; nothing drafted, no replay note; at c=16 the starts'
    interval holds 1, so the page gives no verdict word for it."""
    section = mtp2_section()
    flat = " ".join(section.split()).replace("**", "")
    with open_run(NGRAM2) as frames:
        a = frames.analysis
    cells = {(c["arm"], c["concurrency"]): c for c in a["cells"]}
    for p in a["pairs"]:
        c = p["concurrency"]
        base, spec = cells[("none", c)], cells[("ngram", c)]
        starts = base["per_trial_pooled_tok_s"]
        sp = p["speedup"]
        out_b, out_s = (x["throughput"]["wall_output_tok_s"] for x in (base, spec))
        row = (f"| {c} | {base['throughput']['pooled_tok_s']:.1f} ({starts['0']:.1f}, "
               f"{starts['1']:.1f}) | {interval(sp['geomean'], sp['ci95'], 3)} | "
               f"[{sp['start_ci95'][0]:.3f}, {sp['start_ci95'][1]:.3f}] | "
               f"{out_b:.1f} → {out_s:.1f}")
        assert row in section, row
        assert spec["acceptance"]["draft_tokens"] == 0
        assert not [w for w in p["warnings"] if w["kind"] == "draft_replay"]
        if c == 16:
            lo, hi = sp["start_ci95"]
            assert lo < 1 < hi and "the 6 % is not settled" in flat
            assert f"in {round(96 * (1 - p['parity']['exact_match_rate']))} of 96 pairs" in flat


MTP2_VLLM = H100 / "mtp2-part2/h100-mtp2-part2-vllm-mtp2.zip"
MTP2_REPS = H100 / "mtp2-part4/decompose-mtp-reps.json"


def mtp2_vllm_section() -> str:
    """The page's section on `mtp2 PART=2` and `PART=4` (one H100, 2026-12-07)."""
    return doc_section("## vLLM's MTP at n = 8 and at alpha 0.7")


def test_vllms_mtp_at_n8_and_alpha_07_rows_and_c16_are_the_archive() -> None:
    """`mtp2 PART=2`: each c=1 row (MAL beside the unclipped expectation of the scripted
    rates, speedup with its interval, C(n)), the ratio to round 3's H200 line, the c=16
    outputs, per-request ratios and host figures, which pairs are host-bound, the starts: all
    from the archive's raw records; one start per arm, so no verdict word in the table."""
    section = mtp2_vllm_section()
    flat = " ".join(section.split()).replace("**", "")
    with open_run(MTP2_VLLM) as frames:
        a = frames.analysis
        trials = frames.trials
    pairs = {(p["arm"], p["n"], p["concurrency"]): p for p in a["pairs"]}
    cells = {(c["arm"], c["n"], c["concurrency"]): c for c in a["cells"]}
    assert set(pairs) == {("mtp-a0.9", 8, 1), ("mtp-a0.7", 4, 1), ("mtp-a0.9", 8, 16),
                          ("mtp-a0.7", 4, 16)}
    round3 = (1.225, 0.139)  # the page's round 3 line (tested against its archive above)
    for arm, n in (("mtp-a0.9", 8), ("mtp-a0.7", 4)):
        p = pairs[(arm, n, 1)]
        sp, mal = p["speedup"], p["acceptance"]["mean_acceptance_length"]
        assert sp["start_ci95"] is None  # one start per arm
        alpha = float(arm[-3:])
        expected = 1 + sum(alpha ** k for k in range(1, n + 1))
        cost = mal / sp["geomean"]
        row = (f"| MTP, alpha {alpha} | {n} | {mal:.3f} ({expected:.3f}) | "
               f"{interval(sp['geomean'], sp['ci95'], 3)} | {cost:.3f} |")
        assert row in section, row
        line_c = round3[0] + round3[1] * n
        assert f"C({n}) {line_c:.3f}" in flat
        assert f"{cost / line_c:.3f}" in flat
    base1 = pairs[("mtp-a0.7", 4, 1)]["baseline_tok_s"]
    assert f"Baseline {base1:.1f} tok/s" in flat
    table = section[section.index("| arm | n | MAL"):section.index("- **Against round 3")]
    assert "faster" not in table and "slower" not in table
    wall = {k[:2]: c["throughput"]["wall_output_tok_s"] for k, c in cells.items() if k[2] == 16}
    base = wall.pop(("none", None))
    assert f"baseline's output {base:,.1f} tok/s" in flat
    assert (f"n = 8 {wall[('mtp-a0.9', 8)]:,.1f} ({wall[('mtp-a0.9', 8)] / base:.2f}), "
            f"alpha 0.7 n = 4 {wall[('mtp-a0.7', 4)]:,.1f} "
            f"({wall[('mtp-a0.7', 4)] / base:.2f})") in flat
    c16 = [pairs[("mtp-a0.9", 8, 16)], pairs[("mtp-a0.7", 4, 16)]]
    assert (f"{interval(c16[0]['speedup']['geomean'], c16[0]['speedup']['ci95'], 3)} and "
            f"{interval(c16[1]['speedup']['geomean'], c16[1]['speedup']['ci95'], 3)} of the "
            f"baseline's {c16[0]['baseline_tok_s']:.1f} tok/s") in flat
    bound = {k for k, p in pairs.items() if any(w["kind"] == "host_bound" for w in p["warnings"])}
    assert bound == {("mtp-a0.9", 8, 16), ("mtp-a0.7", 4, 16)}
    host = {k[:2]: c["host_time"] for k, c in cells.items() if k[2] == 16}
    busy = [host[k]["gpu_busy_share"] for k in (("mtp-a0.9", 8), ("mtp-a0.7", 4), ("none", None))]
    assert (f"GPU busy {busy[0]:.2f} and {busy[1]:.2f} of the window against the baseline's "
            f"{busy[2]:.2f}") in flat
    ms = [host[k]["host_ms_per_token"]["mean"] for k in (("mtp-a0.9", 8), ("mtp-a0.7", 4),
                                                           ("none", None))]
    assert f"{ms[0]:.2f} and {ms[1]:.2f} ms of host a token against its {ms[2]:.2f}" in flat
    gpu = [host[k]["busy_ms_per_token"]["mean"] for k in (("mtp-a0.9", 8), ("mtp-a0.7", 4),
                                                           ("none", None))]
    assert f"({gpu[0]:.2f} and {gpu[1]:.2f} ms against {gpu[2]:.2f})" in flat
    windows = [c["host_time"]["per_trial"]["0"]["wall_s"] for k, c in cells.items()
               if k[2] == 16]
    assert f"windows of {min(windows):.1f}-{max(windows):.1f} s" in flat
    c1 = {k[:2]: c["host_time"]["gpu_busy_share"] for k, c in cells.items() if k[2] == 1}
    assert (f"GPU busy {c1[('none', None)]:.2f} of the baseline's window, "
            f"{c1[('mtp-a0.9', 8)]:.2f} and {c1[('mtp-a0.7', 4)]:.2f}") in flat
    ups = sorted(trials["startup_s"].dropna())  # each start once: c=1 and c=16 share it
    assert len(ups) == 3
    assert f"Starts: {ups[0]:.1f}, {ups[1]:.1f} and {ups[2]:.1f} s to ready, all cold" in flat
    assert [s.cache for _, s, _, _ in _starts(MTP2_VLLM)] == ["cold"] * 3


def test_llamas_mtp_split_on_ten_repetitions_is_decompose() -> None:
    """`mtp2 PART=4`: the plain step, each pass in ms and in plain steps, the warm-up
    repetitions and the steady ones, the medians, the rest against the line and its slope
    over n: all from decompose-mtp-reps.json, whose line is `PART=1`'s archive's."""
    import json
    import statistics

    import numpy as np

    flat = " ".join(mtp2_vllm_section().split()).replace("**", "")
    d = json.loads(MTP2_REPS.read_text())
    rows = d["rows"]
    assert [r["n"] for r in rows] == [1, 2, 4, 8]
    assert f"A plain step costs {rows[0]['plain_ms']:.3f} ms" in flat
    ms = [f"{r['verify_ms']:.2f}" for r in rows]
    steps = [f"{r['verify_steps']:.2f}" for r in rows]
    assert f"{', '.join(ms[:-1])} and {ms[-1]} ms (means)" in flat
    assert f"{', '.join(steps[:-1])} and {steps[-1]} plain steps" in flat
    passes = [t for t in d["raw"]["target"] if t["n_gen"] == 0]
    assert [len(t["samples_ns"]) for t in passes] == [10] * 4
    first = [x / 1e6 for t in passes for x in t["samples_ns"][:2]]
    steady = [[x / 1e6 for x in t["samples_ns"][2:]] for t in passes]
    assert f"first two repetitions of every pass took {min(first):.1f}-{max(first):.1f} ms" in flat
    lo, hi = min(map(min, steady)), max(map(max, steady))
    assert f"the other eight lie within {lo:.2f}-{hi:.2f} ms" in flat
    assert max(min(first) - hi, 0) > 0  # every warm-up repetition slower than every steady one
    assert f"within {max(max(s) - min(s) for s in steady):.2f} ms" in flat
    medians = [statistics.median(t["samples_ns"]) / 1e6 for t in passes]
    assert f"medians {', '.join(f'{m:.2f}' for m in medians[:-1])} and {medians[-1]:.2f} ms" in flat
    (plain,) = [t for t in d["raw"]["target"] if t["n_gen"]]
    plain_med = statistics.median(plain["samples_ns"]) / 1e6 / plain["n_gen"]
    assert f"{medians[0] / plain_med:.2f}-{medians[-1] / plain_med:.2f} plain steps" in flat
    rest = [r["rest_steps"] for r in rows]
    assert f"{', '.join(f'{x:.3f}' for x in rest[:-1])} and {rest[-1]:.3f} plain steps" in flat
    shares = [round(100 * r["rest_share"]) for r in rows]
    assert f"({shares[0]} %, {shares[1]} %, {shares[2]} % and {shares[3]} % of C(n))" in flat
    ns = np.array([r["n"] for r in rows], dtype=float)
    slope = np.polyfit(ns, rest, 1)[0]
    pass_slope = np.polyfit(ns, [r["verify_steps"] for r in rows], 1)[0]
    assert f"{slope:.3f} plain steps a drafted token" in flat
    assert f"the pass's own slope {pass_slope:.3f}" in flat
    assert slope + pass_slope == pytest.approx(d["v"])  # the line's v, split in two
    assert [r["explained"] for r in rows] == [True, False, False, False]
    assert "at n = 1 only" in flat
    with open_run(MTP2 / "h100-mtp2-part1-llama-mtp2.zip") as frames:
        (line,) = [s["cost_model"] for s in frames.analysis["sweeps"]
                   if s["arm"] == "mtp-a0.7" and s["concurrency"] == 1]
    assert (d["d"], d["v"]) == pytest.approx((line["d"], line["v"]))
    assert f"({line['d']:.3f} + {line['v']:.3f} n)" in flat


MTP2_WARM = H100 / "mtp2-part5/h100-mtp2-part5-vllm-mtp-warm.zip"


def _starts(archive: Path) -> list[tuple[str, Any, dict[str, Any], Any]]:
    """Every server start of ``archive``: its cell's arm, :func:`rundir.trial_start` of each
    trial entry that made one, the start-up facts vLLM's log gave (``server_props.startup``)
    and the cell's n."""
    with open_run(archive) as frames:
        return [(str(c.coords.get("arm")), start, entry["server_props"]["startup"],
                 c.coords.get("n"))
                for c in frames.run.cells
                for entry in c.manifest.get("trials") or []
                if (start := rundir.trial_start(entry)) is not None]


def test_vllms_warm_start_of_the_hybrid_target_is_the_archives() -> None:
    """`mtp2 PART=5`: the start's time to ready and its phases (warm, from the carried cache)
    against `PART=2`'s cold baseline start, and both cells' rates beside `PART=2`'s: from the
    two archives' raw records and manifests; two machines, one start each."""
    flat = " ".join(mtp2_vllm_section().split()).replace("**", "")
    with open_run(MTP2_WARM) as frames:
        warm_trials, warm_cells = frames.trials, frames.analysis["cells"]
    with open_run(MTP2_VLLM) as frames:
        cold_trials, cold_cells = frames.trials, frames.analysis["cells"]
    (warm,) = warm_trials["startup_s"].dropna()
    cold = cold_trials.loc[cold_trials["arm"] == "none", "startup_s"].dropna().iloc[0]
    assert f"{warm:.1f} s to ready, `warm`" in flat and f"against {cold:.1f} s cold" in flat
    assert warm < cold / 3  # what the carried cache saved, measured
    ((_, start, facts, _),) = _starts(MTP2_WARM)
    assert start.cache == "warm"
    assert (f"(engine init {start.engine_init_s:.1f} s, torch.compile {start.compile_s:.1f} s)"
            in flat)
    (cold_facts,) = [f for arm, _, f, _ in _starts(MTP2_VLLM) if arm == "none"]
    profile = [facts["profile_run_s"], cold_facts["profile_run_s"]]
    assert f"took {profile[0]:.2f} s against {profile[1]:.2f} s" in flat
    base = {c["concurrency"]: c for c in cold_cells if c["arm"] == "none"}
    for c in warm_cells:
        w = c["throughput"]["pooled_tok_s"]
        b = base[c["concurrency"]]["throughput"]["pooled_tok_s"]
        assert f"{w:.1f} tok/s" in flat and f"{b:.1f}" in flat
        assert f"({100 * (w / b - 1):+.1f} %)" in flat
        if c["concurrency"] == 16:
            out_w = c["throughput"]["wall_output_tok_s"]
            out_b = base[16]["throughput"]["wall_output_tok_s"]
            assert f"output of {out_w:,.1f} tok/s against {out_b:,.1f}" in flat


MTP3_VLLM = H100 / "mtp2-part3/h100-mtp2-part3-vllm-mtp3.zip"
MTP5_AGAIN = H100 / "mtp2-part5b/h100-mtp2-part5-vllm-mtp-warm.zip"


def mtp3_vllm_section() -> str:
    """The page's section on `mtp2 PART=3` and `PART=5` again (one H100, 2026-12-07)."""
    return doc_section("## vLLM's MTP line at alpha 0.7")


def test_vllms_mtp_line_at_alpha_07_is_the_archive() -> None:
    """`mtp2 PART=3`: each c=1 row (MAL beside the unclipped expectation, speedup and
    interval, C(n)), the line with its intervals and R², its C(4) against `PART=2`'s n = 4, the
    line in milliseconds beside llama.cpp's (`mtp2 PART=1`), the c=16 outputs, per-request
    ratios and host figures, which pairs are host-bound, and each start warm or cold with its
    phases: all from the archives' raw records; one start per arm, so no verdict word."""
    section = mtp3_vllm_section()
    flat = " ".join(section.split()).replace("**", "")
    with open_run(MTP3_VLLM) as frames:
        a = frames.analysis
    pairs = {(p["arm"], p["n"], p["concurrency"]): p for p in a["pairs"]}
    cells = {(c["arm"], c["n"], c["concurrency"]): c for c in a["cells"]}
    assert {k for k in pairs if k[2] == 1} == {("mtp-a0.7", n, 1) for n in (1, 2, 8)}
    for n in (1, 2, 8):
        p = pairs[("mtp-a0.7", n, 1)]
        sp, mal = p["speedup"], p["acceptance"]["mean_acceptance_length"]
        assert sp["start_ci95"] is None  # one start per arm
        expected = 1 + sum(0.7 ** k for k in range(1, n + 1))
        row = (f"| MTP, alpha 0.7 | {n} | {mal:.3f} ({expected:.3f}) | "
               f"{interval(sp['geomean'], sp['ci95'], 3)} | {mal / sp['geomean']:.3f} |")
        assert row in section, row
    base = pairs[("mtp-a0.7", 1, 1)]["baseline_tok_s"]
    assert f"Baseline {base:.1f} tok/s" in flat
    table = section[section.index("| arm | n | MAL"):section.index("- **The line")]
    assert "faster" not in table and "slower" not in table
    (line,) = [s["cost_model"] for s in a["sweeps"] if s["concurrency"] == 1]
    assert (f"d {interval(line['d'], line['d_ci95'], 3)} + "
            f"v {interval(line['v'], line['v_ci95'], 3)} n (R² {line['r2']:.3f}") in flat
    c4 = line["d"] + 4 * line["v"]
    (at4,) = [x for x in line["predicted"] if x["n"] == 4]
    assert max(line["predicted"], key=lambda x: x["speedup"])["n"] == 4
    assert f"C(4) {c4:.3f} and {at4['speedup']:.3f}x at n = 4, the best n" in flat
    with open_run(MTP2_VLLM) as frames:
        (p4,) = [p for p in frames.analysis["pairs"]
                 if p["arm"] == "mtp-a0.7" and p["concurrency"] == 1]
    m4 = p4["acceptance"]["mean_acceptance_length"] / p4["speedup"]["geomean"]
    assert (f"measured {m4:.3f} ({p4['speedup']['geomean']:.3f}x), "
            f"{100 * (m4 / c4 - 1):.1f} % above the line") in flat
    with open_run(MTP2 / "h100-mtp2-part1-llama-mtp2.zip") as frames:
        (llama,) = [s["cost_model"] for s in frames.analysis["sweeps"]
                    if s["arm"] == "mtp-a0.7" and s["concurrency"] == 1]
        llama_base = next(p for p in frames.analysis["pairs"]
                      if p["arm"] == "mtp-a0.7" and p["concurrency"] == 1)["baseline_tok_s"]
    assert f"another H100, {llama['d']:.3f} + {llama['v']:.3f} n of its {1000 / llama_base:.2f} ms" in flat
    assert (f"vLLM's d is {line['d'] * 1000 / base:.2f} ms and its v "
            f"{line['v'] * 1000 / base:.2f} ms a drafted token ({1000 / base:.2f} ms plain "
            f"step), llama.cpp's {llama['d'] * 1000 / llama_base:.2f} and "
            f"{llama['v'] * 1000 / llama_base:.2f} ms") in flat
    wall = {k[:2]: c["throughput"]["wall_output_tok_s"] for k, c in cells.items() if k[2] == 16}
    out = wall.pop(("none", None))
    assert f"baseline's output {out:,.1f} tok/s" in flat
    assert ", ".join(f"n = {n} {wall[('mtp-a0.7', n)]:,.1f} ({wall[('mtp-a0.7', n)] / out:.2f})"
                     for n in (1, 2, 8)) in flat
    c16 = [pairs[("mtp-a0.7", n, 16)] for n in (1, 2, 8)]
    ivs = [interval(p["speedup"]["geomean"], p["speedup"]["ci95"], 3) for p in c16]
    assert (f"{ivs[0]}, {ivs[1]} and {ivs[2]} of the baseline's "
            f"{c16[0]['baseline_tok_s']:.1f} tok/s") in flat
    bound = {k for k, p in pairs.items() if any(w["kind"] == "host_bound" for w in p["warnings"])}
    assert bound == {("mtp-a0.7", n, 16) for n in (1, 2, 8)}
    host = {k[:2]: c["host_time"] for k, c in cells.items() if k[2] == 16}
    order = [("mtp-a0.7", 1), ("mtp-a0.7", 2), ("mtp-a0.7", 8), ("none", None)]
    busy = [host[k]["gpu_busy_share"] for k in order]
    assert (f"GPU busy {busy[0]:.2f}, {busy[1]:.2f} and {busy[2]:.2f} of the window against the "
            f"baseline's {busy[3]:.2f}") in flat
    ms = [host[k]["host_ms_per_token"]["mean"] for k in order]
    assert f"{ms[0]:.2f}, {ms[1]:.2f} and {ms[2]:.2f} ms of host a token against its {ms[3]:.2f}" \
        in flat
    starts = {(arm, n): (start, facts) for arm, start, facts, n in _starts(MTP3_VLLM)}
    warm = [starts[("none", None)], starts[("mtp-a0.7", 8)]]
    cold = [starts[("mtp-a0.7", 1)], starts[("mtp-a0.7", 2)]]
    assert [s.cache for s, _ in warm] == ["warm", "warm"]
    assert [s.cache for s, _ in cold] == ["cold", "cold"]
    assert (f"the baseline's {warm[0][0].startup_s:.1f} s and n = 8's "
            f"{warm[1][0].startup_s:.1f} s to ready, `warm`") in flat
    assert (f"(engine init {warm[0][0].engine_init_s:.1f} and {warm[1][0].engine_init_s:.1f} s, "
            f"profiling run {warm[0][1]['profile_run_s']:.2f} and "
            f"{warm[1][1]['profile_run_s']:.2f} s)") in flat
    assert (f"{cold[0][0].startup_s:.1f} and {cold[1][0].startup_s:.1f} s, `cold` (engine init "
            f"{cold[0][0].engine_init_s:.1f} and {cold[1][0].engine_init_s:.1f} s, profiling "
            f"run {cold[0][1]['profile_run_s']:.2f} and {cold[1][1]['profile_run_s']:.2f} s)"
            ) in flat


def test_two_warm_starts_of_the_hybrid_target_on_one_machine_are_the_archives() -> None:
    """`mtp2 PART=5` chained after `PART=3`: the second warm start of the baseline against
    `PART=3`'s, both cells' rates and the c=16 output against it, and `PART=5`'s earlier
    cold-to-warm difference inside that spread: from the three archives' raw records."""
    flat = " ".join(mtp3_vllm_section().split()).replace("**", "")
    ((_, again, facts, _),) = _starts(MTP5_AGAIN)
    (first,) = [s for arm, s, _, _ in _starts(MTP3_VLLM) if arm == "none"]
    assert again.cache == first.cache == "warm"
    assert f"{again.startup_s:.1f} s to ready (engine init {again.engine_init_s:.1f} s, " \
        f"profiling run {facts['profile_run_s']:.2f} s) against `PART=3`'s " \
        f"{first.startup_s:.1f} s" in flat
    with open_run(MTP5_AGAIN) as frames:
        cells_again = {c["concurrency"]: c["throughput"] for c in frames.analysis["cells"]}
    with open_run(MTP3_VLLM) as frames:
        cells_first = {c["concurrency"]: c["throughput"] for c in frames.analysis["cells"]
                       if c["arm"] == "none"}
    change = {}
    for conc in (1, 16):
        w, b = cells_again[conc]["pooled_tok_s"], cells_first[conc]["pooled_tok_s"]
        change[conc] = 100 * (w / b - 1)
        assert f"{w:.1f}" in flat and f"against {b:.1f}" in flat
        assert f"({change[conc]:+.1f} %)" in flat
    o_again, o_first = (cells_again[16]["wall_output_tok_s"],
                        cells_first[16]["wall_output_tok_s"])
    assert f"output of {o_again:,.1f} against {o_first:,.1f} tok/s" in flat
    with open_run(MTP2_WARM) as frames:
        warm1 = next(c["throughput"]["pooled_tok_s"] for c in frames.analysis["cells"]
                 if c["concurrency"] == 1)
    with open_run(MTP2_VLLM) as frames:
        cold1 = next(c["throughput"]["pooled_tok_s"] for c in frames.analysis["cells"]
                 if c["concurrency"] == 1 and c["arm"] == "none")
    earlier = 100 * (warm1 / cold1 - 1)
    assert f"({earlier:+.1f} % at c=1, two machines) lies within it" in flat
    assert abs(earlier) < abs(change[1])


SPLIT = H100 / "vllm-split"


def vllm_split_section() -> str:
    """The page's section on round `vllm-split` (one H100, 2026-12-07 afternoon)."""
    return doc_section("## vLLM's step split, decode alone")


def _table_line(method: str, engine: str) -> tuple[float, float]:
    """The d and v the cost-model table prints for ``method`` in ``engine`` (llama, vllm)."""
    cells = [c.strip() for c in table_row(method).strip("|").split("|")]
    at = {"llama": 1, "vllm": 4}[engine]
    return float(cells[at].split()[0]), float(cells[at + 1].split()[0])


def test_vllms_step_split_decode_alone_is_decompose_on_the_archives(tmp_path: Path) -> None:
    """`vllm-split`: each c=1 row (MAL, speedup and interval, C(n)), the baseline, the batch
    shapes, the split of each step (`crossbench decompose --verify-from --from`, run here on
    the two archives) in plain steps and ms, the extra host time, the parts against the cost
    model's C(4), and each start: all from the archives' raw records; one start per arm, so
    no verdict word."""
    import json

    from click.testing import CliRunner

    from crossbench.cli.main import cli

    section = vllm_split_section()
    flat = " ".join(section.split()).replace("**", "")
    with open_run(SPLIT / "h100-vllm-split-vllm-split.zip") as frames:
        a = frames.analysis
    pairs = {p["arm"]: p for p in a["pairs"]}
    assert set(pairs) == {"eagle3-a0.9", "dflash-a0.9"}
    configured = 1 + sum(0.9 ** k for k in range(1, 5))
    assert f"MAL (configured {configured:.3f})" in flat
    table = section[:section.index("**The split**")]
    assert "faster" not in table and "slower" not in table
    for arm, label in (("eagle3-a0.9", "EAGLE-3"), ("dflash-a0.9", "DFlash")):
        p = pairs[arm]
        sp, mal = p["speedup"], p["acceptance"]["mean_acceptance_length"]
        assert sp["start_ci95"] is None  # one start per arm
        row = (f"| {label}, alpha 0.9 | 4 | {mal:.3f} | {interval(sp['geomean'], sp['ci95'], 3)}"
               f" | {mal / sp['geomean']:.3f} |")
        assert row in flat, row
    mals = {p["acceptance"]["mean_acceptance_length"] for p in pairs.values()}
    assert len(mals) == 1 and f"MAL {mals.pop():.5f} each" in flat
    base = next(c for c in a["cells"] if c["arm"] == "none")
    assert (f"Baseline {base['throughput']['pooled_tok_s']:.1f} tok/s "
            f"({base['latency_ms']['tpot']['p50']:.2f} ms TPOT p50)") in flat
    rows = {}
    for arm in pairs:
        out = tmp_path / f"{arm}.json"
        done = CliRunner().invoke(cli, [
            "decompose", "--verify-from", str(SPLIT / "h100-vllm-split-vllm-shapes.zip"),
            "--from", str(SPLIT / "h100-vllm-split-vllm-split.zip"), "--arm", arm,
            "--n", "4", "--engine", "vllm", "--out", str(out)])
        assert done.exit_code == 0, done.output
        (rows[arm],) = json.loads(out.read_text())["rows"]
        # the round's own decompose step wrote the same verification and measured C(n)
        own = json.loads((SPLIT / f"decompose-vllm-{arm.split('-')[0]}.json").read_text())
        assert own["rows"][0]["verify_steps"] == pytest.approx(rows[arm]["verify_steps"])
        assert own["rows"][0]["measured_steps"] == pytest.approx(rows[arm]["measured_steps"])
    e, f = rows["eagle3-a0.9"], rows["dflash-a0.9"]
    assert e["window"] == f["window"] == "decode"
    base_ms = e["telemetry_base_ms"]
    assert (f"in the baseline's decode step by the same telemetry, {base_ms:.2f} ms: GPU work "
            f"{e['telemetry_base_busy_ms']:.2f} ms and idle "
            f"{base_ms - e['telemetry_base_busy_ms']:.2f} ms a token, so the plain step is "
            f"{1 - e['base_idle_steps']:.2f} GPU work and {e['base_idle_steps']:.2f} idle") in flat
    for r, label in ((e, "EAGLE-3"), (f, "DFlash")):
        parts = (r["verify_gpu_steps"], r["beyond_gpu_steps"], r["idle_steps"])
        assert sum(parts) == pytest.approx(r["telemetry_steps"])
        ms = [x * base_ms for x in (r["telemetry_steps"], *parts)]
        row = (f"| {label} | {r['telemetry_steps']:.3f} ({ms[0]:.2f} ms) | "
               + " | ".join(f"{x:.3f} ({y:.2f} ms)" for x, y in zip(parts, ms[1:], strict=True))
               + f" | {r['measured_steps']:.3f} |")
        assert row in flat, row
        assert abs(r["telemetry_steps"] / r["measured_steps"] - 1) < 0.002
    assert f"is {e['verify_steps']:.3f} plain steps ({e['verify_ms']:.2f} against " \
        f"{e['plain_ms']:.2f} ms" in flat
    with open_run(SPLIT / "h100-vllm-split-vllm-shapes.zip") as frames:
        step = {c["concurrency"]: 1000 / c["throughput"]["pooled_tok_s"]
                for c in frames.analysis["cells"]}
    assert (f"the other shapes {step[2] / step[1]:.3f} at c=2, {step[3] / step[1]:.3f} at c=3, "
            f"{step[9] / step[1]:.3f} at c=9, {step[16] / step[1]:.3f} at c=16") in flat
    assert step[3] > step[5]  # the spread the page names
    assert f"{e['beyond_gpu_steps'] * base_ms / 4:.2f} ms a drafted token" in flat
    extra = [(r["host_ms_per_step"] - base_ms * r["base_idle_steps"]) for r in (e, f)]
    assert f"{extra[0]:.2f} ms and {extra[1]:.2f} ms of host work a step more" in flat
    gaps = []
    for r, method in ((e, "EAGLE-3"), (f, "DFlash")):
        d, v = _table_line(method, "vllm")
        gaps.append(100 * (1 - r["telemetry_steps"] / (d + 4 * v)))
        assert f"{d + 4 * v:.3f} for {method}" in flat
    assert f"the parts come within {gaps[0]:.1f} % and {gaps[1]:.1f} %" in flat
    assert max(gaps) < 10
    ld, lv = _table_line("EAGLE-3", "llama")
    assert (f"llama.cpp's EAGLE-3 step at n = 4 ({ld + 4 * lv:.2f} plain steps by its round-1 "
            f"line, an H200) and vLLM's here ({e['measured_steps']:.2f})") in flat
    starts = {arm: start for arm, start, _, _ in _starts(SPLIT / "h100-vllm-split-vllm-split.zip")}
    order = [starts["none"], starts["eagle3-a0.9"], starts["dflash-a0.9"]]
    assert [s.cache for s in order] == ["cold"] * 3
    assert (f"the baseline {order[0].startup_s:.1f} s, EAGLE-3 {order[1].startup_s:.1f} s, "
            f"DFlash {order[2].startup_s:.1f} s to ready (engine init "
            + ", ".join(f"{s.engine_init_s:.1f}" for s in order) + " s; compile "
            + ", ".join(f"{s.compile_s:.1f}" for s in order) + " s)") in flat
    ((_, shape, _, _),) = _starts(SPLIT / "h100-vllm-split-vllm-shapes.zip")
    assert shape.cache == "warm"
    assert (f"the shapes' baseline {shape.startup_s:.1f} s, `warm` from the round's own first "
            f"start (engine init {shape.engine_init_s:.1f} s, compile {shape.compile_s:.1f} s)"
            ) in flat


def test_the_cells_the_matrix_still_plans_are_what_the_status_names() -> None:
    """The status's count of `h200-methods.yaml` cells no archive under examples/ holds, and
    which they are: every archive's analysed cells against the matrix's expansion."""
    from collections import Counter

    from crossbench.runner.matrix import expand, load_matrix

    seen = set()
    for archive in sorted((ROOT / "examples").glob("h*-methods/**/*.zip")):
        with open_run(archive) as frames:
            seen |= {(c["engine"], str(c["arm"]), c["n"], c["concurrency"])
                     for c in frames.analysis["cells"]}
    path = ROOT / "matrices" / "h200-methods.yaml"
    plan = {(c.coords["engine"], str(c.coords.get("arm")), c.coords.get("n"),
             int(c.coords["concurrency"])) for c in expand(load_matrix(path), path)}
    missing = plan - seen
    flat = " ".join(DOC.read_text().split())
    assert f"still plans {len(missing)} of its {len(plan)} cells that no archive" in flat
    by = Counter((e, a) for e, a, _, _ in missing)
    assert set(by) == {("vllm", "eagle3-a0.7"), ("vllm", "dflash-a0.7"), ("vllm", "draft-a0.7"),
                       ("vllm", "dflash-a0.9"), ("sglang", "eagle3-real"),
                       ("sglang", "dflash-real"), ("sglang", "draft-real"),
                       ("vllm-q35-cut", "none"), ("vllm-q35-fork", "none")}
    assert 4 not in {n for e, a, n, _ in missing if a.endswith("a0.7")}  # n = 4 ran
    assert {n for e, a, n, _ in missing if a == "dflash-a0.9"} == {2}
    assert 4 not in {n for e, a, n, _ in missing if a == "eagle3-real"}
