"""The README stays a page for the person arriving (issue 36 item 1): under 120 lines, no
table cell over 40 words, and every relative link (file and, for Markdown, heading anchor)
resolves in the checkout. Study history belongs in docs/ and CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 120
MAX_CELL_WORDS = 40
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def cells(line: str) -> list[str]:
    """The cells of one Markdown table row (an escaped ``\\|`` stays inside its cell)."""
    inner = line.strip().strip("|")
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (headings inside code fences left out)."""
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def test_cells_and_slugs_read_markdown_as_github_does() -> None:
    assert cells("| `import a\\|b` | two words |") == ["`import a\\|b`", "two words"]
    assert slug("## GPU time per verdict (`benchmarks/gpu_time_per_verdict.py`)".lstrip("#")) \
        == "gpu-time-per-verdict-benchmarksgpu_time_per_verdictpy"
    assert slug("Every method, round 1 (llama.cpp, 2026-12-03)") == \
        "every-method-round-1-llamacpp-2026-12-03"


def test_the_readme_is_under_120_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_no_readme_table_cell_is_over_40_words() -> None:
    long = [(n, len(c.split()), c[:60])
            for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1)
            if line.lstrip().startswith("|") for c in cells(line)
            if len(c.split()) > MAX_CELL_WORDS]
    assert not long, f"README.md cells over {MAX_CELL_WORDS} words (line, words, start): {long}"


def test_every_relative_link_of_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    assert links, "the README links its docs"
    broken = []
    for target in links:
        file, _, anchor = target.partition("#")
        path = README.parent / file if file else README
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, "; ".join(broken)
