"""Importing real llama-server response bodies (captured from the CPU server, see
tests/data/import/README.md): round trip, figures against the bodies, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from crossbench.analysis.analyze import analyze
from crossbench.analysis.paired import StatsOptions
from crossbench.analysis.rundir import load_run
from crossbench.cli.main import cli
from crossbench.errors import UserError
from crossbench.importers.llama_server_raw import import_llama_server_raw, pattern_regex

DATA = Path(__file__).parent / "data" / "import"
RAW = DATA / "llama_server_raw"
PROMPTS = DATA / "llama_server_raw_prompts.jsonl"
PATTERN = "{model}_{arm}_t{trial}_p{prompt}.json"


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    out = tmp_path / "imp"
    import_llama_server_raw(RAW, PATTERN, "baseline", out, r"n(\d+)", PROMPTS)
    return out


def test_round_trip_reproduces_the_server_figures(imported):
    run = load_run(imported)
    assert run.kind == "import"
    by_arm = {(c.coords["arm"], c.coords["n"]): c for c in run.cells}
    assert set(by_arm) == {("baseline", None), ("draft", 2), ("draft", 4)}
    assert by_arm[("draft", 4)].coords["method"] == "draft-simple"  # speculative.types
    base = by_arm[("baseline", None)]
    assert base.coords["method"] == "none" and base.baseline is None
    assert by_arm[("draft", 2)].baseline == base.id
    for cell in run.cells:
        assert cell.manifest["imported"]["source"] == "llama-server"
        assert len(cell.figures) == 6  # 3 prompts x 2 trials
        for f, rec in zip(cell.figures, cell.records, strict=True):
            body = json.loads((RAW / rec["source"]).read_text())
            t = body["timings"]
            assert f.rate_tok_s == pytest.approx(t["predicted_per_second"], rel=1e-9)
            assert f.ttft_ms == pytest.approx(t["prompt_ms"])
            assert f.tokens == t["predicted_n"] == 16
            native = "choices" not in body
            assert (f.token_ids is not None) == native
            assert f.text == (body["content"] if native else body["choices"][0]["text"])
    cats = {f.prompt_id: f.category for f in base.figures}
    assert cats == {"code-01": "code", "math-01": "math", "creative-01": "creative"}
    assert base.load["ignore_eos"] is True and base.load["max_tokens"] == 16
    assert base.load["temperature"] == 0.0


def test_analysis_of_the_import(imported):
    r = analyze(imported, StatsOptions(resamples=1000, min_samples=4))
    pairs = {p["n"]: p for p in r["pairs"]}
    bodies = [json.loads(p.read_text()) for p in RAW.glob("tiny_draft-n2_*.json")]
    drafted = sum(b["timings"]["draft_n"] for b in bodies)
    accepted = sum(b["timings"]["draft_n_accepted"] for b in bodies)
    acc = pairs[2]["acceptance"]
    assert acc["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert acc["source"] == "timings" and acc["mean_acceptance_length"] is None
    assert pairs[2]["verdict"] == "slower"  # the fixture draft costs more than it saves
    assert pairs[2]["parity"]["verdict"] == "identical"
    assert pairs[2]["parity"]["token_level"] == "token ids"
    (sw,) = r["sweeps"]
    assert [p["n"] for p in sw["points"]] == [2, 4]
    # no draft counter: MAL is n/a and says why; tau is estimated from the bodies' counts as
    # tokens per target step, and the cost model says it used that estimate
    assert acc["mean_acceptance_length"] is None
    after = sum(b["timings"]["predicted_n"] - 1 for b in bodies)
    assert acc["mean_acceptance_length_estimate"] == pytest.approx(after / (after - accepted))
    assert "no draft counter" in acc["mal_note"]
    cm = sw["cost_model"]
    assert cm["fitted"] is True and "tokens per target step" in cm["tau_note"]


def test_unmatched_files_are_listed(imported, tmp_path):
    state = json.loads((imported / "state.json").read_text())
    assert state["not_imported"] == [{"file": "NOTES.txt", "reason":
                                      f"does not match --pattern '{PATTERN}'"}]
    manifest = json.loads(next((imported / "cells").glob("*/manifest.json")).read_text())
    assert manifest["imported"]["not_imported"] == state["not_imported"]
    r = CliRunner().invoke(cli, ["import", "llama-server", str(RAW), "--pattern", PATTERN,
                                 "--baseline-arm", "baseline", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0
    assert r.stderr.splitlines()[0] == (
        f"crossbench: not imported: NOTES.txt: does not match --pattern '{PATTERN}'")
    assert r.stdout.splitlines()[0] == f"3 cells written to {tmp_path / 'o'}"


def test_pattern_regex():
    rx = pattern_regex("{model}_{arm}_p{prompt}.json")
    m = rx.match("qwen-8b_eagle_n4_pcode-01.json")
    assert m is not None
    assert m.groupdict() == {"model": "qwen-8b", "arm": "eagle_n4", "prompt": "code-01"}
    assert rx.match("qwen_base_pcode.json.bak") is None
    assert pattern_regex("{model}-{arm}-t{trial}-{prompt}.json").match("m-a-tx-p.json") is None


@pytest.mark.parametrize(("pattern", "problem"), [
    ("{model}_{arm}.json", "missing {prompt}"),
    ("{model}_{arm}_{prompt}_{seed}.json", "unknown placeholder {seed}"),
    ("{model}_{arm}_{prompt}_{arm}.json", "a placeholder used twice"),
])
def test_bad_patterns_name_the_option(pattern, problem, tmp_path):
    with pytest.raises(UserError) as e:
        import_llama_server_raw(RAW, pattern, "baseline", tmp_path / "o")
    assert e.value.message == f"--pattern {pattern!r}: {problem}"
    assert "{model}, {arm} and {prompt}" in (e.value.hint or "")


def test_other_user_errors(tmp_path):
    with pytest.raises(UserError, match=r"--baseline-arm 'base' matches no file") as e:
        import_llama_server_raw(RAW, PATTERN, "base", tmp_path / "o")
    assert e.value.hint == "use one of the arms found: baseline, draft-n2, draft-n4"
    with pytest.raises(UserError, match="has no group"):
        import_llama_server_raw(RAW, PATTERN, "baseline", tmp_path / "o", n_from_arm=r"n\d+")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(UserError, match="already exists and is not empty"):
        import_llama_server_raw(RAW, PATTERN, "baseline", tmp_path / "full")


def _arms_named_by_n(tmp_path: Path) -> Path:
    """The captured bodies renamed to arms named only by n (``n2``, ``n4``) and stripped of
    ``speculative.types``, as many published studies store them."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for p in RAW.glob("*.json"):
        body = json.loads(p.read_text())
        (body.get("generation_settings") or {}).pop("speculative.types", None)
        name = p.name.replace("_draft-n", "_n")
        (raw / name).write_text(json.dumps(body))
    return raw


