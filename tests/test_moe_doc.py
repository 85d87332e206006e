"""docs/moe-vs-dense.md's measured section is what examples/h200-moe/part12 holds: every row of
both verification curves re-derives from the raw llama-bench and llama-batched-bench results
kept in the curves' JSON, the bytes line is refitted from them, and each MTP cell's speedup,
interval and C(n), and the dense twin's d and v, are recomputed from the verified archive's raw
records; each figure must appear in the page as printed, so the page cannot drift from the
data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crossbench.analysis import decompose as dec
from crossbench.analysis import verify_curve as vc
from crossbench.analysis.fit import Source, fit_across
from crossbench.analysis.sweep import sweep_point
from crossbench.frames import open_run

ROOT = Path(__file__).resolve().parents[1]
PART = ROOT / "examples" / "h200-moe" / "part12"
ARCHIVE = PART / "h200-moe-part12-llama-f16-mtp.zip"
DOC = ROOT / "docs" / "moe-vs-dense.md"


@pytest.fixture(scope="module")
def section() -> str:
    text = DOC.read_text()
    start = text.index("## Measured so far: llama.cpp F16 on one H200")
    return text[start:text.index("\n## ", start + 1)]


def _flat(text: str) -> str:
    """The text with every run of whitespace (line breaks too) as one space."""
    return " ".join(text.split())


def _curve(name: str) -> dict[str, Any]:
    return json.loads((PART / name).read_text())


def _targets(curve: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"].split(".")[0]: t for t in curve["targets"]}


def _table_row(section: str, head: str, first: str) -> list[str]:
    """The cells of the row starting ``| first |`` in the table whose header starts ``head``."""
    start = section.index(head)
    table = section[start:section.index("\n\n", start)]
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {first} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def _bytes_line(split: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """`verify-curve`'s line of the pass time in the predicted bytes: (fixed ms, TB/s, R^2)."""
    line = vc.bytes_line(vc.WeightSplit(**split), rows)
    assert line is not None and line["k"] == [r["k"] for r in rows]
    return line["fixed_ms"], line["tb_per_s"], line["r2"]


