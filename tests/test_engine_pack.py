"""Offline packs of a pinned engine (crossbench/engines/pack.py), on a fake wheelhouse.

The wheelhouse holds a fake ``vllm-0.26.0`` (its Requires-Dist has an extra, markers true and
false for the target, a host-provided package whose pin differs, a skipped package, the two
files pack.yaml drops) and a few dependency wheels, so the resolution, the slim wheel, the
parts, the install, the launcher and the identity record have known right answers. A second
wheelhouse holds a fake ``sglang-0.5.17`` (a console script, one dependency) with its own
pack facts, for the interpreter launcher ``bin/python`` that the SGLang adapter runs. No
network; pip runs only to install the fake wheels into a temporary prefix.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.tags import Tag

from crossbench.cli.main import cli
from crossbench.engines import pack as ep
from crossbench.engines import registry
from crossbench.engines.sglang.server import SglangServer
from crossbench.engines.vllm.server import VllmServer
from crossbench.errors import UserError

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "3.11" if HERE == "3.12" else "3.12"
PART = 50_000
FA2 = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
FA3 = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
RS = "vllm/vllm-rs"

MAIN = '''\
import os
import sys


def main() -> int:
    if "--version" in sys.argv[1:]:
        print("0.26.0")
        return 0
    for name in ("VLLM_USE_FLASHINFER_SAMPLER", "CROSSBENCH_TEST_MODE"):
        print(f"{name}={os.environ.get(name)}")
    import starlette
    print(f"argv0={sys.argv[0]}")
    print(f"starlette={starlette.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

FACTS = '''\
schema_version: 1
engine: vllm
releases:
  "0.26.0":
    drop_files:
      vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so: FA2 kernels; Hopper runs FA3.
      vllm/vllm-rs: Rust frontend; runs only with VLLM_USE_RUST_FRONTEND=1.
    skip_packages:
      flashinfer-python: optional kernels, imported lazily.
    keep_host:
      numba: the host's 0.68 serves.
      torch: never carried.
    env:
      VLLM_USE_FLASHINFER_SAMPLER: {value: "0", reason: flashinfer is not carried.}
      CROSSBENCH_TEST_MODE: {value: packed, reason: a second default for the test.}
'''

HOST = '''\
# the fake host: pinned, bare and commented lines
numpy==2.5.2
numba==0.68.0
click
torch==2.11.0
uvloop   # present, version unknown
'''


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (),
               extras: tuple[str, ...] = (), files: dict[str, bytes] | None = None,
               entry_points: str | None = None) -> Path:
    """A valid pure-Python wheel with METADATA, WHEEL, entry_points.txt and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Provides-Extra: {e}\n" for e in extras)
            + "".join(f"Requires-Dist: {r}\n" for r in requires))
    content = dict(files or {f"{name.replace('-', '_')}/__init__.py": b"VERSION = 1\n"})
    content[f"{info}/METADATA"] = meta.encode()
    content[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: crossbench-test\n"
                                b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    if entry_points is not None:
        content[f"{info}/entry_points.txt"] = entry_points.encode()
    record = "".join(f"{p},sha256={_b64(d)},{len(d)}\n" for p, d in content.items())
    content[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in content.items():
            zi = zipfile.ZipInfo(p, (2024, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if p == RS else 0o644) << 16
            zf.writestr(zi, d, zipfile.ZIP_DEFLATED)
    return path


@dataclass
class World:
    """The fake wheelhouse, host list and pack facts."""

    root: Path
    wheels: Path
    host: Path
    facts: Path
    engines_dir: Path

    def pack(self, out: str, python: str = HERE, **kw: Any) -> ep.PackResult:
        kw.setdefault("wheelhouse", self.wheels)
        kw.setdefault("facts_file", self.facts)
        kw.setdefault("part_bytes", PART)
        return ep.pack(kw.pop("req", "vllm==0.26.0"), python, self.host, self.root / out, **kw)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("pack")
    wheels = root / "wheelhouse"
    wheels.mkdir()
    rnd = random.Random(0)
    make_wheel(
        wheels, "vllm", "0.26.0",
        requires=("fastapi[standard]<0.137.0,>=0.133.0", "starlette", "numpy>=1.26",
                  "numba==0.65.0", "flashinfer-python==0.6.14", "torch==2.11.0",
                  'legacy-backport; python_version < "3.11"',
                  'six>=1.16.0; python_version > "3.11"', 'bench-only; extra == "bench"'),
        extras=("bench",),
        files={"vllm/__init__.py": b'__version__ = "0.26.0"\n',
               "vllm/entrypoints/__init__.py": b"", "vllm/entrypoints/cli/__init__.py": b"",
               "vllm/entrypoints/cli/main.py": MAIN.encode(),
               FA2: rnd.randbytes(300_000), FA3: rnd.randbytes(120_000),
               RS: rnd.randbytes(50_000)},
        entry_points="[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n\n"
                     "[vllm.general_plugins]\nx = vllm.plugins:register\n")
    make_wheel(wheels, "fastapi", "0.136.3",
               requires=("starlette<1.0.1,>=0.40.0", 'uvicorn[standard]>=0.30; extra == "standard"',
                         'httpx>=0.23; extra == "all"'), extras=("standard", "all"))
    make_wheel(wheels, "starlette", "1.0.1")
    make_wheel(wheels, "starlette", "0.99.0")
    make_wheel(wheels, "uvicorn", "0.35.0",
               requires=("click>=8.0", "h11>=0.8",
                         'uvloop>=0.15; extra == "standard" and sys_platform != "win32"'),
               extras=("standard",))
    make_wheel(wheels, "h11", "0.16.0")
    make_wheel(wheels, "six", "1.17.0")
    host = root / "host.txt"
    host.write_text(HOST)
    engines_dir = root / "engines"
    (engines_dir / "vllm").mkdir(parents=True)
    facts = engines_dir / "vllm" / "pack.yaml"
    facts.write_text(FACTS)
    return World(root, wheels, host, facts, engines_dir)


@pytest.fixture(scope="module")
def packed(world: World) -> ep.PackResult:
    return world.pack("out")


@pytest.fixture(scope="module")
def installed(world: World, packed: ep.PackResult) -> ep.InstallResult:
    return ep.install(packed.out, world.root / "prefix")


def payload_bytes(res: ep.PackResult) -> bytes:
    return b"".join((res.out / p["name"]).read_bytes() for p in res.manifest["parts"])


def wheel_from_payload(res: ep.PackResult, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(payload_bytes(res))) as tar:
        f = tar.extractfile(name)
        assert f is not None
        return f.read()


# -- resolution -----------------------------------------------------------------------------


def test_resolution_skips_host_packages_and_follows_extras_and_markers(
        world: World, packed: ep.PackResult) -> None:
    man = packed.manifest
    carried = {w["project"]: w["version"] for w in man["wheels"]}
    six = {"six": "1.17.0"} if HERE == "3.12" else {}
    assert carried == {"vllm": "0.26.0", "fastapi": "0.136.3", "starlette": "0.99.0",
                       "uvicorn": "0.35.0", "h11": "0.16.0", **six}
    by_name = {w["project"]: w for w in man["wheels"]}
    # fastapi's tighter pin replaced the starlette chosen for vllm's bare requirement
    assert by_name["starlette"]["required_by"] == [
        "vllm 0.26.0: starlette", "fastapi 0.136.3: starlette<1.0.1,>=0.40.0"]
    assert by_name["fastapi"]["extras"] == ["standard"]
    assert by_name["uvicorn"]["required_by"] == [
        'fastapi 0.136.3: uvicorn[standard]>=0.30; extra == "standard"']
    assert set(man["host_provided"]) == {"numpy", "numba", "torch", "click", "uvloop"}
    assert man["host_provided"]["uvloop"]["version"] is None
    assert man["host_provided"]["numba"]["pin_differs"] == ["vllm 0.26.0: numba==0.65.0"]
    assert man["host_provided"]["numba"]["kept_because"] == "the host's 0.68 serves."
    assert "pin_differs" not in man["host_provided"]["torch"]
    assert man["skipped"] == {"flashinfer-python": {
        "reason": "optional kernels, imported lazily.",
        "required_by": ["vllm 0.26.0: flashinfer-python==0.6.14"]}}
    assert man["against"]["sha256"] == hashlib.sha256(world.host.read_bytes()).hexdigest()
    assert man["python"] == HERE and man["kind"] == "crossbench.engine_pack"
    assert man["env"]["VLLM_USE_FLASHINFER_SAMPLER"]["value"] == "0"


def test_markers_are_evaluated_for_the_target_python(world: World) -> None:
    facts = ep.load_facts("vllm", "0.26.0", world.facts)
    host = ep.read_host_list(world.host)
    roots = [(Requirement("vllm==0.26.0"), "command line")]
    names = {}
    for py in ("3.11", "3.12"):
        t = ep.Target.parse(py)
        res = ep.resolve(roots, t, host, facts, ep.Wheelhouse(world.wheels, t))
        names[py] = set(res.wheels)
    assert names["3.12"] - names["3.11"] == {"six"}  # six>=1.16.0; python_version > "3.11"
    assert not {"legacy-backport", "bench-only", "httpx"} & (names["3.11"] | names["3.12"])


def test_refetch_is_reported(world: World) -> None:
    msgs: list[str] = []
    world.pack("out-msgs", progress=msgs.append)
    assert ("starlette 1.0.1 does not satisfy fastapi 0.136.3: starlette<1.0.1,>=0.40.0; "
            "fetching starlette<1.0.1,>=0.40.0") in msgs


def test_host_version_that_violates_a_pin_is_refused(world: World) -> None:
    with pytest.raises(UserError) as e:
        world.pack("out-conflict", with_reqs=["numpy<2"])
    assert e.value.message == (f"--against {world.host}: the host has numpy==2.5.2, but "
                               "--with: numpy<2 needs numpy<2")
    assert "keep_host" in (e.value.hint or "")


def test_constraint_picks_the_version_and_conflicts_name_every_requirement(
        world: World, tmp_path: Path) -> None:
    facts = tmp_path / "pack.yaml"
    facts.write_text(FACTS.replace("    keep_host:", """    constraints:
      starlette: {spec: "<1.0", reason: what pip would backtrack to.}
    keep_host:"""))
    msgs: list[str] = []
    res = world.pack("out-constrained", facts_file=facts, progress=msgs.append)
    assert res.manifest["constraints"] == {"starlette": {
        "spec": "<1.0", "reason": "what pip would backtrack to.", "chosen": "0.99.0"}}
    assert not [m for m in msgs if "does not satisfy" in m]  # no re-fetch was needed
    with pytest.raises(UserError) as e:
        world.pack("out-conflicting", with_reqs=["starlette>=1.0.1"])
    assert e.value.message.startswith(
        "no single starlette meets every requirement (--with: starlette>=1.0.1; vllm 0.26.0: "
        "starlette; fastapi 0.136.3: starlette<1.0.1,>=0.40.0): --wheelhouse ")
    assert "add a constraint to" in (e.value.hint or "")


def test_requirement_missing_from_the_wheelhouse_is_named(world: World) -> None:
    with pytest.raises(UserError, match=r"no wheel of orjson>=3 for CPython"):
        world.pack("out-missing", with_reqs=["orjson>=3"])


def test_release_without_facts_and_loose_pins_are_refused(world: World) -> None:
    with pytest.raises(UserError) as e:
        world.pack("out-nofacts", req="vllm==0.25.0")
    assert e.value.message == f"{world.facts} has no entry for vllm 0.25.0 (it has: 0.26.0)"
    assert f'add releases."0.25.0" to {world.facts}' in (e.value.hint or "")
    with pytest.raises(UserError, match="does not pin one release"):
        world.pack("out-loose", req="vllm>=0.26")
    with pytest.raises(UserError, match="is not a Python minor version"):
        world.pack("out-py", python="3")


def test_repository_facts_cover_0_26_0() -> None:
    facts = ep.load_facts("vllm", "0.26.0")
    assert set(facts.drop_files) == {FA2, RS}
    assert {"flashinfer-python", "nvtx", "pynvvideocodec", "torchcodec"} <= set(
        facts.skip_packages)
    assert "apache-tvm-ffi" not in facts.skip_packages  # xgrammar imports it at vllm's import
    assert {"numba", "numpy", "setuptools", "torch", "torchaudio", "torchvision",
            "triton"} <= set(facts.keep_host)
    assert {str(n): str(c.spec) for n, c in facts.constraints.items()} == {"xgrammar": "<0.2.8"}
    assert facts.env["VLLM_USE_FLASHINFER_SAMPLER"].value == "0"


# -- slim wheel, parts, determinism ---------------------------------------------------------


def test_dropped_files_are_gone_from_the_slim_wheel_and_its_record(
        world: World, packed: ep.PackResult) -> None:
    name = "vllm-0.26.0-py3-none-any.whl"
    slim = zipfile.ZipFile(io.BytesIO(wheel_from_payload(packed, name)))
    orig = zipfile.ZipFile(world.wheels / name)
    assert slim.testzip() is None
    assert set(orig.namelist()) - set(slim.namelist()) == {FA2, RS}
    record = slim.read("vllm-0.26.0.dist-info/RECORD").decode()
    assert FA2 not in record and RS not in record and FA3 in record
    assert len(record.splitlines()) == len(orig.read("vllm-0.26.0.dist-info/RECORD")
                                            .decode().splitlines()) - 2
    for n in slim.namelist():
        if not n.endswith("RECORD"):
            assert slim.read(n) == orig.read(n), n
    assert {i.date_time for i in slim.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert slim.namelist()[-1] == "vllm-0.26.0.dist-info/RECORD"
    dropped = {d["path"]: d for d in packed.manifest["dropped_files"]}
    assert set(dropped) == {FA2, RS}
    assert dropped[FA2]["size"] == 300_000 and dropped[FA2]["bytes_saved"] > 290_000
    assert dropped[RS]["reason"] == "Rust frontend; runs only with VLLM_USE_RUST_FRONTEND=1."
    ew = packed.manifest["engine_wheel"]
    assert ew["original_sha256"] == hashlib.sha256(
        (world.wheels / name).read_bytes()).hexdigest()


def test_a_drop_path_the_wheel_lacks_is_refused(world: World, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no vllm/nope.so to drop"):
        ep.slim_wheel(world.wheels / "vllm-0.26.0-py3-none-any.whl", tmp_path / "x.whl",
                      {"vllm/nope.so": "why"})


def test_parts_are_at_most_part_size_and_reassemble_to_the_payload(
        packed: ep.PackResult) -> None:
    parts = packed.manifest["parts"]
    assert len(parts) >= 3
    assert [p["name"] for p in parts] == [f"payload.tar.part{i:03d}" for i in range(len(parts))]
    assert all(p["size"] == PART for p in parts[:-1]) and 0 < parts[-1]["size"] <= PART
    for p in parts:
        data = (packed.out / p["name"]).read_bytes()
        assert len(data) == p["size"] and hashlib.sha256(data).hexdigest() == p["sha256"]
    whole = payload_bytes(packed)
    assert hashlib.sha256(whole).hexdigest() == packed.manifest["payload"]["sha256"]
    assert len(whole) == packed.manifest["payload"]["size"]
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(w["name"] for w in packed.manifest["wheels"])
    assert {(m.mtime, m.uid, m.mode) for m in members} == {(0, 0, 0o644)}
    sizes = {w["name"]: w["size"] for w in packed.manifest["wheels"]}
    assert {m.name: m.size for m in members} == sizes


def test_packing_twice_gives_identical_bytes(world: World, packed: ep.PackResult) -> None:
    again = world.pack("out-again")
    first = {p.name: p.read_bytes() for p in sorted(packed.out.iterdir())}
    second = {p.name: p.read_bytes() for p in sorted(again.out.iterdir())}
    assert first == second


# -- install --------------------------------------------------------------------------------


def run_launcher(launcher: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("VLLM_USE_FLASHINFER_SAMPLER", "CROSSBENCH_TEST_MODE", "PYTHONPATH")}
    return subprocess.run([str(launcher), *args], capture_output=True, text=True, check=True,
                          env={**base, **env}, timeout=60)


def test_install_round_trip(world: World, packed: ep.PackResult,
                            installed: ep.InstallResult) -> None:
    prefix = world.root / "prefix"
    assert installed.changed and installed.launcher == prefix / "bin" / "vllm"
    assert os.access(installed.launcher, os.X_OK)
    assert run_launcher(installed.launcher, "--version").stdout == "0.26.0\n"
    out = run_launcher(installed.launcher).stdout.splitlines()
    assert out[:3] == ["VLLM_USE_FLASHINFER_SAMPLER=0", "CROSSBENCH_TEST_MODE=packed",
                       "argv0=vllm"]
    assert out[3].startswith(f"starlette={prefix / 'site' / 'starlette'}")
    mine = run_launcher(installed.launcher, VLLM_USE_FLASHINFER_SAMPLER="1",
                        CROSSBENCH_TEST_MODE="mine").stdout.splitlines()
    assert mine[:2] == ["VLLM_USE_FLASHINFER_SAMPLER=1", "CROSSBENCH_TEST_MODE=mine"]
    site = prefix / "site"
    assert (site / "vllm" / "vllm_flash_attn" / "_vllm_fa3_C.abi3.so").is_file()
    assert not (site / "vllm" / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so").exists()
    assert not (site / "vllm" / "vllm-rs").exists()
    rec = json.loads((prefix / "install.json").read_text())
    assert rec == installed.record
    assert rec["kind"] == "crossbench.engine_install" and rec["release"] == "0.26.0"
    assert rec["payload_sha256"] == packed.manifest["payload"]["sha256"]
    assert rec["skipped_packages"] == {"flashinfer-python": "optional kernels, imported lazily."}
    assert [d["path"] for d in rec["dropped_files"]] == [RS, FA2]  # entry order
    assert rec["host_pins_differ"] == {"numba": "the host's 0.68 serves."}
    assert rec["installed_utc"].endswith("Z")
    # the site's bytecode is compiled at install, beside each module, for this Python
    assert rec["bytecode"]["all_compiled"] is True and rec["bytecode"]["seconds"] >= 0
    tag = sys.implementation.cache_tag
    assert (site / "vllm" / "__pycache__" / f"__init__.{tag}.pyc").is_file()
    assert installed.launchers == {"vllm": prefix / "bin" / "vllm",
                                   "python": prefix / "bin" / "python"}
    assert rec["launcher"] == str(prefix / "bin" / "vllm")  # the one a matrix names
    assert rec["launchers"] == {k: str(v) for k, v in installed.launchers.items()}
    py = run_launcher(prefix / "bin" / "python", "-c", "import vllm, os; print(vllm.__file__);"
                      " print(os.environ['VLLM_USE_FLASHINFER_SAMPLER'])").stdout.splitlines()
    assert py == [str(site / "vllm" / "__init__.py"), "0"]
    again = ep.install(packed.out, prefix)
    assert not again.changed and again.record == rec
    assert again.launcher == installed.launcher and again.launchers == installed.launchers


def test_launcher_text_quotes_and_defaults(packed: ep.PackResult) -> None:
    text = ep.launcher_text(packed.manifest, Path("/opt/my prefix/site"), "/usr/bin/python3",
                            "vllm.entrypoints.cli.main", "main")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "PYTHONPATH='/opt/my prefix/site'${PYTHONPATH:+:$PYTHONPATH}" in lines
    assert ('[ -n "${VLLM_USE_FLASHINFER_SAMPLER:-}" ] || VLLM_USE_FLASHINFER_SAMPLER=0'
            in lines)
    assert lines[-1] == ("exec /usr/bin/python3 -c 'import sys; from vllm.entrypoints.cli.main "
                         "import main; sys.argv[0] = \"vllm\"; sys.exit(main())' \"$@\"")


def test_install_for_another_python_is_refused(world: World, tmp_path: Path) -> None:
    other = world.pack("out-other", python=OTHER)
    with pytest.raises(UserError) as e:
        ep.install(other.out, tmp_path / "p")
    assert e.value.message == (f"--from {other.out} is packed for Python {OTHER}, but "
                               f"{sys.executable} is Python {HERE}")


@pytest.fixture
def copy(packed: ep.PackResult, tmp_path: Path) -> Iterator[Path]:
    dest = tmp_path / "copy"
    shutil.copytree(packed.out, dest)
    yield dest


def test_tampered_part_is_refused(copy: Path, tmp_path: Path) -> None:
    part = copy / "payload.tar.part001"
    data = bytearray(part.read_bytes())
    data[1234] ^= 0x01
    part.write_bytes(bytes(data))
    with pytest.raises(UserError) as e:
        ep.install(copy, tmp_path / "p")
    assert e.value.message.startswith(f"--from {copy}: part payload.tar.part001 has sha256 ")
    assert e.value.hint == "re-copy payload.tar.part001; the copy is damaged"
    assert not (tmp_path / "p").exists()


def test_missing_part_is_refused(copy: Path, tmp_path: Path) -> None:
    (copy / "payload.tar.part002").unlink()
    with pytest.raises(UserError) as e:
        ep.install(copy, tmp_path / "p")
    assert e.value.one_line() == (f"--from {copy}: part payload.tar.part002 is missing (fix: "
                                  "re-copy payload.tar.part002 from the packing machine)")


def test_part_with_extra_bytes_and_stray_part_are_refused(copy: Path, tmp_path: Path) -> None:
    with (copy / "payload.tar.part000").open("ab") as f:
        f.write(b"x")
    with pytest.raises(UserError, match=r"part payload.tar.part000 is 50,001 bytes, pack.json "
                                        r"says 50,000"):
        ep.install(copy, tmp_path / "p")
    (copy / "payload.tar.part999").write_bytes(b"")
    with pytest.raises(UserError, match="payload.tar.part999 is not a part of this pack"):
        ep.install(copy, tmp_path / "p")


def test_identity_records_the_install(world: World, installed: ep.InstallResult) -> None:
    srv = registry.create("vllm", {"binary": str(installed.launcher), "model": "Qwen/Qwen3-8B"},
                          world.root / "server.log")
    assert isinstance(srv, VllmServer)
    ident = srv.identity()
    assert ident.version == "0.26.0" and ident.extra["release"] == "0.26.0"
    assert ident.extra["install"] == json.loads(
        (world.root / "prefix" / "install.json").read_text())
    assert ep.install_record(Path(sys.executable)) is None
    bindir = world.root / "prefix" / "bin"
    assert ep.install_record(bindir / "python") == ident.extra["install"]  # both launchers
    assert ep.install_record(bindir / "pip") is None  # not a launcher of the record


# -- CLI ------------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_install_llama_cpp_with_from_is_a_usage_error(tmp_path: Path) -> None:
    r = invoke("engines", "install", "llama.cpp", "--from", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --from: llama.cpp builds from source, not from an "
                        "engine pack (fix: drop --from; on a host without network use "
                        "--source-archive FILE from `crossbench engines pack-source`)\n")
    r = invoke("engines", "install", "vllm")
    assert r.exit_code == 2
    assert r.stderr.startswith("crossbench: error: vllm installs from an offline pack and "
                               "needs --from (fix: ")
    r = invoke("engines", "install", "sglang", "--cuda", "--from", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr == ("crossbench: error: --cuda: applies to llama.cpp builds, not to "
                        "sglang (fix: drop it; sglang installs from a pack: --from DIR)\n")


def test_cli_pack_prints_parts_and_folder(world: World, packed: ep.PackResult,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBENCH_ENGINES_DIR", str(world.engines_dir))
    out = world.root / "out-cli"
    r = invoke("engines", "pack", "vllm==0.26.0", "--python", HERE, "--against",
               str(world.host), "--out", str(out), "--part-mb", "0.05", "--wheelhouse",
               str(world.wheels))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{out}\n"
    lines = [ln for ln in r.stderr.splitlines() if "payload.tar.part" in ln]
    assert [ln.split()[1] for ln in lines] == [p["name"] for p in packed.manifest["parts"]]
    assert (out / "pack.json").read_bytes() == (packed.out / "pack.json").read_bytes()


# -- SGLang: the interpreter launcher -------------------------------------------------------

SGL_FACTS = """\
schema_version: 1
engine: sglang
releases:
  "0.5.17":
    drop_files:
      sgl_kernel/flash_ops.abi3.so: FA3 kernels of the dependency; triton attention serves.
    add_packages:
      dill: imported at module level but not declared.
    carry_over_host:
      transformers: the engine pins 5.12.1; the host has 5.17.0.
    skip_packages:
      flashinfer-python: optional kernels, imported lazily.
    keep_host:
      torch: never carried.
    env:
      SGLANG_TEST_DEFAULT: {value: packed, reason: a default the user may override.}
"""

SGL_MAIN = """\
import sys


def main() -> int:
    print(f"console argv0={sys.argv[0]} args={sys.argv[1:]}")
    return 0
"""

SGL_LAUNCH = """\
import os
import sys

import sgl_kernel

print(f"launch_server args={sys.argv[1:]} kernel={sgl_kernel.KERNEL}")
print(f"SGLANG_TEST_DEFAULT={os.environ.get('SGLANG_TEST_DEFAULT')}")
"""


@dataclass
class SglWorld:
    """A fake SGLang wheelhouse, its pack, its install and its engines folder."""

    root: Path
    engines_dir: Path
    wheels: Path
    host: Path
    packed: ep.PackResult
    installed: ep.InstallResult


@pytest.fixture(scope="module")
def sgl(tmp_path_factory: pytest.TempPathFactory) -> SglWorld:
    root = tmp_path_factory.mktemp("sglang-pack")
    wheels = root / "wheelhouse"
    wheels.mkdir()
    make_wheel(wheels, "sglang", "0.5.17",
               requires=("sgl-kernel==0.3.21", "torch==2.11.0", "flashinfer-python>=0.6",
                         "transformers==5.12.1"),
               files={"sglang/__init__.py": b'__version__ = "0.5.17"\n',
                      "sglang/cli/__init__.py": b"", "sglang/cli/main.py": SGL_MAIN.encode(),
                      "sglang/launch_server.py": SGL_LAUNCH.encode()},
               entry_points="[console_scripts]\nsglang = sglang.cli.main:main\n")
    make_wheel(wheels, "sgl-kernel", "0.3.21",
               files={"sgl_kernel/__init__.py": b'KERNEL = "fake-0.3.21"\n',
                      "sgl_kernel/flash_ops.abi3.so": random.Random(1).randbytes(80_000)})
    make_wheel(wheels, "dill", "0.4.1")
    make_wheel(wheels, "transformers", "5.12.1",
               files={"transformers/__init__.py": b'__version__ = "5.12.1"\n'})
    host = root / "host.txt"
    host.write_text("torch==2.11.0\ntransformers==5.17.0\n")
    engines_dir = root / "engines"
    (engines_dir / "sglang").mkdir(parents=True)
    (engines_dir / "sglang" / "pack.yaml").write_text(SGL_FACTS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CROSSBENCH_ENGINES_DIR", str(engines_dir))  # facts found as the CLI finds them
        packed = ep.pack("sglang==0.5.17", HERE, host, root / "out", wheelhouse=wheels,
                         part_bytes=PART)
    installed = ep.install(packed.out, root / "prefix", expect_engine="sglang")
    return SglWorld(root, engines_dir, wheels, host, packed, installed)


def test_sglang_pack_carries_the_engine_and_its_dependency(sgl: SglWorld) -> None:
    man = sgl.packed.manifest
    assert man["engine"] == "sglang" and man["release"] == "0.5.17"
    assert {w["project"]: w["version"] for w in man["wheels"]} == {
        "sglang": "0.5.17", "sgl-kernel": "0.3.21", "dill": "0.4.1", "transformers": "5.12.1"}
    assert set(man["host_provided"]) == {"torch"}
    assert set(man["skipped"]) == {"flashinfer-python"}
    assert man["facts"] == {"file": "pack.yaml", "release": "0.5.17"}


def test_sglang_install_prints_the_interpreter_launcher(sgl: SglWorld) -> None:
    prefix = sgl.root / "prefix"
    inst = sgl.installed
    assert inst.changed and inst.launcher == prefix / "bin" / "python"
    assert inst.launchers == {"sglang": prefix / "bin" / "sglang",
                              "python": prefix / "bin" / "python"}
    assert all(os.access(p, os.X_OK) for p in inst.launchers.values())
    rec = json.loads((prefix / "install.json").read_text())
    assert rec == inst.record and rec["engine"] == "sglang"
    assert rec["launcher"] == str(prefix / "bin" / "python")
    assert rec["launchers"] == {"sglang": str(prefix / "bin" / "sglang"),
                                "python": str(prefix / "bin" / "python")}
    assert rec["skipped_packages"] == {"flashinfer-python": "optional kernels, imported lazily."}


def test_sglang_python_launcher_runs_with_the_site_and_env_defaults(sgl: SglWorld) -> None:
    py = sgl.installed.launcher
    version = "import sglang; print(sglang.__version__)"  # what the SGLang adapter runs
    assert run_launcher(py, "-c", version).stdout == "0.5.17\n"
    env = "import os; print(os.environ['SGLANG_TEST_DEFAULT'])"
    assert run_launcher(py, "-c", env).stdout == "packed\n"
    assert run_launcher(py, "-c", env, SGLANG_TEST_DEFAULT="mine").stdout == "mine\n"
    out = run_launcher(py, "-m", "sglang.launch_server", "--port", "1").stdout.splitlines()
    assert out == ["launch_server args=['--port', '1'] kernel=fake-0.3.21",
                   "SGLANG_TEST_DEFAULT=packed"]
    assert run_launcher(py, "-c", "import sys; print(sys.executable)").stdout == (
        f"{sys.executable}\n")  # the interpreter the install was made with
    text = (sgl.root / "prefix" / "bin" / "python").read_text().splitlines()
    assert text[-1] == f'exec {shlex.quote(sys.executable)} "$@"'
    assert '[ -n "${SGLANG_TEST_DEFAULT:-}" ] || SGLANG_TEST_DEFAULT=packed' in text


def test_sglang_console_launcher_runs_the_entry_point(sgl: SglWorld) -> None:
    out = run_launcher(sgl.root / "prefix" / "bin" / "sglang", "serve", "--x").stdout
    assert out == "console argv0=sglang args=['serve', '--x']\n"


def test_sglang_install_record_is_found_from_either_launcher(sgl: SglWorld) -> None:
    rec = sgl.installed.record
    assert ep.install_record(sgl.installed.launchers["python"]) == rec
    assert ep.install_record(sgl.installed.launchers["sglang"]) == rec
    again = ep.install(sgl.packed.out, sgl.root / "prefix")
    assert not again.changed and again.launcher == sgl.installed.launcher


def test_sglang_identity_records_the_install(sgl: SglWorld) -> None:
    srv = registry.create("sglang", {"binary": str(sgl.installed.launcher),
                                     "model": "Qwen/Qwen3-8B", "version": "0.5.17"},
                          sgl.root / "server.log")
    assert isinstance(srv, SglangServer)
    ident = srv.identity()
    assert ident.version == "0.5.17" and ident.extra["release"] == "0.5.17"
    assert ident.binary == str(sgl.installed.launcher)
    assert ident.extra["install"] == sgl.installed.record
    assert ident.extra["install"]["payload_sha256"] == sgl.packed.manifest["payload"]["sha256"]


def test_a_pack_of_another_engine_is_refused(sgl: SglWorld, tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        ep.install(sgl.packed.out, tmp_path / "p", expect_engine="vllm")
    assert e.value.one_line() == (
        f"--from {sgl.packed.out} is a pack of sglang 0.5.17, not of vllm (fix: run "
        f"crossbench engines install sglang --from {sgl.packed.out}, or give a pack of vllm)")
    assert not (tmp_path / "p").exists()


def test_cli_pack_and_install_sglang(sgl: SglWorld, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBENCH_ENGINES_DIR", str(sgl.engines_dir))
    out, prefix = tmp_path / "out", tmp_path / "prefix"
    r = invoke("engines", "pack", "sglang==0.5.17", "--python", HERE, "--against",
               str(sgl.host), "--out", str(out), "--part-mb", "0.05", "--wheelhouse",
               str(sgl.wheels))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{out}\n"
    assert (out / "pack.json").read_bytes() == (sgl.packed.out / "pack.json").read_bytes()
    r = invoke("engines", "install", "sglang", "--from", str(out), "--prefix", str(prefix))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{prefix / 'bin' / 'python'}\n"
    r = invoke("engines", "install", "vllm", "--from", str(out), "--prefix", str(prefix))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"crossbench: error: --from {out} is a pack of sglang 0.5.17, "
                               "not of vllm (fix: ")


def test_sglang_pack_drops_from_a_dependency_adds_and_carries_over_the_host(
        sgl: SglWorld) -> None:
    man = sgl.packed.manifest
    kernel = next(w for w in man["wheels"] if w["project"] == "sgl-kernel")
    assert kernel["size"] < kernel["original_size"] - 70_000  # the 80 kB random file is gone
    assert [(d["wheel"], d["path"]) for d in man["dropped_files"]] == [
        ("sgl-kernel", "sgl_kernel/flash_ops.abi3.so")]
    with zipfile.ZipFile(io.BytesIO(wheel_from_payload(sgl.packed, kernel["name"]))) as zf:
        assert "sgl_kernel/flash_ops.abi3.so" not in zf.namelist()
        assert "flash_ops" not in zf.read("sgl_kernel-0.3.21.dist-info/RECORD").decode()
    dill = next(w for w in man["wheels"] if w["project"] == "dill")
    assert dill["required_by"] == ["pack.yaml: add_packages: dill"]
    assert man["added"] == {"dill": "imported at module level but not declared."}
    assert man["carried_over_host"] == {"transformers": {
        "carried": "5.12.1", "host": "5.17.0",
        "reason": "the engine pins 5.12.1; the host has 5.17.0."}}
    assert "transformers" not in man["host_provided"]
    rec = sgl.installed.record
    assert rec["carried_over_host"] == {"transformers":
                                        "the engine pins 5.12.1; the host has 5.17.0."}
    out = run_launcher(sgl.installed.launchers["python"], "-c",
                       "import transformers; print(transformers.__version__)")
    assert out.stdout.strip() == "5.12.1"  # the carried one, site first


def test_facts_refuse_a_drop_path_no_carried_wheel_has(sgl: SglWorld, tmp_path: Path) -> None:
    facts = tmp_path / "pack.yaml"
    facts.write_text(SGL_FACTS.replace("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/nope.so"))
    with pytest.raises(UserError, match="drop_files sgl_kernel/nope.so is in no carried wheel"):
        ep.pack("sglang==0.5.17", HERE, sgl.host, tmp_path / "out", wheelhouse=sgl.wheels,
                facts_file=facts)


def test_facts_refuse_a_package_both_kept_and_carried_over(tmp_path: Path) -> None:
    facts = tmp_path / "pack.yaml"
    facts.write_text(SGL_FACTS.replace("      torch: never carried.",
                                       "      torch: never carried.\n"
                                       "      transformers: the host's."))
    with pytest.raises(UserError, match="transformers in both keep_host and carry_over_host"):
        ep.load_facts("sglang", "0.5.17", facts)


def test_target_accepts_the_legacy_manylinux_tags() -> None:
    tags = ep.Target.parse("3.12").tags()
    for plat in ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64",
                 "manylinux2014_x86_64", "manylinux_2_39_x86_64"):
        assert Tag("py3", "none", plat) in tags
    assert Tag("py3", "none", "manylinux_2_40_x86_64") not in tags


# -- recut ----------------------------------------------------------------------------------


def test_recut_keeps_the_payload_and_installs_the_same(world: World, packed: ep.PackResult,
                                                       installed: ep.InstallResult,
                                                       tmp_path: Path) -> None:
    """`engines recut`: the same payload bytes in parts of another size, pack.json's parts list
    the only change, and an install from it records the same payload (so the same engine build
    key); a damaged source part is refused before anything is written."""
    out = tmp_path / "recut"
    res = ep.recut(packed.out, out, PART // 3)
    assert payload_bytes(res) == payload_bytes(packed)
    assert {k for k in packed.manifest if packed.manifest[k] != res.manifest[k]} == {"parts"}
    assert len(res.manifest["parts"]) > len(packed.manifest["parts"])
    assert all(p["size"] <= PART // 3 for p in res.manifest["parts"])
    assert json.loads((out / "pack.json").read_text()) == res.manifest
    again = ep.install(out, tmp_path / "prefix")
    assert again.record["payload_sha256"] == installed.record["payload_sha256"]
    assert ep.install(out, world.root / "prefix").changed is False  # the same install
    r = CliRunner().invoke(cli, ["engines", "recut", str(packed.out), "--out",
                                 str(tmp_path / "cli"), "--part-mb", "0.02"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(tmp_path / "cli")
    assert "payload sha256" in r.stderr and "unchanged" in r.stderr
    with pytest.raises(UserError, match="is the pack being cut"):
        ep.recut(out, out, PART)
    bad = tmp_path / "bad"
    shutil.copytree(packed.out, bad)
    part = bad / "payload.tar.part001"
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    with pytest.raises(UserError, match="part payload.tar.part001 has sha256"):
        ep.recut(bad, tmp_path / "never", PART)
    assert not (tmp_path / "never").exists()
