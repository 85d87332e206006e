"""Engine version constraints of a matrix (``engines.<id>.requires``), checked before a run."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from packaging.version import InvalidVersion, Version

from crossbench.engines.base import EngineIdentity

_OPS: dict[str, Callable[[Version, Version], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
    ">": operator.gt, "<": operator.lt,
}
_CLAUSE = re.compile(r"^(==|!=|>=|<=|>|<)\s*([\w.+-]+)$")


def engine_version(identity: EngineIdentity) -> Version | None:
    """The comparable version of an engine: its build number (llama.cpp), else its version."""
    if identity.build_number is not None:
        return Version(str(identity.build_number))
    m = re.search(r"\d+(\.\d+)*", identity.version)
    try:
        return Version(m.group(0)) if m else None
    except InvalidVersion:
        return None


def unmet(constraint: str, identity: EngineIdentity) -> str | None:
    """Why ``identity`` does not satisfy ``constraint`` (e.g. ``>=11312,<12000``), or None."""
    have = engine_version(identity)
    if have is None:
        return f"{identity.binary} reports no comparable version ({identity.version!r})"
    for clause in constraint.split(","):
        m = _CLAUSE.match(clause.strip())
        if m is None:
            return f"cannot read the constraint {clause.strip()!r}"
        op, want = m.groups()
        if not _OPS[op](have, Version(want)):
            return (f"{identity.kind} {have} (from {identity.binary}) does not satisfy "
                    f"{constraint}")
    return None
