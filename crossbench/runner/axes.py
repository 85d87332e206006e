"""Axis values: lists, or llama-bench style strings (``1,2,4``, ``1-15+2``, ``1-16*2``)."""

from __future__ import annotations

import re

from crossbench.errors import UserError

_RANGE = re.compile(r"^(-?\d+)-(-?\d+)(?:([+*])(\d+))?$")


def parse_int_axis(value: int | str | list[int], field: str) -> list[int]:
    """Expand an integer axis; duplicates are an error, order is kept.

    ``"1,2,4"`` -> [1, 2, 4]; ``"1-15+2"`` -> [1, 3, ..., 15]; ``"1-16*2"`` -> [1, 2, 4, 8, 16].
    """
    if isinstance(value, bool):
        raise UserError(f"{field}: {value!r} is not a number", "write e.g. 4, [2, 4] or '1-15+2'")
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        out = list(value)
    else:
        out = []
        for part in str(value).replace(" ", "").split(","):
            if not part:
                continue
            if part.lstrip("-").isdigit():
                out.append(int(part))
                continue
            m = _RANGE.match(part)
            if not m:
                raise UserError(f"{field}: cannot read {part!r}",
                                "write a list such as 1,2,4 or a range such as 1-15+2 "
                                "(step) or 1-16*2 (factor)")
            lo, hi, op, step = int(m[1]), int(m[2]), m[3] or "+", int(m[4] or 1)
            if hi < lo or step < 1 or (op == "*" and (step < 2 or lo < 1)):
                raise UserError(f"{field}: range {part!r} is empty or never ends",
                                "use lo-hi with lo <= hi, a step >= 1, or a factor >= 2 from 1")
            x = lo
            while x <= hi:
                out.append(x)
                x = x + step if op == "+" else x * step
    if not out:
        raise UserError(f"{field}: no values", "give at least one value")
    if any(not isinstance(v, int) or isinstance(v, bool) for v in out):
        raise UserError(f"{field}: {value!r} holds a non-integer", "use whole numbers")
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise UserError(f"{field}: {dup} listed twice", "list each value once")
    return out
