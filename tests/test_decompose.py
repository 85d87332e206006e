"""`crossbench decompose`: a speculative step's parts from llama-bench tests, against a fitted
cost model. Arithmetic on llama-bench-shaped tests with known times, the published round 1
cost model read back from its archive, refusals, and the real llama-bench on the fixtures."""

from __future__ import annotations

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
        assert row["verify_ms"] == pytest.approx(sum(pp["samples_ns"]) / len(pp["samples_ns"]) / 1e6)
        assert row["verify_steps"] == pytest.approx(row["verify_ms"] / row["plain_ms"])
        assert row["draft_steps"] > 0
