"""SGLang's kernel caches carried to the next machine (``crossbench engines kernel-cache``):
packed with a manifest first, unpacked beside what a machine holds, refused for another
compute capability or engine build; with crossbench's stand-in SGLang (not SGLang), whose
start makes a module folder in ``TVM_FFI_CACHE_DIR`` as SGLang's JIT kernels do."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from standins.sglang import write_launcher

from crossbench import host
from crossbench.cli.main import cli
from crossbench.engines import registry
from crossbench.engines.sglang import kernel_cache
from crossbench.errors import UserError

H100 = ("--gpu", "NVIDIA H100 80GB HBM3", "--compute-cap", "9.0")


def _machine(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A machine's kernel caches in ``root`` (this process's environment points at them, as
    a device call's does at HOME's) and the environment its SGLang starts with."""
    env = {"TVM_FFI_CACHE_DIR": str(root / "tvm-ffi"), "TRITON_CACHE_DIR": str(root / "triton")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def _start(py: Path, env: dict[str, str], log: Path) -> str:
    """One stand-in start's kind (cold, partial, warm) as the adapter records it."""
    srv = registry.create("sglang", {"binary": str(py), "model": "Qwen/Qwen3-8B", "env": env},
                          log)
    with srv:
        kind: str = srv.props()["startup_cut"]["start"]
    return kind


def _cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["engines", "kernel-cache", *args])
    return res.exit_code, res.stdout, res.stderr


def test_pack_unpack_makes_the_next_machines_first_start_warm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    env = _machine(tmp_path / "a", monkeypatch)
    assert _start(py, env, tmp_path / "a.log") == "cold"
    kernel = tmp_path / "a" / "triton" / "3fa9c0" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"\x7fELF cubin")
    pack = tmp_path / "kc.tgz"
    code, out, err = _cli("pack", "--binary", str(py), *H100, "--out", str(pack))
    assert code == 0, err
    assert out == f"{pack}\n"
    build = kernel_cache.engine_build(py)
    assert err == (f"crossbench: {build['build_key']}, NVIDIA H100 80GB HBM3 (compute "
                   "capability 9.0): tvm_ffi 1 entries, triton 1 entries\n")
    with tarfile.open(pack) as tar:
        names = tar.getnames()
        f = tar.extractfile(names[0])
        assert f is not None
        man = json.loads(f.read())
    assert names[0] == "crossbench-kernel-cache.json"  # the manifest first
    assert "tvm_ffi/sgl_kernel_jit_standin_none" in names
    assert "triton/3fa9c0/kernel.cubin" in names
    assert man.pop("created") and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                                                kernel_cache.read_manifest(pack)["created"])
    assert man == {"format": 1, "kind": "sglang-kernel-cache", "engine": "sglang",
                   "build_key": build["build_key"], "release": "0.5.17",
                   "payload_sha256": None, "gpu": "NVIDIA H100 80GB HBM3",
                   "compute_cap": "9.0",
                   "caches": {"tvm_ffi": ["sgl_kernel_jit_standin_none"],
                              "triton": ["3fa9c0"]}}
    assert build["build_key"].startswith("0.5.17-")
    code, out, _ = _cli("list", "--pack", str(pack))
    assert code == 0 and json.loads(out)["compute_cap"] == "9.0"

    # the next machine (an H200: 9.0 too) holds one Triton kernel of its own and one of the
    # same name that must stay as it is
    env_b = _machine(tmp_path / "b", monkeypatch)
    mine = tmp_path / "b" / "triton" / "77aa01" / "k.cubin"
    same = tmp_path / "b" / "triton" / "3fa9c0" / "kernel.cubin"
    for path in (mine, same):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"this machine's")
    code, out, err = _cli("unpack", str(pack), "--binary", str(py), "--gpu", "NVIDIA H200",
                          "--compute-cap", "9.0")
    assert code == 0, err
    assert out.splitlines() == [env_b["TVM_FFI_CACHE_DIR"], env_b["TRITON_CACHE_DIR"]]
    assert err == (f"crossbench: {build['build_key']} (sm90): 1 entries added (tvm_ffi 1, "
                   "triton 0), 1 already there\n")
    assert (tmp_path / "b" / "tvm-ffi" / "sgl_kernel_jit_standin_none").is_dir()
    assert same.read_bytes() == mine.read_bytes() == b"this machine's"  # kept
    assert _start(py, env_b, tmp_path / "b.log") == "warm"  # the first start finds its kernels
    code, _, err = _cli("unpack", str(pack), "--binary", str(py), "--compute-cap", "9.0")
    assert code == 0 and "0 entries added (tvm_ffi 0, triton 0), 2 already there" in err
    code, out, _ = _cli("list")
    assert [json.loads(line) for line in out.splitlines()] == [
        {"cache": "tvm_ffi", "path": env_b["TVM_FFI_CACHE_DIR"],
         "entries": ["sgl_kernel_jit_standin_none"]},
        {"cache": "triton", "path": env_b["TRITON_CACHE_DIR"], "entries": ["3fa9c0", "77aa01"]}]


