"""vLLM compile caches and SGLang kernel caches between leases: what one device machine
compiled comes back with the round's files and goes out with the next lease's calls, so that a
configuration started on an earlier machine starts warm (issue 33 item 5; docs/h200-rounds.md
"Compile caches between leases").

A device call returns at most 8 files of 16 MB each, 64 MB together, and carries at most
64 MiB with the working tree, so a pack (``crossbench engines compile-cache pack``) travels in
parts of at most :data:`PART_BYTES`, named ``NAME.pKofN`` (K from 0): a set is whole when
every K below N is there. Three steps and a check, each its own subcommand::

    python3 benchmarks/study/carry.py out PACK OUT_DIR     # on the device: the next parts
    python3 benchmarks/study/carry.py keep FILES_AT DIR    # here, per call: keep the parts
    python3 benchmarks/study/carry.py keep --kernels FILES_AT DIR   # SGLang's kernel caches
    python3 benchmarks/study/carry.py join DIR             # on the device: whole sets joined
    python3 benchmarks/study/carry.py waiting DIR...       # exit 1 while a set lacks parts
    python3 benchmarks/study/carry.py calls                # here: each call's carry list
    python3 benchmarks/study/carry.py lean on|off          # here: examples/ stays behind or not

``out`` cuts PACK once (``PACK.parts/``) and copies into OUT_DIR the next parts that the
call's return limits leave room for beside what OUT_DIR holds already (run.tgz, logs.tgz);
each later call returns the next ones, so a pack larger than one call's return comes back over
several calls (on 2026-12-05 the fits round's cache was 65.7 MB: 6 parts, two calls). ``keep``
gathers a lease's parts in ``DIR/incoming/`` call by call and puts a set in DIR once it is
whole, the newest pack only (after a chained round ``run.sh`` packs again under the next
name). ``calls`` lists what each call of a vLLM lease carries (the pack's parts, then the
compile cache's, as many a call as fit beside the working tree as it is now: 44 MB on
2026-12-05, when two 12 MB cache parts no longer fit beside it). SGLang's kernel caches
(``crossbench engines kernel-cache pack``, ``sglang-kernels.tgz`` on the device) travel the
same way; ``keep --kernels`` keeps only their parts (``keep`` all others), each set in the
folder of its engine build and compute capability (:func:`kernel_key`). Standard library and
git.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import shutil
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any

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
    """Copy into ``out_dir`` the next parts of ``pack`` that fit beside its files.

    The pack is cut once into ``PACK.parts/`` beside it; ``PACK.parts/sent`` lists the parts
    an earlier call returned, so each call returns the next ones, in order, while the call's
    return has room (bytes and files), until every part has gone: a pack larger than one
    call's return travels over several calls. Returns the parts written by this call."""
    stage = _stage(pack, part_bytes)
    sent = _sent(stage)
    held = [p for p in out_dir.iterdir() if p.is_file()]
    used, files = sum(p.stat().st_size for p in held), len(held)
    written = []
    for part in sorted(stage.glob(f"{pack.name}.p*of*"), key=_rank):
        if part.name in sent:
            continue
        size = part.stat().st_size
        if used + size > room_bytes or files + 1 > room_files:
            break
        shutil.copy2(part, out_dir / part.name)
        used, files = used + size, files + 1
        written.append(out_dir / part.name)
        with (stage / "sent").open("a") as f:
            f.write(part.name + "\n")
    return written


def left(pack: Path) -> int:
    """How many parts of ``pack`` (cut by :func:`cut`) no call has returned yet."""
    stage = _stage_dir(pack)
    sent = _sent(stage)
    return sum(1 for p in stage.glob(f"{pack.name}.p*of*") if p.name not in sent)


def _sent(stage: Path) -> set[str]:
    """The parts an earlier call returned (``stage/sent``; a call whose files did not come
    back: delete its lines there and call again)."""
    ledger = stage / "sent"
    return set(ledger.read_text().split()) if ledger.is_file() else set()


def _rank(part: Path) -> int:
    m = _PART.match(part.name)
    assert m is not None
    return int(m["k"])


def _stage_dir(pack: Path) -> Path:
    """Where :func:`cut` keeps the parts of ``pack`` and its ledger: ``PACK.parts/``."""
    return pack.with_name(pack.name + ".parts")


