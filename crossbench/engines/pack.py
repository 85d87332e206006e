"""Offline packs of a pinned engine release, for a GPU host that reaches no package index.

:func:`pack` (needs network unless ``wheelhouse`` is given) resolves ``vllm==X.Y.Z`` and its
requirements for a target Python on ``manylinux`` x86_64 against the host's package list,
slims the engine wheel and writes the wheels as a tar in parts plus ``pack.json``;
:func:`install` (offline, on the host) checks it all and installs it with two launchers and
``install.json`` (docs/vllm-offline.md). Which launcher a matrix's ``binary:`` names is the one
engine-specific fact here (:data:`MATRIX_BINARY`); what a release's pack leaves out, keeps
from the host and sets by default is data: ``engines/<engine>/pack.yaml``.

Example::

    res = pack("vllm==0.26.0", "3.12", Path("engines/hosts/h200-cuda.txt"),
               Path(".carry/vllm-0.26.0"))
    # on the host, after copying the folder:
    inst = install(Path(".carry/vllm-0.26.0"))
    print(inst.launcher)     # ~/.cache/crossbench/engines/vllm-0.26.0-py3.12/bin/vllm
    # sglang==0.5.17 alike; its inst.launcher is .../sglang-0.5.17-py3.12/bin/python
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import email.parser
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import yaml
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from crossbench.errors import CrossbenchError, RunError, UserError
from crossbench.paths import cache_dir, engines_dir
from crossbench.store.atomic import (
    fsync_dir,
    sha256_file,
    temp_name,
    write_bytes_atomic,
    write_json_atomic,
)

#: version of ``pack.json`` and ``install.json``. 1: first version (``install.json`` gained
#: ``launchers`` beside ``launcher`` later; an added key, so readers of 1 are unaffected).
SCHEMA_VERSION = 1
PACK_KIND = "crossbench.engine_pack"
INSTALL_KIND = "crossbench.engine_install"
PACK_FILE = "pack.json"
INSTALL_FILE = "install.json"
FACTS_FILE = "pack.yaml"
PART_PREFIX = "payload.tar.part"
#: one MB of ``--part-mb``: 10^6 bytes
MB = 1_000_000
DEFAULT_PART_MB = 48
#: manylinux_2_5 .. manylinux_2_39 (the H200 image runs Ubuntu 24.04: glibc 2.39)
GLIBC_MINORS = range(5, 40)
#: the legacy manylinux names (PEP 513, 571, 599) and the glibc minor each stands for
LEGACY_MANYLINUX = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
#: packages whose files the host always provides (pip itself installs into the target)
_NEVER_CARRY = frozenset({"pip"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_VALUE = re.compile(r"[A-Za-z0-9_.,:/=+@-]*")
_FIXED_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the zip epoch
_Progress = Callable[[str], None]
#: file name in ``PREFIX/bin`` of the interpreter launcher, and that launcher's kind in
#: :data:`MATRIX_BINARY` (the other kind: ``CONSOLE``)
PYTHON_LAUNCHER, CONSOLE = "python", "console"
MATRIX_BINARY: dict[str, str] = {"vllm": CONSOLE, "sglang": PYTHON_LAUNCHER}
"""Which launcher a matrix's ``binary:`` names, per engine that installs from a pack (and
``engines install`` prints): ``console``, the wheel's console script ``PREFIX/bin/<engine>``
(the vLLM adapter runs ``vllm serve``), or ``python``, the interpreter ``PREFIX/bin/python``
(the SGLang adapter runs ``python -m sglang.launch_server``). An engine not listed gets
``console``. Every install writes both launchers."""


def _quiet(_msg: str) -> None:
    """Progress sink that drops everything."""


# -- facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvDefault:
    """A variable the launcher sets unless the user set it, and why."""

    value: str
    reason: str


@dataclass(frozen=True)
class Constraint:
    """Specifiers a carried package must also meet (as in ``pip -c``), and why."""

    spec: SpecifierSet
    reason: str


@dataclass(frozen=True)
class PackFacts:
    """What one release's pack drops, skips, keeps from the host, constrains and sets
    (``pack.yaml``)."""

    engine: str
    release: str
    source: str
    drop_files: dict[str, str]
    skip_packages: dict[NormalizedName, str]
    keep_host: dict[NormalizedName, str]
    env: dict[str, EnvDefault]
    constraints: dict[NormalizedName, Constraint] = field(default_factory=dict)
    #: requirements the engine imports but does not declare (requirement -> reason)
    add_packages: dict[str, str] = field(default_factory=dict)
    #: host packages carried anyway, at the engine's pin, shadowing the host's for the
    #: launchers only (name -> reason)
    carry_over_host: dict[NormalizedName, str] = field(default_factory=dict)


def facts_path(engine: str) -> Path:
    """``engines/<engine>/pack.yaml`` (``CROSSBENCH_ENGINES_DIR`` overrides ``engines/``)."""
    return engines_dir() / engine / FACTS_FILE


def _str_map(raw: Any, where: str, path: Path) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v.strip()
                                            for v in raw.values()):
        raise UserError(f"{path}: {where} must map names to their reasons",
                        "write `NAME: reason` lines; every entry needs a reason")
    return {str(k): " ".join(v.split()) for k, v in raw.items()}


def load_facts(engine: str, release: str, path: Path | None = None) -> PackFacts:
    """The pack facts of ``engine`` ``release``; UserError naming the file when it has none."""
    path = path or facts_path(engine)
    if not path.is_file():
        raise UserError(f"no pack facts for {engine}: {path} does not exist",
                        f"write {path} with an entry for {release} (engines/vllm/pack.yaml "
                        "shows the format)")
    data = yaml.safe_load(path.read_text()) or {}
    releases = data.get("releases") if isinstance(data, dict) else None
    entry = releases.get(release) if isinstance(releases, dict) else None
    if not isinstance(entry, dict):
        known = ", ".join(sorted(releases)) if isinstance(releases, dict) else "none"
        raise UserError(f"{path} has no entry for {engine} {release} (it has: {known})",
                        f"add releases.\"{release}\" to {path}: drop_files, skip_packages, "
                        "keep_host, constraints and env, each with its reason, checked against "
                        "that wheel")
    unknown = set(entry) - {"checked_against", "drop_files", "skip_packages", "keep_host",
                            "constraints", "env", "add_packages", "carry_over_host"}
    if unknown:
        raise UserError(f"{path}: releases.{release} has unknown keys {sorted(unknown)}",
                        "use drop_files, skip_packages, keep_host, carry_over_host, "
                        "add_packages, constraints, env (and checked_against)")
    add_packages = _str_map(entry.get("add_packages"), "add_packages", path)
    for req in add_packages:
        try:
            Requirement(req)
        except InvalidRequirement as e:
            raise UserError(f"{path}: add_packages.{req} is not a requirement ({e})",
                            "write it like dill or jsonschema>=4") from e
    constraints: dict[NormalizedName, Constraint] = {}
    for name, spec in (entry.get("constraints") or {}).items():
        if not (isinstance(spec, dict) and isinstance(spec.get("spec"), str)
                and isinstance(spec.get("reason"), str)):
            raise UserError(f"{path}: constraints.{name} needs a spec and a reason",
                            f'write {name}: {{spec: "<1.2", reason: "..."}}')
        try:
            constraints[canonicalize_name(str(name))] = Constraint(
                SpecifierSet(spec["spec"]), " ".join(spec["reason"].split()))
        except ValueError as e:
            raise UserError(f"{path}: constraints.{name}: {spec['spec']!r} is not a version "
                            "specifier", 'write it like "<0.2.8" or ">=1,<2"') from e
    env: dict[str, EnvDefault] = {}
    for name, spec in (entry.get("env") or {}).items():
        if not (isinstance(spec, dict) and isinstance(spec.get("value"), str)
                and isinstance(spec.get("reason"), str)):
            raise UserError(f"{path}: env.{name} needs a string value and a reason",
                            f'write {name}: {{value: "0", reason: "..."}}')
        if not _ENV_NAME.fullmatch(str(name)) or not _ENV_VALUE.fullmatch(spec["value"]):
            raise UserError(f"{path}: env.{name}={spec['value']!r} is not a plain variable",
                            "use a shell identifier and a value of letters, digits and ._,:/=+@-")
        env[str(name)] = EnvDefault(spec["value"], " ".join(spec["reason"].split()))
    lists = {key: {canonicalize_name(k): v for k, v in
                   _str_map(entry.get(key), key, path).items()}
             for key in ("skip_packages", "keep_host", "carry_over_host")}
    for a, b in itertools.combinations(lists, 2):
        both = sorted(set(lists[a]) & set(lists[b]))
        if both:
            raise UserError(f"{path}: releases.{release} names {', '.join(both)} in both {a} "
                            f"and {b}", "keep each package in one of them")
    return PackFacts(
        engine=engine, release=release, source=str(path),
        drop_files=_str_map(entry.get("drop_files"), "drop_files", path),
        skip_packages=lists["skip_packages"], keep_host=lists["keep_host"],
        env=env, constraints=constraints, add_packages=add_packages,
        carry_over_host=lists["carry_over_host"])


# -- target and host ------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The environment the wheels are for: CPython ``python`` on manylinux x86_64."""

    python: str

    @classmethod
    def parse(cls, python: str) -> Target:
        """``3.12`` -> Target; UserError for anything else."""
        if not re.fullmatch(r"3\.\d{1,2}", python):
            raise UserError(f"--python {python!r} is not a Python minor version",
                            "give MAJOR.MINOR of the host's python3, e.g. --python 3.12")
        return cls(python)

    def markers(self) -> dict[str, str]:
        """PEP 508 marker values of the target (``extra`` is set per evaluation)."""
        return {"python_version": self.python, "python_full_version": f"{self.python}.0",
                "sys_platform": "linux", "platform_machine": "x86_64",
                "platform_system": "Linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "implementation_version": f"{self.python}.0", "extra": ""}

    def platforms(self) -> list[str]:
        """Platform tags, newest glibc first, then the legacy names (manylinux2014 =
        manylinux_2_17, manylinux2010 = _2_12, manylinux1 = _2_5)."""
        return ([f"manylinux_2_{m}_x86_64" for m in reversed(GLIBC_MINORS)]
                + [f"{name}_x86_64" for name in LEGACY_MANYLINUX])

    def tags(self) -> frozenset[Tag]:
        """Every wheel tag the target accepts."""
        plats = self.platforms()
        version = tuple(map(int, self.python.split(".")))
        return frozenset([*cpython_tags(version, platforms=plats),
                          *compatible_tags(version, f"cp{self.python.replace('.', '')}", plats)])

    def pip_args(self) -> list[str]:
        """``pip download`` options that select wheels for the target."""
        out = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp"]
        for p in self.platforms():
            out += ["--platform", p]
        return out


@dataclass(frozen=True)
class HostPackages:
    """The host's installed packages: canonical name -> version (None: present, unknown)."""

    path: Path
    sha256: str
    versions: dict[NormalizedName, Version | None]


def read_host_list(path: Path) -> HostPackages:
    """Parse ``name==version`` / bare ``name`` lines (``#`` comments) of ``pip list
    --format=freeze``; ``name @ URL`` counts as present with an unknown version."""
    if not path.is_file():
        raise UserError(f"--against {path} does not exist",
                        "give the host's `python3 -m pip list --format=freeze` output, e.g. "
                        "engines/hosts/h200-cuda.txt")
    versions: dict[NormalizedName, Version | None] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*(\S+)|@\s*\S+)?", line)
        if m is None:
            raise UserError(f"--against {path}:{n}: {line!r} is not `name==version` or `name`",
                            "use the lines of `pip list --format=freeze`")
        try:
            versions[canonicalize_name(m.group(1))] = Version(m.group(2)) if m.group(2) else None
        except ValueError as e:
            raise UserError(f"--against {path}:{n}: {m.group(2)!r} is not a version",
                            "fix the line or drop the version") from e
    return HostPackages(path, sha256_file(path), versions)


