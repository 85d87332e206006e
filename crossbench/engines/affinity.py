"""CPU pinning of an engine server: the ``cpus`` setting of every engine config, a Linux CPU
list as ``taskset -c`` takes it (docs/engines.md "Pinning a server to CPUs"). It is set with
``sched_setaffinity`` in the child before exec, so every process and thread the engine starts
inherits it; checked for syntax when the config is read and against the CPUs crossbench may
use when the server starts.
"""

from __future__ import annotations

import itertools
import os

from pydantic import BaseModel, Field, field_validator

from crossbench.errors import UserError


def parse_cpus(text: str) -> frozenset[int]:
    """The CPUs of a Linux CPU list (``"0-3,8,10-11"``); ValueError naming what is wrong."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list: write CPUs and ranges such as "
                             "'2-15' or '0,2,4-7'")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"range {part!r} of {text!r} runs backwards: write {last}-{first}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpus(cpus: frozenset[int]) -> str:
    """A CPU set as a compact Linux CPU list (``{0, 1, 2, 5}`` -> ``"0-2,5"``)."""
    out = []
    for _, group in itertools.groupby(enumerate(sorted(cpus)), lambda ic: ic[1] - ic[0]):
        run = [c for _, c in group]  # consecutive CPUs share cpu - position
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def usable_cpus(text: str, field: str = "cpus") -> frozenset[int]:
    """The CPUs of ``text`` if crossbench may run on all of them; else a UserError that names
    ``field`` and the CPUs available here."""
    want = parse_cpus(text)
    have = frozenset(os.sched_getaffinity(0))
    missing = want - have
    if missing:
        raise UserError(f"{field}: CPU(s) {format_cpus(frozenset(missing))} of {text!r} are not "
                        f"available to crossbench here (available: {format_cpus(have)})",
                        f"set {field} to a list within {format_cpus(have)}, or drop it to let "
                        "the server run on every CPU")
    return want


class CpuSettings(BaseModel):
    """The ``cpus`` field of an engine config (module docstring)."""

    cpus: str | None = Field(
        None, description="Linux CPU list the server's processes run on (e.g. '2-15', as "
        "`taskset -c` takes it); default: every CPU crossbench may use. Keeps the engine's "
        "host work off the load client's CPUs; checked against the CPUs available when the "
        "server starts.")

    @field_validator("cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is not None:
            parse_cpus(value)
        return value