def test_the_batch_one_curve_re_derives_from_the_raw_tests(section: str) -> None:
    got = _curve("verify-curve.json")
    assert (got["parallel"], got["depth"], got["reps"], got["tool"]) == (1, 300, 3,
                                                                         "llama-bench")
    t = _targets(got)
    split = vc.WeightSplit(**t["moe-target"]["split"])
    assert (split.n_experts, split.top_k, split.moe_layers) == (256, 8, 8)
    for target in t.values():
        tests = target["raw"]
        (gen,) = [x for x in tests if x["n_prompt"] == 0]
        assert len(gen["samples_ns"]) == 3
        plain = sum(gen["samples_ns"]) / 3 / 1e6 / gen["n_gen"]
        assert target["plain_ms"] == pytest.approx(plain)
        one = None
        for row in target["rows"]:
            (pp,) = [x for x in tests if x["n_prompt"] == row["k"] and x["n_gen"] == 0]
            ms = sum(pp["samples_ns"]) / len(pp["samples_ns"]) / 1e6
            one = ms if row["k"] == 1 else one
            assert row["verify_ms"] == pytest.approx(ms)
            assert row["x_k1"] == pytest.approx(ms / one)
            if target["split"]:
                assert row["predicted_x_k1"] == pytest.approx(vc.predicted_ratio(split,
                                                                                 row["k"]))
    recorded = {name: {r["k"]: r for r in target["rows"]} for name, target in t.items()}
    flat = _flat(section)
    assert (f"give {recorded['moe-target'][16]['x_k1']:.2f} (MoE) and "
            f"{recorded['dense-twin'][16]['x_k1']:.2f} (dense) times the one-token pass at "
            "k = 16") in flat
    # the repetitions are the CUDA graph's direct run, its capture and its replay: the second
    # slowest and the third fastest at every k, on both targets
    for target in t.values():
        for x in target["raw"]:
            if x["n_gen"] == 0:
                first, capture, replay = x["samples_ns"]
                assert replay < first < capture, (target["name"], x["n_prompt"])
    (one,) = [x for x in t["moe-target"]["raw"] if x["n_prompt"] == 1]
    assert "(the MoE target at k = 1: {:.3f}, {:.3f}, {:.3f} ms)".format(
        *(v / 1e6 for v in one["samples_ns"])) in flat
    # the table: the replayed pass, as verify-curve now reads it (two repetitions left out)
    steady = {name: dec.from_bench(dec.steady_tests(target["raw"])) for name, target in t.items()}
    rows = {name: {r["k"]: r for r in vc.curve(m, list(range(1, 17)),
                                               split if name == "moe-target" else None)}
            for name, m in steady.items()}
    moe, dense = rows["moe-target"], rows["dense-twin"]
    for k in (1, 2, 3, 5, 9, 16):
        cells = _table_row(section, "| k tokens | MoE ms |", str(k))
        assert cells[1:] == [f"{moe[k]['verify_ms']:.3f}", f"{moe[k]['x_k1']:.3f}",
                             f"{moe[k]['predicted_x_k1']:.3f}", f"{dense[k]['verify_ms']:.3f}",
                             f"{dense[k]['x_k1']:.3f}"]
    slope = {name: (r[16]["verify_ms"] - r[1]["verify_ms"]) / 15 for name, r in rows.items()}
    assert (f"grows {slope['moe-target']:.3f} ms a token from 1 to 16 tokens, the dense "
            f"twin's {slope['dense-twin']:.3f}") in flat
    assert (f"the MoE pass {moe[16]['verify_ms'] / dense[16]['verify_ms']:.2f} times the dense "
            f"one ({moe[1]['verify_ms'] / dense[1]['verify_ms']:.2f} at k = 1)") in flat
    assert (f"({moe[1]['plain_steps']:.2f} and {dense[1]['plain_steps']:.2f} of the generation "
            f"test's replayed step, {steady['moe-target'].plain_ms:.3f} and "
            f"{steady['dense-twin'].plain_ms:.3f} ms)") in flat
    assert f"the MoE's slope is {slope['moe-target'] / slope['dense-twin']:.1f} times" in flat
    fixed, tb_s, r2 = _bytes_line(t["moe-target"]["split"], list(moe.values()))
    assert f"**{fixed:.2f} ms + bytes / {tb_s:.2f} TB/s, R² {r2:.3f}** over the 16" in flat
    fixed, tb_s, r2 = _bytes_line(t["moe-target"]["split"], t["moe-target"]["rows"])
    assert f"the recorded means give {fixed:.2f} ms + bytes / {tb_s:.2f} TB/s, R² {r2:.3f}" in flat


