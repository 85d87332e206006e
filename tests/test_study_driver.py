"""The H200 study rounds as data (benchmarks/study/rounds.yaml, read by benchmarks/study/study.py
for the driver benchmarks/study/run.sh): every round's matrices exist and validate, every
--only/--skip selection parses against its matrix's cell keys and picks cells, and the dry
mode prints the exact `crossbench matrix` command lines the former one-script-per-round run
lists (benchmarks/h200_*_runs.sh, removed with this driver) ran."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from bench_loader import load_benchmark

from crossbench.runner.matrix import expand, load_matrix, run_order, trial_work, validate_cells
from crossbench.runner.matrix_run import select

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "benchmarks" / "study" / "study.py"




@pytest.fixture(scope="module")
def study() -> ModuleType:
    return load_benchmark("study/study.py", "study_driver")


@pytest.fixture(scope="module")
def gptv() -> ModuleType:
    return load_benchmark("gpu_time_per_verdict.py", "gpu_time_per_verdict_for_study")


def _every_round(study: ModuleType) -> list[Any]:
    rounds = study.load_rounds()
    return [study.get_round(rounds, n, p) for n in rounds for p in study.parts(rounds, n) or [None]]


def test_the_rounds_file_lists_every_round_of_the_former_scripts(study: ModuleType) -> None:
    rounds = study.load_rounds()
    assert list(rounds) == ["1", "verdict", "shared", "gate", "naive", "twostart", "hoststart",
                            "spread", "known", "all", "methods", "mtp", "fits", "fits2",
                            "verdicts", "alpha", "alpha-same", "startup-next", "startup-spec",
                            "sglang-methods", "mtp2", "ngram2", "vllm-split", "vllm-split-draft",
                            "sglang-nextn", "moe",
                            "synthetic", "sglang-check", "smoke"]
    assert study.parts(rounds, "methods") == [1, 2, 3, 4]
    assert study.parts(rounds, "moe") == list(range(1, 13))  # 12: PART=1 for a short lease
    assert study.parts(rounds, "verdicts") == [1, 2]  # whole, it outgrew one lease
    assert study.parts(rounds, "sglang-methods") == [1, 2, 3]  # the same
    assert study.parts(rounds, "alpha-same") == [1, 2, 3]  # one engine a part
    assert study.parts(rounds, "mtp2") == [1, 2, 3, 4, 5, 6]  # 4: the split again; 5: warm; 6: fork
    assert study.parts(rounds, "ngram2") == [1, 2, 3, 4]  # SGLang's c=1 and c=16 apart
    # the needs the former driver encoded in its case statements
    by = {(r.name, r.part): r for r in _every_round(study) if r.kind == "cross"}
    assert {k for k, r in by.items() if not r.vllm} == {
        ("gate", None), ("spread", None), ("known", None), ("all", None), ("methods", 1),
        ("methods", 2), ("moe", 1), ("moe", 4), ("moe", 6), ("moe", 8), ("moe", 9), ("moe", 12),
        ("sglang-methods", 1), ("sglang-methods", 2), ("sglang-methods", 3), ("alpha-same", 1),
        ("sglang-nextn", None), ("verdicts", 1), ("mtp2", 1), ("mtp2", 4), ("ngram2", 1),
        ("ngram2", 3), ("ngram2", 4)}
    assert {k for k, r in by.items() if r.sglang} == {("sglang-methods", 1),
                                                      ("sglang-methods", 2),
                                                      ("sglang-methods", 3),
                                                      ("sglang-nextn", None), ("ngram2", 3),
                                                      ("ngram2", 4)}
    assert {k for k, r in by.items() if not r.build} == {
        ("naive", None), ("twostart", None), ("hoststart", None), ("methods", 3), ("methods", 4),
        ("moe", 2), ("moe", 3), ("moe", 5), ("moe", 7), ("fits2", None),
        ("sglang-methods", 1), ("sglang-methods", 2), ("sglang-methods", 3),
        ("sglang-nextn", None), ("startup-next", None), ("startup-spec", None), ("verdicts", 2),
        ("alpha-same", 2), ("alpha-same", 3), ("mtp2", 2), ("mtp2", 3), ("mtp2", 5), ("mtp2", 6), ("ngram2", 2),
        ("ngram2", 3), ("ngram2", 4),
        ("moe", 10), ("moe", 11), ("alpha", 1), ("alpha", 2), ("vllm-split", None),
        ("vllm-split-draft", None)}
    assert {k for k, r in by.items() if r.drafters} == {("methods", p) for p in (1, 2, 3, 4)} | {
        ("fits", None), ("fits2", None), ("verdicts", 1), ("verdicts", 2),
        ("sglang-methods", 1), ("sglang-methods", 2), ("sglang-methods", 3), ("alpha", 1),
        ("alpha", 2), ("alpha-same", 1), ("alpha-same", 2), ("alpha-same", 3),
        ("startup-spec", None), ("vllm-split", None), ("vllm-split-draft", None)}
    assert {k for k, r in by.items() if not r.verify_hf} == {
        ("methods", 3), ("methods", 4), ("mtp", None), ("fits", None), ("fits2", None),
        ("verdicts", 1), ("verdicts", 2), ("sglang-methods", 1), ("sglang-methods", 2),
        ("sglang-methods", 3), ("sglang-nextn", None),
        ("startup-next", None), ("startup-spec", None), ("alpha", 1), ("alpha", 2),
        ("alpha-same", 1), ("alpha-same", 2), ("alpha-same", 3), ("vllm-split", None),
        ("vllm-split-draft", None)} | {
        ("moe", p) for p in range(1, 13)} | {
        ("mtp2", p) for p in (1, 2, 3, 4, 5, 6)} | {("ngram2", p) for p in (1, 2, 3, 4)}
    # mtp2 makes the MTP target in both formats for llama.cpp, its HF folder alone for vLLM;
    # ngram2's SGLang part the Qwen3-8B target's HF folder
    assert by[("mtp2", 1)].fixtures == by[("mtp2", 4)].fixtures == (
        ("path mtp-target --shape qwen3-8b", 0),)
    assert by[("mtp2", 2)].fixtures == by[("mtp2", 3)].fixtures == by[("mtp2", 5)].fixtures == \
        by[("mtp2", 6)].fixtures == (
        ("path mtp-target --shape qwen3-8b --format hf", 0),)
    assert by[("ngram2", 1)].fixtures == by[("ngram2", 2)].fixtures == study.DEFAULT_FIXTURES
    assert by[("ngram2", 3)].fixtures == by[("ngram2", 4)].fixtures == (
        ("path target --shape qwen3-8b --format hf", 0),)
    # the MTP round makes the Qwen3.5 target first, then the qwen3-8b pair only where it fits
    assert by[("mtp", None)].fixtures == (("path mtp-target --shape qwen3-8b", 0),
                                          ("make --shape qwen3-8b", 26))
    assert by[("methods", 3)].fixtures == study.DEFAULT_FIXTURES
    # SGLang's NEXTN: the MTP target's HF folder alone (no GGUF: SGLang reads HF folders)
    assert by[("sglang-nextn", None)].fixtures == (
        ("path mtp-target --shape qwen3-8b --format hf", 0),)
    # the MoE round: its targets (the dense twin where 8 GB are free), the 0.6B draft (GGUF
    # pair, then its HF folder) where 24 GB are free; vLLM parts make one target, the
    # quantized parts no draft (their GGUFs take its room)
    moe, twin = "path moe-target --shape qwen3-8b", "path dense-twin --shape qwen3-8b"
    draft = ("path draft --shape qwen3-8b --format hf", 24)
    assert by[("moe", 1)].fixtures == ((moe, 0), (twin, 8), draft)
    assert by[("moe", 2)].fixtures == ((moe, 0), draft)
    assert by[("moe", 3)].fixtures == ((twin, 0), draft)
    assert by[("moe", 4)].fixtures == by[("moe", 5)].fixtures == ((moe, 0), (twin, 8))
    # the DFlash parts: both targets and the 2048-wide drafter (GGUF, then HF for vLLM)
    assert by[("moe", 6)].fixtures == ((moe, 0), (twin, 8),
                                       ("path dflash-moe --shape qwen3-8b", 4))
    assert by[("moe", 7)].fixtures == ((moe, 0), (twin, 8),
                                       ("path dflash-moe --shape qwen3-8b --format hf", 4))
    # the layer-cut check: the MoE target at 4 and 8 layers, the dense twin at 4 to 32
    assert by[("moe", 8)].fixtures == (("path moe-target --shape qwen3-8b-l4", 0),
                                       (moe, 0))
    assert by[("moe", 9)].fixtures == tuple(
        (f"path dense-twin --shape qwen3-8b{cut}", 0) for cut in ("-l4", "", "-l16", "-l32"))
    assert not any(r.q4 for r in by.values())
    assert all(r.purpose and "\n" not in r.purpose for r in by.values())


def test_every_round_matrix_validates_and_every_selection_picks_cells(
        study: ModuleType, gptv: ModuleType, tmp_path: Path) -> None:
    checked = 0
    for r in _every_round(study):
        if r.kind == "lanes":  # each GPU lane and the occasion check pick cells of one matrix
            path = ROOT / str(r.matrix)
            cells = expand(load_matrix(path), path)
            lanes = {k: {c.id for c in select(cells, (), v)} for k, v in r.lanes}
            assert lanes["gpu0"] and lanes["gpu1"] and select(cells, (), r.solo)
            baseline = [c.id for c in cells if c.baseline is None]
            assert lanes["gpu0"] & lanes["gpu1"] == set(baseline)  # each lane has the baseline
            assert lanes["gpu0"] | lanes["gpu1"] == {c.id for c in cells}
            continue
        run_dir = tmp_path / f"{r.name}-{r.part}"
        run_dir.mkdir()
        for src, dst, opts in r.variants:  # the matrices the steps of $dir read
            assert (ROOT / src).is_file(), f"round {r.name}: variant source {src} is missing"
            assert gptv.main(["variant", str(ROOT / src), str(run_dir / dst), *opts]) in (0, None)
        for step in r.steps:
            if step.command is not None:  # the MTP round's llama-bench splits and guarded runs
                assert "$dir" in step.command and step.name
                continue
            path = Path(step.matrix.replace("$dir", str(run_dir)))
            path = path if path.is_absolute() else ROOT / path
            assert path.is_file(), f"round {r.name}: matrix {step.matrix} is missing"
            m = load_matrix(path)
            cells = expand(m, path)
            validate_cells(m, cells, path)
            for sel in step.only:
                assert select(cells, (sel,), ()), f"round {r.name}: --only {sel} picks nothing"
            for sel in step.skip:  # each --skip leaves some cell out
                assert len(select(cells, (), (sel,))) < len(cells), (r.name, sel)
            chosen = select(cells, step.only, step.skip)
            assert chosen, f"round {r.name} step {step.name}: the selection picks no cell"
            checked += 1
            if (r.name, step.name) == ("verdicts", "llama-split"):  # the decode-window sweep
                assert sorted(c.id for c in chosen) == sorted(
                    ["llama/t8b-f16/none/builtin-mixed/c1"]
                    + [f"llama/t8b-f16/draft-a0.9/n{n}/builtin-mixed/c1" for n in (1, 2, 4, 8)])
                assert (m.load["max_tokens"], m.load["requests"]) == (384, 8)
            if (r.name, step.name) == ("verdicts", "vllm-verdicts"):  # baselines first
                order = [cid for cid, _ in run_order(m, chosen)]
                base = "vllm/t8b-hf/none/builtin-mixed/c1"
                assert len(order) == 6 and order[0] == order[3] == base, order
                assert sorted(order[1:3]) == sorted(order[4:6]) == sorted(
                    f"vllm/t8b-hf/{a}-a0.9/n4/builtin-mixed/c1" for a in ("dflash", "eagle3"))
            if (r.name, r.part) in (("moe", 10), ("moe", 11)):  # vLLM baselines by shape
                assert sorted({c.coords["target"] for c in chosen}) == ["dense-hf", "moe-hf"]
                assert {c.baseline for c in chosen} == {None}
                assert sorted({int(c.coords["concurrency"]) for c in chosen}) == (
                    [1, 2, 3, 4, 5, 6, 8, 9, 12, 16] if r.part == 10 else
                    [16 * k for k in range(1, 17)])
            if r.name == "moe" and r.part in (8, 9):  # one target family per machine
                family = "moe" if r.part == 8 else "dense"
                assert {c.coords["target"].split("-")[0] for c in chosen} == {family}
                assert len(chosen) == (10 if r.part == 8 else 20)
            if (r.name, r.part) == ("mtp2", 6):  # the MTP target's baseline, spawned and forked
                assert {(c.coords["engine"], c.coords.get("arm") or "none") for c in chosen} == {
                    ("vllm-q35", "none"), ("vllm-q35-fork", "none")}
                assert {c.coords["engine"]: c.engine_config.get("engine_process", "spawn")
                        for c in chosen} == {"vllm-q35": "spawn", "vllm-q35-fork": "fork"}
                assert {c.coords["target"] for c in chosen} == {"q35-hf"}
                assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
            if (r.name, step.name) == ("fits2", "vllm-fits2"):  # a short lease keeps a baseline
                starts: list[tuple[str, object]] = []
                by_id = {c.id: c for c in chosen}
                for cid, _ in run_order(m, chosen):
                    key = (str(by_id[cid].coords.get("arm") or "none"), by_id[cid].coords.get("n"))
                    starts += [key] if key not in starts else []
                assert starts == [("none", None), ("eagle3-a0.9", 2), ("dflash-a0.9", 8),
                                  ("draft-a0.9", 8), ("draft-a0.9", 2), ("draft-a0.9", 4)]
            if (r.name, step.name) == ("alpha", "vllm-alpha"):  # alpha 0.7 at n = 4, n = 1
                arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                methods = ("draft", "eagle3", "dflash")
                assert arms == {("none", None), *((f"{m}-a0.7", 4) for m in methods),
                                *((f"{m}-a0.9", 1) for m in methods)}, arms
                assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
                order = [cid for cid, _ in run_order(m, chosen)]
                assert "/none/" in order[0], order
            if (r.name, step.name) == ("alpha", "vllm-alpha-rest"):  # what part 1 did not reach
                arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                assert arms == {("none", None), ("eagle3-a0.7", 4), ("dflash-a0.9", 1),
                                ("dflash-a0.7", 4)}, arms
                assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
                assert "/none/" in next(iter(run_order(m, chosen)))[0]
                if (r.name, step.name) == ("methods", "llama-methods-rest"):
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    at07 = {(f"{h}-a0.7", n) for h in ("draft", "eagle3", "dflash")
                            for n in (1, 2, 4, 8)} | {("dflash-a0.7", 15)}
                    at09 = {(f"{h}-a0.9", 1) for h in ("draft", "eagle3", "dflash")}
                    same_machine = {("eagle3-a0.9", 4), ("dflash-a0.9", 4)}
                    assert arms == {("none", None)} | at07 | at09 | same_machine, arms
                if r.name == "sglang-methods":  # three parts, each with its own baseline
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {1: {("none", None), ("eagle3-a0.9", 4), ("dflash-a0.9", 4),
                                        ("draft-a0.9", 4)},
                                    2: {("none", None), ("eagle3-a0.9", 2), ("eagle3-a0.9", 8),
                                        ("dflash-a0.9", 15), ("eagle3-real", 4)},
                                    3: {("none", None), ("dflash-a0.9", 2), ("dflash-a0.9", 8),
                                        ("draft-a0.9", 2), ("draft-a0.9", 8)}}[r.part], arms
                    assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
                    assert "/none/" in next(iter(run_order(m, chosen)))[0]
                if r.name == "sglang-nextn":  # NEXTN on its target, the conv state in F16
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {("none", None), ("mtp-a0.9", 1), ("mtp-a0.9", 2),
                                    ("mtp-a0.9", 4)}, arms
                    assert {c.coords["engine"] for c in chosen} == {"sglang-q35"}
                    assert {c.coords["target"] for c in chosen} == {"q35-hf"}
                    assert {c.engine_config["env"]["SGLANG_MAMBA_CONV_DTYPE"]
                            for c in chosen} == {"float16"}
                    assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
                    assert "/none/" in next(iter(run_order(m, chosen)))[0]
                if r.name == "alpha-same":  # both alphas at n = 4, fresh starts per arm
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    heads = ("eagle3", "dflash") if r.part == 1 else ("eagle3",)
                    assert arms == {("none", None)} | {(f"{h}-a{a}", 4) for h in heads
                                                       for a in ("0.7", "0.9")}, arms
                    assert {int(c.coords["concurrency"]) for c in chosen} == {1}
                    assert m.trials == (3 if r.part == 1 else 2)
                    assert "/none/" in next(iter(run_order(m, chosen)))[0]
                if r.name == "mtp2":  # MTP's alpha 0.7 and vLLM's n = 8, each part a baseline
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {1: {("none", None), ("mtp-a0.9", 4)} | {
                                        ("mtp-a0.7", n) for n in (1, 2, 4, 8)},
                                    2: {("none", None), ("mtp-a0.9", 8), ("mtp-a0.7", 4)},
                                    3: {("none", None), ("mtp-a0.7", 1), ("mtp-a0.7", 2),
                                        ("mtp-a0.7", 8)}}[r.part], arms
                    assert {c.coords["target"] for c in chosen} == (
                        {"q35-f16"} if r.part == 1 else {"q35-hf"})
                    assert {int(c.coords["concurrency"]) for c in chosen} == {1, 16}
                if r.name == "ngram2":  # no prompt twice to a start: own starts, 48 at c=16
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {("none", None), ("ngram", None if r.part == 1 else 4)}, arms
                    assert not m.share_servers and m.trials == 2 and m.block == 1
                    loads = {int(c.coords["concurrency"]) for c in chosen}
                    assert loads == {3: {1}, 4: {16}}.get(r.part, {1, 16}), loads
                    assert {trial_work(c.load).requests for c in chosen
                            if c.coords["concurrency"] == 16} == ({48} if 16 in loads else set())
                    assert not [n for n in validate_cells(m, chosen, path)
                                if "draft_replay" in n]
                if r.name == "vllm-split" and step.name == "vllm-split":
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {("none", None), ("eagle3-a0.9", 4), ("dflash-a0.9", 4)}, arms
                if r.name == "vllm-split-draft" and step.name == "vllm-split-draft":
                    arms = {(str(c.coords.get("arm")), c.coords.get("n")) for c in chosen}
                    assert arms == {("none", None), ("draft-a0.9", 4)}, arms
                if r.name.startswith("vllm-split") and step.name == r.name:  # decode-only room
                    assert {c.coords["engine"] for c in chosen} == {"vllm"}
                    assert {int(c.coords["concurrency"]) for c in chosen} == {1}
                    # 1,024 tokens a request: at 390 tok/s 2.6 s of decode, the 8 NVML
                    # samples host_time.decode needs (0.8 s) many times over
                    assert {trial_work(c.load).output_tokens for c in chosen} == {8 * 1024}
    assert checked == 68  # alpha-same PART=3, ngram2 PART=4, mtp2 PART=5 and 6, vllm-split-draft, moe PART=12
    # added on 2026-12-07


def test_a_selector_with_an_unknown_key_is_refused(study: ModuleType) -> None:
    path = ROOT / "matrices" / "h200-methods.yaml"
    cells = expand(load_matrix(path), path)
    with pytest.raises(Exception, match="--skip 'arms=eagle3-a0.9'"):
        select(cells, (), ("arms=eagle3-a0.9",))
    # a conjunction and a repeated key: 'engine=vllm' and n in {2, 4}, less DFlash's n=2
    got = select(cells, ("engine=vllm", "n=2", "n=4"), ("arm=dflash-a0.9,n=2",))
    assert got and all(c.coords["engine"] == "vllm" and str(c.coords["n"]) in ("2", "4")
                       and not (c.coords["arm"] == "dflash-a0.9" and str(c.coords["n"]) == "2")
                       for c in got)


# The command lines of the former scripts, copied from them before they were removed
# (benchmarks/h200_methods_runs.sh PART=3, h200_verdict_runs.sh, h200_hoststart_runs.sh and
# round 1 of h200_cross.sh), with their run directory parent as DIR.
VLLM_R2 = ("--only engine=vllm --skip arm=draft-a0.7 --skip arm=eagle3-a0.7 --skip arm=dflash-a0.7"
           " --skip n=1 --skip arm=dflash-a0.9,n=2 --skip arm=draft-a0.9,n=2"
           " --skip arm=draft-a0.9,n=8")
OLD = {
    ("methods", 3): [
        "python3 -m crossbench matrix matrices/h200-methods.yaml --out DIR/vllm-methods "
        f"--progress plain {VLLM_R2}"],
    ("verdict", None): [
        "python3 benchmarks/gpu_time_per_verdict.py variant matrices/h200-verdict.yaml "
        "DIR/h200-verdict-crossbench.yaml --trials-per-start 3 --probes 3 --holdout 1",
        "python3 benchmarks/gpu_time_per_verdict.py variant matrices/h200-cross.yaml "
        "DIR/h200-cross-reuse.yaml --trials-per-start 3",
        "python3 -m crossbench matrix matrices/h200-verdict.yaml --out DIR/llama-naive "
        "--progress plain",
        "python3 -m crossbench matrix DIR/h200-verdict-crossbench.yaml --out "
        "DIR/llama-crossbench --progress plain",
        "python3 -m crossbench matrix DIR/h200-cross-reuse.yaml --out DIR/vllm-crossbench "
        "--progress plain --skip engine=llama --skip target=t8b-q4 --skip concurrency=4 "
        "--skip concurrency=16 --skip arm=synth-a0.6 --skip arm=synth-a0.8 --skip "
        "arm=synth-a1.0 --skip arm=ngram --skip n=1 --skip n=3 --skip n=6 --skip n=8"],
    ("hoststart", None): [
        "python3 benchmarks/host_sampler.py DIR/host-cpu.csv &",
        "python3 -m crossbench matrix matrices/h200-shared-naive.yaml --out DIR/vllm-naive-c1 "
        "--progress plain --skip concurrency=8"],
    ("1", None): [
        "python3 -m crossbench matrix matrices/h200-cross.yaml --out DIR --skip target=t8b-q4 "
        "--skip concurrency=4 --skip concurrency=16 --skip arm=synth-a0.6 --skip arm=synth-a0.8"
        " --skip arm=synth-a1.0 --skip arm=ngram --skip n=1 --skip n=3 --skip n=6 --skip n=8 "
        "--progress plain"],
}


@pytest.mark.parametrize("key", list(OLD), ids=lambda k: f"{k[0]}-{k[1]}")
def test_dry_mode_prints_the_former_scripts_command_lines(key: tuple[str, int | None]) -> None:
    name, part = key
    argv = [sys.executable, str(STUDY), "dry", name] + (["--part", str(part)] if part else [])
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == OLD[key]


def test_dry_mode_adds_resume_when_a_previous_call_left_the_step(tmp_path: Path) -> None:
    (tmp_path / "llama-known").mkdir()
    (tmp_path / "llama-known" / "state.json").write_text("{}")
    out = subprocess.run([sys.executable, str(STUDY), "dry", "known", "--dir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert shlex.split(out) == ["python3", "-m", "crossbench", "matrix",
                                "matrices/h200-verdict-known.yaml", "--out",
                                f"{tmp_path}/llama-known", "--resume", "--progress", "plain"]


def test_env_gives_the_driver_the_round_needs_and_refuses_unknown_rounds() -> None:
    def env(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(STUDY), "env", *args], cwd=ROOT,
                              capture_output=True, text=True)
    r = env("methods", "--part", "3")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        "need_vllm=1", "need_sglang=0", "need_build=0", "need_q4=0", "need_drafters=1",
        "need_verify_hf=0",
        "need_into_run=0", "kind=cross", "fixtures_args=('make --shape qwen3-8b --hf')",
        "fixtures_min_gb=(0)"]
    mtp = env("mtp").stdout.splitlines()
    assert mtp[-2:] == ["fixtures_args=('path mtp-target --shape qwen3-8b' "
                        "'make --shape qwen3-8b')", "fixtures_min_gb=(0 26)"]
    bad = env("sharde")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("study.py: unknown ROUND sharde")
    assert env("methods", "--part", "7").stderr.strip() == (
        "study.py: rounds.methods: no PART=7; parts: 1, 2, 3, 4")


def test_run_executes_steps_with_resume_and_logs(study: ModuleType, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    class Done:
        returncode = 3

    def fake_run(argv: list[str], **kw: Any) -> Done:
        calls.append(argv)
        return Done()

    monkeypatch.setattr(study.subprocess, "run", fake_run)
    (tmp_path / "llama-all-naive").mkdir()
    (tmp_path / "llama-all-naive" / "state.json").write_text("{}")
    r = study.get_round(study.load_rounds(), "all")
    assert study.run(r, str(tmp_path)) == 0  # a step round's statuses are in its log
    assert [c[4] for c in calls] == ["matrices/h200-verdict-all-known.yaml",
                                     "matrices/h200-verdict-all.yaml"]
    assert "--resume" not in calls[0] and "--resume" in calls[1]
    assert (tmp_path / "llama-all-known.log").exists()
    calls.clear()  # round 1 runs into the run directory itself and returns the matrix's status
    assert study.run(study.get_round(study.load_rounds(), "1"), str(tmp_path)) == 3
    assert calls[0][6] == str(tmp_path)


def test_a_command_step_runs_until_it_exits_0_once(study: ModuleType, tmp_path: Path) -> None:
    p = tmp_path / "rounds.yaml"
    p.write_text("rounds:\n  x:\n    purpose: p\n    steps:\n"
                 "      - {name: a, command: 'echo run >>$dir/a.out; test -f $dir/go'}\n")
    r = study.get_round(study.load_rounds(p), "x")
    run_dir = tmp_path / "run"
    assert study.run(r, str(run_dir)) == 0
    assert not (run_dir / "a.done").exists()  # exit 1: the next call runs it again
    (run_dir / "go").touch()
    study.run(r, str(run_dir))
    study.run(r, str(run_dir))  # done: not run a third time
    assert (run_dir / "a.out").read_text() == "run\nrun\n"
    assert (run_dir / "a.done").exists() and "a: exit" not in (run_dir / "a.log").read_text()


def test_a_bad_rounds_file_is_one_line_naming_the_field(study: ModuleType,
                                                          tmp_path: Path) -> None:
    p = tmp_path / "rounds.yaml"
    p.write_text("rounds:\n  x:\n    purpose: p\n    vlm: true\n    steps: [{name: a, matrix: m}]\n")
    with pytest.raises(study.RoundsError, match=r"rounds.x: unknown key 'vlm'"):
        study.load_rounds(p)
    p.write_text("rounds:\n  x:\n    purpose: p\n    steps: [{matrix: m}]\n")
    with pytest.raises(study.RoundsError, match=r"rounds.x.steps\[0\].name: missing"):
        study.load_rounds(p)
    p.write_text("rounds:\n  x:\n    purpose: p\n    steps: [{name: a, matrix: m, command: c}]\n")
    with pytest.raises(study.RoundsError, match=r"rounds.x.steps\[0\].matrix: .*\(one of the two\)"):
        study.load_rounds(p)
    p.write_text("rounds:\n  x:\n    purpose: p\n    fixtures: [{args: make, min_free: 3}]\n"
                 "    steps: [{name: a, matrix: m}]\n")
    with pytest.raises(study.RoundsError, match=r"rounds.x.fixtures\[0\]: unknown key 'min_free'"):
        study.load_rounds(p)


def test_rounds_of_other_kinds_give_the_driver_their_data_and_refuse_dry(
        study: ModuleType) -> None:
    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(STUDY), *args], cwd=ROOT,
                              capture_output=True, text=True)
    env = call("env", "synthetic").stdout.splitlines()
    assert "kind=lanes" in env and "study_matrix=matrices/h200.yaml" in env
    assert ("skips_gpu1=(--skip arm=synth-a0.6 --skip arm=synth-a0.8)") in env
    assert "kind=sglang-check" in call("env", "sglang-check").stdout.splitlines()
    dry = call("dry", "smoke")
    assert dry.returncode == 2 and "kind smoke" in dry.stderr


def test_the_driver_refuses_an_unknown_round_before_any_setup(tmp_path: Path) -> None:
    r = subprocess.run(["bash", "benchmarks/study/run.sh"], cwd=ROOT, capture_output=True,
                       text=True, env={"PATH": os.environ["PATH"], "OUT": str(tmp_path),
                                       "ROUND": "verdcit", "HOME": str(tmp_path)})
    assert r.returncode == 2
    assert r.stdout.strip() == "unknown ROUND verdcit (or PART , STEPS )"
    assert "unknown ROUND verdcit; rounds: 1, verdict" in r.stderr
    steps = subprocess.run(["bash", "benchmarks/study/run.sh"], cwd=ROOT, capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"], "OUT": str(tmp_path),
                                           "ROUND": "verdicts", "STEPS": "llama-verdict",
                                           "HOME": str(tmp_path)})
    assert steps.returncode == 2
    assert steps.stdout.strip() == "unknown ROUND verdicts (or PART , STEPS llama-verdict)"
    assert "has no step llama-verdict; its steps: llama-verdicts," in steps.stderr
    assert list(tmp_path.iterdir()) == []


def test_land_turns_a_device_calls_files_into_verified_archives(
        study: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`study.py land` on the files a device call brings back (run.tgz of the round's run
    directory, logs.tgz), here from a run on the vLLM stand-in (named as one: it serves no
    model): the step that ran becomes a verified archive with its report and datapoint, the
    command step's output is copied, the step that never ran is said, the device logs are
    kept; landing again gives the same archive bytes."""
    import tarfile

    from seq_helpers import stand_in_matrix

    from crossbench.runner.matrix_run import run_matrix

    root = tmp_path / "cache" / "h200-cross-roundx"
    m = stand_in_matrix(tmp_path, trials=2, sequential=None,
                        load={"requests": 3, "warmup": 1, "max_tokens": 16})
    run_matrix(m, root / "ran", progress=lambda _m: None)
    (tmp_path / "b").mkdir()
    base = stand_in_matrix(tmp_path / "b", trials=1, sequential=None, arms=[{"method": "none"}],
                           load={"requests": 2, "warmup": 0, "max_tokens": 8})
    run_matrix(base, root / "base", progress=lambda _m: None)
    (root / "split.json").write_text('{"rows": []}\n')
    (root / "split-c16.json").write_text('{"rows": [1]}\n')
    (root / "split.done").touch()
    (root / "split" / "starts").mkdir(parents=True)  # the step's own output folder
    (root / "split" / "starts" / "a.json").write_text('{"ready_s": 31.4}\n')
    files_at = tmp_path / "files"
    files_at.mkdir()
    with tarfile.open(files_at / "run.tgz", "w:gz") as tar:
        tar.add(root, arcname=root.name)
    with tarfile.open(files_at / "logs.tgz", "w:gz") as tar:
        tar.add(m, arcname="calls.txt")
    (files_at / "vllm-compile.tgz.p1of2").write_bytes(b"part")  # the cache's last call
    earlier = tmp_path / "files-earlier"
    earlier.mkdir()
    (earlier / "vllm-compile.tgz.p0of2").write_bytes(b"a compile cache's first ")
    rounds = tmp_path / "rounds.yaml"
    rounds.write_text(yaml.safe_dump({"rounds": {"x": {
        "purpose": "a landing test on the stand-in",
        "parts": {2: {"purpose": "its second part", "steps": [
            {"name": "ran", "matrix": str(m)},
            {"name": "base", "matrix": str(base)},
            {"name": "split", "command": "echo $dir"},
            {"name": "lost", "matrix": str(m)}]}}}}}))
    dest = tmp_path / "examples" / "roundx"
    carried = tmp_path / "repo" / ".carry" / "vllm-compile"
    argv = ["land", "x", str(files_at), str(dest), "--part", "2", "--rounds", str(rounds),
            "--carry-dir", str(carried), "--carry-from", str(earlier),
            "--work", str(tmp_path / "work")]
    assert study.main(argv) == 0
    said = capsys.readouterr().out.splitlines()
    zip_ = dest / "h200-x-part2-ran.zip"
    assert said[0] == ("ran: h200-x-part2-ran.zip verified; report written, datapoint "
                       "written; trials: 4 done, 0 failed, 0 missing"), said
    assert said[1] == ("base: h200-x-part2-base.zip verified; report written, no datapoint "
                       "(has no speculative cell paired with a baseline (fix: a datapoint "
                       "compares a method with its baseline: run a matrix with `method: none` "
                       "and a speculative arm)); trials: 1 done, 0 failed, 0 missing"), said
    assert not (dest / "datapoint-base.md").exists()  # no empty file beside the archive
    assert said[2:] == ["split: command exited 0; copied split-c16.json, split.json, split.tgz",
                        "lost: not run (no h200-cross-roundx/lost/state.json)",
                        f"device logs: {dest / 'device-logs-part2.tgz'}",
                        f"vLLM compile cache: 2 part(s) kept in {carried / 'unnamed'} for the next "
                        "lease's calls (docs/h200-rounds.md)"]
    assert b"".join((carried / "unnamed" / f"vllm-compile.tgz.p{k}of2").read_bytes()
                    for k in (0, 1)) == \
        b"a compile cache's first part"
    report = (dest / "report-ran.md").read_text()
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report)
    assert figures and all(f.startswith("plots-ran/") and (dest / f).is_file()
                           for f in figures), figures  # the links follow the PNGs' folder
    assert "| " in (dest / "datapoint-ran.md").read_text()
    assert (dest / "split.json").read_text() == '{"rows": []}\n'
    with tarfile.open(dest / "split.tgz") as tar:
        assert tar.getnames() == ["split", "split/starts", "split/starts/a.json"]
        member = tar.extractfile("split/starts/a.json")
        assert member is not None and member.read() == b'{"ready_s": 31.4}\n'
    first, packed = zip_.read_bytes(), (dest / "split.tgz").read_bytes()
    assert study.main(argv) == 0
    assert zip_.read_bytes() == first
    assert (dest / "split.tgz").read_bytes() == packed
    assert study.main(["land", "x", str(tmp_path), str(dest), "--part", "2", "--rounds",
                       str(rounds)]) == 2
    assert "no run.tgz" in capsys.readouterr().err
    mine = tmp_path / "mine"  # a --work folder land did not make is left alone
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert study.main([*argv[:-1], str(mine)]) == 2
    assert (mine / "notes.txt").read_text() == "keep"
    assert "holds files `land` did not put there" in capsys.readouterr().err


