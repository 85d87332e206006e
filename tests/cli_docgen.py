"""Generate ``docs/cli.md`` from the commands' own ``--help`` (so the reference cannot drift).

Regenerate with ``python tests/cli_docgen.py > docs/cli.md``; a test fails when the
checked-in file differs.
"""

from __future__ import annotations

import sys

import click
from click.testing import CliRunner

from crossbench.cli.main import cli


def _commands(group: click.Group, prefix: list[str]) -> list[list[str]]:
    out = [prefix]
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if isinstance(cmd, click.Group):
            out += _commands(cmd, [*prefix, name])
        else:
            out.append([*prefix, name])
    return out


def render() -> str:
    """The whole CLI reference as Markdown."""
    runner = CliRunner()
    parts = ["# CLI reference", "",
             "Generated from `--help` by `python tests/cli_docgen.py > docs/cli.md`; "
             "do not edit by hand.", ""]
    for path in _commands(cli, []):
        res = runner.invoke(cli, [*path, "--help"], prog_name="crossbench",
                            terminal_width=100)
        title = " ".join(["crossbench", *path])
        parts += [f"## `{title}`", "", "```", res.output.rstrip(), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
