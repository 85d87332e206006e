"""``crossbench fixtures``: small deterministic GGUF models for tests and demos."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from crossbench.cli.common import user_errors
from crossbench.errors import RunError
from crossbench.fixtures.resolve import (  # the library layer under the command
    ALL_ROLES,
    DRAFTER_ROLES,
    MTP_ROLES,
    ROLES,
    ensure_drafter,
    ensure_fixtures,
    ensure_hf_fixture,
    ensure_mtp_target,
    ensure_mtp_target_hf,
    quantize,
)


@click.group()
def fixtures() -> None:
    """Make and locate the project's own small GGUF models (qwen3, real Qwen tokenizer)."""


@fixtures.command("make", epilog="""\b
Examples:
  crossbench fixtures make                  # tiny pair for CPU tests
  crossbench fixtures make --shape qwen3-8b --quant Q4_K_M --draft-quant Q8_0
  crossbench fixtures make --shape qwen3-8b --hf   # also hf-target/, hf-draft/ for vLLM
  crossbench fixtures make --drafter eagle3 --drafter dflash   # HF folder, then GGUF
  crossbench fixtures make --mtp            # Qwen3.5 target with an MTP layer (HF, GGUF)
  crossbench fixtures make --moe --dense-twin   # Qwen3.5-MoE target and its dense twin
""")
@click.option("--shape", default="tiny", show_default=True, help="tiny or qwen3-8b.")
@click.option("--seed", default=0, show_default=True, help="RNG seed (same seed, same bytes).")
@click.option("--quant", default=None, help="Also quantize the target, e.g. Q4_K_M.")
@click.option("--draft-quant", default=None, help="Also quantize the draft, e.g. Q8_0.")
@click.option("--hf", "hf", is_flag=True,
              help="Also write Hugging Face folders (hf-target/, hf-draft/) of the F16 "
                   "tensors, for vLLM.")
@click.option("--drafter", "drafters", multiple=True, type=click.Choice(DRAFTER_ROLES),
              help="Also make this drafter for the target (repeatable): its HF folder, then "
                   "its GGUF by llama.cpp's convert_hf_to_gguf.py (needs crossbench[convert]).")
@click.option("--mtp", "mtp", is_flag=True,
              help="Also make the Qwen3.5 target that carries an MTP layer (a target, not a "
                   "drafter): its HF folder, then its GGUF by convert_hf_to_gguf.py.")
@click.option("--moe", "moe", is_flag=True,
              help="Also make the Qwen3.5-MoE target (routed experts, a shared expert, an MTP "
                   "layer with its own experts): HF folder, then GGUF.")
@click.option("--dense-twin", "dense_twin", is_flag=True,
              help="Also make the MoE target's dense twin (same attention, a dense MLP as wide "
                   "as the MoE's active MLP, an MTP layer): HF folder, then GGUF.")
@user_errors
def make(shape: str, seed: int, quant: str | None, draft_quant: str | None, hf: bool,
         drafters: tuple[str, ...], mtp: bool, moe: bool, dense_twin: bool) -> None:
    """Write the target/draft GGUF pair (cached) and print their two paths.

    With --quant / --draft-quant, the printed paths are the quantized files (made with the
    installed llama-quantize, cached beside the F16 originals). With --hf, the paths of the
    two Hugging Face folders follow (same tensors as the F16 GGUFs, byte for byte; cached).
    Each --drafter (eagle3: an EAGLE-3 head; dflash: a DFlash block drafter; both for the
    qwen3 target; dflash-moe: a DFlash block drafter for the MoE target and its dense twin)
    prints its HF folder and its converted GGUF, whose every tensor was checked against the HF
    folder.
    --mtp prints the same two paths for the MTP target (serve it alone with draft-mtp in
    llama.cpp, method qwen3_5_mtp in vLLM); --moe and --dense-twin likewise for the MoE
    target and its dense twin (docs/moe-vs-dense.md).
    """
    target, draft = ensure_fixtures(shape, seed)
    if quant:
        target = quantize(target, quant)
    if draft_quant:
        draft = quantize(draft, draft_quant)
    click.echo(str(target))
    click.echo(str(draft))
    if hf:
        for role in ROLES:
            click.echo(str(ensure_hf_fixture(shape, role, seed)))
    for kind in drafters:
        for made in ensure_drafter(shape, kind, seed):
            click.echo(str(made))
    for role, wanted in (("mtp-target", mtp), ("moe-target", moe), ("dense-twin", dense_twin)):
        if wanted:
            for made in ensure_mtp_target(shape, seed, role):
                click.echo(str(made))


@fixtures.command("path", epilog="""\b
Examples:
  crossbench fixtures path target
  crossbench fixtures path draft --shape qwen3-8b --format hf
  crossbench fixtures path dflash-moe --shape qwen3-8b   # DFlash for moe-target, dense-twin
""")
@click.argument("which", type=click.Choice(ALL_ROLES))
@click.option("--shape", default="tiny", show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["gguf", "hf"]), default="gguf",
              show_default=True, help="gguf: the GGUF file; hf: its Hugging Face folder (an MTP-"
              "class target's made alone, not converted).")
