"""llama.cpp engine profiles: which flags, spec types and metrics a given build has.

Profiles are declarative files in the repository's ``engines/llama.cpp/``: one generated
``bNNNNN.yaml`` per known build and the hand-written ``options.yaml`` that maps crossbench's
typed options to flag spellings (newest first). A binary whose build has no profile file is
probed live through ``--help`` (and the result says so in ``origin``).
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines.auth import raw_flag_name
from crossbench.errors import RunError, UserError
from crossbench.paths import engines_dir

# "version: 0.5.0-dev (build 11312, commit 0c1e570)" (current) or "version: 4567 (abc1234)"
_VERSION_RE = re.compile(
    r"version:\s*(?:\S+\s*\(build\s*(\d+),\s*commit\s*([0-9a-fA-F]+|unknown)\)"
    r"|(\d+)\s*\(([0-9a-fA-F]+|unknown)\))")
_HELP_FLAG_RE = re.compile(r"^(-[-\w]+(?:,\s*-[-\w]+)*)", re.M)


def profiles_dir() -> Path:
    """Folder of llama.cpp profiles (``CROSSBENCH_ENGINES_DIR`` overrides the checkout's)."""
    return engines_dir() / "llama.cpp"


@dataclass(frozen=True)
class LlamaCppProfile:
    """What one llama.cpp build accepts."""

    build_number: int | None
    commit: str | None
    flags: frozenset[str]
    removed: dict[str, str]
    spec_types: tuple[str, ...]
    metrics: tuple[str, ...]
    origin: str  # "profile:<file>" or "probe:<binary> --help"
    options: dict[str, list[str]] = field(default_factory=dict)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Human name of the build, e.g. ``b11312 (0c1e570)``."""
        b = f"b{self.build_number}" if self.build_number is not None else "unknown build"
        return f"{b} ({self.commit or 'unknown commit'})"

    def flag(self, option: str) -> str:
        """The spelling of a typed option that this build accepts.

        Raises UserError naming the known builds that have the option when this one lacks it.
        """
        spellings = self.options.get(option)
        if spellings is None:
            raise KeyError(f"option {option!r} is not in options.yaml")
        for s in spellings:
            if s in self.flags:
                return s
        have = [p.label for p in known_profiles() if any(s in p.flags for s in spellings)]
        where = f"builds that have it: {', '.join(have)}" if have else "no known build has it"
        raise UserError(
            f"llama-server {self.label} has no flag for `{option}` ({' / '.join(spellings)})",
            f"drop the setting or use another build; {where}",
        )

    def check_raw_flag(self, flag: str) -> None:
        """Validate a user-given raw flag: removed flags name their replacement."""
        name = raw_flag_name(flag)
        if name in self.removed:
            raise UserError(
                f"llama-server {self.label} removed `{name}`",
                self.removed[name],
            )
        if name not in self.flags:
            have = [p.label for p in known_profiles() if name in p.flags]
            close = sorted(f for f in self.flags if f.startswith(name[:8]))[:5]
            if have:
                hint = f"builds that have it: {', '.join(have)}; drop it for this build"
            elif close:
                hint = f"did you mean one of: {', '.join(close)}?"
            else:
                hint = "see `llama-server --help` for this build's flags"
            raise UserError(f"llama-server {self.label} has no flag `{name}`", hint)


@functools.lru_cache(maxsize=1)
def _options_file() -> dict[str, Any]:
    path = profiles_dir() / "options.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _from_dict(d: dict[str, Any], origin: str) -> LlamaCppProfile:
    opts = _options_file()
    return LlamaCppProfile(
        build_number=d.get("build_number"),
        commit=d.get("commit"),
        flags=frozenset(d.get("server_flags", [])),
        removed=dict(d.get("removed_flags", {})),
        spec_types=tuple(d.get("spec_types", [])),
        metrics=tuple(d.get("metrics", [])),
        origin=origin,
        options=opts["options"],
        methods=opts["methods"],
    )


@functools.lru_cache(maxsize=1)
def known_profiles() -> tuple[LlamaCppProfile, ...]:
    """Every generated profile file, oldest build first."""
    out = [_from_dict(yaml.safe_load(p.read_text()), f"profile:{p.name}")
           for p in sorted(profiles_dir().glob("b*.yaml"))]
    return tuple(sorted(out, key=lambda x: x.build_number or 0))


def profile_for_build(build_number: int) -> LlamaCppProfile | None:
    """The profile file of exactly this build, if one exists."""
    return next((p for p in known_profiles() if p.build_number == build_number), None)


def parse_version(text: str) -> tuple[int | None, str | None]:
    """(build number, commit) from ``llama-server --version`` output."""
    m = _VERSION_RE.search(text)
    if not m:
        return None, None
    build = m.group(1) or m.group(3)
    commit = m.group(2) or m.group(4)
    return int(build), (None if commit == "unknown" else commit)


def run_version(binary: Path) -> str:
    """Output of ``binary --version`` (both streams)."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=60, check=False)
    except OSError as e:
        raise UserError(f"cannot run {binary}: {e}",
                        "check that it is an executable llama-server for this machine") from e
    return (out.stdout + out.stderr).strip()


def parse_help(text: str) -> tuple[set[str], dict[str, str], list[str]]:
    """(flags, removed flags with message, spec types) from ``llama-server --help``."""
    flags: set[str] = set()
    removed: dict[str, str] = {}
    lines = text.splitlines()
    spec_types: list[str] = []
    for i, line in enumerate(lines):
        m = _HELP_FLAG_RE.match(line)
        if not m:
            continue
        names = [n.strip() for n in m.group(1).split(",")]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        rest = line[m.end():] + ("" if nxt.lstrip().startswith("-") else " " + nxt)
        if "has been removed" in rest:
            msg = rest.split("has been removed", 1)[1].strip(" .")
            for n in names:
                removed[n] = msg
            continue
        flags.update(names)
        if "--spec-type" in names:
            tm = re.search(r"--spec-type\s+([a-z0-9,-]+)", line)
            if tm:
                spec_types = tm.group(1).split(",")
    return flags, removed, spec_types


def probe_binary(binary: Path) -> LlamaCppProfile:
    """Profile of a binary: its profile file when the build is known, else from ``--help``."""
    build, commit = parse_version(run_version(binary))
    if build is not None and build > 0 and (known := profile_for_build(build)) is not None:
        return known
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                             timeout=60, check=False)
    except OSError as e:
        raise RunError(f"cannot run {binary} --help: {e}", "check the binary") from e
    flags, removed, types = parse_help(out.stdout + out.stderr)
    if "--port" not in flags:
        raise UserError(f"{binary} does not look like llama-server (no --port in --help)",
                        "point `binary:` at llama.cpp's llama-server")
    return _from_dict(
        {"build_number": build, "commit": commit, "server_flags": sorted(flags),
         "removed_flags": removed, "spec_types": types, "metrics": []},
        f"probe:{binary} --help",
    )