def test_the_sixteen_sequence_curve_re_derives_from_the_raw_results(section: str) -> None:
    got = _curve("verify-curve-c16.json")
    assert (got["parallel"], got["reps"], got["tool"]) == (16, 3, "llama-batched-bench")
    t = _targets(got)
    split = vc.WeightSplit(**t["moe-target"]["split"])
    for target in t.values():
        timed = [x for x in target["raw"] if not x.get("warmup")]
        assert len(timed) == 16 * 3 and {x["pl"] for x in timed} == {16}
        for row in target["rows"]:
            ms = 1e3 * float(np.median([x["t_pp"] for x in timed if x["pp"] == row["k"]]))
            assert row["verify_ms"] == pytest.approx(ms) and row["tokens"] == 16 * row["k"]
            if target["split"]:
                assert row["predicted_x_k1"] == pytest.approx(
                    vc.predicted_ratio(split, row["k"], 16))
    moe = {r["k"]: r for r in t["moe-target"]["rows"]}
    dense = {r["k"]: r for r in t["dense-twin"]["rows"]}
    for k in (2, 3, 5, 8, 9, 16):
        cells = _table_row(section, "| k per sequence | tokens |", str(k))
        assert cells[1:] == [str(16 * k), f"{moe[k]['x_k1']:.3f}",
                             f"{moe[k]['predicted_x_k1']:.3f}", f"{dense[k]['x_k1']:.3f}"]
    assert (f"| 1 | 16 | 1.000 ({moe[1]['verify_ms']:.3f} ms) | 1.000 | 1.000 "
            f"({dense[1]['verify_ms']:.3f} ms) |") in _flat(section)
    fixed, tb_s, r2 = _bytes_line(t["moe-target"]["split"], [moe[k] for k in range(1, 9)])
    line = f"({fixed:.2f} ms + bytes / {tb_s:.2f} TB/s, R² {r2:.3f} over k = 1..8)"
    assert line in _flat(section)
    above = [moe[k] for k in range(9, 17)]
    assert (f"jumps to {min(r['verify_ms'] for r in above):.0f}-"
            f"{max(r['verify_ms'] for r in above):.0f} ms, "
            f"{min(r['x_k1'] for r in above):.1f}-{max(r['x_k1'] for r in above):.1f} times"
            ) in _flat(section)
    assert all(r["x_k1"] > 3 * r["predicted_x_k1"] for r in above)
    assert all(moe[k]["x_k1"] < moe[k]["predicted_x_k1"] for k in range(2, 9))


def test_the_mtp_cells_and_the_dense_line_re_derive_from_the_archive(section: str) -> None:
    with open_run(ARCHIVE) as frames:
        analysis = frames.analysis
        src = Source(str(ARCHIVE), analysis, {c.id: c for c in frames.run.cells},
                     frames.opts)
    points = {(p["model"], p["concurrency"], p["n"]): sweep_point(p)
              for p in analysis["pairs"] if p.get("n") is not None}
    ran = {k for k, v in points.items() if v["speedup"] is not None}
    assert len(ran) == 10  # the 14 cells: 4 baselines and 10 speculative
    assert {k for k in points if k not in ran} == {("moe-f16", 1, 4)}  # cut mid-cell
    labels = {"moe-f16": "MoE", "dense-f16": "dense"}
    for model, c in (("moe-f16", 1), ("dense-f16", 1), ("moe-f16", 16), ("dense-f16", 16)):
        cells = _table_row(section, "| target | c | baseline |", f"{labels[model]} | {c}")
        for n, cell in zip((1, 2, 4, 8), cells[3:], strict=True):
            p = points.get((model, c, n))
            if p is None or p["speedup"] is None:
                assert cell == "not run", (model, c, n)
                continue
            lo, hi = p["ci95"]
            cost = p["mean_acceptance_length"] / p["speedup"]
            assert cell == f"{p['speedup']:.3f} [{lo:.3f}, {hi:.3f}], C {cost:.3f}", (model, c)
    for c, spec in ((1, "**d {d} [{dl}, {dh}], v {v} [{vl}, {vh}]** (R² {r2})"),
                    (16, "d {d} [{dl}, {dh}], v {v} [{vl}, {vh}] (R² {r2})")):
        f = fit_across([src], "mtp-a0.9", "llama", c, target="dense-f16")["fit"]
        want = spec.format(d=f"{f['d']:.3f}", dl=f"{f['d_ci95'][0]:.3f}",
                           dh=f"{f['d_ci95'][1]:.3f}", v=f"{f['v']:.3f}",
                           vl=f"{f['v_ci95'][0]:.3f}", vh=f"{f['v_ci95'][1]:.3f}",
                           r2=f"{f['r2']:.3f}")
        assert want in _flat(section), want
    moe2 = points[("moe-f16", 1, 2)]
    dense2 = points[("dense-f16", 1, 2)]
    assert (f"MoE step costs **{moe2['mean_acceptance_length'] / moe2['speedup']:.2f}** of its "
            f"plain steps against the dense twin's "
            f"**{dense2['mean_acceptance_length'] / dense2['speedup']:.2f}**") in \
        _flat(section)


