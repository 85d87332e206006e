"""SGLang's JIT kernel caches carried to the next machine (``crossbench engines kernel-cache``).

A machine's first SGLang start builds what later starts find: SGLang 0.5.17's JIT modules
with nvcc under ``TVM_FFI_CACHE_DIR`` and Triton's kernels under ``TRITON_CACHE_DIR``
(:data:`crossbench.engines.sglang.startup_log.KERNEL_CACHES`). On an H100 on 2026-12-07 that
start took 216.8 s against about 83 s warm, and the caches held 11.7 MB (tvm-ffi, 5 entries)
and 12.7 MB (Triton, 87) at the lease's end (docs/sglang.md "Where a start goes").

A pack (:func:`pack`) is a gzip tar (:mod:`crossbench.engines.cache_pack`) whose first member
is ``crossbench-kernel-cache.json``: the engine build it came from (:func:`engine_build`), the
GPU and CUDA compute capability its kernels were built for, when it was made and each cache's
entries (top-level names); then ``tvm_ffi/ENTRY/...`` and ``triton/ENTRY/...``.
:func:`unpack` adds the entries a machine lacks to its cache folders, keeping those there, and
refuses a pack of another compute capability (the kernels would not load) or of another
engine build (they were compiled against other sources). Triton's cache is shared with
whatever else ran Triton on the machine (a vLLM round's kernels too): its entries are keyed by
Triton itself, so one that no start asks for costs only its bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from crossbench import host
from crossbench.engines import cache_pack
from crossbench.engines.sglang.startup_log import kernel_cache_roots
from crossbench.errors import UserError

PACK_FORMAT = 1
"""Version of the pack's manifest (1: first)."""
MANIFEST = "crossbench-kernel-cache.json"
"""The pack's first member: its manifest."""
KIND = "sglang-kernel-cache"
"""The manifest's ``kind``."""
_LABEL = "kernel-cache"
_MAKER = "crossbench engines kernel-cache pack"


def engine_build(binary: Path) -> dict[str, Any]:
    """The SGLang build of interpreter ``binary``: ``build_key``, ``release`` and the
    installed pack's ``payload_sha256`` (None for an interpreter that ``crossbench engines
    install sglang`` did not write). The key of an installed launcher comes from its
    ``install.json`` (release and payload), so the same pack installed on another machine,
    under another folder, gives the same key without importing sglang; any other
    interpreter's from its ``sglang.__version__`` and its own sha256."""
    from crossbench.engines.pack import install_record
    from crossbench.engines.sglang.profile import DEFAULT_VERSION
    from crossbench.engines.sglang.server import version_text

    if not binary.is_file():
        raise UserError(f"--binary {binary} does not exist",
                        "give the interpreter that has sglang (PREFIX/bin/python of "
                        "`crossbench engines install sglang`)")
    install = install_record(binary)
    payload = install.get("payload_sha256") if install is not None else None
    if install is not None and isinstance(payload, str):
        release = str(install.get("release"))
        return {"build_key": cache_pack.build_key(release, payload), "release": release,
                "payload_sha256": payload}
    text = version_text(binary, DEFAULT_VERSION)
    return {"build_key": cache_pack.binary_build_key(text, binary),
            "release": text.partition("+")[0],
            "payload_sha256": None}


def local_gpu(gpu: str | None = None, compute_cap: str | None = None) -> tuple[str, str]:
    """This machine's GPU name and compute capability: those given, else what ``nvidia-smi``
    says (one capability for every GPU; the name "" where only the capability is given).
    UserError where it cannot tell."""
    if compute_cap is not None:
        return gpu or "", compute_cap.strip()
    found = host.gpu_archs()
    caps = sorted({cap for _, cap in found})
    if len(caps) != 1 or not caps[0].replace(".", "", 1).isdigit():
        seen = ", ".join(f"{n} ({c})" for n, c in found) or "no NVIDIA GPU (nvidia-smi)"
        raise UserError(f"--compute-cap: cannot tell this machine's compute capability: {seen}",
                        "give it: --compute-cap 9.0 (H100, H200) and --gpu NAME")
    name = gpu or next(n for n, c in found if c == caps[0])
    return name, caps[0]


def sm(compute_cap: str) -> str:
    """A compute capability as CUDA's architecture name: ``9.0`` -> ``sm90``."""
    return "sm" + compute_cap.replace(".", "")


