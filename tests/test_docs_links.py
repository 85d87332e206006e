"""Every relative link in the README, docs/ and the changelog points at a file that exists,
and every #anchor at a heading of that file (GitHub's heading slugs), so the docs stay true to
the tree as files and sections move."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but - and _ dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks), repeats numbered."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#{1,6}\s+(.*)$", line)):
            s = slug(m[1])
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def test_slugs_as_github_makes_them() -> None:
    assert slug("Where a step's cost goes (`crossbench decompose`)") == \
        "where-a-steps-cost-goes-crossbench-decompose"
    assert slug("GPU time per verdict (H200, 2026-12-01 to 2026-12-03)") == \
        "gpu-time-per-verdict-h200-2026-12-01-to-2026-12-03"


def broken(files: list[Path]) -> tuple[list[str], int]:
    """The relative links of ``files`` that point at no file, or at no heading of a Markdown
    file, one line each, and how many relative links were checked."""
    bad, checked = [], 0
    for f in files:
        for m in LINK.finditer(f.read_text()):
            link = m[1]
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, frag = link.partition("#")
            target = f.parent / path if path else f
            checked += 1
            if not target.exists():
                bad.append(f"{f.relative_to(ROOT)}: {link}: no such file")
            elif frag and target.suffix == ".md" and frag not in anchors(target):
                bad.append(f"{f.relative_to(ROOT)}: {link}: no such heading")
    return bad, checked


def test_every_relative_link_and_anchor_resolves() -> None:
    bad, checked = broken([ROOT / "README.md", ROOT / "CHANGELOG.md",
                           *sorted((ROOT / "docs").glob("*.md"))])
    assert not bad, "\n".join(bad)
    assert checked > 100


def test_every_relative_link_of_the_examples_resolves() -> None:
    """The reports and datapoints landed beside the archives (examples/) link their figures
    and files where they are (`study.py land` puts a step's PNGs in plots-STEP/)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files", "examples/*.md"], cwd=ROOT, text=True,
                            capture_output=True, check=True).stdout.split()
    bad, checked = broken([ROOT / name for name in listed])
    assert not bad, "\n".join(bad)
    assert checked > 100
