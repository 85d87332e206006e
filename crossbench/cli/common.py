"""Shared CLI helpers: progress to stderr, user errors as one line with their exit code,
``--set FIELD=VALUE`` items."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from crossbench.errors import CrossbenchError, UserError

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


def field_settings(items: tuple[str, ...], example: str) -> dict[str, Any]:
    """``--set FIELD=VALUE`` items as config fields (VALUE read as YAML); UserError naming the
    item when one is not FIELD=VALUE."""
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise UserError(f"--set {item!r} is not FIELD=VALUE", f"write e.g. --set {example}")
        out[name.strip()] = yaml.safe_load(text)
    return out


def llama_bench_binary(bench: Path | None, variant: str | None,
                       tool: str = "llama-bench") -> Path:
    """``--bench`` as given, else ``tool`` (llama-bench, llama-batched-bench) beside
    crossbench's llama.cpp build of ``variant`` (cpu by default); UserError when it is not
    there."""
    if bench is None:
        from crossbench.engines.llamacpp.build import load_install, parse_variant

        variant = variant or "cpu"
        cuda, arch = parse_variant(variant)
        inst = load_install(cuda=cuda, cuda_arch=arch)
        if inst is None:
            how = f" --cuda --cuda-arch {arch}" if cuda else ""
            raise UserError(f"no {tool}: crossbench's llama.cpp build ({variant}) is not "
                            f"installed, or was built before it made {tool}",
                            f"run `crossbench engines install llama.cpp{how}` (it builds what "
                            "is missing), give --variant, or give --bench")
        bench = inst.binary(tool)
    if not bench.is_file():
        raise UserError(f"--bench {bench} is not a file", f"give the {tool} binary")
    return bench