def test_where_the_dense_sweeps_turn_negative_re_derives(section: str) -> None:
    from crossbench.analysis.analyze import negative_text

    with open_run(ARCHIVE) as frames:
        sweeps = frames.analysis["sweeps"]
    dense = [s for s in sweeps if s["model"] == "dense-f16"]
    assert sorted(s["concurrency"] for s in dense) == [1, 16]
    assert {s["loses_from"] for s in dense} == {1}
    assert {negative_text(s["cost_model"]) for s in dense} == {"1 [1, 1]"}
    assert max(p["n"] for p in dense[0]["cost_model"]["predicted"]) == 8
    assert not [s for s in sweeps if s["model"] == "moe-f16" and s["cost_model"]["fitted"]]
    assert ("the dense twin **loses from n = 1** at both concurrencies (every measured n reads "
            "slower), and its line predicts a loss from n = 1 [1, 1] up to n = 8") in \
        _flat(section)


def test_the_measured_routing_table_re_derives_from_its_json() -> None:
    from crossbench.analysis.moe import expected_distinct_experts

    doc = DOC.read_text()
    start = doc.index("**Measured on the fixture's routers**")
    text = doc[start:doc.index("\n## ", start)]
    r = json.loads((ROOT / "benchmarks" / "results" / "moe-routing.json").read_text())
    assert (r["shape"], r["experts"], r["top_k"], r["tokens"], r["layers"]) == (
        "qwen3-8b", 256, 8, 512, 8)
    ks = r["k"]
    by_layer = r["measured_by_layer"].values()
    for k in ks:
        assert r["uniform"][str(k)] == pytest.approx(expected_distinct_experts(256, 8, k))
        assert r["measured_mean"][str(k)] == pytest.approx(
            np.mean([layer[str(k)] for layer in by_layer]))
    uniform = _table_row(text, "| k tokens |", "uniform prediction")
    measured = _table_row(text, "| k tokens |", "measured, mean of the 8 layers")
    assert uniform[1:] == [f"{r['uniform'][str(k)]:.2f}" for k in ks]
    assert measured[1:] == [f"{r['measured_mean'][str(k)]:.2f}" for k in ks]
    at16 = [layer["16"] for layer in by_layer]
    top = r["expert_use_top"].values()
    flat = _flat(text)
    assert f"{100 * r['measured_mean']['16'] / r['uniform']['16']:.1f} % of the uniform" in flat
    assert f"({min(at16):.1f} to {max(at16):.1f} of them by layer)" in flat
    assert f"takes {100 * min(top):.2f}-{100 * max(top):.2f} % of its routed slots" in flat
    assert f"(uniform: {100 / 256:.2f} %)" in flat


def test_the_quoted_fixture_digests_are_the_recorded_ones() -> None:
    """The routing section's digests: this machine's GGUFs from their landed manifests, the
    H200's from the verified archive's cell manifests."""
    import zipfile

    doc = _flat(DOC.read_text())
    kept = ROOT / "benchmarks" / "results" / "fixture-manifests-cpu"
    here = {role: json.loads((kept / f"qwen3-8b-{role}.json").read_text())["files"][
        f"{role}.gguf"]["sha256"] for role in ("moe-target", "dense-twin")}
    there: dict[str, str] = {}
    with zipfile.ZipFile(ARCHIVE) as z:
        for name in z.namelist():
            if name.endswith("/manifest.json") and "/cells/" in name:
                model = json.loads(z.read(name))["models"]["model"]
                there[model["ref"].split("/")[-1]] = model["sha256"]
    assert set(there) == {"moe-target", "dense-twin"}
    for role in there:
        assert here[role] != there[role]
    assert (f"MoE target `{here['moe-target'][:8]}` here, `{there['moe-target'][:8]}` there; "
            f"dense twin `{here['dense-twin'][:8]}`, `{there['dense-twin'][:8]}`") in doc
