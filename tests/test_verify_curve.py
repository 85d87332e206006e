"""`crossbench verify-curve`: the forward time of k tokens from llama-bench tests, the MoE byte
split read from a GGUF header and the expert-union prediction against hand-computed values,
refusals before llama-bench runs, and the real llama-bench on the tiny MoE target and its
dense twin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from crossbench.analysis import decompose as dec
from crossbench.analysis import verify_curve as vc
from crossbench.cli.main import cli
from crossbench.errors import UserError


def bench_test(n_prompt: int, n_gen: int, ms: list[float], depth: int = 64) -> dict[str, Any]:
    """One test object as `llama-bench -o json` writes it (the fields read here)."""
    return {"n_prompt": n_prompt, "n_gen": n_gen, "n_depth": depth,
            "samples_ns": [round(x * 1e6) for x in ms]}


# E = 8 experts, top-2; 1000 bytes read whatever k is, 100 bytes per expert
SPLIT = vc.WeightSplit(n_experts=8, top_k=2, dense_bytes=1000, bytes_per_expert=100,
                       moe_layers=1, skipped_mtp_bytes=0)


def test_the_prediction_by_hand() -> None:
    # k = 1: D = 2, (1000 + 200) / 1200; k = 2: D = 8 (1 - 0.75^2) = 3.5;
    # k = 4: D = 8 (1 - 0.75^4) = 5.46875
    assert vc.predicted_ratio(SPLIT, 1) == pytest.approx(1.0)
    assert vc.predicted_ratio(SPLIT, 2) == pytest.approx(1350 / 1200)
    assert vc.predicted_ratio(SPLIT, 4) == pytest.approx(1546.875 / 1200)
    # all bytes in the experts: the ratio is the expert union's, D(k) / top_k
    experts_only = vc.WeightSplit(8, 2, 0, 100, 1, 0)
    assert vc.predicted_ratio(experts_only, 16) == pytest.approx(8 * (1 - 0.75**16) / 2)
    # no expert bytes: the pass costs the same for every k
    assert vc.predicted_ratio(vc.WeightSplit(8, 2, 1000, 0, 1, 0), 16) == pytest.approx(1.0)


def test_the_prediction_with_parallel_sequences_by_hand() -> None:
    """P sequences of k tokens route like one block of P k tokens, against P tokens: P = 2,
    k = 2: D(4) = 8 (1 - 0.75^4) = 5.46875 over D(2) = 3.5."""
    assert vc.predicted_ratio(SPLIT, 2, 2) == pytest.approx(1546.875 / 1350)
    assert vc.predicted_ratio(SPLIT, 1, 16) == pytest.approx(1.0)
    assert vc.predicted_ratio(SPLIT, 3, 1) == vc.predicted_ratio(SPLIT, 3)


def test_the_graph_warm_up_repetitions_are_left_out() -> None:
    """llama-bench's first two repetitions of a test (the CUDA graph's direct run and its
    capture) are dropped, the test's other fields kept; the rows then read the replayed
    passes alone (the H200's MoE target at k = 1 on 2026-12-07: 2.367, 3.125, 1.266 ms)."""
    tests = [{"n_prompt": 1, "n_gen": 0, "n_depth": 300,
              "samples_ns": [2_367_000, 3_125_000, 1_266_000]},
             {"n_prompt": 0, "n_gen": 32, "n_depth": 300,
              "samples_ns": [42_123_000, 39_074_000, 39_236_000]}]
    steady = dec.steady_tests(tests)
    assert [t["samples_ns"] for t in steady] == [[1_266_000], [39_236_000]]
    assert steady[0]["n_depth"] == 300 and tests[0]["samples_ns"][0] == 2_367_000  # a copy
    m = dec.from_bench(steady)
    assert m.verify_ms[1] == pytest.approx(1.266)
    assert m.plain_ms == pytest.approx(39.236 / 32)
    with pytest.raises(UserError, match="not more than the 2 warm-up ones"):
        dec.steady_tests([{"n_prompt": 1, "n_gen": 0, "samples_ns": [1, 2]}])


def test_the_bytes_line_recovers_a_known_fixed_part_and_rate() -> None:
    """Passes timed as exactly 1.5 ms plus the predicted bytes at 2e-6 GB a ms, i.e. 2e-6
    TB/s (SPLIT's bytes are tiny): the line gives back the fixed part and the rate with R^2 1; noise lowers R^2 but keeps both near; a dense target, or fewer than three
    passes, has no line."""
    def rows(ks: list[int], parallel: int = 1, noise: list[float] | None = None
             ) -> list[dict[str, Any]]:
        out = []
        for i, k in enumerate(ks):
            gb = vc.pass_bytes(SPLIT, parallel * k) / 1e9
            out.append({"k": k, "tokens": parallel * k,
                        "verify_ms": 1.5 + gb / 2e-6 + (noise[i] if noise else 0.0)})
        return out

    assert vc.pass_bytes(SPLIT, 2) == pytest.approx(1000 + 3.5 * 100)  # D(2) = 3.5
    line = vc.bytes_line(SPLIT, rows([1, 2, 4, 8]))
    assert line is not None
    assert line["fixed_ms"] == pytest.approx(1.5) and line["r2"] == pytest.approx(1.0)
    assert line["tb_per_s"] == pytest.approx(2e-6)  # a GB a ms is a TB a second
    assert line["k"] == [1, 2, 4, 8]
    noisy = vc.bytes_line(SPLIT, rows([1, 2, 3, 4, 6, 8], noise=[0.02, -0.01, 0.0, 0.015,
                                                                 -0.02, 0.01]))
    assert noisy is not None and 0.9 < noisy["r2"] < 1.0
    assert noisy["fixed_ms"] == pytest.approx(1.5, abs=0.05)
    par = vc.bytes_line(SPLIT, rows([1, 2, 3], parallel=4))
    assert par is not None and par["fixed_ms"] == pytest.approx(1.5)
    assert vc.bytes_line(None, rows([1, 2, 4])) is None
    assert vc.bytes_line(SPLIT, rows([1, 2])) is None
    text = vc.format_bytes_line(line)
    assert "1.50 ms + bytes / 0.00 TB/s, R² 1.000 over k = 1..8 (4 passes" in text


def batched(pp: int, t_pp: float, t_tg: float, pl: int = 4, tg: int = 8) -> dict[str, Any]:
    """One result line of `llama-batched-bench --output-format jsonl` (the fields read)."""
    return {"pp": pp, "tg": tg, "pl": pl, "t_pp": t_pp, "t_tg": t_tg}


def test_rows_from_batched_bench_results() -> None:
    """The warm-up entry is left out; per k the median pass, the plain step the median
    t_tg / tg; rows count P k tokens and predict against P tokens."""
    tests = [{**batched(4, 9.0, 9.0), "warmup": True},
             batched(1, 0.0020, 0.016), batched(1, 0.0030, 0.017), batched(1, 0.0021, 0.015),
             batched(4, 0.0050, 0.016), batched(4, 0.0040, 0.016), batched(4, 0.0090, 0.016)]
    m = vc.from_batched(tests)
    assert m.verify_ms == pytest.approx({1: 2.1, 4: 5.0})
    assert m.plain_ms == pytest.approx(2.0) and m.depth == 0
    rows = {r["k"]: r for r in vc.curve(m, [1, 4], SPLIT, parallel=4)}
    assert rows[4]["tokens"] == 16 and rows[4]["x_k1"] == pytest.approx(5.0 / 2.1)
    assert rows[4]["plain_steps"] == pytest.approx(2.5)
    assert rows[4]["distinct_experts"] == pytest.approx(8 * (1 - 0.75**16))
    assert rows[4]["predicted_x_k1"] == pytest.approx(vc.predicted_ratio(SPLIT, 4, 4))
    with pytest.raises(UserError, match="no timed result"):
        vc.from_batched(tests[:1])


def test_a_batched_bench_that_prints_too_little_is_refused(tmp_path: Path) -> None:
    tool = tmp_path / "llama-batched-bench"
    line = json.dumps(batched(2, 0.001, 0.002, pl=4, tg=4))
    tool.write_text(f"#!/bin/sh\necho '{line}'\n")
    tool.chmod(0o755)
    with pytest.raises(UserError, match="printed 1 of 5 results"):
        vc.run_batched_bench(tool, tmp_path / "m.gguf", [1, 2], 4, 4, 2, [])


def test_rows_from_the_bench_tests() -> None:
    tests = [bench_test(0, 8, [8 * 2.0]), bench_test(1, 0, [2.5, 2.7]),
             bench_test(2, 0, [3.0]), bench_test(4, 0, [5.2])]
    m = dec.from_bench(tests)
    rows = {r["k"]: r for r in vc.curve(m, [2, 4], SPLIT)}
    assert sorted(rows) == [2, 4]
    assert rows[4]["verify_ms"] == pytest.approx(5.2)
    assert rows[4]["plain_steps"] == pytest.approx(5.2 / 2.0)
    assert rows[4]["x_k1"] == pytest.approx(5.2 / 2.6)
    assert rows[4]["distinct_experts"] == pytest.approx(5.46875)
    assert rows[4]["predicted_x_k1"] == pytest.approx(1546.875 / 1200)
    dense = vc.curve(m, [1, 2], None)
    assert [r["predicted_x_k1"] for r in dense] == [None, None]
    assert [r["distinct_experts"] for r in dense] == [None, None]
    table = vc.format_rows("t.gguf", dense)
    assert "predicted x k=1" in table and table.count("\n") == 2
    with pytest.raises(UserError, match="no forward pass of 8 tokens"):
        vc.curve(m, [8], None)


def _write_gguf(path: Path, moe: bool, tied: bool = False) -> None:
    """A small GGUF with known tensor bytes: 10 x 4 embedding (F32), one layer with a 4 x 4
    attention, an MoE block of 4 experts (router 4 x 4, up and down 4 x 8 x 4 each), and an MTP
    layer (blk.1) the forward pass does not run."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "qwen35moe")
    w.add_block_count(2)
    w.add_uint32("qwen35moe.nextn_predict_layers", 1)
    if moe:
        w.add_expert_count(4)
        w.add_expert_used_count(2)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, np.ones(shape, dtype=np.float32))

    t("token_embd.weight", 10, 4)  # 160 bytes, a row 16
    if not tied:
        t("output.weight", 10, 4)  # 160
    t("blk.0.attn_q.weight", 4, 4)  # 64
    if moe:
        t("blk.0.ffn_gate_inp.weight", 4, 4)  # 64, the router
        t("blk.0.ffn_up_exps.weight", 4, 8, 4)  # 512, experts outermost
        t("blk.0.ffn_down_exps.weight", 4, 4, 8)  # 512
    else:
        t("blk.0.ffn_up.weight", 8, 4)  # 128
    t("blk.1.nextn.eh_proj.weight", 4, 8)  # 128, the MTP layer
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_byte_split_from_the_gguf_header(tmp_path: Path) -> None:
    moe = tmp_path / "moe.gguf"
    _write_gguf(moe, moe=True)
    split = vc.weight_split(moe)
    assert split == vc.WeightSplit(n_experts=4, top_k=2, dense_bytes=16 + 160 + 64 + 64,
                                   bytes_per_expert=1024 // 4, moe_layers=1,
                                   skipped_mtp_bytes=128)
    tied = tmp_path / "tied.gguf"
    _write_gguf(tied, moe=True, tied=True)
    split_tied = vc.weight_split(tied)
    assert split_tied is not None and split_tied.dense_bytes == 160 + 64 + 64  # head = embd
    dense = tmp_path / "dense.gguf"
    _write_gguf(dense, moe=False)
    assert vc.weight_split(dense) is None


def test_refusals_come_before_llama_bench_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    bench = tmp_path / "llama-bench"
    bench.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    bench.chmod(0o755)
    gguf = tmp_path / "t.gguf"
    _write_gguf(gguf, moe=True)
    base = ["verify-curve", "--bench", str(bench)]
    cases = [
        (["--target", str(tmp_path / "missing.gguf")], "--target", "is not a file"),
        (["--target", str(gguf), "--k", ""], "--k", "no values"),
        (["--target", str(gguf), "--k", "0,1"], "--k", "0 is outside 1..512"),
        (["--target", str(gguf), "--k", "1-600"], "--k", "513 is outside 1..512"),
        (["--target", str(gguf), "--target", str(tmp_path / "b.gguf")], "--target",
         "b.gguf is not a file"),
    ]
    stub = tmp_path / "stub.gguf"
    stub.write_bytes(b"GGUF")
    cases.append((["--target", str(stub)], "cannot read GGUF", "stub.gguf"))
    cases.append((["--target", str(gguf), "--out", str(tmp_path / "no" / "o.json")], "--out",
                  "does not exist"))
    cases.append((["--target", str(gguf), "--parallel", "4", "--depth", "16"], "--depth 16",
                  "cleared context"))
    for args, field, what in cases:
        r = CliRunner().invoke(cli, [*base, *args])
        assert r.exit_code == 2, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and field in lines[0] and what in lines[0], (args, r.output)
        assert "fix:" in lines[0]
    assert not marker.exists()
    with pytest.raises(UserError, match="--k: no block sizes"):
        vc.check_k([])


def test_the_help_says_cpu_figures_say_nothing_of_a_gpu() -> None:
    r = CliRunner().invoke(cli, ["verify-curve", "--help"])
    assert r.exit_code == 0
    assert "measure nothing" in r.output and "about a GPU" in r.output


@pytest.fixture(scope="module")
def moe_and_dense() -> tuple[Path, Path]:
    """The tiny MoE target's and its dense twin's GGUFs, made (or reused) in the cache."""
    from crossbench.fixtures.resolve import ensure_mtp_target

    return (ensure_mtp_target("tiny", 0, "moe-target")[1],
            ensure_mtp_target("tiny", 0, "dense-twin")[1])


@pytest.mark.server
def test_the_real_llama_bench_times_both_targets(llama_server: Path,
                                                 moe_and_dense: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    moe, dense = moe_and_dense
    out = tmp_path / "vc.json"
    r = CliRunner().invoke(cli, ["verify-curve", "--target", str(moe), "--target", str(dense),
                                 "--k", "1,2,4,8", "--depth", "16", "--gen", "4", "--reps", "1",
                                 "--bench", str(llama_server.parent / "llama-bench"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "memory-bound" in r.output
    got = json.loads(out.read_text())
    assert got["assumption"] == vc.ASSUMPTION and got["k"] == [1, 2, 4, 8]
    by_name = {t["name"]: t for t in got["targets"]}
    assert sorted(by_name) == ["dense-twin.gguf", "moe-target.gguf"]
    # tiny: 8 experts top-2 in 4 MoE layers, 3 x 64 x 64 F16 = 24576 bytes per expert a layer
    split = by_name["moe-target.gguf"]["split"]
    assert (split["n_experts"], split["top_k"], split["moe_layers"]) == (8, 2, 4)
    assert split["bytes_per_expert"] == 4 * 24576 and split["skipped_mtp_bytes"] > 0
    assert by_name["dense-twin.gguf"]["split"] is None
    for name, t in by_name.items():
        tests = t["raw"]
        assert sorted(x["n_prompt"] for x in tests if x["n_gen"] == 0) == [1, 2, 4, 8]
        assert {x["n_depth"] for x in tests} == {16}
        (gen,) = [x for x in tests if x["n_prompt"] == 0]
        # --reps 1: llama-bench ran 3, the first two (the CUDA graph's warm-up on a GPU) kept
        # in raw and left out of the rows
        assert got["warmup_reps"] == 2 and len(gen["samples_ns"]) == 3
        plain = gen["samples_ns"][2] / 1e6 / gen["n_gen"]
        assert t["plain_ms"] == pytest.approx(plain)
        assert [row["k"] for row in t["rows"]] == [1, 2, 4, 8]
        (one,) = [x for x in tests if x["n_prompt"] == 1 and x["n_gen"] == 0]
        for row in t["rows"]:  # every row re-derives from the raw tests
            (pp,) = [x for x in tests if x["n_prompt"] == row["k"] and x["n_gen"] == 0]
            assert len(pp["samples_ns"]) == 3
            ms = pp["samples_ns"][2] / 1e6
            assert row["verify_ms"] == pytest.approx(ms)
            assert row["plain_steps"] == pytest.approx(ms / plain)
            assert row["x_k1"] == pytest.approx(ms / (one["samples_ns"][2] / 1e6))
            if name == "moe-target.gguf":
                assert row["distinct_experts"] == pytest.approx(8 * (1 - 0.75 ** row["k"]))
                assert row["predicted_x_k1"] >= 1.0
            else:
                assert row["distinct_experts"] is None and row["predicted_x_k1"] is None


@pytest.mark.server
def test_the_real_batched_bench_times_parallel_passes(llama_server: Path,
                                                      moe_and_dense: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    """--parallel 4 on the CPU build: each row re-derives from the raw llama-batched-bench
    results (medians of 3 passes after one warm-up), 4 sequences in every pass, the MoE
    prediction counting the experts of 4 k tokens."""
    moe, dense = moe_and_dense
    out = tmp_path / "vc.json"
    r = CliRunner().invoke(cli, ["verify-curve", "--target", str(moe), "--target", str(dense),
                                 "--k", "1,2,4", "--parallel", "4", "--gen", "4", "--reps", "3",
                                 "--bench", str(llama_server.parent / "llama-batched-bench"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "one token for each of 4 sequences" in r.output
    got = json.loads(out.read_text())
    assert (got["parallel"], got["depth"], got["tool"]) == (4, 0, "llama-batched-bench")
    for t in got["targets"]:
        raw = t["raw"]
        assert [x["pp"] for x in raw] == [4] + [1] * 3 + [2] * 3 + [4] * 3
        assert raw[0]["warmup"] is True and not any(x.get("warmup") for x in raw[1:])
        assert {(x["pl"], x["tg"]) for x in raw} == {(4, 4)}
        timed = raw[1:]
        assert t["plain_ms"] == pytest.approx(
            1e3 * float(np.median([x["t_tg"] / x["tg"] for x in timed])))
        for row in t["rows"]:
            ms = 1e3 * float(np.median([x["t_pp"] for x in timed if x["pp"] == row["k"]]))
            assert row["verify_ms"] == pytest.approx(ms) and row["tokens"] == 4 * row["k"]
            if t["name"] == "moe-target.gguf":
                assert row["distinct_experts"] == pytest.approx(8 * (1 - 0.75 ** (4 * row["k"])))


@pytest.mark.server
def test_the_cpu_build_says_its_figures_are_not_a_gpus(llama_server: Path,
                                                      moe_and_dense: tuple[Path, Path]) -> None:
    """Timed by crossbench's own CPU build (no --bench, no --variant), the output says so."""
    r = CliRunner().invoke(cli, ["verify-curve", "--target", str(moe_and_dense[1]), "--k", "1",
                                 "--depth", "8", "--gen", "4", "--reps", "1"])
    assert r.exit_code == 0, r.output
    assert "note: timed by crossbench's CPU build: this is a CPU's curve and says nothing " \
        "about a GPU" in r.stdout


def test_a_build_made_before_batched_bench_joined_is_not_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-batched-bench joined the build's TARGETS after builds existed: an install that
    lacks one of them is not reused (`engines install` then builds what is missing), and
    verify-curve --parallel says so and names the fix before anything runs."""
    from crossbench.engines.llamacpp import build
    from crossbench.engines.llamacpp.pins import DEFAULT_PIN, get_pin

    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "cache"))
    root = build.install_dir(get_pin(DEFAULT_PIN), "cpu")
    bin_dir = root / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in build.TARGETS:
        (bin_dir / tool).write_text(f"#!/bin/sh\necho {tool}\n")
        (bin_dir / tool).chmod(0o755)
    (root / build.MANIFEST_NAME).write_text(json.dumps({
        "host_cpu_flags": build.cpu_flags_digest(), "sha256": build.hash_binaries(bin_dir)}))
    assert build.load_install() is not None
    (bin_dir / "llama-batched-bench").unlink()
    assert build.load_install() is None
    gguf = tmp_path / "t.gguf"
    _write_gguf(gguf, moe=True)
    r = CliRunner().invoke(cli, ["verify-curve", "--target", str(gguf), "--parallel", "4"])
    assert r.exit_code == 2
    assert ("no llama-batched-bench: crossbench's llama.cpp build (cpu) is not installed, or "
            "was built before it made llama-batched-bench") in r.output
    assert "run `crossbench engines install llama.cpp` (it builds what is missing)" in r.output


# -- any engine: the curve read from a run's baseline at several concurrencies -------------


def test_the_curve_from_a_runs_batch_shapes(tmp_path: Path) -> None:
    """A baseline whose steps are known (5.0, 5.5, 6.1, 6.9 ms at c = 1, 2, 3, 5): a pass of k
    tokens is the step at concurrency k (k = 4 interpolated between 3 and 5), at --parallel 2
    the step at 2 k over the step at 2; the recorded fixture target gives the prediction from
    its shape, without its files."""
    from test_decompose import TWO, shapes_run

    run = shapes_run(tmp_path / "run", ref="fixture:qwen3-8b/moe-target@hf")
    out = tmp_path / "vc.json"
    r = CliRunner().invoke(cli, ["verify-curve", "--verify-from", str(run), "--k", "1-4",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "vllm/t8b-hf: plain step 5.000 ms (its baseline at concurrency 1" in r.output
    assert "measured against the predicted bytes: " in r.output
    got = json.loads(out.read_text())
    assert got["source"] == "batch shape" and got["parallel"] == 1
    (t,) = got["targets"]
    assert t["bytes_line"]["k"] == [1, 2, 3, 4] and t["bytes_line"]["fixed_ms"] > 0
    assert t["split_from"] == "its fixture shape" and t["split"]["n_experts"] == 256
    from crossbench.fixtures.mtp import mtp_spec

    split = vc.fixture_weight_split(mtp_spec("qwen3-8b", "moe-target"))
    assert split is not None
    want = {1: 5.0, 2: 5.5, 3: 6.1, 4: 6.5}
    for row in t["rows"]:
        assert row["verify_ms"] == pytest.approx(want[row["k"]])
        assert row["plain_steps"] == pytest.approx(want[row["k"]] / 5.0)
        assert row["predicted_x_k1"] == pytest.approx(vc.predicted_ratio(split, row["k"]))
        assert row["verify_concurrencies"] == ([3, 5] if row["k"] == 4 else [row["k"]])
    r = CliRunner().invoke(cli, ["verify-curve", "--verify-from", str(run), "--k", "1,2",
                                 "--parallel", "2", "--out", str(tmp_path / "p2.json")])
    assert r.exit_code == 0, r.output
    (t2,) = json.loads((tmp_path / "p2.json").read_text())["targets"]
    assert [row["verify_ms"] for row in t2["rows"]] == pytest.approx([5.5, 6.5])
    assert t2["plain_ms"] == pytest.approx(5.5)
    r = CliRunner().invoke(cli, ["verify-curve", "--verify-from", str(run), "--k", "1-6"])
    assert r.exit_code == 2 and "a step of 6 sequences is outside them" in r.output
    two = shapes_run(tmp_path / "two", groups=TWO)
    r = CliRunner().invoke(cli, ["verify-curve", "--verify-from", str(two), "--k", "1,2"])
    assert r.exit_code == 0 and "llama/t8b-f16:" in r.output and "vllm/t8b-hf:" in r.output
    assert "no prediction" in r.output  # no recorded model: nothing to split
    r = CliRunner().invoke(cli, ["verify-curve", "--verify-from", str(two), "--engine", "sglang"])
    assert r.exit_code == 2
    assert "no baseline matches --engine/--model (the run's: llama/t8b-f16, vllm/t8b-hf)" in \
        r.output


@pytest.mark.parametrize(("args", "what"), [
    ([], "give --target or --verify-from"),
    (["--target", "t.gguf", "--verify-from", "run"], "give --target or --verify-from"),
    (["--target", "t.gguf", "--engine", "vllm"], "--engine and --model pick baselines"),
    (["--verify-from", "run", "--reps", "5"], "--reps: not used with --verify-from"),
    (["--verify-from", "run", "--bench-arg=-ngl"], "--bench-arg: not used with --verify-from"),
])
def test_sources_are_refused_in_one_line(args: list[str], what: str) -> None:
    r = CliRunner().invoke(cli, ["verify-curve", *args])
    assert r.exit_code == 2
    assert what in r.output and "fix:" in r.output and r.output.count("\n") == 1


def test_splits_from_hf_names_and_from_the_fixture_shape_agree(
        moe_and_dense: tuple[Path, Path]) -> None:
    """The tiny MoE target's HF folder (its safetensors headers) and its shape give one
    split; its GGUF's differs only by the F32 tensors the converter writes (router, norms)."""
    from crossbench.fixtures.resolve import ensure_mtp_target

    hf_dir, gguf = ensure_mtp_target("tiny", 0, "moe-target")
    from_hf = vc.hf_weight_split(hf_dir)
    from crossbench.fixtures.mtp import mtp_spec

    assert from_hf == vc.fixture_weight_split(mtp_spec("tiny", "moe-target"))
    assert vc.model_weight_split("fixture:tiny/moe-target@Q4_K_M") == (
        from_hf, "its fixture shape (F16 proportions for Q4_K_M)")
    assert vc.model_weight_split("fixture:qwen3-8b/target")[0] is None  # the dense Qwen3
    assert from_hf is not None and from_hf.bytes_per_expert == 3 * 64 * 64 * 2 * 4  # 4 layers
    from_gguf = vc.weight_split(gguf)
    assert from_gguf is not None and from_gguf.bytes_per_expert == from_hf.bytes_per_expert
    assert 0 < from_gguf.dense_bytes - from_hf.dense_bytes < 0.001 * from_hf.dense_bytes
    assert vc.hf_weight_split(ensure_mtp_target("tiny", 0, "dense-twin")[0]) is None
    assert vc.model_weight_split(str(hf_dir))[1] == f"{hf_dir}'s safetensors headers"
    assert vc.model_weight_split("/nowhere/model")[1].startswith("no prediction: the model's "
                                                                 "weights are not on this")
