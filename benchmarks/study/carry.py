"""vLLM compile caches between leases: what one device machine compiled comes back with the
round's files and goes out with the next lease's calls, so that a configuration started on an
earlier machine starts warm (issue 33 item 5; docs/h200-rounds.md "Compile caches between
leases").

A device call returns at most 8 files of 16 MB each, 64 MB together, and carries at most
64 MiB with the working tree, so a pack (``crossbench engines compile-cache pack``) travels in
parts of at most :data:`PART_BYTES`, named ``NAME.pKofN`` (K from 0): a set is whole when
every K below N is there. Three steps, each its own subcommand::

    python3 benchmarks/study/carry.py out PACK OUT_DIR     # on the device: cut PACK into OUT_DIR
    python3 benchmarks/study/carry.py keep FILES_AT DIR    # here: keep the parts (`land` does)
    python3 benchmarks/study/carry.py join DIR             # on the device: whole sets joined

``out`` writes the parts only where the call's return limits leave room beside what OUT_DIR
holds already (run.tgz, logs.tgz), else it writes nothing and says so: a lease then starts cold,
as before. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tarfile
import zlib
from pathlib import Path

PART_BYTES = 12_000_000
"""Largest part (a returned file may be 16 MB)."""
RETURN_BYTES = 60_000_000
"""What a call's returned files may hold together, with a margin under the 64 MB limit."""
RETURN_FILES = 8
"""How many files a call returns."""

_PART = re.compile(r"^(?P<name>.+)\.p(?P<k>\d+)of(?P<n>\d+)$")


def part_names(name: str, n: int) -> list[str]:
    """The names of an ``n``-part set of ``name``."""
    return [f"{name}.p{k}of{n}" for k in range(n)]


def cut(pack: Path, out_dir: Path, part_bytes: int = PART_BYTES,
        room_bytes: int = RETURN_BYTES, room_files: int = RETURN_FILES) -> list[Path]:
    """Cut ``pack`` into parts in ``out_dir`` when they fit beside its files; else none.

    Returns the parts written (empty when they would not fit)."""
    size = pack.stat().st_size
    n = max(1, -(-size // part_bytes))
    held = [p for p in out_dir.iterdir() if p.is_file()]
    used = sum(p.stat().st_size for p in held)
    if used + size > room_bytes or len(held) + n > room_files:
        return []
    written = []
    with pack.open("rb") as src:
        for name in part_names(pack.name, n):
            dst = out_dir / name
            with dst.open("wb") as f:
                f.write(src.read(part_bytes))
            written.append(dst)
    return written


def sets(folder: Path) -> dict[str, tuple[int, dict[int, Path]]]:
    """The part sets in ``folder``: name -> (parts expected, {K: part present}). A name
    whose parts disagree on N (two cuts of one name mixed) gets N = 0: never whole."""
    found: dict[str, tuple[int, dict[int, Path]]] = {}
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = _PART.match(p.name)
        if m is None or not p.is_file():
            continue
        n, parts = found.setdefault(m["name"], (int(m["n"]), {}))
        if n != int(m["n"]):
            found[m["name"]] = (0, parts)
        parts[int(m["k"])] = p
    return found


def join(folder: Path) -> tuple[list[Path], list[str]]:
    """Join every whole set in ``folder`` into ``folder/NAME`` (once: a joined file is kept)
    and check that it reads as a gzip tar, its checksum included. Returns (joined files,
    lines on the sets still waiting for parts or refused)."""
    joined, waiting = [], []
    for name, (n, parts) in sets(folder).items():
        missing = sorted(set(range(n)) - set(parts))
        if n == 0:
            mixed = sorted(q.name for q in folder.iterdir()
                           if (m := _PART.match(q.name)) is not None and m["name"] == name)
            waiting.append(f"{name}: parts of cuts into different numbers of parts "
                           f"({', '.join(mixed)}): not joined")
            continue
        if missing:
            waiting.append(f"{name}: {n - len(missing)} of {n} parts, waiting for "
                           f"{', '.join(f'p{k}of{n}' for k in missing)}")
            continue
        whole = folder / name
        if not whole.is_file():
            tmp = folder / f".{name}.tmp"
            with tmp.open("wb") as out:
                for k in range(n):
                    with parts[k].open("rb") as f:
                        shutil.copyfileobj(f, out)
            try:  # the whole gzip stream (its CRC), then the tar's headers
                with gzip.open(tmp, "rb") as g:
                    while g.read(1 << 20):
                        pass
                with tarfile.open(tmp, "r:gz") as tar:
                    tar.getmembers()
            except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
                tmp.unlink()
                waiting.append(f"{name}: its {n} parts do not join into a gzip tar ({e})")
                continue
            tmp.replace(whole)
        joined.append(whole)
    return joined, waiting


def keep(files_at: Path, dest: Path) -> list[Path]:
    """Copy the whole part sets a call brought back into ``dest``, replacing what ``dest``
    held: a later pack holds every entry of the earlier one it was unpacked over. Returns
    the parts kept (none when the call brought no whole set: ``dest`` is left as it was)."""
    whole = [parts for n, parts in sets(files_at).values() if set(parts) == set(range(n))]
    if not whole:
        return []
    if dest.is_dir():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    kept = []
    for parts in whole:
        for k in sorted(parts):
            shutil.copy2(parts[k], dest / parts[k].name)
            kept.append(dest / parts[k].name)
    return kept


def main(argv: list[str] | None = None) -> int:
    """The three subcommands; each prints one line per file or set."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("out", help="cut a pack into parts where the call's return has room")
    o.add_argument("pack", type=Path)
    o.add_argument("out_dir", type=Path)
    k = sub.add_parser("keep", help="keep the part sets a call brought back")
    k.add_argument("files_at", type=Path)
    k.add_argument("dest", type=Path)
    j = sub.add_parser("join", help="join the whole part sets of a folder")
    j.add_argument("folder", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "out":
        parts = cut(a.pack, a.out_dir)
        size = a.pack.stat().st_size
        if not parts:
            print(f"{a.pack.name}: {size} bytes, no room beside {a.out_dir}'s files (a call "
                  f"returns {RETURN_FILES} files, {RETURN_BYTES} bytes here): not returned")
        else:
            print(f"{a.pack.name}: {size} bytes in {len(parts)} part(s): "
                  f"{', '.join(q.name for q in parts)}")
        return 0
    if a.cmd == "keep":
        kept = keep(a.files_at, a.dest)
        print(f"kept {len(kept)} compile-cache part(s) in {a.dest}" if kept else
              f"no whole compile-cache part set in {a.files_at}")
        return 0
    joined, waiting = join(a.folder)
    for w in joined:
        print(f"joined {w}")
    for line in waiting:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
