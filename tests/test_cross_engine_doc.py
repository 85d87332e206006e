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
