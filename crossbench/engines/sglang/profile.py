"""Per-release SGLang profiles: ``engines/sglang/X.Y.Z.yaml``, generated from the wheel by
:mod:`crossbench.engines.sglang.tools.profile_gen` (flags of ``launch_server``, speculative
algorithms, ``sglang:*`` metric families, HTTP routes, the torch pin)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crossbench.engines.auth import raw_flag_name
from crossbench.errors import UserError
from crossbench.paths import engines_dir

DEFAULT_VERSION = "0.5.17"
"""The release configs are written for unless they say otherwise: the newest that pins
torch 2.11.0 (the H200 image's torch; docs/sglang.md)."""

STANDIN_SUFFIX = "+crossbench.standin"
"""Local version part of every stand-in version string (``0.5.17+crossbench.standin``)."""


def profiles_dir() -> Path:
    """``engines/sglang`` (``CROSSBENCH_ENGINES_DIR`` overrides the ``engines`` root)."""
    return engines_dir() / "sglang"


def is_standin(version_text: str) -> bool:
    """Whether a version string is crossbench's stand-in's."""
    return version_text.strip().endswith(STANDIN_SUFFIX)


@dataclass(frozen=True)
class SglangProfile:
    """What one SGLang release accepts and exports."""

    version: str
    origin: str
    flags: dict[str, dict[str, Any]]
    algorithms: tuple[str, ...]
    metrics: dict[str, dict[str, str]]
    server_info_paths: tuple[str, ...]
    requires_torch: str | None = None
    routes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        """``SGLang 0.5.17``."""
        return f"SGLang {self.version}"

    @property
    def server_info_path(self) -> str:
        """``/server_info`` where the release serves it, else ``/get_server_info``."""
        return "/server_info" if "/server_info" in self.server_info_paths else \
            "/get_server_info"

    def check_flag(self, flag: str, setting: str) -> None:
        """UserError naming ``setting`` when the release lacks ``flag``."""
        if flag not in self.flags:
            have = [p.version for p in known_profiles() if flag in p.flags]
            raise UserError(f"{setting}: {self.label} has no {flag}",
                            f"releases that have it: {', '.join(have)}; set version to one"
                            if have else f"drop {setting}")
        if self.flags[flag].get("deprecated"):
            raise UserError(f"{setting}: {flag} is deprecated in {self.label}",
                            "use the flag its help names instead")

    def check_raw_flag(self, arg: str) -> None:
        """An ``extra_args`` flag (``--name`` or ``--name=value``) must exist."""
        name = raw_flag_name(arg)
        self.check_flag(name, f"extra_args ({name})")  # never the value: it may be a key


@functools.cache
def _load(path: Path) -> SglangProfile:
    data = yaml.safe_load(path.read_text())
    return SglangProfile(
        version=str(data["version"]), origin=f"{path.name} ({data.get('source', '')})",
        flags=dict(data.get("flags") or {}),
        algorithms=tuple(data.get("speculative_algorithms") or ()),
        metrics=dict(data.get("metrics") or {}),
        server_info_paths=tuple(data.get("server_info_paths") or ()),
        requires_torch=data.get("requires_torch"), routes=tuple(data.get("routes") or ()))


def known_profiles() -> list[SglangProfile]:
    """Every profile in ``engines/sglang`` (files named by a release, such as 0.5.17.yaml;
    not pack.yaml), oldest first."""
    paths = sorted((p for p in profiles_dir().glob("*.yaml") if p.stem[:1].isdigit()),
                   key=lambda p: tuple(int(x) for x in p.stem.split(".") if x.isdigit()))
    return [_load(p) for p in paths]


def profile_for(version: str) -> SglangProfile:
    """The profile of a release; UserError listing the known ones when there is none."""
    path = profiles_dir() / f"{version}.yaml"
    if not path.is_file():
        known = ", ".join(p.version for p in known_profiles())
        raise UserError(f"version: no SGLang profile for {version!r} (known: {known})",
                        "set version to a profiled release, or make its profile: python -m "
                        "crossbench.engines.sglang.tools.profile_gen WHEEL > "
                        f"engines/sglang/{version}.yaml")
    return _load(path)