def _crossbench_calls(command: str) -> list[list[str]]:
    """The argument lists of every `python3 -m crossbench ...` in a command step, those inside
    `$(...)` included (each replaced by a placeholder path in its outer command)."""
    import re

    calls: list[list[str]] = []
    inner = re.compile(r"\$\(([^()]*)\)")
    while (m := inner.search(command)) is not None:
        calls += _crossbench_calls(m[1])
        command = command[:m.start()] + "/placeholder/path" + command[m.end():]
    for segment in re.split(r"&&|\|\||;|\|", command):
        words = shlex.split(segment)
        for i in range(len(words) - 2):
            if words[i:i + 3] == ["python3", "-m", "crossbench"]:
                calls.append(words[i + 3:])
    return calls


def _parse_only(args: list[str]) -> None:
    """Parse a crossbench command line as the CLI would, subcommands included, without
    running it: a wrong option name or value raises click's UsageError."""
    import click

    from crossbench.cli.main import cli

    cmd: click.Command = cli
    parent, name = None, "crossbench"
    while True:
        ctx = cmd.make_context(name, list(args), parent=parent)
        if not isinstance(cmd, click.Group):
            return
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        sub_name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None
        cmd, parent, name = sub, ctx, sub_name


def test_every_command_step_is_valid_shell_and_crossbench_usage(study: ModuleType,
                                                               tmp_path: Path) -> None:
    """A command step runs only on a leased GPU: its shell must parse (`bash -n`) and every
    crossbench call in it must name options the CLI has, checked here before a lease is
    spent (a wrong flag would lose the step's minutes)."""
    import click

    checked = 0
    for r in _every_round(study):
        for step in r.steps:
            if step.command is None:
                continue
            command = step.command.replace("$dir", str(tmp_path))
            syntax = subprocess.run(["bash", "-n", "-c", command], capture_output=True,
                                    text=True, check=False)
            assert syntax.returncode == 0, (r.name, r.part, step.name, syntax.stderr)
            for args in _crossbench_calls(command):
                try:
                    _parse_only(args)
                except click.UsageError as e:
                    raise AssertionError(f"round {r.name} part {r.part} step {step.name}: "
                                         f"crossbench {shlex.join(args)}: {e}") from e
                checked += 1
    assert checked >= 12  # decompose, fixtures path, verify-curve, matrix calls


