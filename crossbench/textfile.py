"""Reading a text file the user named, safely: a regular file only, a size limit, UTF-8.

:func:`read_text` never blocks on a named pipe, never reads ``/dev/zero`` without end and
never shows a ``UnicodeDecodeError`` traceback: each refusal is a one-line
:class:`~crossbench.errors.UserError` naming the file, what is wrong with it (its kind, its
size, the byte offset of the first byte that is not UTF-8) and the fix. A UTF-8 byte-order
mark at the start is dropped, as editors on Windows write one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from crossbench.errors import UserError

MIB = 1024 * 1024
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF32_BOMS = (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")  # the LE one starts as UTF-16's


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_regular(path: Path) -> str | None:
    """What ``path`` is in words when it is not a regular file after links are followed (a
    directory, a FIFO, a device, a dangling link), or None for a regular file."""
    try:
        st = path.stat()
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    return None if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def size_text(n: int) -> str:
    """A byte count for messages: ``512 bytes``, ``1.0 MiB``, ``3.2 GiB``."""
    if n < 1024:
        return f"{n} bytes"
    if n < MIB:
        return f"{n / 1024:.1f} KiB"
    if n < 1024 * MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / (1024 * MIB):.1f} GiB"


def read_text(path: Path, what: str, limit: int, fix: str) -> str:
    """The text of ``path``, a regular UTF-8 file of at most ``limit`` bytes.

    ``what`` names the file in messages (``matrix``, ``vllm bench result``); ``fix`` is the
    hint when the file is too large. Example::

        text = read_text(Path("m.yaml"), "matrix", MIB, "split the study into smaller files")
    """
    return decode_text(read_bytes(path, what, limit, fix), path, what)


def _open(path: Path, what: str, fix: Callable[[str], str]) -> tuple[int, os.stat_result]:
    """(descriptor, status) of a regular file ``path``; else a UserError, hint ``fix(kind)``."""
    try:  # non-blocking: opening a named pipe must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}", "check the path") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = _kind(st.st_mode)
        raise UserError(f"{what} {path} is {kind}, not a file", fix(kind))
    return fd, st


def open_regular(path: Path, what: str) -> BinaryIO:
    """``path`` opened for binary reading when it is a regular file (a symbolic link to
    ``/dev/zero``, a FIFO or a directory is a :class:`UserError` naming ``what``, and a FIFO
    never blocks the open)."""
    fd, _ = _open(path, what, lambda _: f"replace it with the {what} itself (a regular file)")
    return os.fdopen(fd, "rb")


def read_bytes(path: Path, what: str, limit: int, fix: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, read once (the
    checks of :func:`read_text`, without the decoding)."""
    fd, st = _open(path, what, lambda kind: f"give the path of the {what} file itself"
                   if kind == "a directory"
                   else f"save the {what} to a regular file and pass that file")
    if st.st_size > limit:
        os.close(fd)
        raise UserError(f"{what} {path} is {size_text(st.st_size)}, over the "
                        f"{size_text(limit)} limit", fix)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise UserError(f"cannot read {what} {path}: {e.strerror}",
                            "check the path") from None
    if len(data) > limit:  # a file that grew, or one whose size the system does not know
        raise UserError(f"{what} {path} is larger than the {size_text(limit)} limit", fix)
    return data


def decode_text(data: bytes, path: Path, what: str) -> str:
    """``data`` (read from ``path``) as UTF-8 text, a leading byte-order mark dropped; bytes
    that are not UTF-8 are a one-line error naming the offset."""
    start = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = start + e.start
        why = ""
        if data.startswith(_UTF32_BOMS):
            why = " (a UTF-32 byte-order mark: the file is UTF-32)"
        elif data.startswith(_UTF16_BOMS):
            why = " (a UTF-16 byte-order mark: the file is UTF-16)"
        raise UserError(f"{what} {path} is not UTF-8: byte 0x{data[offset]:02x} at offset "
                        f"{offset}{why}", "save it as UTF-8") from None