# -- wheels ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelMeta:
    """What the resolver reads from a wheel: name, version and requirements."""

    path: Path
    name: NormalizedName
    version: Version
    requires: tuple[Requirement, ...]
    requires_python: SpecifierSet | None


def _dist_info_file(zf: zipfile.ZipFile, wheel: Path, name: str) -> str:
    hits = [n for n in zf.namelist()
            if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
            and n.endswith("/" + name)]
    if len(hits) != 1:
        raise UserError(f"{wheel.name}: not a wheel ({len(hits)} */.dist-info/{name} files)",
                        "remove it from the wheel folder, or download it again")
    return hits[0]


def read_wheel_meta(path: Path) -> WheelMeta:
    """Name, version, Requires-Dist and Requires-Python from a wheel's METADATA."""
    try:
        with zipfile.ZipFile(path) as zf:
            text = zf.read(_dist_info_file(zf, path, "METADATA")).decode()
    except zipfile.BadZipFile as e:
        raise UserError(f"{path}: not a zip file ({e})", "delete it and download it again") from e
    msg = email.parser.HeaderParser().parsestr(text)
    try:
        reqs = tuple(Requirement(r) for r in msg.get_all("Requires-Dist") or [])
    except (InvalidRequirement, InvalidMarker) as e:
        raise UserError(f"{path.name}: unreadable Requires-Dist ({e})",
                        "use another release of this package") from e
    rp = msg.get("Requires-Python")
    return WheelMeta(path, canonicalize_name(str(msg["Name"])), Version(str(msg["Version"])),
                     reqs, SpecifierSet(rp) if rp else None)


def read_entry_point(wheel: Path, script: str) -> tuple[str, str]:
    """(module, callable) of console script ``script`` in the wheel's entry_points.txt."""
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(_dist_info_file(zf, wheel, "entry_points.txt")).decode()
    section, value = "", None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip()
        elif section == "console_scripts" and s.partition("=")[0].strip() == script:
            value = s.partition("=")[2]
    if value is None or ":" not in value:
        raise RunError(f"{wheel.name}: entry_points.txt has no console script {script!r}",
                       "pack a wheel of this engine that installs its command")
    module, _, attr = value.strip().partition(":")
    return module.strip(), attr.split("[")[0].strip()


