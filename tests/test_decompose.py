"""`crossbench decompose`: a speculative step's parts from llama-bench tests, against a fitted
cost model. Arithmetic on llama-bench-shaped tests with known times, the published round 1
cost model read back from its archive, refusals, and the real llama-bench on the fixtures."""

from __future__ import annotations

import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from crossbench.analysis import decompose as dec
from crossbench.cli.main import cli
from crossbench.errors import UserError

ROUND1 = (Path(__file__).parent.parent / "examples" / "h200-methods" / "round1"
          / "h200-methods-round1.zip")


def test(n_prompt: int, n_gen: int, ms: list[float], depth: int = 300) -> dict[str, Any]:
    """One test object as `llama-bench -o json` writes it (the fields read here)."""
    return {"model_filename": "t.gguf", "n_prompt": n_prompt, "n_gen": n_gen,
            "n_depth": depth, "samples_ns": [round(x * 1e6) for x in ms],
            "avg_ns": round(sum(ms) / len(ms) * 1e6)}


test.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test

# the H200 figures: a plain step 5.2 ms, verification of 3-5 tokens 9.2-9.6 ms,
# the draft 1.6 ms a token; the study's fitted draft-model line d = 2.93, v = 0.372
TARGET = [test(0, 32, [32 * 5.2, 32 * 5.2]), test(3, 0, [9.2, 9.2]), test(5, 0, [9.6, 9.6]),
          test(9, 0, [10.4, 10.4])]
DRAFT = [test(0, 32, [32 * 1.6])]


def test_parts_in_plain_steps_and_the_rest() -> None:
    m = dec.from_bench(TARGET, DRAFT)
    assert m.plain_ms == pytest.approx(5.2) and m.draft_ms_per_token == pytest.approx(1.6)
    assert m.depth == 300 and m.raw["target"] == TARGET
    rows = {r["n"]: r for r in dec.decompose(m, [2, 4, 8], d=2.93, v=0.372)}
    r2 = rows[2]
    assert r2["verify_steps"] == pytest.approx(9.2 / 5.2)
    assert r2["draft_steps"] == pytest.approx(2 * 1.6 / 5.2)
    assert r2["parts_steps"] == pytest.approx((9.2 + 3.2) / 5.2)
    assert r2["fitted_steps"] == pytest.approx(2.93 + 0.744)
    assert r2["rest_steps"] == pytest.approx(2.93 + 0.744 - 12.4 / 5.2)
    assert r2["explained"] is False  # 2.38 of 3.67 plain steps: a third is elsewhere
    # parts that match the line within 10 % are said to explain it
    m8 = rows[8]["parts_steps"]
    close = dec.decompose(m, [8], d=m8 * 1.05 - 0.1 * 8, v=0.1)[0]
    assert close["explained"] is True and close["rest_share"] == pytest.approx(0.05 / 1.05)


def test_a_head_leaves_drafting_in_the_rest() -> None:
    m = dec.from_bench(TARGET, DRAFT)
    (r,) = dec.decompose(m, [4], d=1.71, v=0.148, method="draft-eagle3")
    assert r["draft_steps"] is None and "hidden states" in r["draft_note"]
    assert r["parts_steps"] == pytest.approx(9.6 / 5.2)
    assert "hidden states" in dec.format_rows([r])


def test_refusals_name_the_fix() -> None:
    with pytest.raises(UserError, match="no verification batch of 17 tokens"):
        dec.decompose(dec.from_bench(TARGET), [16])
    with pytest.raises(UserError, match="generation tests"):
        dec.from_bench(TARGET[1:])
    with pytest.raises(UserError, match="several depths"):
        dec.from_bench([*TARGET, test(2, 0, [9.0], depth=0)])
    with pytest.raises(UserError, match="no prompt test"):
        dec.from_bench(TARGET[:1])


def test_the_cost_model_comes_from_the_published_sweep() -> None:
    with zipfile.ZipFile(ROUND1) as z:
        analysis = json.loads(z.read("h200-methods-round1/data/analysis.json"))
    d, v, method = dec.sweep_cost_model(analysis, "draft-a0.9", 1)
    assert (round(d, 2), round(v, 3), method) == (2.93, 0.372, "draft-simple")  # cross-engine.md
    with pytest.raises(UserError, match="no n-sweep of arm 'nope'"):
        dec.sweep_cost_model(analysis, "nope", 1)


def test_cli_refuses_before_running(tmp_path: Path) -> None:
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(b"GGUF")
    r = CliRunner().invoke(cli, ["decompose", "--target", str(gguf), "--from", str(tmp_path)])
    assert r.exit_code != 0 and "--from and --arm go together" in r.output
    r = CliRunner().invoke(cli, ["decompose", "--target", str(tmp_path / "missing.gguf")])
    assert r.exit_code != 0 and "--target" in r.output and "is not a file" in r.output


