"""`crossbench report` and `crossbench datapoint` on studies with known figures (no engine):
every figure drawn when its data exists, reports reproducible byte for byte, exact texts."""

from __future__ import annotations

import csv
import json
import re
from html import unescape
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.study import Arm, study

from crossbench.cli.main import cli
from crossbench.report.build import build_report
from crossbench.report.datapoint import MAX_LINES, datapoint
from crossbench.report.plots import figures, throughput_vs_concurrency
from crossbench.report.study import Study, load_study
from crossbench.telemetry.sampler import COLUMNS

PROMPTS = [(f"p{i}", ("code", "math", "poem")[i % 3]) for i in range(9)]
ACC = {"drafts": 900, "draft_tokens": 1800, "accepted": 1200, "per_position": [700, 500]}


def rate(arm: Arm, pid: str, trial: int, occ: int) -> float:
    return 100.0 if arm.n is None else 100.0 + 10 * arm.n + int(pid[1:])


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Baseline and draft-simple at n=2 and n=3 (known speedups above 1), analysed."""
    out = tmp_path / "study"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC),
                         Arm("dft", "draft-simple", 3, acceptance=ACC)], rate, trials=2)
    assert invoke("analyze", str(out), "--resamples", "500").exit_code == 0
    return out


def plant_trace(cell_dir: Path, t0_ns: int = 1_700_000_000_000_000_000) -> None:
    """A GPU trace with 20 samples (what the sampler writes on a GPU host)."""
    (cell_dir / "telemetry").mkdir(exist_ok=True)
    with (cell_dir / "telemetry" / "t0.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for i in range(20):
            w.writerow([t0_ns + i * 100_000_000, 0, "", 30_000_000_000, 80_000_000_000, 90,
                        40, 1980 - i, 2619, 300 + 10 * i, 50 + i, 0, ""])


def test_report_files_and_content(sweep: Path) -> None:
    r = invoke("report", str(sweep))
    assert r.exit_code == 0, r.output
    out = sweep / "report"
    assert r.stdout.strip() == str(out / "report.html")
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["datapoint.md", "plots/acceptance_curves.png",
                     "plots/acceptance_curves.svg", "plots/acceptance_vs_speedup.png",
                     "plots/acceptance_vs_speedup.svg", "plots/speedup_vs_n.png",
                     "plots/speedup_vs_n.svg", "report.html", "report.md"]
    assert (out / "plots" / "speedup_vs_n.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    analysis = json.loads((sweep / "analysis.json").read_text())
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    for p in analysis["pairs"]:
        sp = p["speedup"]
        row = f"{sp['geomean']:.3f}"
        ci = f"[{sp['ci95'][0]:.3f}, {sp['ci95'][1]:.3f}]"
        assert row in html and ci in html
        marked = p["verdict"] + ("*" if p.get("verdict_caveats") else "")
        assert f"| dft n={p['n']} | {row} | {ci} | {marked} |" in md
    for section in ("Verdicts", "Figures", "n-sweeps", "Study card", "Confounds",
                    "Stability warnings", "Failed trials", "How to reproduce"):
        assert f"<h2>{section}</h2>" in html and f"## {section}" in md
    assert html.count('src="data:image/svg+xml;base64,') == 3
    assert "![Decode speedup against n](plots/speedup_vs_n.png)" in md
    assert "No failed trial." in html


def test_report_is_self_contained(sweep: Path) -> None:
    build_report(sweep)
    html = (sweep / "report" / "report.html").read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)
    assert csp is not None and unescape(csp.group(1)).startswith("default-src 'none'; ")
    assert "<script" not in html
    # nothing is fetched: no src, href or CSS url() outside data: URIs
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']|url\(([^)]*)\)""", html)
    fetched = [a or b for a, b in refs if not (a or b).startswith("data:")]
    assert fetched == []
    assert "http://" not in html and "https://" not in html


def test_all_figures_when_data_exists(sweep: Path) -> None:
    state = json.loads((sweep / "state.json").read_text())
    plant_trace(sweep / state["cells"][0]["dir"])
    plant_trace(sweep / state["cells"][1]["dir"], 1_700_000_010_000_000_000)
    names = [p.name for p in figures(load_study(sweep))]
    assert names == ["speedup_vs_n", "acceptance_curves", "acceptance_vs_speedup", "telemetry"]


def test_throughput_figure_only_when_concurrency_is_swept(tmp_path: Path) -> None:
    def cell(c: int, rate: float) -> dict[str, object]:
        return {"cell": f"e/m/none/w/c{c}", "engine": "e", "target": "m", "arm": "none",
                "method": "none", "n": None, "workload": "w", "concurrency": c,
                "throughput": {"wall_output_tok_s": rate, "pooled_tok_s": rate}}

    analysis = {"options": {}, "pairs": [], "cells": [cell(1, 50.0), cell(4, 170.0)]}
    swept = Study(tmp_path, "matrix", "s", None, analysis, [], varying=("concurrency",))
    plot = throughput_vs_concurrency(swept)
    assert plot is not None and plot.name == "throughput_vs_concurrency"
    ax = plot.figure.axes[0]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 4] and list(line.get_ydata()) == [50.0, 170.0]
    flat = Study(tmp_path, "matrix", "s", None, {**analysis, "cells": [cell(1, 50.0)]}, [])
    assert throughput_vs_concurrency(flat) is None


