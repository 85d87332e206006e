"""Engine caches packed to travel to the next machine: one gzip tar whose first member is a
JSON manifest, then the cache's entries; read back from the stream's head without unpacking
the whole, and extracted entry by entry where each entry lands, keeping those already there.

vLLM's torch.compile cache (``crossbench engines compile-cache``,
:mod:`crossbench.engines.vllm.startup_cut`) and SGLang's JIT kernel caches (``crossbench
engines kernel-cache``, :mod:`crossbench.engines.sglang.kernel_cache`) are packed this way;
each module names its manifest, its entries and where they go.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from crossbench.errors import UserError


def build_key(version_text: str, binary_sha256: str) -> str:
    """Name of one engine build's cache: the release and 12 hex digits of a hash of the
    version text and ``binary_sha256``. For a launcher that ``crossbench engines install``
    wrote, that is the launcher script's sha256: it names the payload's sha256, the install
    folder and the interpreter, so the same pack installed under another folder or over
    another Python gets another key (the study's devices all install at one path)."""
    release = (version_text.split("+", 1)[0].strip() or "unknown").replace("/", "_")
    ident = json.dumps([version_text, binary_sha256])
    return f"{release}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def binary_build_key(version_text: str, binary: Path) -> str:
    """:func:`build_key` of the executable ``binary`` (links resolved) that answers
    ``version_text``: the key vLLM's compile cache and an SGLang interpreter outside an
    install are filed under."""
    digest = hashlib.sha256(binary.resolve().read_bytes()).hexdigest()
    return build_key(version_text, digest)


def utc_now() -> str:
    """This moment as a manifest's ``created`` stamp (ISO 8601, UTC, whole seconds: the
    strings order as the times do)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Regular files and folders only (a link would be refused when unpacked anyway)."""
    return info if info.isfile() or info.isdir() else None


def write(out: Path, manifest_name: str, manifest: dict[str, Any],
          members: Iterable[tuple[Path, str]]) -> None:
    """Write ``out`` (a .tar.gz): the manifest as member ``manifest_name`` first, then each
    ``(path, name)`` (a folder with everything under it; links left out)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        data = json.dumps(manifest, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(manifest_name)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
        for path, name in members:
            tar.add(path, arcname=name, filter=_plain)


def read_head(path: Path, manifest_name: str, label: str, maker: str,
              extra: tuple[str, ...] = ()) -> tuple[Any, dict[str, bytes]]:
    """A pack's manifest (parsed) and the bodies of the ``extra`` members written before its
    entries, read in one pass over the stream's head (a pack of 100 MB is not decompressed
    whole). UserError, ``label`` first and ``maker`` (the command that makes such a pack) as
    the fix, for anything that is not such a pack."""
    manifest: bytes | None = None
    found: dict[str, bytes] = {}
    fix = f"pass a file made by `{maker}`"
    try:
        with tarfile.open(path, "r|gz") as tar:
            for member in tar:
                if member.name == manifest_name or member.name in extra:
                    f = tar.extractfile(member)
                    body = f.read() if f is not None else b""
                    if member.name == manifest_name:
                        manifest = body
                    else:
                        found[member.name] = body
                elif manifest is not None:  # the entries have begun: the head is read
                    break
                if manifest is not None and len(found) == len(extra):
                    break
        if manifest is None:
            raise UserError(f"{label}: {path} is not a {label} pack (no {manifest_name})", fix)
        return json.loads(manifest), found
    except (OSError, EOFError, tarfile.TarError, json.JSONDecodeError) as e:
        raise UserError(f"{label}: {path} is not a {label} pack ({e})", fix) from e


def check_manifest(data: Any, path: Path, fmt: int, label: str, maker: str) -> dict[str, Any]:
    """``data`` as a manifest of format ``fmt`` naming a build key that can be a folder's
    name; UserError naming what is wrong otherwise."""
    if not isinstance(data, dict) or data.get("format") != fmt \
            or not isinstance(data.get("build_key"), str):
        raise UserError(f"{label}: {path} has no format-{fmt} manifest",
                        f"make it again with this crossbench's `{maker}`")
    key = data["build_key"]
    if "/" in key or key.startswith(".") or not key:
        raise UserError(f"{label}: {path} names build key {key!r}",
                        f"make the pack again with `{maker}`")
    return data


def extract(path: Path, place: Callable[[str], tuple[Path, str] | None], label: str,
            maker: str) -> None:
    """Extract the regular files and folders of a pack that ``place`` maps (member name ->
    the folder it goes under and its name there; None: left out). tarfile's ``data`` filter
    refuses a member that would land outside its folder (UserError) or is a link."""
    with tarfile.open(path, "r:gz") as tar:
        by_root: dict[Path, list[tarfile.TarInfo]] = {}
        for m in tar.getmembers():
            where = place(m.name) if m.isfile() or m.isdir() else None
            if where is not None:
                by_root.setdefault(where[0], []).append(m.replace(name=where[1], deep=False))
        for root, members in by_root.items():
            root.mkdir(parents=True, exist_ok=True)
            try:
                tar.extractall(root, members=members, filter="data")
            except tarfile.FilterError as e:
                raise UserError(f"{label}: {path} holds a member that would land outside "
                                f"{root} ({e})", f"use a pack made by `{maker}`; this one "
                                "was altered") from e