def test_arms_named_only_by_n_form_a_sweep_without_false_confounds(tmp_path):
    raw = _arms_named_by_n(tmp_path)
    import_llama_server_raw(raw, PATTERN, "baseline", tmp_path / "imp", r"n(\d+)", PROMPTS)
    run = load_run(tmp_path / "imp")
    spec = [c for c in run.cells if c.coords["method"] != "none"]
    # nothing names the method: recorded as unknown, never the arm's name
    assert {(c.coords["arm"], c.coords["method"], c.coords["n"]) for c in spec} == {
        ("unknown", "unknown", 2), ("unknown", "unknown", 4)}
    r = analyze(tmp_path / "imp", StatsOptions(resamples=500, min_samples=4))
    assert {p["verdict"] for p in r["pairs"]} <= {"faster", "slower", "indistinguishable"}
    assert all(not p["confounds"]["confounded"] for p in r["pairs"]), [
        p["confounds"].get("confounding_fields") for p in r["pairs"]]
    (sw,) = r["sweeps"]
    assert [p["n"] for p in sw["points"]] == [2, 4]
    assert sw["best"]["n"] in (2, 4) and sw["best"]["ci95"] is not None
    # with --method the arms carry it
    import_llama_server_raw(raw, PATTERN, "baseline", tmp_path / "imp2", r"n(\d+)", PROMPTS,
                            method="draft-dflash")
    methods = {c.coords["method"] for c in load_run(tmp_path / "imp2").cells}
    assert methods == {"none", "draft-dflash"}


def test_n_from_arm_group_that_is_not_a_number(tmp_path):
    with pytest.raises(UserError, match=r"--n-from-arm: the group .* is not a whole number"):
        import_llama_server_raw(RAW, PATTERN, "baseline", tmp_path / "imp", r"(draft)-n\d+",
                                PROMPTS)


def test_prompts_as_a_json_array_and_unknown_prompt_ids_listed(tmp_path):
    """A JSON array of prompts works like JSONL; prompt ids the file does not know are listed
    (imported with category unknown), as unmatched files are."""
    lines = [json.loads(x) for x in PROMPTS.read_text().splitlines() if x.strip()]
    arr = tmp_path / "prompts.json"
    arr.write_text(json.dumps([p for p in lines if p["id"] != "math-01"]))
    state = import_llama_server_raw(RAW, PATTERN, "baseline", tmp_path / "imp", r"n(\d+)", arr)
    unknown = [x for x in state["not_imported"] if "math-01" in x["reason"]]
    assert len(unknown) == 6  # one file per arm (3) and trial (2)
    assert all("imported with category unknown" in x["reason"] for x in unknown)
    cats = {f.prompt_id: f.category for c in load_run(tmp_path / "imp").cells
            for f in c.figures}
    assert cats == {"code-01": "code", "math-01": "unknown", "creative-01": "creative"}
    r = CliRunner().invoke(cli, ["import", "llama-server", str(RAW), "--pattern", PATTERN,
                                 "--baseline-arm", "baseline", "--prompts", str(arr),
                                 "--out", str(tmp_path / "imp3")])
    assert r.exit_code == 0, r.output
    assert "note: tiny_baseline_t0_pmath-01.json: prompt id 'math-01' is not in prompts.json" \
        in r.output