def test_report_bytes_are_reproducible(sweep: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build_report(sweep, a)
    build_report(sweep, b)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert len(files) == 10  # 9 and the folder's .crossbench-output.json
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_report_analyses_in_memory_when_missing_and_never_writes_the_run(
        tmp_path: Path) -> None:
    out = tmp_path / "s"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate)
    assert not (out / "analysis.json").exists()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    r = invoke("report", str(out), "--out", str(tmp_path / "rep"))
    assert r.exit_code == 0, r.output
    assert (f"no analysis.json in {out}: analysing it in memory (default options; nothing is "
            "written into the run)") in r.stderr
    assert (tmp_path / "rep" / "report.html").exists()
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # the same numbers as an analysis written by `crossbench analyze`
    assert invoke("analyze", str(out)).exit_code == 0
    r = invoke("report", str(out), "--out", str(tmp_path / "rep2"))
    assert r.exit_code == 0, r.output
    assert "analysing it in memory" not in r.stderr
    for name in ("report.html", "report.md", "datapoint.md"):
        assert (tmp_path / "rep" / name).read_bytes() == (tmp_path / "rep2" / name).read_bytes()


def test_report_of_a_study_without_pairs(tmp_path: Path) -> None:
    out = tmp_path / "s"
    study(out, PROMPTS, [Arm("none")], rate)
    build_report(out)
    html = (out / "report" / "report.html").read_text()
    assert "no speculative cell paired with a baseline" in html
    assert "<h2>Verdicts</h2>" not in html and "<h2>Cells</h2>" in html


def test_server_starts_of_a_recorded_vllm_run(tmp_path: Path) -> None:
    """The report lists every server start with what vLLM's log said of it: vLLM's H100
    verdicts (2026-12-05), each configuration's first start cold, its second warm."""
    import zipfile

    archive = (Path(__file__).resolve().parents[1] / "examples" / "h100-methods"
               / "verdicts-part2" / "h100-verdicts-part2-vllm-verdicts.zip")
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path)
    run = tmp_path / "h100-verdicts-part2-vllm-verdicts" / "data"
    (run / "analysis.json").unlink()  # an older format: the report analyses in memory
    build_report(run, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    starts = md.split("## Server starts", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in starts.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert [r.split(" | ")[3] for r in rows] == ["cold", "warm"] * 3
    manifest = json.loads((run / "cells" / "vllm__t8b-hf__eagle3-a0.9__n4__builtin-mixed__c1"
                           / "manifest.json").read_text())
    cold = manifest["trials"][0]
    cut = cold["server_props"]["startup_cut"]
    assert (f"| eagle3-a0.9 n=4 | 0 | {cold['phase_s']['startup']:.1f} | cold | "
            f"{cut['engine_init_s']:.1f} | {cut['compile_s']:.1f} |") in rows
    assert "<h2>Server starts</h2>" in (tmp_path / "out" / "report.html").read_text()


def test_datapoint_length_and_content(sweep: Path) -> None:
    r = invoke("datapoint", str(sweep))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) < 60
    assert lines[0] == "#### crossbench datapoint: import:synthetic"
    table = [ln for ln in lines if ln.startswith("| dft")]
    assert len(table) == 2
    analysis = json.loads((sweep / "analysis.json").read_text())
    p = analysis["pairs"][0]
    assert table[0].startswith(f"| dft n=2 | {p['speedup']['geomean']:.3f} ")
    assert any(ln.startswith("- **GPU**:") for ln in lines)
    assert any(ln.startswith("- **Engine**:") for ln in lines)
    assert any(ln.startswith("- **Models**:") for ln in lines)
    assert "**Caveats (confound check)**" in r.stdout
    assert "https://doi.org/10.5281/zenodo.XXXXXXX" in lines[-1]


def test_datapoint_cells_filter_and_errors(sweep: Path) -> None:
    r = invoke("datapoint", str(sweep), "--cells", "*/n3/*")
    assert r.exit_code == 0
    assert [ln[:10] for ln in r.stdout.splitlines() if ln.startswith("| dft")] == ["| dft n=3 "]
    r = invoke("datapoint", str(sweep), "--cells", "nothing")
    assert r.exit_code == 2
    assert r.stderr.startswith("crossbench: error: --cells nothing matches no speculative cell")


def test_datapoint_stays_under_60_lines_with_many_caveats(sweep: Path) -> None:
    s = load_study(sweep)
    finding = {"severity": "caveat", "message": "m", "action": "a", "source": "s", "rule": "r"}
    for i, p in enumerate(s.analysis["pairs"]):
        p["confounds"] = {"checked": True, "confounding_fields": [f"f{i}"],
                          "findings": [{**finding, "message": f"m{i}-{k}"} for k in range(40)]}
    text = datapoint(s)
    assert len(text.splitlines()) <= MAX_LINES
    assert "more: see the report's Confounds section" in text
    assert text.rstrip().endswith("(replace with the archive's DOI)")


def test_datapoint_says_how_many_trials_ran_when_a_study_is_partial(tmp_path):
    """A study cut short (trial 2 of 3 never ran) says so instead of the planned count."""
    import json as _json

    from standins.study import Arm, study

    from crossbench.report.datapoint import datapoint
    from crossbench.report.study import load_study

    root = tmp_path / "s"
    acc = {"drafts": 10, "draft_tokens": 20, "accepted": 10, "per_position": [6, 4]}
    study(root, [("p0", "code"), ("p1", "math")], [Arm("none"), Arm("d", "draft-simple", 2,
          acceptance=acc)], lambda a, p, t, o: 120.0 if a.method != "none" else 100.0,
          trials=3)
    state = _json.loads((root / "state.json").read_text())
    for cell in state["cells"]:
        path = root / cell["dir"] / "manifest.json"
        man = _json.loads(path.read_text())
        man["trials"] = [{"trial": 0, "status": "ok"}, {"trial": 1, "status": "ok"}]
        path.write_text(_json.dumps(man))
    text = datapoint(load_study(root))
    assert "2 of 3 planned trials" in text


def test_datapoint_says_when_its_verdicts_rest_on_one_server_start(tmp_path: Path) -> None:
    """Two trials on one server start per side: the datapoint posted upstream says the
    intervals leave out start-to-start variation; a study of fresh starts says nothing."""
    out = tmp_path / "one-start"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=2, extra=lambda arm, pid, t, occ: {"server_start": 0})
    assert invoke("analyze", str(out), "--resamples", "500").exit_code == 0
    line = ("single start: every trial ran on one server start per side, so the intervals "
            "leave out start-to-start variation")
    assert line in datapoint(load_study(out))
    fresh = tmp_path / "fresh"
    study(fresh, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=2)
    assert invoke("analyze", str(fresh), "--resamples", "500").exit_code == 0
    assert "single start" not in datapoint(load_study(fresh))
    assert "single trial" not in datapoint(load_study(fresh))