class WheelSource(Protocol):
    """Where the resolver gets the one wheel of ``name`` that satisfies ``spec``."""

    def fetch(self, name: NormalizedName, spec: SpecifierSet) -> Path:
        """A wheel of ``name`` matching ``spec`` for the target; errors name the requirement."""
        ...


@dataclass
class Wheelhouse:
    """A folder of wheels, used as it is (offline)."""

    folder: Path
    target: Target

    def find(self, name: NormalizedName, spec: SpecifierSet) -> Path | None:
        """The newest wheel of ``name`` in the folder that matches ``spec`` and the target."""
        tags = self.target.tags()
        best: tuple[Version, tuple[Any, ...], Path] | None = None
        for p in sorted(self.folder.glob("*.whl")):
            try:
                wname, version, build, wtags = parse_wheel_filename(p.name)
            except InvalidWheelFilename:
                continue
            if wname != name or not spec.contains(version) or not (wtags & tags):
                continue
            if best is not None and (version, build) <= (best[0], best[1]):
                continue
            rp = read_wheel_meta(p).requires_python
            if rp is not None and not rp.contains(f"{self.target.python}.0"):
                continue
            best = (version, tuple(build), p)
        return best[2] if best else None

    def fetch(self, name: NormalizedName, spec: SpecifierSet) -> Path:
        """The wheel from :meth:`find`; UserError naming the requirement when there is none."""
        found = self.find(name, spec)
        if found is None:
            raise UserError(f"--wheelhouse {self.folder}: no wheel of {name}{spec} for "
                            f"CPython {self.target.python} manylinux x86_64",
                            f"add one (pip download --no-deps --only-binary=:all: "
                            f"--python-version {self.target.python} '{name}{spec}'), or pack "
                            "without --wheelhouse to download it")
        return found