def cache_entries(roots: dict[str, Path]) -> dict[str, list[str]]:
    """Each cache's entries (top-level names, sorted; none where the folder is missing)."""
    return {name: sorted(p.name for p in root.iterdir()) if root.is_dir() else []
            for name, root in roots.items()}


def roots_here() -> dict[str, Path]:
    """The kernel caches' folders of an SGLang server started from this environment."""
    return kernel_cache_roots(dict(os.environ))


def pack(roots: dict[str, Path], out: Path, build: dict[str, Any], gpu: str,
         compute_cap: str) -> dict[str, Any]:
    """Write ``out`` (a .tar.gz): the manifest, then every entry of every cache in ``roots``.
    ``build`` is :func:`engine_build`'s; ``gpu`` and ``compute_cap`` what the kernels were
    built on. UserError where the caches hold no entry."""
    entries = cache_entries(roots)
    if not any(entries.values()):
        raise UserError(f"{_LABEL}: the kernel caches hold no entry "
                        f"({', '.join(str(r) for r in roots.values())})",
                        "start SGLang once on this machine first (or check TVM_FFI_CACHE_DIR "
                        "and TRITON_CACHE_DIR)")
    manifest = {"format": PACK_FORMAT, "kind": KIND, "engine": "sglang",
                "build_key": build["build_key"], "release": build.get("release"),
                "payload_sha256": build.get("payload_sha256"), "gpu": gpu,
                "compute_cap": compute_cap, "created": cache_pack.utc_now(),
                "caches": entries}
    cache_pack.write(out, MANIFEST, manifest,
                     [(roots[name] / e, f"{name}/{e}") for name, names in entries.items()
                      for e in names])
    return manifest


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a pack, read from the stream's head; UserError for anything else."""
    data, _ = cache_pack.read_head(path, MANIFEST, _LABEL, _MAKER)
    man = cache_pack.check_manifest(data, path, PACK_FORMAT, _LABEL, _MAKER)
    if man.get("kind") != KIND or not isinstance(man.get("compute_cap"), str) \
            or not isinstance(man.get("caches"), dict):
        raise UserError(f"{_LABEL}: {path} has no {KIND} manifest (kind, compute_cap, caches)",
                        f"make it again with this crossbench's `{_MAKER}`")
    return man


def unpack(path: Path, roots: dict[str, Path], build_key: str, gpu: str,
           compute_cap: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Add the pack's entries that ``roots`` lack (those there are kept: Triton and tvm-ffi
    name an entry by a hash of what it holds). Refused (UserError naming the field) where the
    pack was built for another ``compute_cap`` than this machine's, or by another engine
    build than ``build_key``. Returns the manifest and each cache's entries added."""
    man = read_manifest(path)
    if man["compute_cap"] != compute_cap:
        made = f" ({man['gpu']})" if man.get("gpu") else ""
        here = f"this machine's GPU ({gpu})" if gpu else "this machine's GPU"
        raise UserError(f"{_LABEL}: {path} holds kernels built for compute capability "
                        f"{man['compute_cap']}{made}, {here} has {compute_cap}: compute_cap "
                        "differs and its kernels would not load",
                        f"carry a pack made on a GPU of compute capability {compute_cap} "
                        "(H100 and H200 are both 9.0), or start without it (cold)")
    if man["build_key"] != build_key:
        payload = man.get("payload_sha256")
        made = f" (release {man.get('release')}" + (f", payload {payload[:12]})"
                                                    if isinstance(payload, str) else ")")
        raise UserError(f"{_LABEL}: {path} was packed by SGLang build {man['build_key']}"
                        f"{made}, this one is {build_key}: build_key differs and its kernels "
                        "were built from other sources", "install the SGLang pack those "
                        "kernels came from and give its PREFIX/bin/python as --binary, or "
                        "start without it (cold)")
    before = {name: set(entries) for name, entries in cache_entries(roots).items()}

    def place(name: str) -> tuple[Path, str] | None:
        cache, _, rest = name.partition("/")
        entry = rest.split("/", 1)[0]
        if cache not in roots or not entry or entry in before[cache]:
            return None
        return roots[cache], rest

    cache_pack.extract(path, place, _LABEL, _MAKER)
    after = cache_entries(roots)
    return man, {name: sorted(set(after[name]) - before[name]) for name in roots}