def test_datapoint_says_when_its_verdicts_rest_on_one_trial(tmp_path: Path) -> None:
    """One trial per cell (each a fresh start, as a one-start-per-arm round): the verdict
    rests on one server start per side, and the datapoint says so beside it."""
    out = tmp_path / "one-trial"
    study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)], rate,
          trials=1, occurrences=4)
    assert invoke("analyze", str(out), "--resamples", "500").exit_code == 0
    text = datapoint(load_study(out))
    assert ("single trial: one trial per cell, so one server start per side, and the "
            "intervals leave out start-to-start variation") in text
    assert "| faster* |" in text  # the verdict stays, marked
    build_report(out)  # the report marks it too, and says why under its verdict table
    md = (out / "report" / "report.md").read_text()
    html = (out / "report" / "report.html").read_text()
    assert "| faster* |" in md and '<span class="badge faster">faster*</span>' in html
    assert ("\\* carries a caveat: one trial per cell, so one server start per side: the "
            "interval leaves out start-to-start variation: see warnings.") in md


def test_datapoint_says_when_its_server_starts_disagree(tmp_path: Path) -> None:
    """Two starts per side, the speculative one 30 % faster on the first and 10 % on the
    second: the datapoint says the starts disagree; starts that agree say nothing."""
    line = ("starts disagree: with each server start as one sample the interval holds 1; the "
            "verdict rests on fewer starts than their spread needs")
    for name, second, said in (("disagree", 110.0, True), ("agree", 130.0, False)):
        out = tmp_path / name
        study(out, PROMPTS, [Arm("none"), Arm("dft", "draft-simple", 2, acceptance=ACC)],
              lambda a, p, t, o, s=second: 100.0 if a.method == "none" else
              (130.0 if t < 2 else s),
              trials=4, extra=lambda arm, pid, t, occ: {"server_start": 2 * (t // 2)})
        assert invoke("analyze", str(out), "--resamples", "500").exit_code == 0
        assert (line in datapoint(load_study(out))) is said


def test_report_shows_the_runs_hardware_warning_at_its_top(sweep: Path) -> None:
    """A matrix run on other hardware than its `hardware` names (the H100 runs of the H200
    matrices, whose notes say "on one H200") says so before the verdicts, in both twins."""
    from crossbench.store import rundir

    build_report(sweep)
    assert "Run warning" not in (sweep / "report" / "report.md").read_text()
    said = ("the matrix expects 1 x NVIDIA H200, this host has NVIDIA H100 80GB HBM3: its "
            "results will not describe that hardware; run it there, or change `hardware` to "
            "what you have")
    state = rundir.read_state(sweep)
    rundir.write_state(sweep, {**state, "warnings": [said]})
    build_report(sweep)
    md = (sweep / "report" / "report.md").read_text()
    assert f"**Run warning:** {said}" in md
    assert md.index("Run warning") < md.index("## Verdicts")
    html = unescape((sweep / "report" / "report.html").read_text())
    assert f'<p class="warn">Run warning: {said}</p>' in html
    assert html.index("Run warning") < html.index("<h2>Verdicts</h2>")