def test_both_decode_rate_definitions_are_named_and_shown(tmp_path):
    """b11312 reports predicted_per_second = (predicted_n - 1) / predicted_ms; older builds
    report predicted_n / predicted_ms. The suite keeps one definition (tokens after the
    first), names the engine's, and shows the engine's own figure beside it."""
    from crossbench.analysis.analyze import verdict_table

    r = analyze(_import(RAW, tmp_path / "a"), StatsOptions(resamples=300, min_samples=4))
    for c in r["cells"]:
        th = c["throughput"]
        assert th["engine_rate_definition"] == "predicted_n - 1"
        assert th["engine_reported_tok_s"] == pytest.approx(th["pooled_tok_s"], rel=1e-9)
    older = tmp_path / "older"
    older.mkdir()
    for p in RAW.glob("*.json"):  # the same bodies as an older build would report them
        body = json.loads(p.read_text())
        t = body["timings"]
        t["predicted_per_second"] = t["predicted_n"] / (t["predicted_ms"] / 1e3)
        (older / p.name).write_text(json.dumps(body))
    r = analyze(_import(older, tmp_path / "b"), StatsOptions(resamples=300, min_samples=4))
    for c in r["cells"]:
        th = c["throughput"]
        assert th["engine_rate_definition"] == "predicted_n"
        # 16 tokens a request: the engine's figure is 16/15 of the suite's
        assert th["engine_reported_tok_s"] == pytest.approx(th["pooled_tok_s"] * 16 / 15)
    pair = r["pairs"][0]
    assert pair["baseline_engine_tok_s"] == pytest.approx(pair["baseline_tok_s"] * 16 / 15)
    assert "baseline tok/s (engine)" in verdict_table(r).splitlines()[0].replace("  ", " ")


def _import(raw: Path, out: Path) -> Path:
    import_llama_server_raw(raw, PATTERN, "baseline", out, r"n(\d+)", PROMPTS)
    return out


def test_tables_sort_n_as_numbers_and_leave_out_what_an_import_cannot_know(tmp_path):
    from crossbench.analysis.analyze import tables

    raw = tmp_path / "raw"
    raw.mkdir()
    for p in RAW.glob("*.json"):  # arms n2 and n11: text order would put n11 first
        (raw / p.name.replace("draft-n4", "draft-n11")).write_text(p.read_text())
    r = analyze(_import(raw, tmp_path / "imp"), StatsOptions(resamples=300, min_samples=4))
    header, rows = tables(r)["verdicts"]
    assert [row[header.index("n")] for row in rows] == ["2", "11"]
    header, rows = tables(r)["cells"]
    for name in ("chunk gap p50 ms", "token ITL p50 ms", "wall tok/s"):
        assert {row[header.index(name)] for row in rows} == {"n/a"}, name
    assert {row[header.index("TTFT p50 ms")] for row in rows} != {"n/a"}  # prompt_ms: known
    for c in r["cells"]:
        assert c["not_from_source"] == ["latency_ms.chunk_gap", "latency_ms.token_itl",
                                        "throughput.wall_output_tok_s"]
    header, rows = tables(r)["verdicts"]
    assert all(row[header.index("MAL")].startswith("~") for row in rows)  # an estimate


def test_a_thinking_models_reasoning_reaches_parity(tmp_path: Path) -> None:
    """Chat bodies whose answer lives in reasoning_content: the import keeps the reasoning, so
    parity sees two arms that thought differently (content alone, "" against "", read
    identical)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for src in RAW.glob("tiny_*.json"):  # creative-01's bodies are the OpenAI-format ones
        body = json.loads(src.read_text())
        if "choices" not in body:
            (raw / src.name).write_text(src.read_text())
            continue
        prompt = src.stem.rsplit("_p", 1)[1]
        draft = "_draft-" in src.name
        thought = f"think about {prompt} " + ("later" if draft else "first")
        body["choices"] = [{"index": 0, "finish_reason": "length",
                            "message": {"role": "assistant", "content": "",
                                        "reasoning_content": thought}}]
        (raw / src.name).write_text(json.dumps(body))
    out = tmp_path / "imp"
    import_llama_server_raw(raw, PATTERN, "baseline", out, r"n(\d+)", PROMPTS)
    recs = [r for c in load_run(out).cells for r in c.records if "creative" in r["prompt_id"]]
    assert len(recs) == 6 and all(r["reasoning_text"].startswith("think about") for r in recs)
    r = analyze(out, StatsOptions(resamples=200, min_samples=1))
    pairs = [p for p in r["pairs"] if p["parity"].get("compared")]
    assert pairs
    assert all(p["parity"]["verdict"] == "diverges" for p in pairs)
    assert all(p["parity"]["compares"] == "reasoning and content" for p in pairs)
