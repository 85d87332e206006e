"""matrices/h200-moe.yaml (issue 34: the MoE target against its dense twin on the H200): it
validates, every speculative cell is paired with a baseline of the same engine entry, target
and quantization, no known-interaction rule reads a pair as confounded, and the `moe` round's
steps (benchmarks/study/rounds.yaml) select each chosen cell's baseline with it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from bench_loader import load_benchmark

from crossbench.confounds.normalize import View, normalize_config
from crossbench.confounds.rules import check_pair
from crossbench.fixtures.drafters import drafter_spec
from crossbench.fixtures.mtp import mtp_spec
from crossbench.runner.matrix import (
    Cell,
    Matrix,
    expand,
    load_matrix,
    parse_fixture_ref,
    validate_cells,
)
from crossbench.runner.matrix_run import run_config, select

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "matrices" / "h200-moe.yaml"


@pytest.fixture(scope="module")
def matrix() -> tuple[Matrix, list[Cell]]:
    m = load_matrix(MATRIX)
    cells = expand(m, MATRIX)
    validate_cells(m, cells, MATRIX)
    return m, cells


def _quant(m: Matrix, cell: Cell) -> tuple[str, str | None]:
    """A cell's quantization: its target's label and its engine entry's online setting."""
    eng = m.engines[cell.coords["engine"]]
    return m.models[cell.coords["target"]].quant, eng.server.get("quantization")


def test_the_matrix_validates_and_covers_both_targets_in_every_format(
        matrix: tuple[Matrix, list[Cell]]) -> None:
    m, cells = matrix
    assert len(cells) == 300
    per_engine = Counter(c.coords["engine"] for c in cells)
    # llama.cpp: 6 targets (MoE, dense x F16, Q8_0, Q4_K_M) x 2 concurrencies x (baseline,
    # MTP and draft at 4 n, n-gram, DFlash at 5 n); vLLM float16 and FP8: 2 targets each,
    # n-gram at n=4
    assert per_engine == {"llama": 180, "vllm-q35": 60, "vllm-q35-fp8": 60}
    refs = {tid: parse_fixture_ref(e.path or "", tid) for tid, e in m.models.items()}
    for tid in m.axes.target:
        shape, role, quant = refs[tid]
        assert shape == "qwen3-8b" and role in ("moe-target", "dense-twin")
        label = m.models[tid].quant
        if quant == "hf":  # vLLM: the HF folder, float16 or quantized online by its engine
            engines = m.models[tid].engines or []
            assert len(engines) == 1
            online = m.engines[engines[0]].server.get("quantization")
            assert (label, online) in (("F16", None), ("FP8", "fp8"))
            assert m.engines[engines[0]].server["dtype"] == "float16"
        else:  # llama.cpp: a GGUF of its own quantization
            assert (quant or "F16") == label and m.models[tid].engines == ["llama"]
    assert {parse_fixture_ref(m.models[a.draft].path or "", "d")[1]
            for a in m.arms if a.draft} == {"draft", "dflash-moe"}
    dflash = [c for c in cells if c.coords["arm"] == "dflash-a0.9"]
    assert len(dflash) == 100 and {c.coords["n"] for c in dflash} == {1, 2, 4, 8, 15}


def test_every_speculative_cell_has_a_baseline_of_its_engine_target_and_quantization(
        matrix: tuple[Matrix, list[Cell]]) -> None:
    m, cells = matrix
    by_id = {c.id: c for c in cells}
    spec = [c for c in cells if c.baseline is not None]
    assert len(spec) == 280 and all(c.coords["method"] != "none" for c in spec)
    for c in spec:
        b = by_id[c.baseline or ""]
        assert b.coords["method"] == "none"
        for key in ("engine", "target", "workload", "concurrency"):
            assert b.coords[key] == c.coords[key], (c.id, key)
        assert _quant(m, b) == _quant(m, c)
        assert b.engine_config["model"] == c.engine_config["model"]
        # the pair differs in its speculative settings only
        drop = {"spec"}
        assert {k: v for k, v in b.engine_config.items() if k not in drop} == \
            {k: v for k, v in c.engine_config.items() if k not in drop}
    # the quantizations in each engine: at least two, each with its own baselines
    quants = {(c.coords["engine"], _quant(m, c)) for c in cells if c.baseline is None}
    assert quants == {("llama", ("F16", None)), ("llama", ("Q8_0", None)),
                      ("llama", ("Q4_K_M", None)), ("vllm-q35", ("F16", None)),
                      ("vllm-q35-fp8", ("FP8", "fp8"))}