def _pack_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, py: Path) -> Path:
    """A pack of one fake JIT module, built on an H100 by the build of ``py``."""
    _machine(tmp_path / "a", monkeypatch)
    (tmp_path / "a" / "tvm-ffi" / "sgl_kernel_jit_x").mkdir(parents=True)
    (tmp_path / "a" / "tvm-ffi" / "sgl_kernel_jit_x" / "x.so").write_bytes(b"so")
    pack = tmp_path / "kc.tgz"
    code, _, err = _cli("pack", "--binary", str(py), *H100, "--out", str(pack))
    assert code == 0, err
    return pack


def test_unpack_refuses_another_compute_capability_or_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    pack = _pack_here(tmp_path, monkeypatch, py)
    key = kernel_cache.engine_build(py)["build_key"]
    _machine(tmp_path / "b", monkeypatch)
    refused = {
        ("--binary", str(py), "--gpu", "NVIDIA A100", "--compute-cap", "8.0"):
            "holds kernels built for compute capability 9.0 (NVIDIA H100 80GB HBM3), this "
            "machine's GPU (NVIDIA A100) has 8.0: compute_cap differs and its kernels would not "
            "load (fix: carry a pack made on a GPU of compute capability 8.0 (H100 and H200 are "
            "both 9.0), or start without it (cold))",
        ("--build", "0.5.17-0123456789ab", "--compute-cap", "9.0"):
            f"was packed by SGLang build {key} (release 0.5.17), this one is "
            "0.5.17-0123456789ab: build_key differs and its kernels were built from other "
            "sources (fix: install the SGLang pack those kernels came from and give its "
            "PREFIX/bin/python as --binary, or start without it (cold))"}
    for args, said in refused.items():
        code, out, err = _cli("unpack", str(pack), *args)
        assert (code, out) == (2, ""), args
        assert err == f"crossbench: error: kernel-cache: {pack} {said}\n"
    assert not (tmp_path / "b" / "tvm-ffi").exists()  # nothing was extracted
    code, _, err = _cli("unpack", str(pack), "--binary", str(py), "--build", key,
                        "--compute-cap", "9.0")
    assert code == 2 and "--binary and --build name the build twice" in err


