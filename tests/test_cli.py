"""User-facing CLI texts, asserted exactly (no server needed)."""

from __future__ import annotations

from pathlib import Path

from cli_docgen import render
from click.testing import CliRunner

from crossbench.cli.main import cli


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_missing_model_is_one_line_exit_2(tmp_path, fake_binary):
    b = fake_binary()
    r = invoke("run", "--binary", str(b), "--model", str(tmp_path / "m.gguf"),
               "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    assert r.stderr == (f"crossbench: error: model: {tmp_path / 'm.gguf'} does not exist "
                        "(fix: fix the path; `crossbench fixtures make` writes small test "
                        "models)\n")
    assert not (tmp_path / "o").exists()  # nothing written, nothing started


def test_percent_rates_are_refused(tmp_path):
    r = invoke("run", "--model", str(tmp_path / "m.gguf"), "--synth-rates", "90,70",
               "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --synth-rates '90,70' has values above 1 "
                        "(fix: rates are fractions in [0, 1], not percentages: write 0.9, "
                        "not 90)\n")


def test_draft_method_without_draft_from_cli(tmp_path, fake_binary, gguf_stub):
    r = invoke("run", "--binary", str(fake_binary()), "--model", str(gguf_stub),
               "--spec", "draft-simple", "--n", "4", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --spec draft-simple needs a draft model (fix: pass "
                        "--draft DRAFT.gguf (draft_model), or choose an n-gram method)\n")


def test_run_refuses_to_overwrite(tmp_path, fake_binary, gguf_stub):
    out = tmp_path / "o"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    r = invoke("run", "--binary", str(fake_binary()), "--model", str(gguf_stub),
               "--out", str(out))
    assert r.exit_code == 2
    assert "already holds a run" in r.stderr


def test_cli_reference_is_current():
    doc = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    assert doc.read_text() == render(), (
        "docs/cli.md is stale: run `python tests/cli_docgen.py > docs/cli.md`")
