"""The archives published in examples/ keep verifying as the formats evolve: each is re-derived
from its raw records with today's code and compared on what its format version defines
(fields added or redefined since are left out; pyperf keeps old result files as fixtures the
same way). A format change that silently breaks old deposits fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from crossbench.cli.main import cli

EXAMPLES = Path(__file__).parent.parent / "examples"
ARCHIVES = sorted(EXAMPLES.rglob("*.zip"))


def test_there_are_published_archives() -> None:
    assert len(ARCHIVES) >= 5  # four of the H200 llama.cpp study, one cross-engine round


@pytest.mark.parametrize("archive", ARCHIVES, ids=lambda p: p.parent.name)
def test_published_archive_verifies(archive: Path) -> None:
    r = CliRunner().invoke(cli, ["archive", "verify", str(archive)])
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith(f"{archive}: verified")
