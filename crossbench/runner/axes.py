"""Axis values: lists, or llama-bench style strings (``1,2,4``, ``1-15+2``, ``1-16*2``).

An axis is bounded before anything is expanded, so a careless or hostile range costs nothing:

- at most :data:`MAX_AXIS_VALUES` values per axis. No engine accepts an n above 1024
  (llama.cpp's own bound on its n-gram draft lengths, ``--spec-ngram-mod-n-max`` and
  ``--spec-ngram-*-size-m`` in ``common/arg.cpp``; every other method's limit is lower), so a
  longer n axis must hold values no engine takes, and 1024 values are already 1024 cells per
  arm. A range's size is computed from its bounds, never by listing it;
- every value within +-:data:`MAX_AXIS_VALUE` (2**31 - 1): llama.cpp reads n and the slot
  count as 32-bit ``int``; a larger value can only be a typo;
- duplicates are found with a set, in time linear in the number of values.
"""

from __future__ import annotations

import re

from crossbench.errors import UserError

MAX_AXIS_VALUES = 1024
"""Most values one integer axis (an arm's ``n``, ``axes.concurrency``) may hold."""

MAX_AXIS_VALUE = 2**31 - 1
"""Largest magnitude of an axis value (a 32-bit signed int, as the engines read them)."""

_NUMBER = re.compile(r"-?[0-9]+")
_RANGE = re.compile(r"(-?[0-9]+)-(-?[0-9]+)(?:([+*])([0-9]+))?")
_FORMS = ("write a list such as 1,2,4 or a range such as 1-15+2 (step) or 1-16*2 (factor)")


def _number(text: str, field: str, limit: int = MAX_AXIS_VALUE) -> int:
    """An ASCII integer of magnitude at most ``limit`` (its digits checked before converting,
    so a number of thousands of digits costs nothing)."""
    digits = text.lstrip("-")
    if len(digits) > len(str(limit)) or int(digits) > limit:
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(digits)} digits)"
        raise UserError(f"{field}: {shown} is larger than {MAX_AXIS_VALUE} in magnitude",
                        "use a value an engine can take (n is a few drafted tokens, "
                        "concurrency a number of requests in flight)")
    return int(text)


def _too_many(field: str, what: str, count: int) -> UserError:
    return UserError(f"{field}: {what} has {count} values, more than the {MAX_AXIS_VALUES} an "
                     "axis may hold", "sweep fewer values, e.g. with a step (1-64+4) or a "
                     "factor (1-64*2)")


def _range_size(lo: int, hi: int, op: str, step: int) -> int:
    """How many values ``lo-hi`` with ``+step`` or ``*step`` holds, without listing them."""
    if op == "+":
        return (hi - lo) // step + 1
    count, x = 0, lo
    while x <= hi:  # about 100 rounds at most: x at least doubles and hi <= 10**30
        count += 1
        x *= step
    return count


def parse_int_axis(value: int | str | list[int], field: str) -> list[int]:
    """Expand an integer axis; duplicates are an error, order is kept.

    ``"1,2,4"`` -> [1, 2, 4]; ``"1-15+2"`` -> [1, 3, ..., 15]; ``"1-16*2"`` -> [1, 2, 4, 8, 16].
    Raises UserError naming ``field`` for an unreadable value, an empty or endless range, more
    than :data:`MAX_AXIS_VALUES` values or one beyond :data:`MAX_AXIS_VALUE` (module docstring).
    """
    if isinstance(value, bool):
        raise UserError(f"{field}: {value!r} is not a number", "write e.g. 4, [2, 4] or '1-15+2'")
    if isinstance(value, int):
        return [_number(str(value), field)]
    if isinstance(value, list):
        if len(value) > MAX_AXIS_VALUES:
            raise _too_many(field, "the list", len(value))
        if any(not isinstance(v, int) or isinstance(v, bool) for v in value):
            raise UserError(f"{field}: the list holds a non-integer", "use whole numbers")
        out = [_number(str(v), field) for v in value]
    else:
        out = []
        parts = str(value).replace(" ", "").split(",")
        if len(parts) > 1 and not all(parts):  # "1,,2" or "1,2,": a value left out?
            shown = str(value) if len(str(value)) <= 40 else str(value)[:40] + "..."
            raise UserError(f"{field}: {shown!r} has an empty item between commas",
                            "separate the values with single commas")
        for part in parts:
            if not part:
                continue
            if _NUMBER.fullmatch(part):
                out.append(_number(part, field))
            elif (m := _RANGE.fullmatch(part)) is not None:
                # bounds up to 10**30 are read so that a range's size can be named; values
                # beyond MAX_AXIS_VALUE are refused after the size check
                lo, hi = _number(m[1], field, 10**30), _number(m[2], field, 10**30)
                op, step = m[3] or "+", _number(m[4] or "1", field)
                if hi < lo or step < 1 or (op == "*" and (step < 2 or lo < 1)):
                    raise UserError(f"{field}: range {part!r} is empty or never ends",
                                    "use lo-hi with lo <= hi, a step >= 1, or a factor >= 2 "
                                    "from 1")
                size = _range_size(lo, hi, op, step)
                if size > MAX_AXIS_VALUES:
                    raise _too_many(field, f"range {part!r}", size)
                if len(out) + size > MAX_AXIS_VALUES:
                    raise _too_many(field, "the axis", len(out) + size)
                lo, hi = _number(m[1], field), _number(m[2], field)
                x = lo
                while x <= hi:
                    out.append(x)
                    x = x + step if op == "+" else x * step
            else:
                shown = part if len(part) <= 40 else part[:40] + "..."
                raise UserError(f"{field}: cannot read {shown!r}", _FORMS)
            if len(out) > MAX_AXIS_VALUES:
                raise _too_many(field, "the axis", len(out))
    if not out:
        raise UserError(f"{field}: no values", "give at least one value")
    seen: set[int] = set()
    dup: set[int] = set()
    for v in out:
        (dup if v in seen else seen).add(v)
    if dup:
        raise UserError(f"{field}: {sorted(dup)} listed twice", "list each value once")
    return out
