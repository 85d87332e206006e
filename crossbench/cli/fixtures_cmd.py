"""``crossbench fixtures``: small deterministic GGUF models for tests and demos."""

from __future__ import annotations

from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors
from crossbench.engines.llamacpp.pins import DEFAULT_PIN
from crossbench.errors import UserError

VOCAB_FILE = "models/ggml-vocab-qwen35.gguf"


def vocab_path(pin: str = DEFAULT_PIN) -> Path:
    """The real Qwen tokenizer (vocab-only GGUF) from the pinned llama.cpp tree."""
    from crossbench.engines.llamacpp.build import source_tree
    from crossbench.engines.llamacpp.pins import get_pin

    path = source_tree(get_pin(pin), progress) / VOCAB_FILE
    if not path.exists():
        raise UserError(f"{VOCAB_FILE} is missing from {pin}'s llama.cpp tree",
                        f"use a pin whose tree has it (default {DEFAULT_PIN})")
    return path


def ensure_fixtures(shape: str = "tiny", seed: int = 0) -> tuple[Path, Path]:
    """Make (or reuse from the cache) the fixture pair; return (target, draft)."""
    from crossbench.fixtures import fixture_dir, make_fixtures
    from crossbench.paths import cache_dir

    pair = make_fixtures(vocab_path(), fixture_dir(cache_dir(), shape, seed), shape=shape,
                         seed=seed, progress=progress)
    return pair.target, pair.draft


@click.group()
def fixtures() -> None:
    """Make and locate the project's own small GGUF models (qwen3, real Qwen tokenizer)."""


@fixtures.command("make", epilog="""\b
Examples:
  crossbench fixtures make                  # tiny pair for CPU tests
  crossbench fixtures make --shape qwen3-8b # 8B-shaped target + 0.6B draft (F16, ~17 GB)
""")
@click.option("--shape", default="tiny", show_default=True, help="tiny or qwen3-8b.")
@click.option("--seed", default=0, show_default=True, help="RNG seed (same seed, same bytes).")
@user_errors
def make(shape: str, seed: int) -> None:
    """Write the target/draft GGUF pair (cached) and print their two paths."""
    target, draft = ensure_fixtures(shape, seed)
    click.echo(str(target))
    click.echo(str(draft))


@fixtures.command("path")
@click.argument("which", type=click.Choice(["target", "draft"]))
@click.option("--shape", default="tiny", show_default=True)
@click.option("--seed", default=0, show_default=True)
@user_errors
def path(which: str, shape: str, seed: int) -> None:
    """Print the path of one fixture model (making the pair first if needed)."""
    target, draft = ensure_fixtures(shape, seed)
    click.echo(str(target if which == "target" else draft))