@user_errors
def path(which: str, shape: str, seed: int, fmt: str) -> None:
    """Print the path of one fixture model (making it first if needed)."""
    if which in MTP_ROLES and fmt == "hf":  # the HF folder alone, not converted
        click.echo(str(ensure_mtp_target_hf(shape, seed, which)))
        return
    if which in DRAFTER_ROLES or which in MTP_ROLES:
        hf_dir, gguf = (ensure_mtp_target(shape, seed, which) if which in MTP_ROLES
                        else ensure_drafter(shape, which, seed))
        click.echo(str(hf_dir if fmt == "hf" else gguf))
        return
    if fmt == "hf":
        click.echo(str(ensure_hf_fixture(shape, which, seed)))
        return
    target, draft = ensure_fixtures(shape, seed)
    click.echo(str(target if which == "target" else draft))


def verify_line(role: str, gguf: Path, hf_dir: Path) -> tuple[str, bool]:
    """One line of ``verify-hf`` for a model, and whether every tensor matched."""
    from crossbench.fixtures.hf import compare_tensors

    matches = compare_tensors(gguf, hf_dir)
    bad = [m for m in matches if not m.equal]
    if not bad:
        return f"{role}: {len(matches)} tensors, all sha256 equal", True
    shown = ", ".join(f"{m.gguf_name or m.hf_name} ({m.problem})" for m in bad[:5])
    more = f", and {len(bad) - 5} more" if len(bad) > 5 else ""
    return f"{role}: {len(bad)} of {len(matches)} tensors differ: {shown}{more}", False


def _converted(shape: str, seed: int, drafters: tuple[str, ...],
               roles: list[str]) -> Iterator[tuple[str, list[Any]]]:
    """Each drafter's, then each MTP target's, tensor checks against its HF folder (made
    first if needed), one model at a time."""
    from crossbench.fixtures import drafters as dr
    from crossbench.fixtures import mtp as mt

    for kind in drafters:
        yield kind, dr.compare(dr.drafter_spec(shape, kind), *ensure_drafter(shape, kind, seed))
    for role in roles:
        yield role, mt.compare(mt.mtp_spec(shape, role), *ensure_mtp_target(shape, seed, role))


@fixtures.command("verify-hf", epilog="""\b
Examples:
  crossbench fixtures verify-hf
  crossbench fixtures verify-hf --shape qwen3-8b
  crossbench fixtures verify-hf --drafter eagle3 --drafter dflash
  crossbench fixtures verify-hf --mtp --moe --dense-twin
""")
@click.option("--shape", default="tiny", show_default=True, help="tiny or qwen3-8b.")
@click.option("--seed", default=0, show_default=True)
@click.option("--drafter", "drafters", multiple=True, type=click.Choice(DRAFTER_ROLES),
              help="Also check this drafter's GGUF against its HF folder (repeatable).")
@click.option("--mtp", "mtp", is_flag=True,
              help="Also check the MTP target's GGUF against its HF folder.")
@click.option("--moe", "moe", is_flag=True,
              help="Also check the MoE target's GGUF against its HF folder.")
@click.option("--dense-twin", "dense_twin", is_flag=True,
              help="Also check the dense twin's GGUF against its HF folder.")
@user_errors
def verify_hf(shape: str, seed: int, drafters: tuple[str, ...], mtp: bool, moe: bool,
              dense_twin: bool) -> None:
    """Check that the Hugging Face folders hold the GGUFs' tensors, byte for byte.

    Re-reads both files of each model (making the folders first if needed) and compares the
    sha256 of every tensor; prints one line per model. A drafter's GGUF is compared after the
    converter's documented changes (renames, EAGLE-3's Q/K row order, d2t re-based, norms to
    F32, t2d dropped); the MTP target's likewise (renames, nextn layer, norms +1, -exp(A_log),
    V heads reordered, conv squeezed; the MoE's experts stacked). Exit code 1 on any
    difference.
    """
    target, draft = ensure_fixtures(shape, seed)
    failed = []
    for role, gguf in zip(ROLES, (target, draft), strict=True):
        line, ok = verify_line(role, gguf, ensure_hf_fixture(shape, role, seed))
        click.echo(line)
        if not ok:
            failed.append(role)
    roles = [r for r, wanted in (("mtp-target", mtp), ("moe-target", moe),
                                 ("dense-twin", dense_twin)) if wanted]
    for name, checks in _converted(shape, seed, drafters, roles):
        bad = [c for c in checks if not c.equal]
        changed = sum(c.change != "bytes unchanged" for c in checks)
        click.echo(f"{name}: {len(checks)} tensors, {len(checks) - len(bad)} equal "
                   f"({changed} through a documented converter change)"
                   + "".join(f"; {c.hf_name or c.gguf_name}: {c.detail}" for c in bad[:5]))
        if bad:
            failed.append(name)
    if failed:
        raise RunError(f"the Hugging Face copy of {' and '.join(failed)} differs from its GGUF",
                       f"delete {target.parent}/hf-* and run `crossbench fixtures make --hf "
                       f"--shape {shape}`")