def test_unpack_refuses_what_is_not_a_kernel_pack(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(tmp_path / "b", monkeypatch)
    vllm = tmp_path / "vllm-compile.tgz"  # a vLLM compile-cache pack is not one
    with tarfile.open(vllm, "w:gz") as tar:
        body = json.dumps({"format": 1, "build_key": "0.26.0-abc"}).encode()
        info = tarfile.TarInfo("crossbench-compile-cache.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    code, _, err = _cli("unpack", str(vllm), "--build", "k", "--compute-cap", "9.0")
    assert code == 2
    assert err == (f"crossbench: error: kernel-cache: {vllm} is not a kernel-cache pack (no "
                   "crossbench-kernel-cache.json) (fix: pass a file made by `crossbench "
                   "engines kernel-cache pack`)\n")
    sneaky = tmp_path / "sneaky.tgz"
    with tarfile.open(sneaky, "w:gz") as tar:
        for name, body in (("crossbench-kernel-cache.json", json.dumps(
                {"format": 1, "kind": "sglang-kernel-cache", "build_key": "k",
                 "compute_cap": "9.0", "caches": {}}).encode()),
                ("triton/../../escaped", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    with pytest.raises(UserError, match="would land outside"):
        kernel_cache.unpack(sneaky, kernel_cache.roots_here(), "k", "", "9.0")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "b" / "escaped").exists()
    code, _, err = _cli("unpack", str(tmp_path / "missing.tgz"), "--build", "k",
                        "--compute-cap", "9.0")
    assert code == 2 and "does not exist" in err


def test_pack_refuses_empty_caches_and_a_machine_without_a_known_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    py = write_launcher(tmp_path / "python", "--standin-step-ms", "0")
    _machine(tmp_path / "a", monkeypatch)
    code, _, err = _cli("pack", "--binary", str(py), *H100, "--out", str(tmp_path / "k.tgz"))
    assert code == 2 and "the kernel caches hold no entry" in err
    assert "start SGLang once on this machine first" in err and not (tmp_path / "k.tgz").exists()
    monkeypatch.setattr(host, "gpu_archs", lambda: [])
    code, _, err = _cli("pack", "--binary", str(py), "--out", str(tmp_path / "k.tgz"))
    assert code == 2
    assert err == ("crossbench: error: --compute-cap: cannot tell this machine's compute "
                   "capability: no NVIDIA GPU (nvidia-smi) (fix: give it: --compute-cap 9.0 "
                   "(H100, H200) and --gpu NAME)\n")
    monkeypatch.setattr(host, "gpu_archs", lambda: [("NVIDIA H100", "9.0"),
                                                    ("NVIDIA A100", "8.0")])
    with pytest.raises(UserError, match=r"NVIDIA H100 \(9\.0\), NVIDIA A100 \(8\.0\)"):
        kernel_cache.local_gpu()


def test_the_gpu_and_its_compute_capability_come_from_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in nvidia-smi answers as the H100's driver does for the two fields."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    smi = bin_ / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = --query-gpu=name,compute_cap ] || exit 2\n'
                   'echo "NVIDIA H100 80GB HBM3, 9.0"\necho "NVIDIA H100 80GB HBM3, 9.0"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:/usr/bin:/bin")
    assert host.gpu_archs() == [("NVIDIA H100 80GB HBM3", "9.0")] * 2
    assert kernel_cache.local_gpu() == ("NVIDIA H100 80GB HBM3", "9.0")
    assert kernel_cache.local_gpu("mine", "8.6") == ("mine", "8.6")
    assert host.gpu_names() == []  # this stand-in refuses the name-only query
    assert kernel_cache.sm("9.0") == "sm90"


def _installed(prefix: Path, payload: str) -> Path:
    """A launcher as `crossbench engines install sglang` writes it, with its install.json;
    it fails if run, so a key read from it proves the record alone was read."""
    launcher = prefix / "bin" / "python"
    launcher.parent.mkdir(parents=True)
    launcher.write_text(f"#!/bin/sh\n# {prefix}\nexit 1\n")
    launcher.chmod(0o755)
    (prefix / "install.json").write_text(json.dumps(
        {"kind": "crossbench.engine_install", "engine": "sglang", "release": "0.5.17",
         "payload_sha256": payload, "launchers": {"python": str(launcher)}}))
    return launcher


def test_an_installed_builds_key_is_its_payload_not_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same SGLang pack installed on two machines, under two folders: one build key (the
    launchers differ), read from install.json without importing sglang; another payload is
    another build. With no --binary, the one install in the cache is the build."""
    one = _installed(tmp_path / "m1" / "sglang-0.5.17-py3.12", "ab" * 32)
    two = _installed(tmp_path / "m2" / "sglang-0.5.17-py3.12", "ab" * 32)
    other = _installed(tmp_path / "m3" / "sglang-0.5.17-py3.12", "cd" * 32)
    a, b, c = (kernel_cache.engine_build(p) for p in (one, two, other))
    assert a == b == {"build_key": a["build_key"], "release": "0.5.17",
                      "payload_sha256": "ab" * 32}
    assert a["build_key"].startswith("0.5.17-") and c["build_key"] != a["build_key"]
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "empty"))
    _machine(tmp_path / "b", monkeypatch)
    code, _, err = _cli("list", "--pack", str(tmp_path / "kc.tgz"))
    assert code == 2 and "give a file made by `crossbench engines kernel-cache pack`" in err
    code, _, err = _cli("unpack", str(one), "--compute-cap", "9.0")  # any existing file
    assert code == 2 and "--binary: 0 SGLang installs in" in err
    monkeypatch.setenv("CROSSBENCH_CACHE", str(tmp_path / "m1"))
    (tmp_path / "m1" / "engines").mkdir()
    (tmp_path / "m1" / "sglang-0.5.17-py3.12").rename(
        tmp_path / "m1" / "engines" / "sglang-0.5.17-py3.12")
    launcher = tmp_path / "m1" / "engines" / "sglang-0.5.17-py3.12" / "bin" / "python"
    record = json.loads((launcher.parent.parent / "install.json").read_text())
    record["launchers"] = {"python": str(launcher)}
    (launcher.parent.parent / "install.json").write_text(json.dumps(record))
    (tmp_path / "b" / "tvm-ffi" / "m").mkdir(parents=True)
    code, _, err = _cli("pack", "--compute-cap", "9.0", "--out", str(tmp_path / "kc.tgz"))
    assert code == 0, err
    assert kernel_cache.read_manifest(tmp_path / "kc.tgz")["payload_sha256"] == "ab" * 32
    assert kernel_cache.read_manifest(tmp_path / "kc.tgz")["build_key"] == a["build_key"]