def _stage(pack: Path, part_bytes: int) -> Path:
    """``PACK.parts/`` holding every part of ``pack`` (cut on the first call only)."""
    stage = _stage_dir(pack)
    if (stage / "cut.done").is_file():
        return stage
    if stage.is_dir():
        shutil.rmtree(stage)
    stage.mkdir()
    n = max(1, -(-pack.stat().st_size // part_bytes))
    with pack.open("rb") as src:
        for name in part_names(pack.name, n):
            with (stage / name).open("wb") as f:
                f.write(src.read(part_bytes))
    (stage / "cut.done").write_text(f"{n}\n")
    return stage


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


def whole_sets(folder: Path) -> list[list[Path]]:
    """The sets in ``folder`` whose every part is there, each as its parts in order."""
    return [[parts[k] for k in sorted(parts)] for n, parts in sets(folder).values()
            if n and set(parts) == set(range(n))]


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


def waiting(folder: Path) -> list[str]:
    """The part sets in ``folder`` that some parts of have come and others not yet (one line
    each): a round started now would run cold for the configurations they hold."""
    return [f"{name}: {len(parts)} of {n} parts" for name, (n, parts) in sets(folder).items()
            if n and set(parts) != set(range(n))]


def cache_parts(folder: Path) -> list[Path]:
    """The compile cache's parts in ``folder``, in their order (none where it is no folder)."""
    return sorted((q for q in folder.iterdir() if _PART.match(q.name) and q.is_file()),
                  key=_rank) if folder.is_dir() else []


MANIFEST = "crossbench-compile-cache.json"
"""The member of a pack that names it (``crossbench engines compile-cache pack``)."""
KERNEL_MANIFEST = "crossbench-kernel-cache.json"
"""The member that names a pack of SGLang's kernel caches (``engines kernel-cache pack``)."""
KERNELS = "sglang-kernels"
"""The name ``run.sh`` gives SGLang's kernel-cache packs (``sglang-kernels.tgz``,
``sglang-kernels-2.tgz`` after a chained round): their parts are told from vLLM's by it."""


class _Joined(io.RawIOBase):
    """The parts of a set read in order as one stream, without joining them on disk."""

    def __init__(self, parts: list[Path]) -> None:
        self._parts = iter(parts)
        self._f: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while True:
            if self._f is None:
                nxt = next(self._parts, None)
                if nxt is None:
                    return 0
                self._f = nxt.open("rb")
            n = self._f.readinto(buf)
            if n:
                return int(n)
            self._f.close()
            self._f = None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
        super().close()


def manifest(parts: list[Path]) -> dict[str, Any]:
    """The manifest of the pack whose whole set ``parts`` is (in order); {} where the parts
    hold no readable one. The manifest is the pack's first member, so only the stream's head
    is read."""
    try:
        with _Joined(parts) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            member = next(iter(tar), None)
            f = tar.extractfile(member) if member is not None and \
                member.name in (MANIFEST, KERNEL_MANIFEST) else None
            data = json.loads(f.read()) if f is not None else {}
    except (OSError, EOFError, zlib.error, tarfile.TarError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def created(parts: list[Path]) -> str:
    """When the pack whose whole set ``parts`` is was made: its manifest's ``created`` stamp
    (ISO 8601, UTC, so strings order as times); "" where it has none."""
    stamp = manifest(parts).get("created")
    return stamp if isinstance(stamp, str) else ""


def model_tail(path: str) -> str:
    """A served model's folder as machines share it: the part after the last ``fixtures``
    folder for a crossbench fixture (``qwen3-8b-seed0-v1/hf-target``; each machine's cache
    root differs), else the last two folders."""
    names = [n for n in path.replace("\\", "/").split("/") if n]
    cut = max((i for i, n in enumerate(names) if n == "fixtures"), default=-1)
    return "/".join(names[cut + 1:] if cut >= 0 else names[-2:])


def models(parts: list[Path]) -> set[str]:
    """The models (:func:`model_tail`) a pack's entries were compiled for, by its manifest
    (empty where it names none)."""
    named = manifest(parts).get("models")
    return {model_tail(m) for m in named if isinstance(m, str)} if isinstance(named, list) \
        else set()


UNNAMED = "unnamed"
"""The folder of a pack whose manifest names no model."""


def set_key(tails: set[str]) -> str:
    """The folder a pack of these models (:func:`models`) is kept in: their tails joined, or
    a digest of them where that is long."""
    key = "+".join(sorted(tails)).replace("/", "-")
    if not key:
        return UNNAMED
    return key if len(key) <= 80 else "models-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def kernel_key(parts: list[Path]) -> str:
    """The folder a kernel-cache pack is kept in: its engine build and the CUDA architecture
    its kernels were built for, by its manifest (``0.5.17-0123456789ab-sm90``)."""
    man = manifest(parts)
    key, cap = man.get("build_key"), man.get("compute_cap")
    if not isinstance(key, str) or not isinstance(cap, str) or not key:
        return UNNAMED
    return f"{key}-sm{cap.replace('.', '')}".replace("/", "_").lstrip(".") or UNNAMED


def home_key(parts: list[Path], kernels: bool) -> str:
    """The folder a whole set is kept in: :func:`kernel_key` for SGLang's kernel caches,
    else the models of a vLLM compile cache (:func:`set_key`)."""
    return kernel_key(parts) if kernels else set_key(models(parts))


def held(dest: Path) -> dict[Path, list[Path]]:
    """The whole sets kept in ``dest``: each folder (``dest`` itself, as before 2026-12-06,
    and each model-set folder beside ``incoming/``) -> its parts in order."""
    found = {}
    for folder in [dest, *sorted(d for d in dest.iterdir() if d.is_dir()
                                 and d.name != "incoming")] if dest.is_dir() else []:
        whole = whole_sets(folder)
        if whole:
            found[folder] = max(whole, key=created)
    return found


def keep(files_at: Path, dest: Path, kernels: bool = False) -> list[Path]:
    """Keep the parts a call brought back (``files_at``) in ``dest/incoming/``, where the parts
    of one set gather over the calls of a lease; once a set is whole there, it goes into the
    folder of its models (:func:`set_key`: ``dest/qwen3-8b-seed0-v1-hf-target/``), replacing
    the older pack there (a later pack holds every entry of one it was unpacked over).

    Packs of other models are kept beside it, so a round that carried none of them (a
    MoE round, whose models no kept pack holds) does not drop them; one the new pack's models
    include and that is older is dropped (its entries were carried and packed again). Parts
    kept in ``dest`` itself (before 2026-12-06) move to their models' folder.

    Only the newest pack of a lease is kept (its manifest's ``created``): after a round
    chained on the same machine, ``run.sh`` packs again under the next name
    (``vllm-compile-2.tgz``, every entry so far), and a set of the first pack that completes
    later, or in another call order, never replaces it. A whole set older than what its
    folder holds is dropped. Returns the parts now kept when this call put a set there, else
    none (``dest`` is left as it was).

    ``kernels``: keep SGLang's kernel-cache parts (named :data:`KERNELS`) instead of the
    compile cache's, each set in the folder of its engine build and compute capability
    (:func:`kernel_key`: ``dest/0.5.17-0123456789ab-sm90/``), the newer pack replacing the
    older there; packs of other builds or capabilities stay beside it."""
    brought = [p for p in cache_parts(files_at) if p.name.startswith(KERNELS) == kernels]
    if not brought:
        return []
    incoming = dest / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    for p in brought:
        shutil.copy2(p, incoming / p.name)
    whole = whole_sets(incoming)
    if not whole:
        return []
    stamps = [created(parts) for parts in whole]
    stamp, _, newest = max(zip(stamps, (p[0].name for p in whole), whole, strict=True))
    tails = models(newest)
    home = dest / home_key(newest, kernels)
    kept_sets = held(dest)
    if dest in kept_sets:  # the layout before model folders: move the set to its folder
        legacy = kept_sets.pop(dest)
        folder = dest / home_key(legacy, kernels)
        if folder in kept_sets and created(kept_sets[folder]) >= created(legacy):
            for part in legacy:  # its folder holds a pack as new already
                part.unlink()
        else:
            _place(legacy, folder)
        kept_sets = held(dest)
    superseded = home in kept_sets and created(kept_sets[home]) > stamp
    for parts in whole:  # the older whole sets (and this one, if its folder holds a newer pack)
        if parts is not newest or superseded:
            for part in parts:
                part.unlink()
    kept: list[Path] = []
    if not superseded:
        for folder, parts in kept_sets.items():  # packs this one's models include, older
            if not kernels and folder != home and models(parts) <= tails \
                    and created(parts) < stamp:
                shutil.rmtree(folder)
        kept = _place(newest, home)
    if not any(incoming.iterdir()):
        incoming.rmdir()
    return kept


def _place(parts: list[Path], folder: Path) -> list[Path]:
    """Move the whole set ``parts`` into ``folder`` in place of the files it held; returns
    the parts' new paths."""
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.unlink()
    placed = []
    for part in parts:
        part.replace(folder / part.name)
        placed.append(folder / part.name)
    return placed


CARRY_BYTES = 64 * 2**20
"""What one device call carries: the working tree (tracked files and untracked ones git does not
ignore) and the ``carry`` paths together."""
CARRY_MARGIN = 1_000_000
"""Room kept under :data:`CARRY_BYTES` (the tree may grow by a file between planning and
calling)."""


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    return path.stat().st_size if path.is_file() else \
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def tree_bytes(repo: Path, under: str | None = None) -> int:
    """Bytes of what a device call counts of the checkout against :data:`CARRY_BYTES` besides
    its ``carry``: the files the index tracks, nested git repository or not (on 2026-12-07 a
    call was refused for tracked files under one; :data:`LEAN`), and the untracked files git
    does not ignore, where an untracked nested repository travels without its files (git
    lists it as one folder entry, ``examples/`` while lean, and none of its files counts);
    ``under``: of that folder alone."""
    import subprocess

    names = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard", *([under] if under else [])],
                           capture_output=True, check=True).stdout
    return sum((repo / n).stat().st_size for n in names.decode().split("\0")
               if n and (repo / n).is_file())


LEAN = "examples"
"""The folder ``lean on`` leaves behind a device call: the landed archives and reports, 44.7 MB
of the 57.0 MB tree on 2026-12-07 (which left 9 MB a call for a pack's parts); no round reads
it on the device but one whose command names it (``study.py calls`` refuses those while lean).
The device counts the files the outer repository's index tracks, nested repository or not:
on 2026-12-07 a call with ``examples/`` a nested repository but still in the index was refused
(tree over 64 MiB); with its files out of the index (``git rm -r --cached``) it was accepted,
a 12.2 MB tree with no file under ``examples/``."""
LEAN_MARK = "crossbench-lean"
LEAN_HOOK = "# crossbench lean guard: written by benchmarks/study/carry.py lean on, removed by " \
    "lean off"
"""The line that marks a ``pre-commit`` hook as ``lean on``'s (:func:`lean`)."""


def is_lean(repo: Path) -> bool:
    """Whether ``lean on`` holds: its marker in ``repo/examples/.git``, the nested repository
    it makes (its files are then out of the outer index and a pre-commit hook refuses commits;
    :func:`lean`)."""
    return (repo / LEAN / ".git" / LEAN_MARK).is_file()


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def _hook(repo: Path) -> tuple[Path, bool | None]:
    """The repository's ``pre-commit`` hook (``git rev-parse --git-path hooks``, which honours
    ``core.hooksPath``) and whether ``lean on`` wrote it (None: there is none)."""
    hooks = Path(_git(repo, "rev-parse", "--git-path", "hooks").strip())
    path = (hooks if hooks.is_absolute() else repo / hooks) / "pre-commit"
    if not path.is_file():
        return path, None
    return path, LEAN_HOOK in path.read_text(errors="replace").splitlines()


HOOK_TEXT = f"""#!/bin/sh
{LEAN_HOOK}
# While examples/ is lean its files are out of the index (git rm -r --cached): a commit
# would delete them from the repository. Git runs this at the top of the working tree.
if [ -f {LEAN}/.git/{LEAN_MARK} ]; then
    echo "{LEAN}/ is lean (benchmarks/study/carry.py lean on): run" \\
        "\\`python3 benchmarks/study/carry.py lean off\\` before committing" >&2
    exit 1
fi
exit 0
"""
"""The ``pre-commit`` hook ``lean on`` installs: it refuses every commit while the marker is
there."""


def _uncommitted(repo: Path, then: str) -> None:
    """ValueError when ``git status`` shows changes under ``examples/``."""
    dirty = _git(repo, "status", "--porcelain", "--", LEAN)
    if dirty.strip():
        raise ValueError(f"{LEAN}/ has uncommitted changes ({dirty.splitlines()[0].strip()}"
                         f", ...): {then}; while lean, git does not see new files there")


def lean(repo: Path, on: bool) -> str:
    """Leave ``examples/`` behind device calls (``on``), or take it along again (``off``).

    A device call counts the files the outer repository's index tracks and the untracked ones git
    does not ignore, where an untracked nested git repository travels without its files. So ``on``
    makes ``examples/`` one (an empty ``git init`` with the marker :data:`LEAN_MARK`) and takes its
    files out of the outer index (``git rm -r --cached``: they stay on disk, and ``git status``
    shows them as staged deletions); the nested repository alone is not enough, the device still
    counts the files the index tracks (:data:`LEAN`, measured 2026-12-07). Committing that index
    would delete the examples from the repository, so ``on`` installs a ``pre-commit`` hook
    (:data:`HOOK_TEXT`) that refuses every commit while the marker is there; where a hook crossbench
    did not write is in place it is left alone, and the line returned says that no hook guards the
    commits. ``off`` restores the index (``git reset -- examples``), removes the nested ``.git``
    (only where the marker is) and the hook (only ours). Either may be repeated, and each completes
    a half-done state (the marker there, the index restored or not). While on, the outer git does
    not see new files under ``examples/`` (``land`` would write them there unseen), so ``on`` is
    refused while ``examples/`` has uncommitted changes, and ``study.py land`` refuses while lean.
    One line saying what was done; ValueError naming the fix otherwise."""
    import subprocess

    folder = repo / LEAN
    hook, ours = _hook(repo)
    if not on:
        if not is_lean(repo):
            if ours:
                hook.unlink()
            return f"{LEAN}/ travels with the tree (lean is off)"
        if subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify", "HEAD"],
                          capture_output=True).returncode == 0:
            _git(repo, "reset", "-q", "--", LEAN)
        shutil.rmtree(folder / ".git")
        if ours:
            hook.unlink()
        said = {True: "pre-commit hook removed", None: "no pre-commit hook was there",
                False: f"{hook} is not crossbench's: left in place"}[ours]
        return f"{LEAN}/ travels with the tree again (index restored; {said})"
    was = is_lean(repo)
    if not was:
        if (folder / ".git").exists():
            raise ValueError(f"{folder}/.git is a repository crossbench did not make: move it "
                             "away before `lean on`")
        _uncommitted(repo, "commit them first")
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
        (folder / ".git" / LEAN_MARK).write_text("made by benchmarks/study/carry.py lean on; "
                                                 "`carry.py lean off` removes this .git\n")
    if _git(repo, "ls-files", "--", LEAN).strip():  # first time, or the index restored since
        if was:
            _uncommitted(repo, "`lean off`, commit them, then `lean on`")
        _git(repo, "rm", "-r", "--cached", "-q", "--", LEAN)
    if ours is not False:
        hook.parent.mkdir(parents=True, exist_ok=True)
        hook.write_text(HOOK_TEXT)
        hook.chmod(0o755)
        guard = "a pre-commit hook refuses commits meanwhile"
    else:
        guard = f"NO pre-commit hook installed ({hook} is not crossbench's): commit nothing " \
            "before `lean off`"
    again = "; lean was on already" if was else ""
    return (f"{LEAN}/ stays behind device calls (tree now {tree_bytes(repo)} bytes{again}): "
            f"its files are out of the index until `lean off`; {guard}")


def first_carry(carry_root: Path, wheels: Path) -> list[Path]:
    """What a lease's first call carries besides pack.json: crossbench's wheels and the
    llama.cpp source (``carry_root/llama-cpp-python-*.src.tgz``)."""
    return [wheels, *sorted(carry_root.glob("llama-cpp-python-*.src.tgz"))]


def recut(parts: list[Path], part_bytes: int) -> list[Path]:
    """A whole set (``parts``, in order, one folder) cut again into parts of at most
    ``part_bytes``, in place: joined and checked as :func:`join` does, cut under the same
    name, the old parts removed only once the new ones are written. The set unchanged where
    no part is larger; ValueError where the parts do not join into a gzip tar."""
    if max(q.stat().st_size for q in parts) <= part_bytes:
        return parts
    folder = parts[0].parent
    m = _PART.match(parts[0].name)
    assert m is not None
    work = folder / f".{m['name']}.recut"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    try:
        for q in parts:  # linked, not copied: join reads them once into the whole
            (work / q.name).symlink_to(q.resolve())
        joined, waiting = join(work)
        if not joined:
            raise ValueError(f"{folder}: {'; '.join(waiting)}")
        new = sorted(_stage(joined[0], part_bytes).glob(f"{m['name']}.p*of*"), key=_rank)
        for q in parts:
            q.unlink()
        out = [folder / q.name for q in new]
        for q, dst in zip(new, out, strict=True):
            q.replace(dst)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def split(item: Path, part_bytes: int) -> list[Path]:
    """``item`` cut into parts of at most ``part_bytes`` (``ITEM.parts/ITEM.pKofN``, the
    compile cache's naming, so the device's :func:`join` puts it together and checks it as a
    gzip tar). A cut made before is reused unless its parts are larger or ``item`` is newer."""
    stage = _stage_dir(item)
    done = stage / "cut.done"
    if done.is_file():
        old = list(stage.glob(f"{item.name}.p*of*"))
        if (not old or max(q.stat().st_size for q in old) > part_bytes
                or item.stat().st_mtime > done.stat().st_mtime):
            shutil.rmtree(stage)
    return sorted(_stage(item, part_bytes).glob(f"{item.name}.p*of*"), key=_rank)


SPLIT_ROUND = 1_000_000
"""A split ``first`` item's parts are whole megabytes (below the room a call leaves)."""


def part_room(tree: int, every: list[Path], limit: int = CARRY_BYTES - CARRY_MARGIN) -> int:
    """The bytes one part may have to travel in a call beside the tree and ``every`` (each
    call's pack.json), in whole MB (0 where none is left)."""
    return max(0, (limit - tree - sum(_size(p) for p in every)) // SPLIT_ROUND * SPLIT_ROUND)


def calls(tree: int, first: list[Path], every: list[Path], parts: list[Path],
          limit: int = CARRY_BYTES - CARRY_MARGIN) -> list[list[Path]]:
    """The carry list of each call of a lease: ``first`` (the wheels, the llama.cpp source),
    then ``parts`` (the engine packs' and the compile cache's), in order, as many per call as
    fit beside the tree (``tree`` bytes) and ``every`` (pack.json, which each call's install
    step reads), under ``limit``; a ``first`` item that no longer fits in the first call goes
    to the next (run.sh's setup waits for the source), and a ``first`` file that fits no call
    whole travels as its parts (:func:`split`; run.sh joins the source's). ValueError naming
    the item when a pack's part alone does not fit, or a call leaves a split no whole MB."""
    base = tree + sum(_size(p) for p in every)
    room = (limit - base) // SPLIT_ROUND * SPLIT_ROUND
    items: list[tuple[Path, bool]] = []
    for p in first:
        if p.is_file() and base + _size(p) > limit and room > 0:
            items += [(q, True) for q in split(p, room)]
        else:
            items.append((p, True))
    heads: list[list[Path]] = [[]]
    tails: list[list[Path]] = [[]]
    load = base
    for item, is_first in [*items, *((p, False) for p in parts)]:
        size = _size(item)
        if base + size > limit:
            mb = room // SPLIT_ROUND
            fix = ("shrink the tree or carry the item alone" if is_first else
                   "cut the pack's parts smaller, byte for byte (`crossbench engines recut "
                   f"PACK --out NEW --part-mb {mb}`: {mb} MB fit beside the tree)" if mb > 0
                   else "the tree leaves no whole MB for a part: shrink the tree")
            raise ValueError(f"{item} ({size} bytes) does not fit beside the {tree}-byte tree "
                             f"and {', '.join(map(str, every)) or 'nothing'} under {limit} "
                             f"bytes: {fix}")
        if load + size > limit:
            heads.append([])
            tails.append([])
            load = base
        (heads if is_first else tails)[-1].append(item)
        load += size
    return [[*h, *every, *t] for h, t in zip(heads, tails, strict=True)]


def main(argv: list[str] | None = None) -> int:
    """The subcommands; each prints one line per file or set."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("out", help="cut a pack into parts where the call's return has room")
    o.add_argument("pack", type=Path)
    o.add_argument("out_dir", type=Path)
    k = sub.add_parser("keep", help="keep the part sets a call brought back")
    k.add_argument("files_at", type=Path)
    k.add_argument("dest", type=Path)
    k.add_argument("--kernels", action="store_true", help="SGLang's kernel-cache parts "
                   f"({KERNELS}*) instead of the vLLM compile cache's")
    j = sub.add_parser("join", help="join the whole part sets of a folder")
    j.add_argument("folder", type=Path)
    w = sub.add_parser("waiting", help="exit 1 while a set in the folders lacks parts")
    w.add_argument("folder", type=Path, nargs="+")
    c = sub.add_parser("calls", help="each call's carry list for a vLLM lease, from the tree's "
                       "size now")
    c.add_argument("--pack", type=Path, default=Path(".carry/vllm-0.26.0"),
                   help="the vLLM pack's folder (pack.json and payload.tar.partNNN)")
    c.add_argument("--cache", type=Path,
                   help="the folder of the compile cache's parts (default: the newest pack "
                        "kept in .carry/vllm-compile/; `study.py calls` picks by the round's "
                        "models instead; an empty folder: a cold round)")
    c.add_argument("--first", type=Path, action="append",
                   help="what the first call carries besides pack.json (default: .whl and "
                        "the llama.cpp source .carry/llama-cpp-python-*.src.tgz)")
    ln = sub.add_parser("lean", help="leave examples/ behind device calls (on) or take it "
                        "along again (off)")
    ln.add_argument("state", choices=("on", "off"))
    a = p.parse_args(argv)
    if a.cmd == "lean":
        try:
            print(lean(Path.cwd(), a.state == "on"))
        except ValueError as e:
            print(f"carry.py lean: {e}", file=sys.stderr)
            return 2
        return 0
    if a.cmd == "calls":
        first = a.first or first_carry(Path(".carry"), Path(".whl"))
        kept = held(Path(".carry/vllm-compile"))
        cache = cache_parts(a.cache) if a.cache is not None else \
            max(kept.values(), key=created) if kept else []
        parts = sorted(a.pack.glob("payload.tar.part*")) + cache
        tree = tree_bytes(Path.cwd())
        try:
            plan = calls(tree, first, [a.pack / "pack.json"], parts)
        except ValueError as e:
            print(f"carry.py calls: {e}", file=sys.stderr)
            return 2
        print(f"tree {tree} bytes; {len(plan)} calls, each under {CARRY_BYTES - CARRY_MARGIN} "
              "bytes (BUDGET_S=40 for the first, 20 for the rest, 560 for the last):")
        for i, carried in enumerate(plan, 1):
            total = tree + sum(_size(q) for q in carried)
            print(f"call {i} ({total} bytes): " + ", ".join(f'"{q}"' for q in carried))
        return 0
    if a.cmd == "out":
        parts = cut(a.pack, a.out_dir)
        size, rest = a.pack.stat().st_size, left(a.pack)
        said = (f"{', '.join(q.name for q in parts)} returned" if parts else
                f"no part returned (no room beside {a.out_dir}'s files: a call returns "
                f"{RETURN_FILES} files, {RETURN_BYTES} bytes here)")
        print(f"{a.pack.name}: {size} bytes; {said}; " +
              (f"{rest} part(s) left for the next calls" if rest else "every part returned"))
        return 0
    if a.cmd == "keep":
        got = keep(a.files_at, a.dest, a.kernels)
        what = "kernel-cache" if a.kernels else "compile-cache"
        print(f"kept {len(got)} {what} part(s) in {got[0].parent}" if got else
              f"no set completed by {a.files_at} (parts so far in {a.dest / 'incoming'})")
        return 0
    if a.cmd == "waiting":
        lines = [line for folder in a.folder for line in waiting(folder)]
        for line in lines:
            print(line)
        return 1 if lines else 0
    joined, left_out = join(a.folder)
    for whole in joined:
        print(f"joined {whole}")
    for line in left_out:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