def test_the_parts_are_timed_by_the_build_the_study_ran(tmp_path: Path) -> None:
    # round 1 ran llama.cpp's CUDA sm90 build: without it here, decompose refuses rather than
    # time a GPU study's parts with the CPU build (on the H200 it found no build at all)
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(b"GGUF")
    r = CliRunner().invoke(cli, ["decompose", "--target", str(gguf), "--from", str(ROUND1),
                                 "--arm", "draft-a0.9"])
    assert r.exit_code != 0
    assert "llama.cpp build (cuda-sm90) is not installed" in r.output
    assert "crossbench engines install llama.cpp --cuda --cuda-arch 90" in r.output
    r = CliRunner().invoke(cli, ["decompose", "--target", str(gguf), "--variant", "gpu"])
    assert r.exit_code != 0 and "variant 'gpu' is not cpu or cuda-smNN" in r.output


@pytest.mark.server
def test_the_real_llama_bench_times_every_part(llama_server: Path,
                                               fixture_models: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    target, draft = fixture_models
    out = tmp_path / "dec.json"
    r = CliRunner().invoke(cli, ["decompose", "--target", str(target), "--draft", str(draft),
                                 "--n", "1,2,4", "--depth", "64", "--gen", "8", "--reps", "1",
                                 "--bench", str(llama_server.parent / "llama-bench"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    tests = got["raw"]["target"]
    assert sorted(t["n_prompt"] for t in tests if t["n_gen"] == 0) == [2, 3, 5]
    assert [t["n_depth"] for t in tests] == [64] * 4
    assert [r["n"] for r in got["rows"]] == [1, 2, 4]
    for row in got["rows"]:  # every part re-derives from the raw tests
        k = row["n"] + 1
        (pp,) = [t for t in tests if t["n_prompt"] == k]
        # --reps 1: llama-bench ran 3, the first two (the CUDA graph's warm-up on a GPU) kept
        # in raw and left out of the rows
        assert len(pp["samples_ns"]) == 3 and got["warmup_reps"] == 2
        assert row["verify_ms"] == pytest.approx(pp["samples_ns"][2] / 1e6)
        assert row["verify_steps"] == pytest.approx(row["verify_ms"] / row["plain_ms"])
        assert row["draft_steps"] > 0
    # one timed repetition a test: nothing to judge, and the JSON says so as it says the rest
    assert got["notes"] == dec.repetition_notes(dec.steady_tests(tests), "target") == []
    assert "warning:" not in r.output


# -- the batch-shape source: the baseline's step at concurrency n + 1 ------------------------

# true per-step times (ms) of a baseline at each concurrency: the step of k sequences
STEPS = {1: 5.0, 2: 5.5, 3: 6.1, 5: 6.9}


def shapes_run(out: Path, steps: dict[int, float] = STEPS,
               groups: tuple[tuple[str, str], ...] = (("vllm", "t8b-hf"),),
               ref: str | None = None) -> Path:
    """An import directory made by the project's writers: for each (engine, target) a
    baseline cell per concurrency whose requests decode at exactly 1 / step tokens a second
    (context 30-37 + 48 tokens), and one speculative cell (ignored: the verification comes
    from baselines only)."""
    from standins.study import request

    from crossbench.importers.records import ImportedCell, run_config, write_import

    cells = []
    for (engine, target), (c, ms) in itertools.product(groups, [*steps.items(), (1, 4.0)]):
        spec = {"type": "none"} if ms != 4.0 else {"type": "draft-simple", "n": 2}
        records = [request(trial=0, index=i, prompt_id=f"p{i}", category="code",
                           t_sent_ns=i * 10**9, rate_tok_s=1e3 / ms, tokens=48,
                           usage={"prompt_tokens": 30 + i, "completion_tokens": 48})
                   for i in range(8)]
        config = run_config(engine=engine, model=target, spec=spec, trials=1,
                            load={"workload": "builtin:mixed", "concurrency": c})
        if ref:
            config["model_refs"] = {"model": ref}
        arm = str(spec["type"])
        coords = {"engine": engine, "target": target, "arm": arm, "method": arm,
                  "n": spec.get("n"), "workload": "builtin:mixed", "concurrency": c}
        cells.append(ImportedCell(coords, config, {"kind": "synthetic", "version": None,
                                                   "sha256": None}, records, {"trials": [0]}))
    write_import(out, cells, {"tool": "synthetic"}, [])
    return out


def shape_of(run: Path, **kw: Any) -> dec.BatchShape:
    from crossbench.analysis.rundir import load_run

    return dec.batch_shape(load_run(run).cells, **kw)


def test_batch_shape_recovers_the_known_steps(tmp_path: Path) -> None:
    shape = shape_of(shapes_run(tmp_path / "run"))
    assert (shape.engine, shape.target, shape.workload) == ("vllm", "t8b-hf", "builtin:mixed")
    assert [c["concurrency"] for c in shape.cells] == [1, 2, 3, 5]  # no speculative cell
    for c in shape.cells:  # the analysis's pooled rate, and its sums re-derive the step
        assert c["step_ms"] == pytest.approx(STEPS[c["concurrency"]], rel=1e-6)
        assert c["step_ms"] == pytest.approx(1e3 * c["decode_s"] / c["decode_tokens"])
        assert c["pooled_tok_s"] == pytest.approx(1e3 / c["step_ms"])
        assert (c["requests"], c["decode_tokens"]) == (8, 8 * 47)
    m = dec.from_batch_shape(shape, [1, 2, 3, 4])
    rows = {r["n"]: r for r in dec.decompose(m, [1, 2, 3, 4], d=1.0, v=0.1)}
    assert m.plain_ms == pytest.approx(5.0)
    for n, want in ((1, 5.5), (2, 6.1), (4, 6.9)):  # measured: k = n + 1 ran
        assert rows[n]["verify_steps"] == pytest.approx(want / 5.0)
        assert rows[n]["verify_concurrencies"] == [n + 1]
    # n = 3: k = 4 lies between the measured 3 and 5, interpolated linearly
    assert rows[3]["verify_ms"] == pytest.approx((6.1 + 6.9) / 2)
    assert rows[3]["verify_concurrencies"] == [3, 5]
    r4 = rows[4]
    assert r4["draft_steps"] is None and "no draft model given" in r4["draft_note"]
    assert r4["rest_steps"] == pytest.approx(1.4 - 6.9 / 5.0)
    assert r4["verify_from"] == "batch shape" and r4["batch_sequences"] == 5


def test_batch_shape_refuses_to_extrapolate(tmp_path: Path) -> None:
    shape = shape_of(shapes_run(tmp_path / "run"))
    with pytest.raises(UserError, match=r"a step of 9 sequences is outside them") as e:
        dec.from_batch_shape(shape, [2, 8])
    assert "run the baseline at concurrency 9 or more" in str(e.value.hint)
    # at a sweep's concurrency c the step is c (n + 1) sequences, in steps of c
    m = dec.from_batch_shape(shape, [1], concurrency=2)
    assert m.plain_ms == pytest.approx(5.5) and m.verify_ms[2] == pytest.approx(
        (6.1 + 6.9) / 2)
    without_1 = shape_of(shapes_run(tmp_path / "no1", {2: 5.5, 3: 6.1}))
    with pytest.raises(UserError, match="a step of 1 sequences is outside them"):
        dec.from_batch_shape(without_1, [1])


def test_the_kv_bound_from_the_recorded_shape_or_assumed(tmp_path: Path) -> None:
    recorded = shape_of(shapes_run(tmp_path / "ref", ref="fixture:qwen3-8b/target@hf")).kv
    assumed = shape_of(shapes_run(tmp_path / "none")).kv
    per_token = 2 * 36 * 8 * 128 * 2  # K and V, 36 layers, 8 KV heads of 128, F16
    for kv in (recorded, assumed):
        assert kv["kv_bytes_per_token"] == per_token
        assert kv["context_tokens"] == 37 + 48  # the largest prompt + output recorded
        assert kv["kv_bytes_per_sequence"] == per_token * 85
    assert recorded["shape_assumed"] is False and recorded["shape"].startswith(
        "fixture:qwen3-8b/target@hf: 36 layers")
    assert recorded["weights_from"] == "its fixture shape at F16"
    assert recorded["weight_bytes"] == pytest.approx(16.38e9, rel=1e-3)
    assert assumed["shape_assumed"] is True and "assumed" in assumed["shape"]
    # the brief's figure: 300 tokens of context are ~44 MB a sequence against 16.4 GB
    assert per_token * 300 == pytest.approx(44.2e6, rel=1e-3)
    rows = dec.decompose(dec.from_batch_shape(shape_of(tmp_path / "ref"), [4]), [4])
    assert rows[0]["kv_extra_share"] == pytest.approx(4 * per_token * 85
                                                      / recorded["weight_bytes"])


# the Qwen3.5 fixture targets (crossbench/fixtures/mtp.py), their bound worked out by hand from
# the specs' numbers: K and V of the full-attention layers (every 4th), the recurrent state of
# the gated delta-net layers at 4 bytes an element (llama.cpp's F32), per sequence whatever the
# context: the delta rule's value heads x key dim x value dim and the short convolution's
# (kernel - 1) x (2 key heads x key dim + value heads x value dim); the bytes a step reads:
# F16 (A_log F32), the MTP layer and all but one embedding row left out, top-k experts alone
VOCAB = 151936


def _qwen35_step_bytes(e: int, full: tuple[int, int], linear: tuple[int, int, int], mlp: int,
                       n_full: int, n_linear: int) -> int:
    """Bytes one step reads: ``full`` = (matrix rows over e, norm elements) of a
    full-attention layer, ``linear`` = (matrix rows, other F16 elements, F32 elements) of a
    linear one, ``mlp`` = the MLP's matrix rows read (each of e elements), two layer norms a
    layer, one embedding row, the final norm and the output head."""
    f16 = (n_full * (full[0] * e + full[1]) + n_linear * (linear[0] * e + linear[1])
           + (n_full + n_linear) * (mlp * e + 2 * e) + e + e + VOCAB * e)
    return 2 * f16 + 4 * n_linear * linear[2]


# qwen3-8b moe-target: 8 layers (2 full), width 2048, 2 KV heads of 256 (16 query heads,
# gated: q_proj 2 x 16 x 256 rows), linear 16 key / 32 value heads of 128, conv kernel 4,
# 256 experts of 512, top 8, a shared expert of 512. Full attention: q, k, v rows and o_proj
# (2048 x 16 x 256: as many elements as 16 x 256 rows of 2048); q_norm and k_norm
MOE_FULL = (2 * 16 * 256 + 2 * 256 + 2 * 256 + 16 * 256, 256 + 256)
# in_proj_qkv 2 x 2048 + 4096, z 4096, b 32, a 32, out_proj 4096 rows (over e 2048); the
# conv kernel (8192 x 4), dt_bias 32, norm 128; A_log 32 (F32)
MOE_LINEAR = (2 * 16 * 128 + 32 * 128 + 32 * 128 + 32 + 32 + 32 * 128, 8192 * 4 + 32 + 128, 32)
MOE_STATE = 6 * (32 * 128 * 128 + (4 - 1) * (2 * 16 * 128 + 32 * 128)) * 4
# router 256 rows, 8 experts' gate/up/down 3 x 512 rows each, the shared expert's 3 x 512 and
# its gate 1
MOE_MLP = 256 + 8 * 3 * 512 + 3 * 512 + 1
TWIN_MLP = 3 * (8 * 512 + 512)  # the dense twin: one MLP of 4608
# tiny mtp-target: 4 layers (1 full), width 64, 2 KV heads of 64 (4 query heads), linear
# 2 key / 4 value heads of 16, conv kernel 4, one MLP of 256
TINY_FULL = (2 * 4 * 64 + 2 * 64 + 2 * 64 + 4 * 64, 64 + 64)
TINY_LINEAR = (2 * 2 * 16 + 4 * 16 + 4 * 16 + 4 + 4 + 4 * 16, (2 * 32 + 64) * 4 + 4 + 16, 4)
TINY_STATE = 3 * (4 * 16 * 16 + (4 - 1) * (2 * 2 * 16 + 4 * 16)) * 4

QWEN35 = {  # ref: (K and V bytes a token, state bytes a sequence, bytes a step reads)
    "fixture:qwen3-8b/moe-target@hf": (
        2 * 2 * 2 * 256 * 2, MOE_STATE,
        _qwen35_step_bytes(2048, MOE_FULL, MOE_LINEAR, MOE_MLP, 2, 6)),
    "fixture:qwen3-8b/dense-twin": (
        2 * 2 * 2 * 256 * 2, MOE_STATE,
        _qwen35_step_bytes(2048, MOE_FULL, MOE_LINEAR, TWIN_MLP, 2, 6)),
    "fixture:tiny/mtp-target": (
        2 * 1 * 2 * 64 * 2, TINY_STATE,
        _qwen35_step_bytes(64, TINY_FULL, TINY_LINEAR, 3 * 256, 1, 3)),
}


@pytest.mark.parametrize("ref", sorted(QWEN35))
def test_the_kv_bound_of_a_qwen35_target(tmp_path: Path, ref: str) -> None:
    per_token, state, weights = QWEN35[ref]
    shape = shape_of(shapes_run(tmp_path / "run", ref=ref))
    kv = shape.kv
    assert kv["shape_assumed"] is False and kv["shape"].startswith(f"{ref}: K and V of ")
    assert "full-attention layers" in kv["shape"] and "gated delta-net" in kv["shape"]
    assert kv["kv_bytes_per_token"] == per_token  # the full-attention layers alone
    assert kv["state_bytes_per_sequence"] == state
    assert kv["context_tokens"] == 85
    assert kv["kv_bytes_per_sequence"] == per_token * 85 + state
    assert kv["weight_bytes"] == weights
    assert "the bytes one step reads" in kv["weights_from"]
    assert "16 bits reads half" in kv["state_note"]
    rows = dec.decompose(dec.from_batch_shape(shape, [4]), [4])
    assert rows[0]["kv_extra_share"] == pytest.approx(4 * (per_token * 85 + state) / weights)
    assert rows[0]["state_extra_share"] == pytest.approx(4 * state / weights)
    assert "extra KV and recurrent state reads" in dec.format_rows(rows)


def test_the_moe_targets_figures() -> None:
    # the figures docs/analysis.md states for the qwen3-8b moe-target: 13.2 MB of state a
    # sequence, 1.60 GB a step (of 16.4 GB in the file), 12.7 % at 16 sequences of 85 tokens,
    # where the Qwen3-8B shape's K and V come to 1.1 %
    per_token, state, weights = QWEN35["fixture:qwen3-8b/moe-target@hf"]
    assert state == 13_172_736 and weights == 1_597_485_696
    assert 15 * (per_token * 85 + state) / weights == pytest.approx(0.127, abs=5e-4)
    assert 15 * 2 * 36 * 8 * 128 * 2 * 85 / dec.ASSUMED_SHAPE["weight_bytes"] == pytest.approx(
        0.011, abs=5e-4)


def test_the_bytes_a_step_reads_beside_a_recorded_file(tmp_path: Path) -> None:
    from types import SimpleNamespace

    def bound(ref: str, size: int) -> dict[str, Any]:
        cell = SimpleNamespace(config={"model_refs": {"model": ref}},
                               manifest={"models": {"model": {"bytes": size}}})
        return dec.kv_bound(cell, 85, 256)  # type: ignore[arg-type]

    _, _, weights = QWEN35["fixture:qwen3-8b/moe-target@hf"]
    # an MoE's file is not what a step reads (most experts are not): the shape's bytes
    assert bound("fixture:qwen3-8b/moe-target", 16_400_000_000)["weight_bytes"] == weights
    # a quantized file: the step's F16 bytes times the file's bytes per F16 byte
    whole = 16_391_341_696  # the shape's whole F16 folder (docs/moe-vs-dense.md: 16.4 GB)
    q4 = bound("fixture:qwen3-8b/moe-target@Q4_K_M", 5_000_000_000)
    assert q4["weight_bytes"] == round(weights * 5_000_000_000 / whole)
    assert "Q4_K_M" in q4["weights_from"]
    # the plain Qwen3 targets keep the recorded size
    assert bound("fixture:qwen3-8b/target", 16_388_039_712)["weight_bytes"] == 16_388_039_712


@pytest.mark.parametrize("ref", ["fixture:qwen3-8b/moe-twin", "fixture:qwen3-8b-l64/moe-target",
                                 "fixture:qwen3-8b-l4/target", "fixture:huge/dense-twin@hf"])
def test_an_unknown_qwen35_role_or_shape_is_assumed(tmp_path: Path, ref: str) -> None:
    kv = shape_of(shapes_run(tmp_path / "run", ref=ref)).kv
    assert kv["shape_assumed"] is True and kv["shape"].startswith("assumed")
    assert kv["kv_bytes_per_token"] == 2 * 36 * 8 * 128 * 2
    assert kv["state_bytes_per_sequence"] == 0
    assert kv["kv_bytes_per_sequence"] == 2 * 36 * 8 * 128 * 2 * 85
    assert kv["weight_bytes"] == dec.ASSUMED_SHAPE["weight_bytes"]


def test_a_layer_cut_is_recognised(tmp_path: Path) -> None:
    kv = shape_of(shapes_run(tmp_path / "run", ref="fixture:qwen3-8b-l4/dense-twin")).kv
    assert kv["shape_assumed"] is False  # 4 layers: 3 linear, 1 full
    assert kv["kv_bytes_per_token"] == 2 * 1 * 2 * 256 * 2
    assert kv["state_bytes_per_sequence"] == 3 * (32 * 128 * 128 + 3 * 8192) * 4


TWO = (("vllm", "t8b-hf"), ("llama", "t8b-f16"))


def test_batch_shape_names_the_baseline_to_pick(tmp_path: Path) -> None:
    from crossbench.analysis.rundir import load_run

    cells = load_run(shapes_run(tmp_path / "a", groups=TWO)).cells
    with pytest.raises(UserError, match="2 baselines") as e:
        dec.batch_shape(cells)
    assert "--engine and --model" in str(e.value.hint)
    assert dec.batch_shape(cells, engine="llama").target == "t8b-f16"


ROUND4_VLLM = ROUND1.parent.parent / "round4" / "h200-methods-round4-vllm.zip"


def test_verify_from_keeps_its_sources_and_takes_the_sweeps_baseline(tmp_path: Path) -> None:
    # round 4's vLLM EAGLE-3 sweep (d, v) against a batch-shape run of the same engine and
    # target names (vllm, t8b-hf): the sweep picks the baseline among the run's two engines
    run = shapes_run(tmp_path / "run", groups=TWO)
    out = tmp_path / "dec.json"
    with zipfile.ZipFile(ROUND4_VLLM) as z:
        analysis = json.loads(z.read("h200-methods-round4-vllm/data/analysis.json"))
    d, v, _ = dec.sweep_cost_model(analysis, "eagle3-a0.9", 1)
    r = CliRunner().invoke(cli, ["decompose", "--verify-from", str(run), "--n", "1,2,3,4",
                                 "--from", str(ROUND4_VLLM), "--arm", "eagle3-a0.9",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "KV bound" in r.output and "batch shape" in r.output
    assert "hidden states" in r.output  # EAGLE-3's drafting stays in the rest
    got = json.loads(out.read_text())
    assert got["verify_source"] == "batch shape" and (got["d"], got["v"]) == (d, v)
    cells = {c["concurrency"]: c for c in got["batch_shape"]["cells"]}
    step = {c: 1e3 * x["decode_s"] / x["decode_tokens"] for c, x in cells.items()}
    for row in got["rows"]:  # every figure re-derives from the kept cells
        used = row["verify_concurrencies"]
        k = row["verify_tokens"]
        want = step[k] if used == [k] else step[used[0]] + (k - used[0]) / (
            used[1] - used[0]) * (step[used[1]] - step[used[0]])
        assert row["verify_ms"] == pytest.approx(want)
        assert row["verify_steps"] == pytest.approx(want / step[1])
        assert row["rest_steps"] == pytest.approx(d + v * row["n"] - row["verify_steps"])
    assert got["batch_shape"]["engine"] == "vllm"
    assert got["batch_shape"]["kv"]["context_tokens"] == 85
    # two engines in the run and no sweep to pick one: named, not guessed
    r = CliRunner().invoke(cli, ["decompose", "--verify-from", str(run), "--n", "1"])
    assert r.exit_code != 0 and "2 baselines" in r.output and "--engine" in r.output
    r = CliRunner().invoke(cli, ["decompose", "--verify-from", str(run), "--n", "8",
                                 "--engine", "llama", "--model", "t8b-f16"])
    assert r.exit_code != 0 and "run the baseline at concurrency 9 or more" in r.output


def test_the_analysis_baseline_rate_is_the_step(tmp_path: Path) -> None:
    # round 4's vLLM baseline ran at c=1 and c=16: the step is 1 / the analysis's own
    # baseline rate (pooled tok/s), and n + 1 between them is interpolated
    from crossbench.frames import open_run

    with zipfile.ZipFile(ROUND4_VLLM) as z:
        analysis = json.loads(z.read("h200-methods-round4-vllm/data/analysis.json"))
    pooled = {c["concurrency"]: c["throughput"]["pooled_tok_s"] for c in analysis["cells"]
              if c["method"] == "none"}
    run = open_run(ROUND4_VLLM)
    shape = dec.batch_shape(run.run.cells)
    assert {c["concurrency"]: c["pooled_tok_s"] for c in shape.cells} == pytest.approx(pooled)
    (row,) = dec.decompose(dec.from_batch_shape(shape, [4]), [4])
    s1, s16 = 1e3 / pooled[1], 1e3 / pooled[16]
    assert row["verify_steps"] == pytest.approx((s1 + 4 / 15 * (s16 - s1)) / s1)
    assert shape.kv["shape_assumed"] is False  # fixture:qwen3-8b/target@hf


def test_cli_refusals_of_the_batch_shape(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["decompose", "--n", "1"])
    assert r.exit_code != 0 and "--target is required without --verify-from" in r.output
    gguf = tmp_path / "d.gguf"
    gguf.write_bytes(b"GGUF")
    r = CliRunner().invoke(cli, ["decompose", "--verify-from", str(tmp_path), "--draft",
                                 str(gguf)])
    assert r.exit_code != 0 and "--target and --draft go together" in r.output


@pytest.mark.server
def test_verify_from_a_real_llama_server_run(llama_server: Path,
                                             fixture_models: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    # the CPU llama-server's baseline at concurrency 1, 2, 3 with the tiny fixtures: every
    # figure re-derives from the run's cells (their times are this host's, asserted on none)
    import yaml

    matrix = tmp_path / "shapes.yaml"
    matrix.write_text(yaml.safe_dump({
        "schema_version": 1, "study": {"name": "shapes"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(llama_server),
                              "server": {"parallel": 3, "ctx_size": 1536}}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"}},
        "load": {"requests": 3, "requests_per_concurrency": 2, "warmup": 1,
                 "max_tokens": 12, "warmup_max_tokens": 4, "temperature": 0.0,
                 "ignore_eos": True, "cache_prompt": False},
        "arms": [{"method": "none"}],
        "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:code"],
                 "concurrency": [1, 2, 3]},
        "trials": 1, "share_servers": True, "telemetry_hz": 0}))
    run, out = tmp_path / "run", tmp_path / "dec.json"
    r = CliRunner().invoke(cli, ["matrix", str(matrix), "--out", str(run)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["decompose", "--verify-from", str(run), "--n", "1,2",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = json.loads(out.read_text())
    cells = {c["concurrency"]: c for c in got["batch_shape"]["cells"]}
    assert sorted(cells) == [1, 2, 3] and all(c["requests"] > 0 for c in cells.values())
    kv = got["batch_shape"]["kv"]  # fixture:target: the tiny shape, its GGUF's recorded size
    assert kv["shape"].startswith("fixture:target: 8 layers, 2 KV heads of 32")
    assert kv["weights_from"] == "the target file's recorded size"
    assert kv["kv_bytes_per_token"] == 2 * 8 * 2 * 32 * 2
    for row in got["rows"]:
        c = cells[row["n"] + 1]
        assert row["verify_concurrencies"] == [row["n"] + 1]
        assert row["verify_ms"] == pytest.approx(1e3 * c["decode_s"] / c["decode_tokens"])
        assert row["verify_steps"] == pytest.approx(row["verify_ms"] / (
            1e3 * cells[1]["decode_s"] / cells[1]["decode_tokens"]))


ROUND4_LLAMA = ROUND4_VLLM.parent / "h200-methods-round4-llama.zip"


def test_the_telemetry_split_re_derives_round_4s_figures() -> None:
    """The run's own telemetry, per speculative step: GPU work and idle, and their sum in the
    baseline's time per token by the same window; the figures docs/cross-engine.md states for
    round 4's llama.cpp draft sweep (work + idle 2.88 / 3.61 / 4.44 / 6.18 plain steps against
    the fitted 3.00 / 3.42 / 4.26 / 5.94) re-derive from the archive."""
    with zipfile.ZipFile(ROUND4_LLAMA) as z:
        analysis = json.loads(z.read("h200-methods-round4-llama/data/analysis.json"))
    sweep = dec.find_sweep(analysis, "draft-a0.9")
    split = dec.telemetry_split(analysis, sweep)
    assert sorted(split) == [1, 2, 4, 8]
    # recorded before the clock anchor: the trial window, as the docs' figures were made
    assert {row["window"] for row in split.values()} == {"trial"}
    # (its recorded analysis.json predates host_time.decode)
    assert {row["window_note"] for row in split.values()} == {"no decode figures"}
    assert [round(split[n]["telemetry_steps"], 2) for n in (1, 2, 4, 8)] == [
        2.88, 3.61, 4.44, 6.18]
    assert [round(split[n]["gpu_ms_per_step"], 1) for n in (1, 2, 4, 8)] == [
        11.3, 13.9, 16.2, 22.5]
    assert round(split[1]["host_ms_per_step"], 1) == 6.1
    d, v, _ = dec.sweep_cost_model(analysis, "draft-a0.9")
    for n, row in split.items():  # within 6 % of the fitted C(n)
        assert abs(row["telemetry_steps"] / (d + v * n) - 1) < 0.06
    no_telemetry = {**analysis, "cells": [{k: v for k, v in c.items() if k != "host_time"}
                                          for c in analysis["cells"]]}
    assert dec.telemetry_split(no_telemetry, sweep) == {}


H100_VLLM = ROUND1.parent.parent.parent / "h100-methods" / "verdicts-part2"


def test_an_arm_at_one_n_is_split_against_its_measured_step(tmp_path: Path) -> None:
    """vLLM's verdicts on an H100 ran EAGLE-3 at n = 4 alone: no line to fit, so the rest is
    the pair's own C(4) = MAL / speedup minus the verification read from the same machine's
    batch-shape run; n without a pair get no rest; the table says the C(n) is measured."""
    verdicts = H100_VLLM / "h100-verdicts-part2-vllm-verdicts.zip"
    with zipfile.ZipFile(verdicts) as z:
        analysis = json.loads(z.read("h100-verdicts-part2-vllm-verdicts/data/analysis.json"))
    (pair,) = [p for p in analysis["pairs"] if p["arm"] == "eagle3-a0.9"]
    want = pair["acceptance"]["mean_acceptance_length"] / pair["speedup"]["geomean"]
    assert dec.measured_costs(dec.arm_points(analysis, "eagle3-a0.9")) == {4: pytest.approx(want)}
    out = tmp_path / "dec.json"
    r = CliRunner().invoke(cli, ["decompose", "--verify-from",
                                 str(H100_VLLM / "h100-verdicts-part2-vllm-shapes.zip"),
                                 "--n", "1,4", "--from", str(verdicts), "--arm", "eagle3-a0.9",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "measured C(n)" in r.output and "no fit" in r.output
    got = json.loads(out.read_text())
    assert (got["d"], got["v"], got["method"]) == (None, None, "eagle3")
    one, four = got["rows"]
    assert "rest_steps" not in one and "measured_steps" not in one
    assert four["measured_steps"] == pytest.approx(want)
    assert four["rest_steps"] == pytest.approx(want - four["verify_steps"])
    assert four["explained"] is (abs(four["rest_steps"]) <= dec.EXPLAINED * want)
    assert four["gpu_ms_per_step"] > 0  # the run's own telemetry, per step of the pair
    r = CliRunner().invoke(cli, ["decompose", "--verify-from",
                                 str(H100_VLLM / "h100-verdicts-part2-vllm-shapes.zip"),
                                 "--n", "4", "--from", str(verdicts), "--arm", "nope"])
    assert r.exit_code != 0 and "no cell of arm 'nope'" in r.output
    assert "eagle3-a0.9 (c=1)" in r.output


REPS = (Path(__file__).parent.parent / "examples" / "h100-methods" / "mtp2-part4"
        / "decompose-mtp-reps.json")


def test_slow_first_repetitions_are_named_and_steady_ones_are_not() -> None:
    """The H100's real llama-bench output (`mtp2 PART=4`, 10 repetitions a test): each of the
    four passes has two slow first repetitions, pulling its mean 8-15 % above the median, so
    each gets a note naming the fix; the 32-token generation (mean within 0.3 % of its
    median) gets none, nor do steady or too-short tests."""
    raw = json.loads(REPS.read_text())["raw"]["target"]
    m = dec.from_bench(raw)
    assert len(m.notes) == 4
    for note, k in zip(m.notes, (2, 3, 5, 9), strict=True):
        assert note.startswith(f"the target's pass over {k} tokens: the mean of 10 repetitions")
        assert "warm-up" in note and "--reps 10" in note
    assert "the target's pass over 2 tokens: the mean of 10 repetitions (9.30 ms) is 15 % " \
           "above their median (8.11 ms), slowest 18.14 ms" in m.notes[0]
    assert dec.repetition_notes(TARGET, "target") == []  # steady: mean = median
    assert dec.repetition_notes([test(2, 0, [20.0, 8.0])], "target") == []  # 2: not judged
    assert dec.repetition_notes([test(2, 0, [8.0, 8.0, 8.0, 9.0])], "draft") == []  # 3 %
    (note,) = dec.repetition_notes([test(0, 32, [400.0, 200.0, 200.0])], "draft")
    assert note.startswith("the draft's 32-token generation: the mean of 3 repetitions "
                           "(266.67 ms) is 33 % above their median (200.00 ms)")


def test_the_cli_leaves_out_the_graph_warm_up_and_says_what_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`crossbench decompose` given llama-bench output with two slow first repetitions (the
    H100's recorded output of `mtp2 PART=4`, 10 repetitions a test, stands in for llama-bench
    here, named as such: the CUDA graph's direct run and capture) asks llama-bench for two
    more repetitions than --reps, leaves the first two out of its rows (each pass the mean of
    its other eight) and so prints no warm-up warning; given a slow third repetition as well,
    it warns, and writes the same notes into --out's JSON."""
    raw = json.loads(REPS.read_text())["raw"]["target"]
    asked: list[int] = []

    def bench(binary: Path, model: Path, prompts: list[int], n_gen: int, depth: int,
              reps: int, extra: list[str]) -> list[dict[str, Any]]:
        asked.append(reps)
        return raw

    monkeypatch.setattr(dec, "run_llama_bench", bench)
    bench_bin, target = tmp_path / "llama-bench", tmp_path / "t.gguf"
    bench_bin.write_text("recorded output stands in\n")
    target.write_bytes(b"GGUF")
    out = tmp_path / "steady.json"
    r = CliRunner().invoke(cli, ["decompose", "--target", str(target), "--method", "draft-mtp",
                                 "--n", "1,2,4,8", "--reps", "8", "--bench", str(bench_bin),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert asked == [10] and "warning: " not in r.output
    got = json.loads(out.read_text())
    assert got["notes"] == [] and got["warmup_reps"] == 2 and got["raw"]["target"] == raw
    (pp,) = [t for t in raw if t["n_prompt"] == 2 and t["n_gen"] == 0]
    assert got["rows"][0]["verify_ms"] == pytest.approx(sum(pp["samples_ns"][2:]) / 8 / 1e6)
    # a slow third repetition is no graph warm-up: it is named
    raw = [dict(t, samples_ns=[*t["samples_ns"][:2], 3 * t["samples_ns"][2],
                               *t["samples_ns"][3:]]) if t["n_gen"] == 0 else t for t in raw]
    monkeypatch.setattr(dec, "run_llama_bench", lambda *a, **k: raw)
    out = tmp_path / "d.json"
    r = CliRunner().invoke(cli, ["decompose", "--target", str(target), "--method", "draft-mtp",
                                 "--n", "1,2,4,8", "--reps", "8", "--bench", str(bench_bin),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    warnings = [ln for ln in r.output.splitlines() if ln.startswith("warning: ")]
    got = json.loads(out.read_text())
    assert [w.removeprefix("warning: ") for w in warnings] == got["notes"]
    assert len(got["notes"]) == 4 and "pass over 9 tokens" in got["notes"][3]