@dataclass
class PipDownloader:
    """``pip download`` of one wheel at a time into ``cache`` (kept between packs: pip reuses
    a file that is already there)."""

    cache: Path
    target: Target
    progress: _Progress = _quiet

    def fetch(self, name: NormalizedName, spec: SpecifierSet) -> Path:
        """Download the newest matching wheel (or reuse it from the cache)."""
        self.cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               *self.target.pip_args(), "-d", str(self.cache), f"{name}{spec}"]
        self.progress(f"pip download {name}{spec}")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            last = [ln for ln in out.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise RunError(f"pip download '{name}{spec}' failed: {last[0].strip()}",
                           "check the network and that a wheel exists for CPython "
                           f"{self.target.python} manylinux x86_64")
        found = Wheelhouse(self.cache, self.target).find(name, spec)
        if found is None:
            raise RunError(f"pip download '{name}{spec}' left no matching wheel in {self.cache}",
                           "run the pip command by hand to see what it fetched")
        return found


# -- resolution -----------------------------------------------------------------------------


@dataclass
class ResolvedWheel:
    """A wheel the pack carries and who required it."""

    meta: WheelMeta
    specifier: SpecifierSet
    extras: set[str]
    required_by: list[str]


@dataclass
class HostUse:
    """A requirement the host's package list satisfies."""

    version: Version | None
    required_by: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    extras: set[str] = field(default_factory=set)


@dataclass
class SkipUse:
    """A requirement the pack leaves out on purpose."""

    reason: str
    required_by: list[str] = field(default_factory=list)


@dataclass
class Resolution:
    """Outcome of :func:`resolve`: wheels to carry, host packages used, requirements skipped."""

    wheels: dict[NormalizedName, ResolvedWheel]
    host: dict[NormalizedName, HostUse]
    skipped: dict[NormalizedName, SkipUse]


def _add(seen: list[str], label: str) -> None:
    if label not in seen:
        seen.append(label)


def resolve(roots: Iterable[tuple[Requirement, str]], target: Target, host: HostPackages,
            facts: PackFacts, source: WheelSource, progress: _Progress = _quiet) -> Resolution:
    """Walk Requires-Dist from ``roots`` ((requirement, who asked)) for ``target``.

    A requirement whose marker is false for the target (with the extras asked of its parent)
    is ignored; one the facts skip is recorded; one the host list has is not carried (a known
    host version outside the specifier is a UserError unless the facts keep the host's), unless
    the facts carry it over the host's;
    anything else gets exactly one wheel that also meets the facts' constraint for it, fetched
    again with the combined specifier when a later requirement excludes the chosen version
    (no backtracking: a conflict is a UserError that asks for a constraint).
    """
    env = target.markers()
    res = Resolution({}, {}, {})
    queue = deque((r, who) for r, who in roots if r.marker is None or r.marker.evaluate(env))

    def enqueue(w: ResolvedWheel) -> None:
        """Queue the requirements of ``w`` that its extras make true for the target."""
        who = f"{w.meta.name} {w.meta.version}"
        extras = ("", *sorted(w.extras))
        queue.extend((r, who) for r in w.meta.requires if r.marker is None
                     or any(r.marker.evaluate({**env, "extra": e}) for e in extras))

    while queue:
        req, parent = queue.popleft()  # markers are true: checked when it was queued
        name = canonicalize_name(req.name)
        label = f"{parent}: {req}"
        if name in facts.skip_packages:
            _add(res.skipped.setdefault(name, SkipUse(facts.skip_packages[name])).required_by,
                 label)
            continue
        on_host = name in host.versions and name not in facts.carry_over_host
        if on_host or name in facts.keep_host or name in _NEVER_CARRY:
            if name not in host.versions and name not in _NEVER_CARRY:
                raise UserError(f"--against {host.path}: {facts.source} says the host provides "
                                f"{name}, but the list lacks it ({label})",
                                f"add {name} to {host.path}, or drop it from keep_host")
            hv = host.versions.get(name)
            use = res.host.setdefault(name, HostUse(hv))
            _add(use.required_by, label)
            use.extras |= req.extras
            if hv is not None and not req.specifier.contains(hv, prereleases=True):
                if name not in facts.keep_host:
                    raise UserError(
                        f"--against {host.path}: the host has {name}=={hv}, but {label} "
                        f"needs {name}{req.specifier}",
                        f"add {name} to keep_host in {facts.source} with a reason to use the "
                        f"host's, or remove it from {host.path.name} to carry a matching wheel")
                _add(use.differs, label)
            continue
        current = res.wheels.get(name)
        start = facts.constraints[name].spec if name in facts.constraints else SpecifierSet()
        spec = (current.specifier if current else start) & req.specifier
        if current is not None and spec.contains(current.meta.version, prereleases=True):
            current.specifier = spec
            _add(current.required_by, label)
            if not req.extras <= current.extras:
                current.extras |= req.extras
                enqueue(current)
            continue
        if current is not None:
            progress(f"{name} {current.meta.version} does not satisfy {label}; "
                     f"fetching {name}{spec}")
        try:
            meta = read_wheel_meta(source.fetch(name, spec))
        except CrossbenchError as e:
            if current is None:
                raise
            asked = "; ".join([*current.required_by, label])
            raise UserError(f"no single {name} meets every requirement ({asked}): {e.message}",
                            f"add a constraint to {facts.source} for one of the packages that "
                            "asked, so that their versions agree (pip's resolver would "
                            "backtrack to such a version)") from e
        if meta.name != name or not spec.contains(meta.version, prereleases=True):
            raise RunError(f"{meta.path.name}: is {meta.name} {meta.version}, asked for "
                           f"{name}{spec}", "delete it from the wheel folder and pack again")
        w = ResolvedWheel(meta, spec, set(req.extras) | (current.extras if current else set()),
                          (current.required_by if current else []))
        _add(w.required_by, label)
        res.wheels[name] = w
        enqueue(w)
    return res


# -- slim engine wheel ----------------------------------------------------------------------


@dataclass(frozen=True)
class DroppedFile:
    """A file removed from the engine wheel: why, and how many bytes it took."""

    path: str
    reason: str
    compressed_bytes: int
    size: int


class _ZipWriter:
    """A minimal zip writer that copies already-compressed entries byte for byte, with fixed
    timestamps (1980-01-01), so the output depends only on the input's entries."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.central: list[bytes] = []

    def add(self, name: str, method: int, crc: int, csize: int, size: int, system: int,
            external_attr: int, chunks: Iterable[bytes]) -> None:
        """Write one entry whose (possibly compressed) bytes come from ``chunks``."""
        offset = self.f.tell()
        if max(offset, csize, size) >= 0xFFFFFFFF or len(self.central) >= 0xFFFF:
            raise RunError(f"slim wheel: {name} needs zip64, which crossbench does not write",
                           "drop fewer files, or report this wheel")
        raw = name.encode()
        flags = 0 if name.isascii() else 0x800
        self.f.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, flags, method, 0,
                                 _FIXED_DOS_DATE, crc, csize, size, len(raw), 0) + raw)
        for chunk in chunks:
            self.f.write(chunk)
        self.central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02",
                                         (system << 8) | 20, 20, flags, method, 0,
                                         _FIXED_DOS_DATE, crc, csize, size, len(raw), 0, 0,
                                         0, 0, external_attr, offset) + raw)

    def close(self) -> None:
        """Write the central directory and its end record."""
        start = self.f.tell()
        for entry in self.central:
            self.f.write(entry)
        n, size = len(self.central), self.f.tell() - start
        self.f.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, size, start, 0))


def _raw_chunks(f: BinaryIO, info: zipfile.ZipInfo) -> Iterable[bytes]:
    f.seek(info.header_offset)
    head = f.read(30)
    if head[:4] != b"PK\x03\x04":
        raise RunError(f"{info.filename}: bad local header in the wheel",
                       "download the wheel again")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    f.seek(info.header_offset + 30 + name_len + extra_len)
    left = info.compress_size
    while left:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            raise RunError(f"{info.filename}: the wheel is truncated", "download it again")
        left -= len(chunk)
        yield chunk


def _entry_order(name: str) -> tuple[int, str]:
    """Package files first, then ``*.dist-info/``, RECORD last (as the wheel spec asks)."""
    top = name.split("/", 1)[0]
    if not top.endswith(".dist-info"):
        return 0, name
    return (2 if name == f"{top}/RECORD" else 1), name


def _drops(name: str, path: str) -> bool:
    """Whether drop path ``path`` (a folder ends in ``/``) covers the wheel file ``name``."""
    return name == path or (path.endswith("/") and name.startswith(path))


def slim_wheel(src: Path, dest: Path, drop: dict[str, str]) -> list[DroppedFile]:
    """Copy wheel ``src`` to ``dest`` without the paths of ``drop`` (a folder ends in ``/``)
    and with its RECORD trimmed to match; deterministic (sorted entries, fixed timestamps,
    compressed data copied as it is). Every ``drop`` path must match something."""
    dropped: list[DroppedFile] = []
    used: set[str] = set()
    with zipfile.ZipFile(src) as zf, src.open("rb") as raw:
        record_name = _dist_info_file(zf, src, "RECORD")
        infos = sorted((i for i in zf.infolist() if not i.is_dir()),
                       key=lambda i: _entry_order(i.filename))
        gone = set()
        for info in infos:
            key = next((path for path in drop if _drops(info.filename, path)), None)
            if key is not None:
                used.add(key)
                gone.add(info.filename)
                dropped.append(DroppedFile(info.filename, drop[key], info.compress_size,
                                           info.file_size))
        missing = sorted(set(drop) - used)
        if missing:
            raise UserError(f"{src.name} has no {', '.join(missing)} to drop",
                            "fix drop_files in the pack facts for this release")
        lines = zf.read(record_name).decode().splitlines(keepends=True)
        record = "".join(ln for ln in lines
                         if not ln.strip() or next(csv.reader([ln]))[0] not in gone).encode()
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_name(dest)
        try:
            with tmp.open("wb") as out:
                w = _ZipWriter(out)
                for info in infos:
                    if info.filename in gone:
                        continue
                    if info.filename == record_name:
                        w.add(record_name, zipfile.ZIP_STORED, zlib.crc32(record),
                              len(record), len(record), info.create_system,
                              info.external_attr, [record])
                    else:
                        w.add(info.filename, info.compress_type, info.CRC, info.compress_size,
                              info.file_size, info.create_system, info.external_attr,
                              _raw_chunks(raw, info))
                w.close()
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
    with zipfile.ZipFile(dest) as check:
        bad = check.testzip()
    if bad is not None:
        raise RunError(f"slim wheel {dest.name}: entry {bad} fails its CRC",
                       "report this wheel; pack without drop_files meanwhile")
    return dropped


# -- payload parts --------------------------------------------------------------------------


class _PartWriter:
    """A write-only stream that cuts what it is given into ``payload.tar.partNNN`` files of at
    most ``part_bytes`` each, hashing the parts and the whole."""

    def __init__(self, folder: Path, part_bytes: int) -> None:
        self.folder, self.part_bytes = folder, part_bytes
        self.whole = hashlib.sha256()
        self.parts: list[dict[str, Any]] = []
        self._f: BinaryIO | None = None
        self._path = folder
        self._h = hashlib.sha256()
        self._n = 0

    def _roll(self) -> None:
        self.close()
        name = f"{PART_PREFIX}{len(self.parts):03d}"
        self._path = self.folder / name
        self._f = temp_name(self._path).open("wb")
        self._h, self._n = hashlib.sha256(), 0

    def close(self) -> None:
        """Finish the current part (the last one, when called from outside)."""
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(temp_name(self._path), self._path)
            self.parts.append({"name": self._path.name, "size": self._n,
                               "sha256": self._h.hexdigest()})
            self._f = None

    def write(self, data: bytes) -> int:
        """Append ``data`` to the payload, starting new parts as they fill."""
        view = memoryview(data)
        while view:
            if self._f is None or self._n >= self.part_bytes:
                self._roll()
            assert self._f is not None
            take = view[: self.part_bytes - self._n]
            self._f.write(take)
            self._h.update(take)
            self.whole.update(take)
            self._n += len(take)
            view = view[len(take):]
        return len(data)


def write_payload(wheels: list[Path], folder: Path, part_bytes: int) -> tuple[list[dict[str, Any]],
                                                                              str, int]:
    """One uncompressed, deterministic tar of ``wheels`` (sorted, mtime 0, root-owned, 0644)
    cut into parts in ``folder``: (parts, payload sha256, payload bytes)."""
    writer = _PartWriter(folder, part_bytes)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for p in sorted(wheels, key=lambda x: x.name):
            info = tarfile.TarInfo(p.name)
            info.size, info.mtime, info.mode = p.stat().st_size, 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with p.open("rb") as f:
                tar.addfile(info, f)
    writer.close()
    fsync_dir(folder)
    return writer.parts, writer.whole.hexdigest(), sum(int(p["size"]) for p in writer.parts)


# -- pack -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackResult:
    """What :func:`pack` wrote: the folder and its ``pack.json`` content."""

    out: Path
    manifest: dict[str, Any]


def _drops_by_wheel(drop_files: dict[str, str], wheels: dict[NormalizedName, ResolvedWheel],
                    source: str) -> dict[NormalizedName, dict[str, str]]:
    """``drop_files`` grouped by the one carried wheel each path is in (a folder ends in
    ``/``); UserError for a path that no carried wheel has, or that several have."""
    names: dict[NormalizedName, list[str]] = {}
    for name, w in wheels.items():
        with zipfile.ZipFile(w.meta.path) as zf:
            names[name] = zf.namelist()
    out: dict[NormalizedName, dict[str, str]] = {}
    for path, reason in drop_files.items():
        owners = [n for n, files in names.items() if any(_drops(f, path) for f in files)]
        if len(owners) != 1:
            where = f"is in {', '.join(sorted(owners))}" if owners else "is in no carried wheel"
            raise UserError(f"{source}: drop_files {path} {where}",
                            "give a path inside exactly one carried wheel (check the wheel's "
                            "file list with `unzip -l`)")
        out.setdefault(owners[0], {})[path] = reason
    return out


def parse_pin(req: str) -> tuple[Requirement, NormalizedName, str]:
    """(requirement, engine name, release) of ``vllm==X.Y.Z``; UserError when not exact."""
    try:
        r = Requirement(req)
    except InvalidRequirement as e:
        raise UserError(f"REQ {req!r} is not a requirement ({e})",
                        "write it like vllm==0.26.0") from e
    pins = [s for s in r.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if len(pins) != 1 or len(r.specifier) != 1 or r.marker is not None:
        raise UserError(f"REQ {req!r} does not pin one release",
                        f"pin it exactly, e.g. {r.name}==0.26.0")
    return r, canonicalize_name(r.name), pins[0].version


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file", "give a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / PACK_FILE).exists():
        raise UserError(f"--out {out} is a folder with other files and no {PACK_FILE}",
                        "give an empty or new folder (an earlier pack's folder is replaced)")
    out.mkdir(parents=True, exist_ok=True)
    (out / PACK_FILE).unlink(missing_ok=True)  # a half-written pack never looks complete
    for old in out.glob(f"{PART_PREFIX}*"):
        old.unlink()


def pack(req: str, python: str, against: Path, out: Path, with_reqs: Iterable[str] = (),
         part_bytes: int = DEFAULT_PART_MB * MB, wheelhouse: Path | None = None,
         cache: Path | None = None, facts_file: Path | None = None,
         progress: _Progress = _quiet) -> PackResult:
    """Resolve, slim and write an offline pack of ``req`` (``vllm==X.Y.Z``) into ``out``.

    ``wheelhouse``: use only the wheels in that folder (offline). Otherwise wheels are
    downloaded with pip into ``cache`` (default ``<cache_dir>/wheels``), which pip reuses.
    """
    root, engine, release = parse_pin(req)
    facts = load_facts(engine, release, facts_file)
    target = Target.parse(python)
    host = read_host_list(against)
    if part_bytes < 1024:
        raise UserError(f"--part-mb: parts of {part_bytes} bytes are too small",
                        "use at least 0.01 (MB); the transfer limit is about 50 MB")
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise UserError(f"--wheelhouse {wheelhouse} is not a folder",
                        "give the folder of wheels, or drop --wheelhouse to download")
    roots: list[tuple[Requirement, str]] = [(root, "command line")]
    for extra in with_reqs:
        try:
            roots.append((Requirement(extra), "--with"))
        except InvalidRequirement as e:
            raise UserError(f"--with {extra!r} is not a requirement ({e})",
                            "write it like orjson or gguf>=0.17") from e
    roots += [(Requirement(extra), f"{Path(facts.source).name}: add_packages")
              for extra in facts.add_packages]
    source: WheelSource = (Wheelhouse(wheelhouse, target) if wheelhouse is not None else
                           PipDownloader(cache or cache_dir() / "wheels", target, progress))
    res = resolve(roots, target, host, facts, source, progress)
    if engine not in res.wheels:
        raise UserError(f"{engine} itself is not carried: the host list or {facts.source} "
                        "covers it", f"remove {engine} from {against} and from the pack facts")
    stale = sorted(set(facts.carry_over_host) - set(res.wheels))
    if stale:
        raise UserError(f"{facts.source}: carry_over_host names {', '.join(stale)}, which no "
                        f"requirement of {root} asks for", "drop them from carry_over_host")
    drops = _drops_by_wheel(facts.drop_files, res.wheels, facts.source)
    _prepare_out(out)
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=out) as tmp:
        engine_src = res.wheels[engine].meta.path
        files = {name: w.meta.path for name, w in res.wheels.items()}
        original = {name: sha256_file(path) for name, path in files.items()}  # hashed once
        dropped: list[tuple[NormalizedName, DroppedFile]] = []
        for name, drop in sorted(drops.items()):
            files[name] = Path(tmp) / files[name].name
            dropped += [(name, d) for d in slim_wheel(res.wheels[name].meta.path, files[name],
                                                      drop)]
        wheels: list[dict[str, Any]] = []
        for name, w in sorted(res.wheels.items()):
            p = files[name]
            slimmed = {"original_sha256": original[name],
                       "original_size": w.meta.path.stat().st_size} if name in drops else {}
            wheels.append({"name": p.name, "project": str(name), "version": str(w.meta.version),
                           "sha256": sha256_file(p) if name in drops else original[name],
                           "size": p.stat().st_size,
                           "required_by": w.required_by, **slimmed,
                           **({"extras": sorted(w.extras)} if w.extras else {})})
        progress(f"writing {len(wheels)} wheels ({sum(int(w['size']) for w in wheels):,} bytes)"
                 f" as parts of at most {part_bytes:,} bytes")
        parts, payload_sha, payload_size = write_payload(list(files.values()), out, part_bytes)
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": PACK_KIND, "engine": engine,
        "release": release, "requirement": str(root), "with": [str(r) for r, _ in roots[1:]],
        "python": target.python,
        "target": {"markers": {k: v for k, v in target.markers().items() if k != "extra"},
                   "platforms": target.platforms()},
        "against": {"name": against.name, "sha256": host.sha256},
        "facts": {"file": Path(facts.source).name, "release": release},
        "engine_wheel": {"name": engine_src.name, "original_sha256": original[engine],
                         "original_size": engine_src.stat().st_size},
        "wheels": wheels,
        "skipped": {str(n): {"reason": s.reason, "required_by": s.required_by}
                    for n, s in sorted(res.skipped.items())},
        "host_provided": {str(n): {"version": str(h.version) if h.version else None,
                                   "required_by": h.required_by,
                                   **({"pin_differs": h.differs,
                                       "kept_because": facts.keep_host[n]} if h.differs else {}),
                                   **({"extras_not_checked": sorted(h.extras)}
                                      if h.extras else {})}
                          for n, h in sorted(res.host.items())},
        "dropped_files": [{"wheel": str(n), "path": d.path, "reason": d.reason,
                           "bytes_saved": d.compressed_bytes, "size": d.size}
                          for n, d in dropped],
        "added": dict(sorted(facts.add_packages.items())),
        "carried_over_host": {str(n): {"carried": str(res.wheels[n].meta.version),
                                       "host": str(host.versions[n])
                                       if host.versions.get(n) else None, "reason": why}
                              for n, why in sorted(facts.carry_over_host.items())},
        "constraints": {str(n): {"spec": str(c.spec), "reason": c.reason,
                                 "chosen": str(res.wheels[n].meta.version)
                                 if n in res.wheels else None}
                        for n, c in sorted(facts.constraints.items())},
        "env": {k: {"value": v.value, "reason": v.reason} for k, v in sorted(facts.env.items())},
        "parts": parts,
        "payload": {"sha256": payload_sha, "size": payload_size},
    }
    write_json_atomic(out / PACK_FILE, manifest)
    return PackResult(out, manifest)


def recut(src: Path, out: Path, part_bytes: int, progress: _Progress = _quiet) -> PackResult:
    """Cut the payload of the pack in ``src`` into parts of at most ``part_bytes`` in ``out``,
    byte for byte: no resolution, no network, the same payload sha256 (so the same engine build
    key, and the compile caches made with the first cut still match), a new ``parts`` list in
    ``pack.json`` and nothing else changed. Every source part is checked first
    (:func:`check_parts`); the joined bytes are checked against the recorded payload hash before
    ``pack.json`` is written. ``out`` must not be ``src``."""
    manifest = read_pack_manifest(src)
    check_parts(src, manifest)
    if out.resolve() == src.resolve():
        raise UserError(f"--out {out} is the pack being cut", "give another folder; then "
                        "replace the old one with it")
    _prepare_out(out)
    writer = _PartWriter(out, part_bytes)
    for part in manifest["parts"]:
        with (src / part["name"]).open("rb") as f:
            while chunk := f.read(MB):
                writer.write(chunk)
    writer.close()
    fsync_dir(out)
    whole = writer.whole.hexdigest()
    if whole != manifest["payload"]["sha256"]:  # the parts passed, so only an edited pack.json
        for p in out.glob(f"{PART_PREFIX}*"):
            p.unlink()
        raise UserError(f"--from {src}: its parts join to sha256 {whole[:16]}..., pack.json's "
                        f"payload says {manifest['payload']['sha256'][:16]}...", _UNEDITED)
    new = {**manifest, "parts": writer.parts}
    write_json_atomic(out / PACK_FILE, new)
    progress(f"{len(manifest['parts'])} parts re-cut into {len(writer.parts)} of at most "
             f"{part_bytes:,} bytes; payload sha256 {whole[:16]}... unchanged")
    return PackResult(out, new)


# -- install --------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallResult:
    """Where :func:`install` put the engine, and whether it changed anything. ``launcher`` is
    the one a matrix's ``binary:`` names (:data:`MATRIX_BINARY`); ``launchers`` has every
    launcher by its name in ``PREFIX/bin``."""

    prefix: Path
    launcher: Path
    record: dict[str, Any]
    changed: bool
    launchers: dict[str, Path] = field(default_factory=dict)


def binary_launcher(engine: str) -> str:
    """File name in ``PREFIX/bin`` of the launcher a matrix's ``binary:`` names for
    ``engine``: ``vllm`` for vLLM, ``python`` for SGLang (:data:`MATRIX_BINARY`)."""
    return PYTHON_LAUNCHER if MATRIX_BINARY.get(engine) == PYTHON_LAUNCHER else engine


def record_launchers(record: dict[str, Any]) -> dict[str, Path]:
    """The launchers an ``install.json`` lists, by name (a record written before
    ``launchers`` existed has only ``launcher``)."""
    raw = record.get("launchers")
    if isinstance(raw, dict):
        return {str(k): Path(str(v)) for k, v in raw.items()}
    one = record.get("launcher")
    return {Path(one).name: Path(one)} if isinstance(one, str) else {}


def read_pack_manifest(src: Path) -> dict[str, Any]:
    """``pack.json`` of a pack folder; UserError when it is missing or not a pack."""
    path = src / PACK_FILE
    if not path.is_file():
        raise UserError(f"--from {src} has no {PACK_FILE}",
                        "give the folder that `crossbench engines pack --out` wrote, copied "
                        "whole")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"--from {path} is not JSON ({e})", "re-copy it") from e
    if not isinstance(data, dict) or data.get("kind") != PACK_KIND:
        raise UserError(f"--from {path} is not a crossbench engine pack",
                        "give the folder that `crossbench engines pack --out` wrote")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"--from {path}: schema_version {data.get('schema_version')} is not "
                        f"{SCHEMA_VERSION}", "install it with the crossbench that packed it, "
                        "or pack again with this one")
    _check_names(data, path)
    return data


_UNEDITED = "use the pack.json that `crossbench engines pack` wrote, unedited"
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""A name pack.json may give a file or a folder: no path separator, no ``..``, not hidden."""


def _plain(value: Any, field: str, path: Path) -> None:
    """UserError naming ``field`` of ``path`` unless ``value`` is a :data:`_PLAIN` name: the
    engine, release and Python name the install's folder, parts and wheels name files, so a
    ``../`` in any of them would reach outside the pack or the cache."""
    if not isinstance(value, str) or not _PLAIN.fullmatch(value) or ".." in value:
        shown = repr(value)[:60]
        raise UserError(f"--from {path}: {field} {shown} is not a plain name (a path "
                        "separator, '..' or an empty or hidden name would reach outside the "
                        "pack or the install folder)", _UNEDITED)


def _check_names(data: dict[str, Any], path: Path) -> None:
    """Every name of ``pack.json`` that becomes a path is plain, and its lists are lists of
    records (:func:`_plain`; a hand-edited or hostile pack.json is one line)."""
    for key in ("engine", "release", "python"):
        _plain(data.get(key), key, path)
    for key in ("parts", "wheels"):
        entries = data.get(key)
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise UserError(f"--from {path}: {key} is missing or not a list of records",
                            _UNEDITED)
        for i, entry in enumerate(entries):
            _plain(entry.get("name"), f"{key}[{i}].name", path)
            if key == "parts" and type(entry.get("size")) is not int:
                raise UserError(f"--from {path}: parts[{i}].size {entry.get('size')!r} is not "
                                "a number of bytes", _UNEDITED)
    wheel = data.get("engine_wheel")
    _plain(wheel.get("name") if isinstance(wheel, dict) else None, "engine_wheel.name", path)
    env = data.get("env", {})
    if not isinstance(env, dict):
        raise UserError(f"--from {path}: env is not a record of variables", _UNEDITED)
    for name, spec in env.items():  # names become shell words of the launcher; values quoted
        if not (_ENV_NAME.fullmatch(name) and isinstance(spec, dict)
                and isinstance(spec.get("value"), str) and isinstance(spec.get("reason"), str)):
            raise UserError(f"--from {path}: env {repr(name)[:60]} is not a variable name "
                            "with a string value and reason", _UNEDITED)


def default_prefix(manifest: dict[str, Any]) -> Path:
    """``<cache_dir>/engines/<engine>-<release>-py<python>``."""
    return (cache_dir() / "engines" /
            f"{manifest['engine']}-{manifest['release']}-py{manifest['python']}")


def installed_launcher(engine: str, release: str) -> Path | None:
    """The launcher a matrix's ``binary:`` names (:func:`binary_launcher`) where
    :func:`install` put ``engine`` ``release`` (:func:`default_prefix`), the newest Python's
    where several; None where it is not installed."""
    def python(p: Path) -> list[int]:
        return [int(x) for x in p.parts[-3].rsplit("-py", 1)[1].split(".") if x.isdigit()]

    found = (cache_dir() / "engines").glob(f"{engine}-{release}-py*/bin/"
                                           f"{binary_launcher(engine)}")
    return max(found, key=python, default=None)


def check_parts(src: Path, manifest: dict[str, Any]) -> None:
    """Every listed part present, of its recorded size and sha256; no stray parts."""
    listed = {p["name"] for p in manifest["parts"]}
    for stray in sorted(p.name for p in src.glob(f"{PART_PREFIX}*")):
        if stray not in listed:
            raise UserError(f"--from {src}: {stray} is not a part of this pack "
                            f"({PACK_FILE} lists {len(listed)})",
                            "delete it; it belongs to another pack")
    for part in manifest["parts"]:
        path = src / part["name"]
        if not path.is_file():
            raise UserError(f"--from {src}: part {part['name']} is missing",
                            f"re-copy {part['name']} from the packing machine")
        size = path.stat().st_size
        if size != part["size"]:
            raise UserError(f"--from {src}: part {part['name']} is {size:,} bytes, "
                            f"{PACK_FILE} says {part['size']:,}",
                            f"re-copy {part['name']}; the copy is incomplete or damaged")
        digest = sha256_file(path)
        if digest != part["sha256"]:
            raise UserError(f"--from {src}: part {part['name']} has sha256 {digest[:16]}..., "
                            f"{PACK_FILE} says {part['sha256'][:16]}...",
                            f"re-copy {part['name']}; the copy is damaged")


def _reassemble(src: Path, manifest: dict[str, Any], work: Path) -> list[Path]:
    payload = work / "payload.tar"
    h = hashlib.sha256()
    with payload.open("wb") as out:
        for part in manifest["parts"]:
            with (src / part["name"]).open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != manifest["payload"]["sha256"]:
        raise UserError(f"--from {src}: the reassembled payload's sha256 differs from "
                        f"{PACK_FILE}'s", "re-copy every part and pack.json from one pack")
    expected = {w["name"]: w["sha256"] for w in manifest["wheels"]}
    wheels = work / "wheels"
    wheels.mkdir()
    with tarfile.open(payload) as tar:
        for m in tar.getmembers():
            if not m.isfile() or "/" in m.name or m.name not in expected:
                raise UserError(f"--from {src}: the payload holds {m.name!r}, which "
                                f"{PACK_FILE} does not list", "pack again")
            f = tar.extractfile(m)
            assert f is not None
            with f, (wheels / m.name).open("wb") as dst:
                shutil.copyfileobj(f, dst)
    payload.unlink()
    for name, digest in sorted(expected.items()):
        p = wheels / name
        if not p.is_file() or sha256_file(p) != digest:
            raise UserError(f"--from {src}: wheel {name} is missing from the payload or "
                            "differs from its recorded sha256", "pack again")
    return [wheels / n for n in sorted(expected)]


def _identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``install.json`` that say which pack it came from."""
    return {"engine": manifest["engine"], "release": manifest["release"],
            "python": manifest["python"], "payload_sha256": manifest["payload"]["sha256"]}


def _installed(record_path: Path, manifest: dict[str, Any],
               binary: Path) -> dict[str, Any] | None:
    """The install record at ``record_path`` when it records this pack and this Python, its
    launchers are all there and ``binary`` is one of them."""
    try:
        old = json.loads(record_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    ident = _identity(manifest)
    if not (isinstance(old, dict) and {k: old.get(k) for k in ident} == ident
            and old.get("python_executable") == sys.executable):
        return None
    launchers = record_launchers(old)
    if binary not in launchers.values() or not all(p.is_file() for p in launchers.values()):
        return None
    return old


def _launcher(manifest: dict[str, Any], site: Path, *tail: str) -> str:
    """A POSIX sh launcher: what installed it, PYTHONPATH with ``site`` first, the pack's env
    defaults (each set only when the user has not set it), then the lines ``tail``."""
    engine, release = manifest["engine"], manifest["release"]
    lines = ["#!/bin/sh",
             f"# {engine} {release} installed by `crossbench engines install {engine} --from`",
             f"# (payload sha256 {manifest['payload']['sha256']}); ../{INSTALL_FILE} records "
             "what was carried, dropped and skipped.",
             f"PYTHONPATH={shlex.quote(str(site))}${{PYTHONPATH:+:$PYTHONPATH}}",
             "export PYTHONPATH"]
    for name, spec in sorted(manifest["env"].items()):  # names checked by _check_names
        reason = "".join(c if c.isprintable() else " " for c in spec["reason"][:200])
        lines += [f"# {reason}", f'[ -n "${{{name}:-}}" ] || {name}={shlex.quote(spec["value"])}',
                  f"export {name}"]
    return "\n".join([*lines, *tail, ""])


def launcher_text(manifest: dict[str, Any], site: Path, python: str, module: str,
                  attr: str) -> str:
    """The console-script launcher ``PREFIX/bin/<engine>``: the engine's entry point run by
    ``python`` (:func:`_launcher`)."""
    engine = manifest["engine"]
    code = (f"import sys; from {module} import {attr}; sys.argv[0] = {json.dumps(engine)}; "
            f"sys.exit({attr}())")
    return _launcher(manifest, site,
                     f"# the console script `{engine} = {module}:{attr}` of the wheel",
                     f'exec {shlex.quote(python)} -c {shlex.quote(code)} "$@"')


def python_launcher_text(manifest: dict[str, Any], site: Path, python: str) -> str:
    """The interpreter launcher ``PREFIX/bin/python``: ``python`` with the caller's arguments
    (``bin/python -m sglang.launch_server ...``; :func:`_launcher`)."""
    return _launcher(manifest, site,
                     "# the interpreter the install was made with, the install's site first",
                     f'exec {shlex.quote(python)} "$@"')


def check_prefix(prefix: Path, engine: str) -> None:
    """Refuse an install ``prefix`` crossbench must not write into: a file, or a non-empty
    folder that is not a crossbench install of ``engine`` (its ``install.json``). A new or
    empty folder passes, and so does the leftover of a killed install (only its
    ``.install-*`` work folder)."""
    flag = "--prefix"
    if prefix.exists() and not prefix.is_dir():
        raise UserError(f"{flag} {prefix} is a file", f"give {flag} a new or empty folder")
    if not prefix.is_dir():
        return
    names = sorted(p.name for p in prefix.iterdir() if not p.name.startswith(".install-"))
    if not names:
        return
    record: Any = None
    with contextlib.suppress(OSError, ValueError, RecursionError):
        record = json.loads((prefix / INSTALL_FILE).read_bytes())
    if isinstance(record, dict) and record.get("kind") == INSTALL_KIND:
        if record.get("engine") == engine:
            return
        raise UserError(f"{flag} {prefix} holds a crossbench install of "
                        f"{str(record.get('engine'))[:40]}, not of {engine}",
                        f"give {flag} a new or empty folder for {engine}")
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{flag} {prefix} is not empty ({listed}) and holds no crossbench "
                    f"install ({INSTALL_FILE})", f"give {flag} a new or empty folder "
                    "(crossbench never deletes or overwrites other files)")


def compile_bytecode(site: Path, progress: _Progress = _quiet) -> dict[str, Any]:
    """Byte-compile an installed site once, in parallel, so the engine's first start does not
    compile the modules it imports (a few seconds for vLLM 0.26.0's pack: docs/vllm.md
    "Start-up"). A module
    that does not compile (templates, other Pythons' files) is left to the import, as before:
    ``all_compiled`` says whether any was."""
    progress(f"compiling bytecode in {site}")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(site)],
                         capture_output=True, text=True, check=False)
    return {"all_compiled": out.returncode == 0, "seconds": round(time.monotonic() - t0, 1)}


def install(src: Path, prefix: Path | None = None, force: bool = False,
            progress: _Progress = _quiet, expect_engine: str | None = None) -> InstallResult:
    """Check and install a pack folder: parts, payload and wheels against ``pack.json``, then
    ``pip install --no-index --no-deps --target PREFIX/site`` (its bytecode compiled after,
    :func:`compile_bytecode`), the launchers
    ``PREFIX/bin/<engine>`` and ``PREFIX/bin/python``, and ``PREFIX/install.json``. A no-op
    when ``install.json`` already records this pack. ``expect_engine``: refuse a pack of
    another engine."""
    manifest = read_pack_manifest(src)
    if expect_engine is not None and manifest["engine"] != expect_engine:
        raise UserError(f"--from {src} is a pack of {manifest['engine']} "
                        f"{manifest['release']}, not of {expect_engine}",
                        f"run crossbench engines install {manifest['engine']} --from {src}, or "
                        f"give a pack of {expect_engine}")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        raise UserError(f"--from {src} is packed for Python {manifest['python']}, but "
                        f"{sys.executable} is Python {here}",
                        f"run crossbench with a Python {manifest['python']} interpreter, or "
                        f"pack again with --python {here}")
    prefix = (prefix or default_prefix(manifest)).expanduser().absolute()
    engine = str(manifest["engine"])
    bindir, site, record_path = prefix / "bin", prefix / "site", prefix / INSTALL_FILE
    launchers = {engine: bindir / engine, PYTHON_LAUNCHER: bindir / PYTHON_LAUNCHER}
    launcher = bindir / binary_launcher(engine)
    old = _installed(record_path, manifest, launcher) if site.is_dir() else None
    if old is not None and not force:
        progress(f"{engine} {manifest['release']} is already installed in {prefix}")
        return InstallResult(prefix, launcher, old, changed=False,
                             launchers=record_launchers(old))
    check_prefix(prefix, engine)
    check_parts(src, manifest)
    progress(f"{len(manifest['parts'])} parts match {PACK_FILE}")
    prefix.mkdir(parents=True, exist_ok=True)
    # a record that no pack matches (never a record of a half-replaced install) which still
    # says whose folder this is, so that a killed install can be made again in it
    write_json_atomic(record_path, {"schema_version": SCHEMA_VERSION, "kind": INSTALL_KIND,
                                    "engine": engine, "state": "installing"})
    work = Path(tempfile.mkdtemp(prefix=".install-", dir=prefix))
    try:
        wheels = _reassemble(src, manifest, work)
        progress(f"payload and {len(wheels)} wheels match {PACK_FILE}; installing")
        engine_wheel = work / "wheels" / manifest["engine_wheel"]["name"]
        module, attr = read_entry_point(engine_wheel, engine)
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps",
               "--no-compile", "--disable-pip-version-check", "--target", str(work / "site"),
               *map(str, wheels)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            last = [ln for ln in out.stderr.splitlines() if ln.strip()][-1:] or ["(no output)"]
            raise RunError(f"pip install --target {site} failed: {last[0].strip()}",
                           "see the message; a wheel may not fit this host's Python")
        if site.exists():
            shutil.rmtree(site)
        os.replace(work / "site", site)
        bytecode = compile_bytecode(site, progress)
        texts = {engine: launcher_text(manifest, site, sys.executable, module, attr),
                 PYTHON_LAUNCHER: python_launcher_text(manifest, site, sys.executable)}
        for name, text in texts.items():
            write_bytes_atomic(launchers[name], text.encode())
            launchers[name].chmod(0o755)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": INSTALL_KIND, **_identity(manifest),
        "pack_sha256": sha256_file(src / PACK_FILE),
        "engine_wheel": manifest["engine_wheel"],
        "wheels": {w["name"]: w["sha256"] for w in manifest["wheels"]},
        "dropped_files": manifest["dropped_files"],
        "skipped_packages": {n: s["reason"] for n, s in manifest["skipped"].items()},
        "host_pins_differ": {n: h["kept_because"] for n, h in manifest["host_provided"].items()
                             if "kept_because" in h},
        "constraints": {n: c["spec"] for n, c in manifest.get("constraints", {}).items()},
        "added_packages": manifest.get("added", {}),
        "carried_over_host": {n: c["reason"]
                              for n, c in manifest.get("carried_over_host", {}).items()},
        "env": manifest["env"],
        "against": manifest["against"],
        "python_executable": sys.executable,
        "launcher": str(launcher),
        "launchers": {name: str(path) for name, path in launchers.items()},
        "site": str(site),
        "bytecode": bytecode,
        "installed_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    write_json_atomic(record_path, record)
    return InstallResult(prefix, launcher, record, changed=True, launchers=launchers)


def install_record(binary: Path) -> dict[str, Any] | None:
    """``install.json`` of a crossbench-installed engine when ``binary`` is one of its
    launchers (``PREFIX/bin/vllm``, ``PREFIX/bin/sglang``, ``PREFIX/bin/python`` ->
    ``PREFIX/install.json``), or None for any other binary."""
    path = binary.parent.parent / INSTALL_FILE
    if binary.parent.name != "bin" or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not JSON ({e})",
                        "install the engine again with `crossbench engines install`") from e
    if not isinstance(data, dict) or data.get("kind") != INSTALL_KIND:
        return None
    if binary.name not in {p.name for p in record_launchers(data).values()}:
        return None
    return data
