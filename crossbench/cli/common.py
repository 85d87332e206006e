"""Shared CLI helpers: progress to stderr, user errors as one line with their exit code."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

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