def test_the_usage_check_catches_a_wrong_option() -> None:
    import click

    (args,) = [a for a in _crossbench_calls(
        'x="$(python3 -m crossbench fixtures path target)" && python3 -m crossbench '
        'verify-curve --verify-form run') if a[0] == "verify-curve"]
    with pytest.raises(click.UsageError, match="No such option '--verify-form'"):
        _parse_only(args)
    _parse_only(["fixtures", "path", "moe-target", "--shape", "qwen3-8b"])


def test_plan_adds_crossbench_plans_design_to_the_setup(
        study: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """`study.py plan moe --part 8`: its one matrix step costs what `crossbench plan --json`
    says the matrix runs (from the round's recorded timings), and the lease is that plus the
    setup the round's entry gives."""
    import json

    r = study.get_round(study.load_rounds(), "moe", 8)
    assert r.timings_from and all((ROOT / f).is_file() for f in r.timings_from)
    assert study.main(["plan", "moe", "--part", "8"]) == 0
    said = capsys.readouterr().out.splitlines()
    (step,) = r.steps
    sel = [a for x in step.only for a in ("--only", x)]
    done = subprocess.run([sys.executable, "-m", "crossbench", "plan", str(step.matrix), *sel,
                           *[a for f in r.timings_from for a in ("--from", f)], "--json"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    own = json.loads(done.stdout)["matrix_design"]
    assert said[1] == (f"  llama-layers-moe: {study._hms(own['gpu_s'])} of GPU time, "
                       f"{own['server_starts']:g} server starts, {own['cells']} cells "
                       f"({own['design']})")
    assert said[-1] == f"  lease: {study._hms(own['gpu_s'] + r.setup_s)}"
    assert study.main(["plan", "startup-next"]) == 0  # command steps only: nothing planned
    assert "startup-next: a command step, not planned" in capsys.readouterr().out


def test_plan_says_when_a_carried_compile_cache_will_make_starts_warm(
        study: ModuleType, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`crossbench plan` prices each start as its timings were (cold or warm); where a kept
    compile cache goes with a vLLM round's calls, `study.py plan` says so after the lease, and
    says nothing where none goes or the round starts no vLLM server."""
    r = study.get_round(study.load_rounds(), "vllm-split-draft", None)
    monkeypatch.setattr(study, "cache_pick", lambda _r, _repo: (
        [Path("p0")], "compile cache .carry/vllm-compile/x (the pack holding 1 of its 1)"))
    assert study.plan(r, tmp_path / "a") == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("  starts are priced as timed; compile cache .carry/vllm-compile/x "
                           "(the pack holding 1 of its 1) goes with the calls"), last
    monkeypatch.setattr(study, "cache_pick", lambda _r, _repo: ([], "no compile cache"))
    assert study.plan(r, tmp_path / "b") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("  lease: ")
    monkeypatch.setattr(study, "cache_pick", lambda _r, _repo: pytest.fail("not a vLLM round"))
    assert study.plan(study.get_round(study.load_rounds(), "moe", 8), tmp_path / "c") == 0


def test_plan_says_why_a_variant_could_not_be_made(
        study: ModuleType, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A design variant that fails (here: its source matrix is missing; on 2026-12-06 the
    editable install was being replaced beside it) stops the plan with the variant's own last
    error line, not a traceback of study.py's subprocess call."""
    r = study.get_round(study.load_rounds(), "verdicts", 1)
    monkeypatch.setattr(study, "commands", lambda _r, _w: [
        ["python3", "benchmarks/gpu_time_per_verdict.py", "variant", "/nonexistent.yaml",
         "/tmp/unused.yaml"]])
    assert study.plan(r, tmp_path) == 1
    err = capsys.readouterr().err
    assert err.startswith("study.py: benchmarks/gpu_time_per_verdict.py variant "
                          "/nonexistent.yaml failed: FileNotFoundError"), err


def test_every_rounds_plan_names_files_that_exist(study: ModuleType) -> None:
    for r in _every_round(study):
        for f in r.timings_from:
            assert (ROOT / f).is_file(), (r.name, r.part, f)
        assert (r.setup_s is None) == (r.setup_from is None), (r.name, r.part)
    with pytest.raises(study.RoundsError, match=r"rounds.x.plan.setup_s: expected whole "):
        study._resolve("x", {"purpose": "p", "steps": [{"name": "a", "matrix": "m"}],
                             "plan": {"setup_s": "ten"}}, None)


@pytest.mark.server
def test_a_round_runs_and_lands_on_the_cpu_server(study: ModuleType, llama_server: Path,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The device flow rehearsed on this machine: `study.py run` of a round whose matrix step
    runs the real CPU llama-server (the cpu-smoke matrix cut to a baseline and its synthetic
    arm) and whose command step times a verification curve, the run directory packed as
    run.sh packs it, then `land`: a verified archive, its report, the step's JSON."""
    import tarfile

    doc = yaml.safe_load((ROOT / "matrices/cpu-smoke.yaml").read_text())
    doc["trials"] = 1
    doc["load"] = {**doc["load"], "requests": 4, "max_tokens": 32}
    doc["engines"]["llama"] = {"kind": "llama-server", "binary": str(llama_server)}
    matrix = tmp_path / "smoke.yaml"
    matrix.write_text(yaml.safe_dump(doc))
    bench = llama_server.parent / "llama-bench"
    rounds = tmp_path / "rounds.yaml"
    rounds.write_text(yaml.safe_dump({"rounds": {"rehearsal": {
        "purpose": "the study driver's flow on the CPU server",
        "steps": [
            {"name": "smoke", "matrix": str(matrix), "only": ["workload=builtin:mixed"],
             "skip": ["arm=draft-simple"]},
            {"name": "curve", "command": (
                'python3 -m crossbench verify-curve --target "$(python3 -m crossbench '
                f'fixtures path moe-target)" --k 1,2 --depth 8 --gen 4 --reps 1 --bench {bench} '
                "--out $dir/curve.json")}]}}}))
    r = study.get_round(study.load_rounds(rounds), "rehearsal")
    run_dir = tmp_path / "cache" / "h200-cross-roundrehearsal"
    assert study.run(r, str(run_dir)) == 0
    assert (run_dir / "curve.done").is_file(), (run_dir / "curve.log").read_text()
    files = tmp_path / "files"
    files.mkdir()
    with tarfile.open(files / "run.tgz", "w:gz") as tar:  # as run.sh: tar -C CACHE -czf
        tar.add(run_dir, arcname=run_dir.name)
    capsys.readouterr()
    dest = tmp_path / "landed"
    assert study.land(r, files, dest, tmp_path / "work") == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("smoke: h200-rehearsal-smoke.zip verified; report written, "
                              "datapoint written; trials: 2 done, 0 failed, 0 missing"), said
    assert said[1] == "curve: command exited 0; copied curve.json, curve.log"
    curve = json.loads((dest / "curve.json").read_text())
    assert [row["k"] for row in curve["targets"][0]["rows"]] == [1, 2]
    assert (dest / "report-smoke.md").read_text().strip()


def test_steps_keeps_only_the_named_steps_and_refuses_unknown_ones() -> None:
    """STEPS (or --steps) runs part of a round on a short lease: only the named steps, in the
    round's order, for dry, env and run alike; a name the round lacks is refused before any
    setup, with the round's step names."""
    def dry(*args: str, steps: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PART": "1"}
        env.pop("STEPS", None)
        if steps is not None:
            env["STEPS"] = steps
        return subprocess.run([sys.executable, str(STUDY), "dry", "verdicts", *args], cwd=ROOT,
                              capture_output=True, text=True, env=env)

    every = dry().stdout.splitlines()
    assert any("/llama-split" in ln for ln in every) and len(every) > 2
    by_option = dry("--steps", "llama-verdicts").stdout.splitlines()
    by_env = dry(steps="llama-verdicts").stdout.splitlines()
    assert by_option == by_env
    matrices = [ln for ln in by_option if " matrix " in ln]
    assert len(matrices) == 1 and "/llama-verdicts " in matrices[0]
    assert not any("llama-split" in ln or "decompose-split" in ln for ln in by_option)
    # the variants a kept step reads are still made
    assert [ln for ln in every if "variant" in ln] == [ln for ln in by_option if "variant" in ln]
    bad = dry(steps="llama-verdict")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("study.py: STEPS: round verdicts PART=1 has no step "
                                  "llama-verdict; its steps: llama-verdicts, llama-split, "
                                  "decompose-split")
    env_bad = subprocess.run([sys.executable, str(STUDY), "env", "verdicts"], cwd=ROOT,
                             capture_output=True, text=True,
                             env={**os.environ, "STEPS": "nope"})
    assert env_bad.returncode == 2 and "has no step nope" in env_bad.stderr


def test_land_names_archives_for_the_gpu_the_machine_had(study: ModuleType,
                                                         tmp_path: Path) -> None:
    """A round that ran on an H100 (a lease that came as nvidia-h100-x1) lands as h100-...:
    the GPU is read from logs.tgz's gpu.txt (nvidia-smi's line), h200 where it says none."""
    import io
    import tarfile

    def logs(folder: Path, line: str | None) -> Path:
        folder.mkdir()
        with tarfile.open(folder / "logs.tgz", "w:gz") as tar:
            if line is not None:
                info = tarfile.TarInfo("cross-logs/gpu.txt")
                info.size = len(line.encode())
                tar.addfile(info, io.BytesIO(line.encode()))
        return folder

    h100 = logs(tmp_path / "a", "0, NVIDIA H100 80GB HBM3, GPU-00a2, 580.159.04, 81559 MiB\n")
    h200 = logs(tmp_path / "b", "0, NVIDIA H200, GPU-9f1c, 580.159.03, 143771 MiB\n")
    assert study.machine_of(h100) == "h100"
    assert study.machine_of(h200) == "h200"
    assert study.machine_of(logs(tmp_path / "c", None)) == "h200"
    assert study.machine_of(tmp_path / "missing") == "h200"
    r = study.get_round(study.load_rounds(study.ROUNDS), "verdicts", 1)
    assert study.archive_name(r, "llama-verdicts", "h100") == "h100-verdicts-part1-llama-verdicts"


def test_calls_list_a_leases_carries_up_to_the_rounds_start(
        study: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`study.py calls ROUND`: the first call the wheels and the llama.cpp source; then the
    vLLM pack's parts and the compile cache's, each call under the carry limit beside the
    tree as git would copy it; the last of them starts the round. A llama.cpp round carries
    nothing after its first call; a round whose engine has no pack is refused, naming it."""
    import subprocess

    def sized(path: Path, size: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            f.truncate(size)

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".carry/\n.whl/\n")
    sized(repo / "examples" / "big.zip", 30_000_000)  # the tree: 30 MB and .gitignore
    sized(repo / ".whl" / "a.whl", 3_000_000)
    sized(repo / ".carry" / "llama-cpp-python-0.3.36.src.tgz", 12_000_000)
    sized(repo / ".carry" / "vllm-0.26.0" / "pack.json", 50_000)
    for k in range(3):
        sized(repo / ".carry" / "vllm-0.26.0" / f"payload.tar.part00{k}", 20_000_000)
    # a compile-cache pack of the Qwen3-8B target, kept in its models' folder: 2 parts, the
    # first 12 MB (a manifest, then 23.9 MB that do not compress)
    import io
    import random
    import tarfile

    pack = tmp_path / "vllm-compile.tgz"
    with tarfile.open(pack, "w:gz") as tar:
        for name, data in (("crossbench-compile-cache.json", json.dumps(
                {"created": "2026-12-05T22:53:21Z", "models": [
                    "/work/main/.cbcache/fixtures/qwen3-8b-seed0-v1/hf-target"]}).encode()),
                           ("torch_compile_cache/x/a", random.Random(0).randbytes(23_900_000))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    kept = repo / ".carry" / "vllm-compile" / "qwen3-8b-seed0-v1-hf-target"
    kept.mkdir(parents=True)
    study._carry_module().cut(pack, kept, part_bytes=12_000_000, room_bytes=10**9)
    methods, moe = str(ROOT / "matrices" / "h200-methods.yaml"), str(ROOT / "matrices" /
                                                                     "h200-moe.yaml")
    rounds = tmp_path / "rounds.yaml"
    rounds.write_text(yaml.safe_dump({"rounds": {
        "v": {"purpose": "a vLLM round", "vllm": True, "build": False,
              "parts": {2: {"purpose": "its second part",
                            "steps": [{"name": "m", "matrix": methods,
                                       "only": ["engine=vllm,arm=none"]},
                                      {"name": "s", "command": "true"}]}}},
        "c": {"purpose": "a vLLM round of commands", "vllm": True, "build": False,
              "steps": [{"name": "s", "command": "true"}]},
        "var": {"purpose": "a vLLM round of a variant", "vllm": True, "build": False,
                "variants": [{"from": methods, "to": "x.yaml", "options": ["--trials", "2"]}],
                "steps": [{"name": "m", "matrix": "$dir/x.yaml",
                           "only": ["engine=vllm,arm=none"]}]},
        "dir": {"purpose": "a vLLM round of a matrix it makes", "vllm": True, "build": False,
                "steps": [{"name": "m", "matrix": "$dir/made.yaml"}]},
        "moe": {"purpose": "a vLLM round of the MoE target", "vllm": True, "build": False,
                "steps": [{"name": "m", "matrix": moe, "only": ["engine=vllm-q35,arm=none"]}]},
        "l": {"purpose": "a llama.cpp round", "vllm": False,
              "steps": [{"name": "s", "command": "true"}]},
        "g": {"purpose": "an SGLang round", "vllm": False, "sglang": True, "build": False,
              "steps": [{"name": "s", "command": "true"}]}}}))
    calls = study.lease_calls(study.get_round(study.load_rounds(rounds), "v", 2), repo)
    meta = Path(".carry/vllm-0.26.0/pack.json")
    pack = [Path(f".carry/vllm-0.26.0/payload.tar.part00{k}") for k in range(3)]
    cache = [Path(f".carry/vllm-compile/qwen3-8b-seed0-v1-hf-target/vllm-compile.tgz.p{k}of2")
             for k in range(2)]
    # 30 MB of tree: 20 + 12 MB fit beside it (under 64 MiB less 1 MB), 20 + 20 do not
    assert calls == [
        ("BUDGET_S=40 ROUND=v PART=2", [Path(".whl"), Path(
            ".carry/llama-cpp-python-0.3.36.src.tgz"), meta, pack[0]]),
        ("BUDGET_S=20 ROUND=v PART=2", [meta, pack[1]]),
        ("BUDGET_S=20 ROUND=v PART=2", [meta, pack[2], cache[0]]),
        ("BUDGET_S=560 ROUND=v PART=2", [meta, cache[1]])]
    assert study.cache_pick(study.get_round(study.load_rounds(rounds), "v", 2), repo)[1] == (
        "compile cache .carry/vllm-compile/qwen3-8b-seed0-v1-hf-target (the pack holding 1 of "
        "its 1 vLLM target(s))")
    # a variant is read from its source matrix; another matrix of $dir is not known before
    # the round runs, and the newest pack goes
    assert study.round_models(study.get_round(study.load_rounds(rounds), "var", None),
                              repo) == {"qwen3-8b-seed0-v1/hf-target"}
    assert study.round_models(study.get_round(study.load_rounds(rounds), "dir", None),
                              repo) is None
    assert study.cache_pick(study.get_round(study.load_rounds(rounds), "dir", None), repo) == (
        study._carry_module().held(repo / ".carry" / "vllm-compile")[kept],
        "compile cache .carry/vllm-compile/qwen3-8b-seed0-v1-hf-target (its targets are not "
        "known before it runs: the newest pack)")
    # the MoE round: no kept pack holds its target, so its calls carry none
    moe_round = study.get_round(study.load_rounds(rounds), "moe", None)
    assert study.round_models(moe_round, repo) == {"qwen3-8b-seed0-v1/moe-target/hf",
                                                   "qwen3-8b-seed0-v1/dense-twin/hf"}
    assert study.cache_pick(moe_round, repo) == ([], (
        "no kept compile cache holds this round's vLLM targets (qwen3-8b-seed0-v1/dense-twin/"
        "hf, qwen3-8b-seed0-v1/moe-target/hf): none carried, the round compiles cold and "
        "returns a pack of its own, kept beside the others"))
    assert not any("vllm-compile" in str(q) for _, c in study.lease_calls(moe_round, repo)
                   for q in c)
    assert study.cache_pick(study.get_round(study.load_rounds(rounds), "c", None), repo) == (
        [], "the round's steps serve no vLLM cell of a matrix (a command step fills a cache of "
        "its own): no compile cache carried")
    llama = study.lease_calls(study.get_round(study.load_rounds(rounds), "l", None), repo)
    assert llama == [("BUDGET_S=40 ROUND=l", [Path(".whl"), Path(
        ".carry/llama-cpp-python-0.3.36.src.tgz")]), ("BUDGET_S=560 ROUND=l", [])]
    with pytest.raises(ValueError, match="needs sglang and .carry/ holds no sglang pack"):
        study.lease_calls(study.get_round(study.load_rounds(rounds), "g", None), repo)
    import os

    here = Path.cwd()
    os.chdir(repo)
    try:
        assert study.main(["calls", "v", "--part", "2", "--rounds", str(rounds)]) == 0
    finally:
        os.chdir(here)
    out = capsys.readouterr().out.splitlines()
    assert out.pop(0).startswith("compile cache .carry/vllm-compile/qwen3-8b-seed0-v1-hf-target")
    assert out[0] == ("call 1: OUT=$OUT BUDGET_S=40 ROUND=v PART=2 bash "
                      "benchmarks/study/run.sh 2>&1 | tail -30")
    assert out[1] == ('  carry: [".whl", ".carry/llama-cpp-python-0.3.36.src.tgz", '
                      '".carry/vllm-0.26.0/pack.json", ".carry/vllm-0.26.0/payload.tar.part000"]')
    assert out[-1].startswith('then: BUDGET_S=560 calls carrying [".carry/vllm-0.26.0/'
                              'pack.json"] until the round has ended; then BUDGET_S=20')


def test_uncommitted_code_names_what_a_call_would_carry_unlike_the_commit(
        study: ModuleType, tmp_path: Path) -> None:
    """`study.py calls` warns while code differs from the last commit (a device call carries
    the tree as it is: on 2026-12-07 a change being written ran in a round): changed,
    deleted and untracked files under the code folders count, docs and ignored files not."""
    import subprocess

    repo = tmp_path / "repo"
    for rel in ("crossbench/a.py", "crossbench/gone.py", "benchmarks/b.py", "docs/d.md"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("x = 1\n")
    (repo / ".gitignore").write_text("crossbench/__pycache__/\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    assert study.uncommitted_code(repo) == []
    (repo / "crossbench" / "a.py").write_text("x = 2\n")
    (repo / "crossbench" / "gone.py").unlink()
    (repo / "engines" / "new.yaml").parent.mkdir()
    (repo / "engines" / "new.yaml").write_text("a: 1\n")
    (repo / "docs" / "d.md").write_text("changed\n")  # not code
    (repo / "crossbench" / "__pycache__").mkdir()
    (repo / "crossbench" / "__pycache__" / "a.pyc").write_text("")  # ignored
    assert sorted(study.uncommitted_code(repo)) == ["crossbench/a.py", "crossbench/gone.py",
                                                    "engines/"]
    assert study.uncommitted_code(tmp_path / "not-a-repo") == []


def test_calls_refuse_a_lease_without_the_wheels_or_the_source(study: ModuleType,
                                                                tmp_path: Path) -> None:
    """A cross round's setup unpacks the llama.cpp source and its first call installs the
    wheels: without either `study.py calls` refuses the lease, naming the command that makes
    it, before any device time is spent (2026-12-06: a first call without the source started
    a setup that waited for one, and the next call's ran beside it)."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".carry/\n.whl/\n")
    r = study.get_round(study.load_rounds(study.ROUNDS), "verdicts", 1)  # llama.cpp only
    with pytest.raises(ValueError, match=r"\.whl/ holds none: `python3 benchmarks/study/"
                                         r"study.py wheels`"):
        study.lease_calls(r, repo)
    (repo / ".whl").mkdir()
    (repo / ".whl" / "a.whl").write_bytes(b"w")
    with pytest.raises(ValueError, match=r"round verdicts's setup unpacks the llama.cpp source"
                                         r".*crossbench engines pack-source --out \.carry/"):
        study.lease_calls(r, repo)
    (repo / ".carry").mkdir()
    (repo / ".carry" / "llama-cpp-python-0.3.36.src.tgz").write_bytes(b"s")
    assert study.lease_calls(r, repo)[0][1] == [
        Path(".whl"), Path(".carry/llama-cpp-python-0.3.36.src.tgz")]


def test_wheels_pins_what_the_gpu_image_lacks_from_the_constraints(study: ModuleType) -> None:
    """`study.py wheels`: one `pip download` of the packages the image lacks at the versions
    constraints.txt pins, as CPython 3.12 x86-64 wheels without dependencies; a package the
    constraints do not pin is named."""
    text = (ROOT / "constraints.txt").read_text()
    argv = study.wheels_argv(text, Path(".whl"))
    assert argv[1:6] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert argv[argv.index("-d") + 1] == ".whl"
    pins = [a for a in argv if "==" in a]
    assert [p.split("==")[0] for p in pins] == list(study.HOST_LACKS)
    for p in pins:
        assert f"\n{p}\n" in f"\n{text}\n"
    with pytest.raises(ValueError, match="pins no version of gguf"):
        study.wheels_argv("\n".join(ln for ln in text.splitlines()
                                    if not ln.startswith("gguf==")), Path(".whl"))


def test_land_tells_steps_the_call_left_out_from_steps_that_did_not_run(
        study: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run` lists the steps its call selected (STEPS) in the run directory, one file per
    part; `land` says "not selected" for the others instead of "not run" (on 2026-12-06
    `verdicts PART=1 STEPS=llama-verdicts` landed with llama-split "not run")."""
    import tarfile

    r = study._resolve("x", {"purpose": "p", "steps": [{"name": "a", "command": "true"},
                                                        {"name": "b", "command": "true"}]},
                       None)
    run_dir = tmp_path / "run" / "h200-cross-roundx"
    assert study.run(study.only_steps(r, "a"), str(run_dir)) == 0
    assert (run_dir / study.selected_name(r)).read_text() == "a\n"
    assert (run_dir / "a.done").is_file() and not (run_dir / "b.log").exists()
    files = tmp_path / "files"
    files.mkdir()
    with tarfile.open(files / "run.tgz", "w:gz") as tar:
        tar.add(run_dir, arcname=run_dir.name)
    assert study.land(r, files, tmp_path / "dest", tmp_path / "work") == 0
    said = capsys.readouterr().out
    assert "a: command exited 0" in said
    assert "b: not selected (the call's STEPS kept a)" in said
    v = study.get_round(study.load_rounds(), "verdicts", 1)
    assert study.selected_name(v) == "steps-part1.txt"


def test_an_engine_pack_is_cut_again_when_the_tree_outgrew_its_parts(
        study: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lease_calls` cuts an engine pack again (`crossbench engines recut`, byte for byte)
    where its parts no longer fit beside the tree, replacing the folder once the new cut is
    made; a pack whose parts fit is left alone, as is every pack when no MB is left."""
    from crossbench.engines import pack as epack

    made: list[tuple[Path, int]] = []

    def fake_recut(src: Path, out: Path, part_bytes: int) -> None:
        made.append((src, part_bytes))
        out.mkdir()
        (out / "pack.json").write_text("{}")
        (out / "payload.tar.part000").write_bytes(b"x" * part_bytes)

    monkeypatch.setattr(epack, "recut", fake_recut)
    pack = tmp_path / "vllm-0.26.0"
    pack.mkdir()
    (pack / "pack.json").write_text("{}")
    (pack / "payload.tar.part000").write_bytes(b"x" * 3_000_000)
    study.recut_pack(pack, 3_000_000)
    study.recut_pack(pack, 0)
    assert made == []
    study.recut_pack(pack, 2_000_000)
    assert made == [(pack, 2_000_000)]
    assert (pack / "payload.tar.part000").stat().st_size == 2_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm-0.26.0"]


def _kernel_pack(path: Path, payload: str, size: int) -> Path:
    """A pack of SGLang's kernel caches made by `engines kernel-cache pack`'s own code, of the
    SGLang pack whose payload is ``payload``: one JIT module of ``size`` random bytes."""
    import random

    from crossbench.engines.sglang import kernel_cache

    roots = {"tvm_ffi": path.parent / "tvm-ffi", "triton": path.parent / "triton"}
    (roots["tvm_ffi"] / "m").mkdir(parents=True)
    (roots["tvm_ffi"] / "m" / "m.so").write_bytes(random.Random(size).randbytes(size))
    kernel_cache.pack(roots, path, {"build_key": "0.5.17-0123456789ab", "release": "0.5.17",
                                    "payload_sha256": payload}, "NVIDIA H100", "9.0")
    return path


def test_an_sglang_lease_carries_the_kernel_cache_its_pack_built_and_lands_the_next(
        study: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`study.py calls` of an SGLang round: after the SGLang pack's parts, the kept kernel
    cache built by that pack (its manifest's payload is the pack.json's), not a newer one of
    another SGLang build; none where no kept cache was built by it. `land` keeps the kernel
    cache's parts a lease returned in the folder of its build and compute capability, apart
    from the vLLM compile cache's."""
    import tarfile

    carry = study._carry_module()
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".carry/\n.whl/\n")
    (repo / ".whl").mkdir()
    (repo / ".whl" / "a.whl").write_bytes(b"w" * 1000)
    (repo / ".carry" / "sglang-0.5.17").mkdir(parents=True)
    (repo / ".carry" / "llama-cpp-python-0.3.36.src.tgz").write_bytes(b"s" * 1000)
    ours = "ab" * 32
    (repo / ".carry" / "sglang-0.5.17" / "pack.json").write_text(json.dumps(
        {"engine": "sglang", "release": "0.5.17", "payload": {"sha256": ours, "size": 2}}))
    (repo / ".carry" / "sglang-0.5.17" / "payload.tar.part000").write_bytes(b"p0")
    rounds = tmp_path / "rounds.yaml"
    rounds.write_text(yaml.safe_dump({"rounds": {"g": {
        "purpose": "an SGLang round", "sglang": True, "build": False,
        "steps": [{"name": "s", "command": "true"}]}}}))
    r = study.get_round(study.load_rounds(rounds), "g", None)
    assert study.kernel_pick(r, repo) == ([], (
        "no SGLang kernel cache is kept (.carry/sglang-kernels/): the round's first SGLang "
        "start builds its kernels (cold)"))
    kept = repo / ".carry" / "sglang-kernels"
    home = kept / "0.5.17-0123456789ab-sm90"
    home.mkdir(parents=True)
    carry.cut(_kernel_pack(tmp_path / "ours" / "sglang-kernels.tgz", ours, 30_000), home,
              part_bytes=12_000, room_bytes=10**9)
    other = kept / "0.5.17-ffffffffffff-sm90"  # of another SGLang pack
    other.mkdir()
    carry.cut(_kernel_pack(tmp_path / "other" / "other.tgz", "cd" * 32, 5_000), other,
              part_bytes=12_000, room_bytes=10**9)
    parts = [Path(f".carry/sglang-kernels/{home.name}/sglang-kernels.tgz.p{k}of3")
             for k in range(3)]
    assert study.kernel_pick(r, repo) == ([repo / q for q in parts], (
        f"SGLang kernel cache .carry/sglang-kernels/{home.name} (the newest built by this "
        "lease's SGLang pack)"))
    meta = Path(".carry/sglang-0.5.17/pack.json")
    assert study.lease_calls(r, repo) == [
        ("BUDGET_S=40 ROUND=g", [Path(".whl"), Path(".carry/llama-cpp-python-0.3.36.src.tgz"),
                                 meta, Path(".carry/sglang-0.5.17/payload.tar.part000"),
                                 *parts]),
        ("BUDGET_S=560 ROUND=g", [meta])]
    here = Path.cwd()
    os.chdir(repo)
    try:
        assert study.main(["calls", "g", "--rounds", str(rounds)]) == 0
    finally:
        os.chdir(here)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"SGLang kernel cache .carry/sglang-kernels/{home.name}")
    assert out[-1] == ('then: BUDGET_S=560 calls carrying [".carry/sglang-0.5.17/pack.json"] '
                       "until the round has ended; then BUDGET_S=20 calls until calls.txt "
                       "says `every part returned` (the kernel cache)")
    (repo / ".carry" / "sglang-0.5.17" / "pack.json").write_text(json.dumps(
        {"payload": {"sha256": "ee" * 32}}))  # another SGLang pack: no kept cache is its
    assert study.kernel_pick(r, repo) == ([], (
        "no kept SGLang kernel cache was built by this lease's SGLang pack (payload "
        "eeeeeeeeeeee): none carried, the round's first SGLang start builds its kernels "
        "(cold)"))

    # land: the lease's two calls returned the kernel cache's parts and a compile cache's
    run = tmp_path / "h200-cross-roundg"
    run.mkdir()
    (run / "s.done").touch()
    calls = [tmp_path / "call1", tmp_path / "call2"]
    for c in calls:
        c.mkdir()
    with tarfile.open(calls[1] / "run.tgz", "w:gz") as tar:
        tar.add(run, arcname=run.name)
    back = _kernel_pack(tmp_path / "back" / "sglang-kernels.tgz", ours, 20_000)
    stage = carry.cut(back, calls[0], part_bytes=12_000, room_bytes=10**9)
    stage[1].rename(calls[1] / stage[1].name)  # the second part came with the last call
    (calls[1] / "vllm-compile.tgz.p0of1").write_bytes(b"not SGLang's")
    dest, cdir = tmp_path / "landed", tmp_path / "cc"
    assert study.main(["land", "g", str(calls[1]), str(dest), "--rounds", str(rounds),
                       "--carry-from", str(calls[0]), "--kernel-dir", str(kept),
                       "--carry-dir", str(cdir), "--work", str(tmp_path / "work")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == (f"SGLang kernel cache: 2 part(s) kept in {home} for the next lease's "
                        "calls (docs/h200-rounds.md)")
    assert [q.name for q in carry.cache_parts(home)] == [f"sglang-kernels.tgz.p{k}of2"
                                                          for k in range(2)]
    joined, _ = carry.join(home)
    assert [j.read_bytes() for j in joined] == [back.read_bytes()]  # the lease's new pack
    assert said[-2] == (f"vLLM compile cache: 1 part(s) kept in {cdir / 'unnamed'} for the "
                        "next lease's calls (docs/h200-rounds.md)")  # apart from SGLang's
    assert [q.name for q in cdir.rglob("*")] == ["unnamed", "vllm-compile.tgz.p0of1"]


def test_room_removes_only_the_targets_a_chained_round_does_not_name(
        study: ModuleType, tmp_path: Path) -> None:
    """2026-12-07: `mtp2 PART=1` left its 33.6 GB MTP target on the machine and the chained
    `ngram2 PART=1`'s Qwen3-8B pair met `No space left on device`. `room` (run by the late
    setup) removes the MTP, MoE and dense-twin folders the round does not name, only while
    the disk is short, and keeps every folder a round names (a DFlash-MoE drafter keeps its
    dense twin); the pair's files are never touched."""
    rounds = study.load_rounds()
    fixtures = tmp_path / "fixtures"
    made = {}
    for shape, role in (("qwen3-8b", "mtp-target"), ("qwen3-8b", "moe-target"),
                        ("qwen3-8b", "dense-twin"), ("qwen3-8b-l4", "moe-target")):
        folder = fixtures / f"{shape}-seed0-v1" / role
        (folder / "hf").mkdir(parents=True)
        (folder / "hf" / "model.safetensors").write_bytes(b"\0" * 1000)
        made[(shape, role)] = folder
    pair = fixtures / "qwen3-8b-seed0-v1" / "target.gguf"
    pair.write_bytes(b"\0" * 10)

    def spare(name: str, part: int | None) -> set[tuple[str, str]]:
        got = study.spare_targets(study.get_round(rounds, name, part), tmp_path)
        return {k for k, v in made.items() if v in got}

    assert spare("ngram2", 1) == set(made)                   # names none of them
    assert spare("mtp2", 1) == set(made) - {("qwen3-8b", "mtp-target")}
    assert spare("moe", 6) == {("qwen3-8b", "mtp-target"), ("qwen3-8b-l4", "moe-target")}
    assert spare("moe", 8) == {("qwen3-8b", "mtp-target"), ("qwen3-8b", "dense-twin")}

    ngram = study.get_round(rounds, "ngram2", 1)
    assert study.make_room(ngram, tmp_path, min_free_gb=0) == []  # room enough: nothing goes
    assert all(f.is_dir() for f in made.values())
    lines = study.make_room(ngram, tmp_path, min_free_gb=1e12)   # never room: all four go
    assert len(lines) == 4 and all(re.fullmatch(
        r'late_freed="fixtures/[^"]+" gb=0\.0 free_gb_before=\S+ free_gb_after=\S+', ln)
        for ln in lines), lines
    assert not any(f.exists() for f in made.values()) and pair.is_file()
    cli = subprocess.run([sys.executable, str(STUDY), "room", "mtp2", "--part", "1",
                          "--cache", str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert cli.returncode == 0 and cli.stdout == "", cli.stderr  # nothing left to remove


def test_while_lean_a_round_reading_examples_and_land_into_them_are_refused(
        study: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With `carry.py lean on` the examples stay behind device calls: a round whose command
    reads examples/ on the device (mtp2 PART=4) is refused by `calls`, naming `lean off`,
    and so is `land` into examples/ (git would not see what it writes there); a round that
    does not read them is planned as usual."""
    carry = study._carry_module()
    monkeypatch.setattr(carry, "is_lean", lambda repo: True)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    rounds = study.load_rounds()
    with pytest.raises(ValueError, match=r"decompose-mtp-reps read examples/ .*lean off"):
        study.lease_calls(study.get_round(rounds, "mtp2", 4), tmp_path)
    with pytest.raises(ValueError, match="wheels"):  # past the lean check: the next one
        study.lease_calls(study.get_round(rounds, "mtp2", 1), tmp_path)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "run.tgz").write_bytes(b"")
    assert study.land(study.get_round(rounds, "mtp2", 1), tmp_path / "files",
                      study.REPO / "examples" / "h100-methods" / "x", tmp_path / "w") == 2
    assert "carry.py lean off` first" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
