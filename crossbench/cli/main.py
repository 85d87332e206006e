"""Entry point of the ``crossbench`` command."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from crossbench import __version__
from crossbench.errors import CrossbenchError

F = TypeVar("F", bound=Callable[..., Any])


def progress(msg: str) -> None:
    """Progress line to stderr (never mixed with data on stdout)."""
    click.echo(f"crossbench: {msg}", err=True)


def user_errors(fn: F) -> F:
    """Turn crossbench errors into one stderr line and their exit code (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CrossbenchError as e:
            kind = "error" if e.exit_code == 2 else "failed"
            click.echo(f"crossbench: {kind}: {e.one_line()}", err=True)
            sys.exit(e.exit_code)
    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="crossbench")
def cli() -> None:
    """Measure speculative decoding across inference engines, with numbers you can re-derive.

    \b
    Exit codes: 0 ok, 1 runtime failure, 2 usage error.
    """


def _register() -> None:
    from crossbench.cli import demo_cmd, engines_cmd, fixtures_cmd, run_cmd

    cli.add_command(engines_cmd.engines)
    cli.add_command(fixtures_cmd.fixtures)
    cli.add_command(run_cmd.run)
    cli.add_command(demo_cmd.demo)


_register()


def main() -> None:
    """Console-script entry."""
    cli()
