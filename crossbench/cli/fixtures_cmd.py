"""``crossbench fixtures``: small deterministic GGUF models for tests and demos."""

from __future__ import annotations

from collections.abc import Callable
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


def quantize(src: Path, qtype: str, progress_fn: Callable[[str], None] = progress) -> Path:
    """``src`` quantized to ``qtype`` with the installed llama-quantize (cached beside it)."""
    import subprocess

    from crossbench.engines.llamacpp.build import Install, load_install
    from crossbench.paths import cache_dir
    from crossbench.store.atomic import temp_name

    out = src.with_name(f"{src.stem}-{qtype}.gguf")
    if out.exists():
        return out
    inst = load_install()
    if inst is None:  # a GPU host may hold only a CUDA build: its llama-quantize works too
        for root in sorted((cache_dir() / "engines").glob("*-cuda-sm*")):
            if Install(root, {}).binary("llama-quantize").exists():
                inst = Install(root, {})
                break
    if inst is None:
        raise UserError("llama-quantize is not built",
                        "run `crossbench engines install llama.cpp` first")
    tmp = temp_name(out)
    progress_fn(f"quantizing {src.name} to {qtype}")
    proc = subprocess.run([str(inst.binary("llama-quantize")), str(src), str(tmp), qtype],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise UserError(f"llama-quantize {qtype} failed:\n{tail}",
                        "use a type llama-quantize lists, e.g. Q4_K_M, Q8_0, Q6_K")
    tmp.rename(out)
    return out


@click.group()
def fixtures() -> None:
    """Make and locate the project's own small GGUF models (qwen3, real Qwen tokenizer)."""


@fixtures.command("make", epilog="""\b
Examples:
  crossbench fixtures make                  # tiny pair for CPU tests
  crossbench fixtures make --shape qwen3-8b --quant Q4_K_M --draft-quant Q8_0
""")
@click.option("--shape", default="tiny", show_default=True, help="tiny or qwen3-8b.")
@click.option("--seed", default=0, show_default=True, help="RNG seed (same seed, same bytes).")
@click.option("--quant", default=None, help="Also quantize the target, e.g. Q4_K_M.")
@click.option("--draft-quant", default=None, help="Also quantize the draft, e.g. Q8_0.")
@user_errors
def make(shape: str, seed: int, quant: str | None, draft_quant: str | None) -> None:
    """Write the target/draft GGUF pair (cached) and print their two paths.

    With --quant / --draft-quant, the printed paths are the quantized files (made with the
    installed llama-quantize, cached beside the F16 originals).
    """
    target, draft = ensure_fixtures(shape, seed)
    if quant:
        target = quantize(target, quant)
    if draft_quant:
        draft = quantize(draft, draft_quant)
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