def test_no_rule_reads_a_pair_as_confounded(matrix: tuple[Matrix, list[Cell]]) -> None:
    m, cells = matrix
    by_id = {c.id: c for c in cells}

    def view(c: Cell) -> View:
        cfg = run_config(c, m.trials, m.fresh_server, resolve=False).model_dump(mode="json")
        return {**normalize_config(cfg), "engine.kind": c.engine_kind}

    seen: Counter[tuple[str, str]] = Counter()
    for c in cells:
        if c.baseline is None:
            continue
        got = check_pair(view(c), view(by_id[c.baseline]), labels=("spec", "baseline"))
        assert [f for f in got if f.severity == "confounding"] == [], c.id
        seen.update((f.rule, f.severity) for f in got)
    # llama.cpp's 16 slots with MTP: a caveat under synthetic acceptance (the acceptance
    # collapse of multi-slot MTP cannot show), on each of its 48 MTP cells
    assert seen[("llama-parallel-slots-mtp", "caveat")] == 48
    # llama.cpp's MTP and draft cells, vLLM's (both engine entries), and DFlash in both
    assert seen[("synthetic-acceptance", "caveat")] == 48 + 48 + 2 * 32 + 60 + 2 * 20
    assert {r for r, _ in seen} == {"llama-parallel-slots-mtp", "synthetic-acceptance"}


def test_the_dflash_arms_use_the_drafter_of_these_targets(
        matrix: tuple[Matrix, list[Cell]]) -> None:
    # the Qwen3-8B drafters (dflash, eagle3) read hidden states twice as wide as these
    # targets'; dflash-moe is as wide, and reads layers of the 8 that llama.cpp can read
    m, _ = matrix
    width = {mtp_spec("qwen3-8b", r).n_embd for r in ("moe-target", "dense-twin")}
    assert width == {2048}
    assert drafter_spec("qwen3-8b", "dflash").n_embd == drafter_spec(
        "qwen3-8b", "eagle3").n_embd == 4096
    moe = drafter_spec("qwen3-8b", "dflash-moe")
    assert moe.n_embd == 2048 and moe.block_size == 16
    assert "8 of the published 40 layers" in MATRIX.read_text()
    assert {mtp_spec("qwen3-8b", r).n_layer for r in ("moe-target", "dense-twin")} == {8}
    assert max(moe.target_layers) <= 8 - 2
    for a in m.arms:
        if a.name == "dflash-a0.9":
            assert a.draft is not None
            ref = parse_fixture_ref(m.models[a.draft].path or "", a.draft)
            assert ref[:2] == ("qwen3-8b", "dflash-moe")
            assert max(int(n) for n in str(a.n).split(",")) == moe.block_size - 1


def test_each_moe_round_step_selects_the_baselines_of_its_cells(
        matrix: tuple[Matrix, list[Cell]]) -> None:
    study = load_benchmark("study/study.py", "study_driver_moe")
    rounds = study.load_rounds()
    _, cells = matrix
    picked: dict[str, set[str]] = {}
    for part in study.parts(rounds, "moe"):
        r = study.get_round(rounds, "moe", part)
        for step in r.steps:
            if step.command is not None:
                continue
            if part in (8, 9, 10, 11):
                # the layer-cut check and vLLM's batch shapes run matrices of their own, whose
                # selections tests/test_study_driver.py checks
                assert step.matrix in ("matrices/h200-moe-layers.yaml",
                                       "matrices/h200-moe-shapes.yaml",
                                       "matrices/h200-moe-shapes-c16.yaml")
                continue
            assert step.matrix == "matrices/h200-moe.yaml"
            chosen = select(cells, step.only, step.skip)
            ids = {c.id for c in chosen}
            assert all(c.baseline in ids for c in chosen if c.baseline), step.name
            assert all(c.coords["engine"] == chosen[0].coords["engine"] for c in chosen)
            picked[step.name] = ids
    # PART=12 is PART=1 for a short lease: its baselines and MTP cells, none of its own
    short = picked.pop("llama-f16-mtp")
    assert short < picked["llama-f16"]
    arms = {c.coords["arm"] for c in cells if c.id in short}
    assert len(short) == 20 and arms == {"none", "mtp-a0.9"}, arms
    counts = {k: len(v) for k, v in picked.items()}
    # DFlash runs in its own parts (6: llama.cpp F16, both targets, n = 1..15; 7: vLLM
    # float16, both targets, n = 4); the other parts skip it
    assert counts == {"llama-f16": 40, "vllm-f16-moe": 8, "vllm-f16-dense": 8,
                      "llama-quant": 32, "vllm-fp8": 8, "llama-dflash": 24, "vllm-dflash": 8}
    spec = [{c for c in ids if "/none/" not in c} for ids in picked.values()]
    assert len(set().union(*spec)) == sum(map(len, spec))  # no speculative cell runs twice
    # the DFlash parts measure their own baselines again (another machine, another run)
    assert picked["llama-dflash"] - spec[list(picked).index("llama-dflash")] == \
        picked["llama-f16"] - spec[list(picked).index("llama-f16")]
