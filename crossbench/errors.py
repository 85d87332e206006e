"""User-facing errors.

A :class:`UserError` is a mistake in what the user asked for (a missing file, an unknown flag,
a method without its draft model). The CLI prints it as one line and exits with code 2; it never
shows a traceback. A :class:`RunError` is a failure while running (a server that died, a
timeout); the CLI prints it as one line and exits with code 1. Both carry the fix in ``hint``.
"""

from __future__ import annotations

import re
from typing import Any


class CrossbenchError(Exception):
    """Base class of every error crossbench raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and its fix on one line, as the CLI prints it."""
        return f"{self.message} (fix: {self.hint})" if self.hint else self.message

    def __str__(self) -> str:
        return self.one_line()


class UserError(CrossbenchError):
    """Bad input: names the field or file and the fix. Exit code 2."""

    exit_code = 2


class RunError(CrossbenchError):
    """A failure while running an engine or a workload. Exit code 1."""

    exit_code = 1


_UNION_TAG = re.compile(r"(int|str|float|bool|none|bytes|[a-z-]+\[.*\]|function-[a-z-]+"
                        r"|constrained-[a-z-]+|(lax|strict)-[a-z-]+|tagged-union)\Z")
"""A pydantic location part that names a member type of a union (``int`` of ``int | str``,
``list[int]``, ``function-after[...]``), not a field."""


def field_name(loc: Any) -> str:
    """A pydantic error location as a user writes the field: list indexes in brackets and the
    union member types pydantic inserts left out (``("arms", 1, "n", "int")`` ->
    ``arms[1].n``). A part that follows another field and looks like a union tag is dropped."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i and _UNION_TAG.match(str(part)):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def first_validation_error(exc: Any, top: str = "config") -> tuple[str, str, str]:
    """(field, error type, message) of a pydantic ValidationError's first error: the field as a
    user writes it (:func:`field_name`; ``top`` at the root), the message without pydantic's
    "Value error, " prefix."""
    err = exc.errors()[0]
    field = field_name(err["loc"]) or top
    return field, str(err["type"]), str(err["msg"]).removeprefix("Value error, ")
