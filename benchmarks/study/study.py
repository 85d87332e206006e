"""The rounds of the H200 device studies as data: reads benchmarks/study/rounds.yaml and runs a
round's steps (what the one-script-per-round run lists did), prints them (``dry``), or tells
the device driver (benchmarks/study/run.sh) what a round needs (``env``).

Usage (from the repository root)::

    python3 benchmarks/study/study.py list
    python3 benchmarks/study/study.py env ROUND [--part N]
    python3 benchmarks/study/study.py dry ROUND [--part N] [--dir DIR]
    python3 benchmarks/study/study.py run ROUND DIR [--part N]
    python3 benchmarks/study/study.py land ROUND FILES_AT DEST [--part N] [--work DIR]
        [--carry-dir DIR] [--kernel-dir DIR]
    python3 benchmarks/study/study.py plan ROUND [--part N]
    python3 benchmarks/study/study.py calls ROUND [--part N]
    python3 benchmarks/study/study.py wheels [--dest .whl]
    python3 benchmarks/study/study.py room ROUND [--part N] --cache DIR [--min-free-gb G]

``run`` makes the round's variants, starts its sampler, then runs each step as
``python3 -m crossbench matrix MATRIX --out DIR/NAME [--resume] --progress plain
[--only ...] [--skip ...]`` (or, for a ``command`` step, its shell command with ``$dir`` the
run directory) with its output appended to DIR/NAME.log, printing a timestamped
``NAME: start`` and ``NAME: exit RC`` line around each; a matrix step resumes its run
directory when a previous call left one, a command step whose ``DIR/NAME.done`` exists (it
exited 0 on an earlier call) is not run again. A round with ``into_run`` runs its one matrix
straight into DIR.
``plan`` prints what a round costs by ``crossbench plan`` (:func:`plan`); ``land`` turns what
a device call brought back (``run.tgz``, ``logs.tgz``) into verified
archives, reports and datapoints in DEST (:func:`land`); it runs crossbench itself.
``calls`` prints a lease's device calls up to the round's start (:func:`lease_calls`);
``wheels`` downloads the wheels of crossbench's dependencies the GPU image lacks into
``.whl/`` (:data:`HOST_LACKS`, pinned by constraints.txt; needs PyPI). ``room`` removes the
MTP, MoE and dense-twin target folders a round does not name from the machine's fixture cache
when the disk is short (:func:`spare_targets`; a chained round's late setup runs it).
PART defaults to the environment's PART, else 1. ``--steps A,B`` (default: the environment's
STEPS) keeps only the named steps of the round, in the round's order, for a lease too short
for all of them (``env``, ``dry``, ``run`` and ``plan`` alike); an unknown name is refused
with the round's step names. Needs only the standard library and PyYAML (``land`` and
``room`` also crossbench, installed).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROUNDS = Path(__file__).with_name("rounds.yaml")
"""The rounds file the driver reads."""
REPO = Path(__file__).resolve().parents[2]
"""The checkout the driver belongs to (its constraints.txt pins the wheels)."""
CARRY_COMPILE = REPO / ".carry" / "vllm-compile"
"""Where ``land`` keeps the vLLM compile cache a lease brought back (ignored by git: the
next lease's calls carry it; benchmarks/study/carry.py)."""
CARRY_KERNELS = REPO / ".carry" / "sglang-kernels"
"""Where ``land`` keeps SGLang's kernel caches a lease brought back, one folder per engine
build and compute capability (``carry.py kernel_key``; ignored by git)."""

ROUND_KEYS = {"purpose", "kind", "vllm", "sglang", "build", "q4", "drafters", "verify_hf",
              "into_run", "variants", "sampler", "steps", "parts", "matrix", "lanes", "solo",
              "fixtures", "plan"}
PLAN_KEYS = {"timings_from", "setup_s", "setup_from"}
"""A round's ``plan``: the runs or archives whose recorded phases time its cells
(``crossbench plan --from``), and its setup's expected seconds with where that figure comes
from (machine, transfers, builds, fixtures: what ``crossbench plan`` does not count)."""
KINDS = ("cross", "lanes", "sglang-check", "smoke")
"""What the driver does with a round: ``cross`` its steps after the shared setup (the default);
``lanes`` issue 8's study of one matrix split over GPUs (``matrix``, ``lanes``: the --skip
list of each GPU's lane, ``solo``: the --skip list of the occasion check); ``sglang-check``
SGLang's live adapter check; ``smoke`` the first CUDA smoke run of the pipeline."""
STEP_KEYS = {"name", "matrix", "only", "skip", "command"}
FIXTURE_KEYS = {"args", "min_free_gb"}
DEFAULT_FIXTURES = (("make --shape qwen3-8b --hf", 0),)
"""What the setup makes when a round names no ``fixtures``: the qwen3-8b pair in F16 with its
HF folders (each entry: ``crossbench fixtures ARGS``, made only with at least ``min_free_gb``
GB free on the cache's disk)."""
VARIANT_KEYS = {"from", "to", "options"}
FLAGS = ("vllm", "sglang", "build", "q4", "drafters", "verify_hf", "into_run")
DEFAULTS = {"vllm": False, "sglang": False, "build": True, "q4": False, "drafters": False,
            "verify_hf": True, "into_run": False}
"""A round's needs when its entry does not name them."""


class Needs(NamedTuple):
    """What a round needs from the device setup (rounds.yaml's header)."""

    vllm: bool
    sglang: bool
    build: bool
    q4: bool
    drafters: bool
    verify_hf: bool
    into_run: bool


class RoundsError(ValueError):
    """A rounds file entry that does not fit the schema (one line naming the field)."""


@dataclass(frozen=True)
class Step:
    """One ``crossbench matrix`` run of a round, or (``command``) one shell command."""

    name: str | None
    matrix: str | None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    command: str | None = None


@dataclass(frozen=True)
class Round:
    """A round (one part of it, for rounds run in parts) with its needs resolved."""

    name: str
    part: int | None
    purpose: str
    kind: str
    vllm: bool
    sglang: bool
    build: bool
    q4: bool
    drafters: bool
    verify_hf: bool
    into_run: bool
    variants: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    fixtures: tuple[tuple[str, int], ...] = DEFAULT_FIXTURES
    sampler: str | None = None
    steps: tuple[Step, ...] = field(default_factory=tuple)
    matrix: str | None = None
    lanes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    solo: tuple[str, ...] = ()
    timings_from: tuple[str, ...] = ()
    setup_s: int | None = None
    setup_from: str | None = None


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RoundsError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _check_keys(doc: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise RoundsError(f"{where}: expected a mapping, got {doc!r}")
    extra = sorted(set(map(str, doc)) - allowed)
    if extra:
        raise RoundsError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(sorted(allowed))}")
    return doc


def _steps(raw: Any, where: str, into_run: bool) -> tuple[Step, ...]:
    if not isinstance(raw, list) or not raw:
        raise RoundsError(f"{where}.steps: expected a non-empty list of steps")
    out = []
    for i, s in enumerate(raw):
        w = f"{where}.steps[{i}]"
        s = _check_keys(s, STEP_KEYS, w)
        if ("matrix" in s) == ("command" in s):
            raise RoundsError(f"{w}.matrix: name the matrix file the step runs, or give a "
                              "command instead (one of the two)")
        if "command" in s and (into_run or {"only", "skip"} & set(s)):
            raise RoundsError(f"{w}.command: a command step takes no only/skip and cannot run "
                              "into_run; give it a name")
        if not into_run and not s.get("name"):
            raise RoundsError(f"{w}.name: missing; name the step's run directory")
        if "command" in s:
            out.append(Step(s.get("name"), None, command=str(s["command"])))
            continue
        out.append(Step(s.get("name"), str(s["matrix"]), _strs(s.get("only", []), f"{w}.only"),
                        _strs(s.get("skip", []), f"{w}.skip")))
    if into_run and len(out) != 1:
        raise RoundsError(f"{where}.steps: a round with into_run runs exactly one step")
    return tuple(out)


def _resolve(name: str, entry: dict[str, Any], part: int | None) -> Round:
    where = f"rounds.{name}" + (f".parts.{part}" if part is not None else "")
    for k in FLAGS:
        if k in entry and not isinstance(entry[k], bool):
            raise RoundsError(f"{where}.{k}: expected true or false, got {entry[k]!r}")
    if not isinstance(entry.get("purpose"), str) or not entry["purpose"].strip():
        raise RoundsError(f"{where}.purpose: missing; say in one line what the round measures")
    variants = []
    for i, v in enumerate(entry.get("variants", [])):
        v = _check_keys(v, VARIANT_KEYS, f"{where}.variants[{i}]")
        variants.append((str(v["from"]), str(v["to"]),
                         _strs(v.get("options", []), f"{where}.variants[{i}].options")))
    fixtures = []
    for i, f in enumerate(entry.get("fixtures", [])):
        f = _check_keys({"args": f} if isinstance(f, str) else f, FIXTURE_KEYS,
                        f"{where}.fixtures[{i}]")
        if not isinstance(f.get("args"), str) or not isinstance(f.get("min_free_gb", 0), int):
            raise RoundsError(f"{where}.fixtures[{i}]: expected `crossbench fixtures` arguments "
                              "(a string) and an optional min_free_gb (whole GB)")
        fixtures.append((f["args"], int(f.get("min_free_gb", 0))))
    flag = {k: bool(entry.get(k, DEFAULTS[k])) for k in FLAGS}
    needs = Needs(*(flag[k] for k in FLAGS))
    kind = entry.get("kind", "cross")
    if kind not in KINDS:
        raise RoundsError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind != "cross":  # the other kinds' commands live in the driver; their data is here
        lanes = _check_keys(entry.get("lanes", {}), {"gpu0", "gpu1"}, f"{where}.lanes")
        if kind == "lanes" and not isinstance(entry.get("matrix"), str):
            raise RoundsError(f"{where}.matrix: missing; name the matrix the lanes split")
        return Round(name, part, entry["purpose"].strip(), kind, *needs,
                     matrix=entry.get("matrix"),
                     lanes=tuple((k, _strs(v, f"{where}.lanes.{k}")) for k, v in lanes.items()),
                     solo=_strs(entry.get("solo", []), f"{where}.solo"))
    plan = _check_keys(entry.get("plan", {}), PLAN_KEYS, f"{where}.plan")
    setup = plan.get("setup_s")
    if setup is not None and (not isinstance(setup, int) or setup < 0
                              or not isinstance(plan.get("setup_from"), str)):
        raise RoundsError(f"{where}.plan.setup_s: expected whole seconds with setup_from "
                          "saying where the figure comes from")
    return Round(name, part, entry["purpose"].strip(), kind, *needs,
                 variants=tuple(variants), fixtures=tuple(fixtures) or DEFAULT_FIXTURES,
                 sampler=entry.get("sampler"),
                 steps=_steps(entry.get("steps"), where, needs.into_run),
                 timings_from=_strs(plan.get("timings_from", []), f"{where}.plan.timings_from"),
                 setup_s=setup, setup_from=plan.get("setup_from"))


def load_rounds(path: Path = ROUNDS) -> dict[str, dict[str, Any]]:
    """The raw round entries of ``path`` by name, each checked (every part resolved once)."""
    doc = yaml.safe_load(path.read_text())
    rounds = _check_keys(doc, {"rounds"}, str(path)).get("rounds")
    if not isinstance(rounds, dict) or not rounds:
        raise RoundsError(f"{path}: rounds: expected a mapping of round names")
    out = {str(k): _check_keys(v, ROUND_KEYS, f"rounds.{k}") for k, v in rounds.items()}
    for name in out:
        for part in parts(out, name) or [None]:
            get_round(out, name, part)
    return out


def parts(rounds: dict[str, dict[str, Any]], name: str) -> list[int | None]:
    """The part numbers of round ``name`` (empty for a round run whole)."""
    raw = rounds[name].get("parts") or {}
    try:
        return [*sorted(int(p) for p in raw)]
    except ValueError as e:
        raise RoundsError(f"rounds.{name}.parts: part names are numbers 1..N ({e})") from None


def get_round(rounds: dict[str, dict[str, Any]], name: str, part: int | None = None) -> Round:
    """Round ``name`` resolved for ``part`` (a part's keys override the round's; a round run
    in parts defaults to part 1)."""
    if name not in rounds:
        raise RoundsError(f"unknown ROUND {name}; rounds: {', '.join(rounds)}")
    entry = {k: v for k, v in rounds[name].items() if k != "parts"}
    nums = parts(rounds, name)
    if not nums:
        return _resolve(name, entry, None)
    part = part or 1
    if part not in nums:
        raise RoundsError(f"rounds.{name}: no PART={part}; parts: "
                          f"{', '.join(map(str, nums))}")
    raw = {int(k): v for k, v in rounds[name]["parts"].items()}
    sub = _check_keys(raw[part], ROUND_KEYS - {"parts"}, f"rounds.{name}.parts.{part}")
    return _resolve(name, {**entry, **sub}, part)


def _selection(step: Step) -> list[str]:
    """A matrix step's ``--only``/``--skip`` arguments, as `crossbench matrix` and `plan`
    take them."""
    return [a for s in step.only for a in ("--only", s)] + \
        [a for s in step.skip for a in ("--skip", s)]


def step_argv(step: Step, out: str, resume: bool, into_run: bool) -> list[str]:
    """The ``crossbench matrix`` command line of ``step`` writing to ``out``. The option order
    is the one the former run lists used (round 1's: its selection before --progress)."""
    if step.matrix is None:
        raise RoundsError(f"step {step.name}: a command step has no matrix command line")
    sel = _selection(step)
    head = ["python3", "-m", "crossbench", "matrix", step.matrix, "--out", out]
    res = ["--resume"] if resume else []
    if into_run:
        return head + res + sel + ["--progress", "plain"]
    return head + res + ["--progress", "plain"] + sel


def _sub(text: str, run_dir: str) -> str:
    return text.replace("$dir", run_dir)


def commands(r: Round, run_dir: str) -> list[list[str]]:
    """Every command ``run`` starts for round ``r`` in ``run_dir``, in order (the sampler's
    ends in ``&``: it runs beside the steps)."""
    out: list[list[str]] = []
    for src, dst, opts in r.variants:
        out.append(["python3", "benchmarks/gpu_time_per_verdict.py", "variant", src,
                    f"{run_dir}/{dst}", *opts])
    if r.sampler:
        out.append(["python3", "benchmarks/host_sampler.py", f"{run_dir}/{r.sampler}", "&"])
    for s in r.steps:
        if s.command is not None:
            out.append(["bash", "-c", _sub(s.command, run_dir), str(s.name)])
            continue
        step = Step(s.name, _sub(s.matrix or "", run_dir), s.only, s.skip)
        dest = run_dir if r.into_run else f"{run_dir}/{s.name}"
        out.append(step_argv(step, dest, Path(dest, "state.json").is_file(), r.into_run))
    return out


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {text}", flush=True)


def selected_name(r: Round) -> str:
    """The file in a round's run directory that lists the steps its call ran (all of the
    part's, or those STEPS kept), one name a line; one file per part."""
    return "steps" + (f"-part{r.part}" if r.part else "") + ".txt"


def run(r: Round, run_dir: str) -> int:
    """Run round ``r`` into ``run_dir``: variants, sampler, then each step (module docstring).
    Returns round 1's matrix exit status, else 0 (the steps' statuses are in the log)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    if not r.into_run:  # the steps this call selected (STEPS): `land` tells them from unrun
        Path(run_dir, selected_name(r)).write_text("".join(f"{s.name}\n" for s in r.steps))
    sampler = None
    try:
        for argv in commands(r, run_dir):
            if argv[-1] == "&":
                sampler = subprocess.Popen(argv[:-1])
                continue
            if argv[0] == "bash":  # a command step: bash -c CMD NAME (NAME is its $0)
                name = argv[-1]
                if Path(run_dir, f"{name}.done").is_file():
                    continue
                _say(f"{name}: start")
                with open(f"{run_dir}/{name}.log", "ab") as log:
                    rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                                        check=False).returncode
                if rc == 0:
                    Path(run_dir, f"{name}.done").touch()
                _say(f"{name}: exit {rc}")
                continue
            if argv[1] != "-m":  # a variant
                subprocess.run(argv, check=False)
                continue
            if r.into_run:
                return subprocess.run(argv, check=False).returncode
            name = Path(argv[argv.index("--out") + 1]).name
            _say(f"{name}: start {'--resume' if '--resume' in argv else ''}")
            with open(f"{run_dir}/{name}.log", "ab") as log:
                rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                                    check=False).returncode
            _say(f"{name}: exit {rc}")
        return 0
    finally:
        if sampler is not None:
            sampler.terminate()


CREATOR = "developers, crossbench"
"""The archives' creator where ``land`` is given none."""


def archive_name(r: Round, step: str, machine: str = "h200") -> str:
    """The archive of ``step`` of round ``r``: ``MACHINE-ROUND[-partN]-STEP``."""
    return f"{machine}-{r.name}" + (f"-part{r.part}" if r.part else "") + f"-{step}"


def machine_of(files_at: Path) -> str:
    """``h100`` or ``h200``: the GPU that ``files_at/logs.tgz``'s ``gpu.txt`` names (what
    ``nvidia-smi`` said on the machine), ``h200`` where it names neither or is missing (the
    rounds' machine; the records inside the archive name the GPU either way)."""
    import tarfile

    try:
        with tarfile.open(files_at / "logs.tgz") as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("gpu.txt")), None)
            f = tar.extractfile(member) if member is not None else None
            text = f.read().decode(errors="replace") if f is not None else ""
    except (OSError, tarfile.TarError):
        text = ""
    return "h100" if "H100" in text and "H200" not in text else "h200"


def _cb(*args: str, out: Path | None = None) -> tuple[int, str]:
    """``python -m crossbench ARGS`` (the interpreter running this script): its exit status
    and its output (stderr included; stdout to ``out`` when given)."""
    argv = [sys.executable, "-m", "crossbench", *args]
    if out is None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout + done.stderr
    with out.open("w") as f:
        done = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, text=True, check=False)
    return done.returncode, done.stderr


def _last(text: str) -> str:
    """The last line of a command's output (what it said last: its error)."""
    return (text.strip().splitlines() or ["no output"])[-1]


def _pack_folder(folder: Path, out: Path) -> Path:
    """Pack ``folder`` into the gzipped tar ``out`` (members under ``folder.name``, sorted,
    owner and mode normalized, the files' own times kept): the same folder gives the same
    bytes, so landing again changes nothing."""
    import gzip
    import tarfile

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with out.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in [folder, *sorted(folder.rglob("*"))]:
            tar.add(path, arcname=str(Path(folder.name) / path.relative_to(folder)),
                    recursive=False, filter=norm)
    return out


def land(r: Round, files_at: Path, dest: Path, work: Path, creator: str = CREATOR,
         carry_dir: Path | None = None, carry_from: Sequence[Path] = (),
         kernel_dir: Path | None = None) -> int:
    """Land what a device call brought back for round ``r`` (``files_at``: its ``run.tgz`` and
    ``logs.tgz``): unpack the run directory into ``work`` (emptied first where an earlier
    ``land`` made it; any other non-empty folder is refused), then for each matrix step that ran
    analyse it, build its archive (:func:`archive_name`, named for the GPU :func:`machine_of`
    reads), copy the zip into ``dest`` and verify the copy, write its report
    (``report-STEP.md``, ``plots-STEP/`` with its PNGs) and PR datapoint
    (``datapoint-STEP.md``); a command step's ``STEP.json``, ``STEP-*.json`` and ``STEP.log``
    are copied, and its output folder ``STEP/``, where it wrote one, is packed as ``STEP.tgz``
    (:func:`_pack_folder`); the device logs become ``device-logs[-partN].tgz``; the vLLM
    compile cache's parts, gathered from the lease's calls (``carry_from``, then
    ``files_at``), replace those in ``carry_dir`` (default :data:`CARRY_COMPILE`) once a set
    is whole, for the next lease (benchmarks/study/carry.py), and SGLang's kernel caches'
    parts those in ``kernel_dir`` (default :data:`CARRY_KERNELS`). Prints one line per step;
    returns 1 when a step that ran could not be landed or its archive fails to
    verify, else 0."""
    import shutil
    import tarfile

    tgz = files_at / "run.tgz"
    if not tgz.is_file():
        print(f"study.py: {tgz}: no run.tgz (fix: give the folder a device call's files "
              "came back to)", file=sys.stderr)
        return 2
    carry = _carry_module()
    lean_root = REPO / carry.LEAN
    if carry.is_lean(REPO) and dest.resolve().is_relative_to(lean_root.resolve()):
        print(f"study.py: {lean_root} is left behind device calls (`carry.py lean on`), and git "
              "does not see new files there: `python3 benchmarks/study/carry.py lean off` "
              "first", file=sys.stderr)
        return 2
    machine = machine_of(files_at)
    if machine != "h200":
        print(f"machine: {machine} (logs.tgz gpu.txt), in the archives' names and titles")
    marker = work / ".crossbench-land"
    if work.exists() and any(work.iterdir()) and not marker.is_file():
        print(f"study.py: --work {work} holds files `land` did not put there (fix: give an "
              "empty or new folder)", file=sys.stderr)
        return 2
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    marker.touch()
    with tarfile.open(tgz) as tar:
        tar.extractall(work, filter="data")
    tops = [p for p in work.iterdir() if p.is_dir()]  # the marker is a file
    if len(tops) != 1:
        print(f"study.py: {tgz}: expected one run directory, found "
              f"{', '.join(p.name for p in tops) or 'none'}", file=sys.stderr)
        return 2
    root, bad = tops[0], 0
    dest.mkdir(parents=True, exist_ok=True)
    listed = root / selected_name(r)
    selected = set(listed.read_text().split()) if listed.is_file() else None
    for step in r.steps:
        name = str(step.name)
        if selected is not None and name not in selected:
            print(f"{name}: not selected (the call's STEPS kept {', '.join(sorted(selected))})")
            continue
        if step.command is not None:
            copied = sorted(f for pattern in (f"{name}.json", f"{name}-*.json", f"{name}.log")
                            for f in root.glob(pattern) if f.is_file())
            for f in copied:
                shutil.copy2(f, dest / f.name)
            names = [f.name for f in copied]
            if (root / name).is_dir():  # the step's own output folder (its raw records)
                names.append(_pack_folder(root / name, dest / f"{name}.tgz").name)
            done = (root / f"{name}.done").is_file()
            print(f"{name}: command {'exited 0' if done else 'did not finish'}; copied "
                  f"{', '.join(names) or 'nothing'}")
            continue
        run_dir = root if r.into_run else root / name
        if not (run_dir / "state.json").is_file():
            print(f"{name}: not run (no {run_dir.relative_to(work)}/state.json)")
            continue
        arch = archive_name(r, name, machine)
        steps = [("analyze", ("analyze", str(run_dir))),
                 ("archive build", ("archive", "build", str(run_dir), "--out",
                                    str(work / "archives"), "--name", arch, "--creator",
                                    creator, "--title", f"crossbench {machine.upper()} "
                                    f"study, round {r.name}"
                                    f"{f' part {r.part}' if r.part else ''}, {name}: "
                                    f"{r.purpose}"))]
        failed = None
        for what, args in steps:
            rc, text = _cb(*args)
            if rc != 0:
                failed = f"{what} exit {rc}: {_last(text)}"
                break
        if failed is None:
            shutil.copy2(work / "archives" / f"{arch}.zip", dest / f"{arch}.zip")
            rc, text = _cb("archive", "verify", str(dest / f"{arch}.zip"))
            if rc != 0:
                failed = f"archive verify exit {rc}: {_last(text)}"
        if failed is not None:
            bad += 1
            print(f"{name}: NOT LANDED, {failed}")
            continue
        report = work / "reports" / name
        rc, text = _cb("report", str(run_dir), "--out", str(report))
        if rc == 0:
            # the report's figures sit beside it in plots-STEP/ (one folder per step), so its
            # links follow them (they read plots/ as `crossbench report` writes them)
            (dest / f"report-{name}.md").write_text(
                (report / "report.md").read_text().replace("](plots/", f"](plots-{name}/"))
            if (report / "plots").is_dir():  # the PNGs: the SVGs are in the archive (every
                # call carries the tree, and the copies left the llama.cpp source no room)
                shutil.copytree(report / "plots", dest / f"plots-{name}", dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.svg"))
        point = dest / f"datapoint-{name}.md"
        rc_dp, said = _cb("datapoint", str(run_dir), out=point)
        if rc_dp != 0:  # e.g. a baseline-only step has no pair to post: no empty file
            point.unlink()
        _, status = _cb("status", str(run_dir))
        trials = next((ln for ln in status.splitlines() if ln.startswith("trials:")),
                      "no status")
        why = _last(said).removeprefix("crossbench: error: ").replace(f"{run_dir} ", "", 1)
        print(f"{name}: {arch}.zip verified; report {'written' if rc == 0 else 'FAILED'}, "
              + ("datapoint written" if rc_dp == 0 else f"no datapoint ({why})")
              + f"; {trials}")
    logs = files_at / "logs.tgz"
    if logs.is_file():
        target = dest / ("device-logs" + (f"-part{r.part}" if r.part else "") + ".tgz")
        shutil.copy2(logs, target)
        print(f"device logs: {target}")
    carry = _carry_module()
    kept = [p for folder in (*carry_from, files_at)
            for p in carry.keep(folder, carry_dir or CARRY_COMPILE)]
    if kept:
        print(f"vLLM compile cache: {len(kept)} part(s) kept in {kept[-1].parent} "
              "for the next lease's calls (docs/h200-rounds.md)")
    kernels = [p for folder in (*carry_from, files_at)
               for p in carry.keep(folder, kernel_dir or CARRY_KERNELS, kernels=True)]
    if kernels:
        print(f"SGLang kernel cache: {len(kernels)} part(s) kept in {kernels[-1].parent} "
              "for the next lease's calls (docs/h200-rounds.md)")
    return 1 if bad else 0


#: crossbench's dependencies the GPU image lacks (its package list, /work/.library's
#: KINDS.md, 2026-11-17): what the first call of a lease carries as wheels in ``.whl/``
HOST_LACKS = ("annotated-types", "gguf", "orjson", "pydantic", "pydantic-core",
              "typing-inspection")
#: the platform of those wheels: CPython 3.12 on x86-64 Linux (the image's interpreter)
WHEEL_PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--platform",
                  "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                  "--platform", "manylinux2014_x86_64")


def wheels_argv(constraints: str, dest: Path) -> list[str]:
    """The ``pip download`` of :data:`HOST_LACKS` at the versions ``constraints`` (the text of
    constraints.txt) pins, binary wheels only, no dependencies. ValueError naming a package
    the constraints do not pin."""
    pins: dict[str, str] = {}
    for line in constraints.splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    missing = [n for n in HOST_LACKS if n not in pins]
    if missing:
        raise ValueError(f"constraints.txt pins no version of {', '.join(missing)}: add "
                         "`NAME==VERSION` lines (pip freeze of the dev environment)")
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            *WHEEL_PLATFORM, "-d", str(dest), *(f"{n}=={pins[n]}" for n in HOST_LACKS)]


def lease_calls(r: Round, repo: Path) -> list[tuple[str, list[Path]]]:
    """A round's device calls until its start, each as (environment, carry list), from the
    tree's size now (``carry.py calls``): the first call the wheels and the llama.cpp source,
    then the engine packs' parts (vLLM, SGLang, as the round needs), for vLLM the compile
    cache's (:func:`cache_pick`) and for SGLang the kernel cache's (:func:`kernel_pick`), as
    many a call as fit; the last of them starts the round (BUDGET_S=560). Paths
    are relative to ``repo``. ValueError when a part cannot fit a call, or when the wheels or
    (for a cross round, whose setup unpacks it) the llama.cpp source are missing (the fix
    named): a first call without the source once started a setup that waited for one, and
    the next call, carrying it, started a second beside it (2026-12-06); ValueError too
    when a step's command reads ``examples/`` while ``carry.py lean on`` leaves it behind."""
    carry = _carry_module()
    root = repo / ".carry"
    reads = [st.name for st in r.steps if st.command and f"{carry.LEAN}/" in st.command]
    if reads and carry.is_lean(repo):
        raise ValueError(f"round {r.name}'s step(s) {', '.join(map(str, reads))} read "
                         f"{carry.LEAN}/ on the device, which `carry.py lean on` leaves "
                         "behind: `python3 benchmarks/study/carry.py lean off` first")
    packs = [d for kind, need in (("vllm", r.vllm), ("sglang", r.sglang)) if need
             for d in sorted(root.glob(f"{kind}-[0-9]*")) if (d / "pack.json").is_file()]
    for kind, need in (("vllm", r.vllm), ("sglang", r.sglang)):
        if need and not any(d.name.startswith(kind) for d in packs):
            raise ValueError(f"round {r.name} needs {kind} and .carry/ holds no {kind} pack: "
                             f"make it first (`crossbench engines pack {kind}==... --out "
                             f".carry/{kind}-VERSION`)")
    tree = carry.tree_bytes(repo)
    room = carry.part_room(tree, [d / "pack.json" for d in packs])
    for d in packs:
        recut_pack(d, room)
    parts = [p for d in packs for p in sorted(d.glob("payload.tar.part*"))]
    for need, pick in ((r.vllm, cache_pick), (r.sglang, kernel_pick)):
        cache = pick(r, repo)[0] if need else []
        if cache and room > 0 and max(q.stat().st_size for q in cache) > room:
            cache = carry.recut(cache, room)  # part names may stay (3 parts again): say so
            print(f"study.py: the cache in {cache[0].parent} cut again into "
                  f"{len(cache)} parts of at most {room // 1_000_000} MB (the "
                  f"{tree}-byte tree leaves no room for larger)", file=sys.stderr)
        parts += cache
    if not any((repo / ".whl").glob("*.whl")):
        raise ValueError("the first call carries crossbench's wheels for the GPU image and "
                         ".whl/ holds none: `python3 benchmarks/study/study.py wheels` "
                         "(needs PyPI)")
    if r.kind == "cross" and not any(root.glob("llama-cpp-python-*.src.tgz")):
        raise ValueError(f"round {r.name}'s setup unpacks the llama.cpp source (the fixtures' "
                         "tokenizer, the drafters' converter, the CUDA build) and .carry/ "
                         "holds none: make it first (`crossbench engines pack-source --out "
                         ".carry/llama-cpp-python-0.3.36.src.tgz`, about 12 MB)")
    first = carry.first_carry(root, repo / ".whl")
    plan = carry.calls(tree, first, [d / "pack.json" for d in packs], parts)
    if len(plan) == 1:  # nothing to carry after the first call: the next one waits for it
        plan.append([d / "pack.json" for d in packs])
    env = f"ROUND={r.name}" + (f" PART={r.part}" if r.part else "")
    return [(f"BUDGET_S={40 if i == 0 else 560 if i == len(plan) - 1 else 20} {env}",
             [q.relative_to(repo) for q in carried]) for i, carried in enumerate(plan)]


def recut_pack(pack: Path, room: int) -> None:
    """An engine pack (``.carry/vllm-0.26.0``) whose payload parts no longer fit a call beside
    the tree (``room`` bytes) cut again, byte for byte, into parts of ``room`` rounded down to
    whole MB (``crossbench engines recut``: same payload, same build key), replacing the
    folder; the old one is removed only once the new cut is checked."""
    from crossbench.engines import pack as epack

    parts = sorted(pack.glob("payload.tar.part*"))
    if room <= 0 or not parts or max(q.stat().st_size for q in parts) <= room:
        return
    new = pack.with_name(pack.name + ".recut")
    if new.exists():
        shutil.rmtree(new)
    epack.recut(pack, new, room // epack.MB * epack.MB)
    old = pack.with_name(pack.name + ".old")
    pack.rename(old)
    new.rename(pack)
    shutil.rmtree(old)
    print(f"study.py: {pack} cut again into parts of at most {room // epack.MB} MB (the tree "
          "leaves no room for larger)", file=sys.stderr)


def round_models(r: Round, repo: Path) -> set[str] | None:
    """The targets the vLLM cells of round ``r``'s matrix steps serve, as a compile-cache
    pack's manifest names them (``carry.py model_tail``: ``qwen3-8b-seed0-v1/hf-target``).
    A step reading a variant the round makes (``$dir/NAME``, :attr:`Round.variants`) is read
    from the variant's source matrix (a variant changes trials and load, not models); None
    where a step reads another matrix of ``$dir``: not known before it runs. Command steps
    are left out: those of vLLM rounds (``startup-next``) fill caches of their own."""
    from crossbench.fixtures.resolve import hf_fixture_path
    from crossbench.runner.matrix import expand, load_matrix, parse_fixture_ref
    from crossbench.runner.matrix_run import select

    carry = _carry_module()
    found: set[str] = set()
    for step in r.steps:
        if step.matrix is None:
            continue
        matrix = step.matrix
        if "$dir" in matrix:
            made = {f"$dir/{dst}": src for src, dst, _ in r.variants}
            if matrix not in made:
                return None
            matrix = made[matrix]
        path = Path(matrix) if Path(matrix).is_absolute() else repo / matrix
        m = load_matrix(path)
        for c in select(expand(m, path), step.only, step.skip):
            ref = c.model_refs.get("model", "")
            if c.engine_kind != "vllm" or not ref:
                continue
            if ref.startswith("fixture:"):
                shape, role, _ = parse_fixture_ref(ref, "model")
                ref = str(hf_fixture_path(shape, role, cache_root=Path("/")))
            found.add(carry.model_tail(ref))
    return found


def cache_pick(r: Round, repo: Path) -> tuple[list[Path], str]:
    """The compile-cache parts a lease of round ``r`` carries, and one line saying why: of the
    packs kept in ``.carry/vllm-compile/`` (one per model set, ``carry.py keep``), the one
    holding most of the round's vLLM targets (the newest on a tie); none where no pack holds
    any (a MoE round: the Qwen3-8B entries would cost its calls and serve no start); the
    newest where the round's targets are not known before it runs; none for a round of
    command steps only."""
    carry = _carry_module()
    held = carry.held(repo / ".carry" / "vllm-compile")
    if not held:
        return [], "no compile cache is kept (.carry/vllm-compile/): the round starts cold"
    wanted = round_models(r, repo)
    if wanted == set():
        return [], ("the round's steps serve no vLLM cell of a matrix (a command step fills a "
                    "cache of its own): no compile cache carried")
    rank = {folder: (len(carry.models(parts) & wanted) if wanted is not None else 0,
                     carry.created(parts)) for folder, parts in held.items()}
    best = max(held, key=lambda f: rank[f])
    if wanted is not None and rank[best][0] == 0:
        return [], (f"no kept compile cache holds this round's vLLM targets "
                    f"({', '.join(sorted(wanted)) or 'none'}): none carried, the round "
                    "compiles cold and returns a pack of its own, kept beside the others")
    why = ("its targets are not known before it runs: the newest pack" if wanted is None else
           f"the pack holding {rank[best][0]} of its {len(wanted)} vLLM target(s)")
    return held[best], f"compile cache {best.relative_to(repo)} ({why})"


CODE_DIRS = ("crossbench", "benchmarks", "engines", "matrices")
"""The folders whose files a device call's round runs (its code and its matrices)."""


def uncommitted_code(repo: Path) -> list[str]:
    """The files under :data:`CODE_DIRS` that ``git status`` says differ from the last commit
    (modified, added, deleted or untracked and not ignored); empty outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--",
                              *CODE_DIRS], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [line[3:].strip() for line in out.stdout.splitlines() if len(line) > 3]


ROOM_GB = 40
"""Free disk (GB) below which a chained round's late setup removes the target folders it does
not name: the largest fixture set a round makes is the Qwen3-8B pair with its HF folders
(34 GB) or the MoE target in both formats (32.8 GB)."""


def _option(words: list[str], name: str, default: str) -> str:
    return words[words.index(name) + 1] if name in words[:-1] else default


def spare_targets(r: Round, cache: Path) -> list[Path]:
    """The MTP, MoE and dense-twin target folders in ``cache``'s fixtures that round ``r``'s
    fixtures do not name (``path ROLE --shape S [--seed N]``; a ``dflash-moe`` drafter keeps
    its shape's dense twin, which it is converted against). On 2026-12-07 the MTP target's
    33.6 GB, left by ``mtp2 PART=1``, left ``ngram2 PART=1``'s chained Qwen3-8B pair no room
    (``No space left on device``); these folders are the large ones a later round can lack."""
    from crossbench.fixtures.make import fixture_dir
    from crossbench.fixtures.mtp import mtp_dir
    from crossbench.fixtures.resolve import MTP_ROLES

    keep = set()
    for args, _ in r.fixtures:
        words = shlex.split(args)
        if words[:1] != ["path"] or len(words) < 2:
            continue
        folder = fixture_dir(cache, _option(words, "--shape", "tiny"),
                             int(_option(words, "--seed", "0")))
        if words[1] in MTP_ROLES:
            keep.add(mtp_dir(folder, words[1]))
        elif words[1] == "dflash-moe":
            keep.add(mtp_dir(folder, "dense-twin"))
    shapes = sorted((cache / "fixtures").glob("*")) if (cache / "fixtures").is_dir() else []
    found = [mtp_dir(d, role) for d in shapes for role in MTP_ROLES]
    return [p for p in found if p.is_dir() and p not in keep]


def _free_gb(path: Path) -> float:
    return shutil.disk_usage(path).free / 1e9


def make_room(r: Round, cache: Path, min_free_gb: float = ROOM_GB) -> list[str]:
    """Remove :func:`spare_targets` while the cache's disk has less than ``min_free_gb`` GB
    free; one ``late_freed=...`` line per folder removed (for timing.txt), none when the disk
    has room."""
    lines = []
    for folder in spare_targets(r, cache):
        free = _free_gb(cache)
        if free >= min_free_gb:
            break
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e9
        shutil.rmtree(folder)
        lines.append(f'late_freed="{folder.relative_to(cache)}" gb={size:.1f} '
                     f"free_gb_before={free:.1f} free_gb_after={_free_gb(cache):.1f}")
    return lines


def kernel_pick(r: Round, repo: Path) -> tuple[list[Path], str]:
    """The SGLang kernel-cache parts a lease of round ``r`` carries, and one line saying why:
    of the packs kept in ``.carry/sglang-kernels/`` (one per engine build and compute
    capability, ``carry.py keep --kernels``), the newest built by the SGLang pack this lease
    installs (its manifest's ``payload_sha256`` is the pack.json's payload); none where no
    kept pack was (``engines kernel-cache unpack`` would refuse it: another build)."""
    carry = _carry_module()
    held = carry.held(repo / ".carry" / "sglang-kernels")
    if not held:
        return [], ("no SGLang kernel cache is kept (.carry/sglang-kernels/): the round's "
                    "first SGLang start builds its kernels (cold)")
    payloads = set()
    for d in sorted((repo / ".carry").glob("sglang-[0-9]*")):
        try:
            payloads.add(json.loads((d / "pack.json").read_text())["payload"]["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    match = {f: p for f, p in held.items() if carry.manifest(p).get("payload_sha256") in payloads}
    if not match:
        return [], ("no kept SGLang kernel cache was built by this lease's SGLang pack "
                    f"(payload {', '.join(sorted(x[:12] for x in payloads)) or 'none'}): none "
                    "carried, the round's first SGLang start builds its kernels (cold)")
    best = max(match, key=lambda f: carry.created(match[f]))
    return match[best], (f"SGLang kernel cache {best.relative_to(repo)} (the newest built by "
                         "this lease's SGLang pack)")


@functools.cache
def _carry_module() -> Any:
    """benchmarks/study/carry.py, loaded by path once (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("study_carry", Path(__file__).with_name(
        "carry.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _hms(seconds: float) -> str:
    m, sec = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}"


def plan(r: Round, work: Path) -> int:
    """Print what round ``r`` costs by ``crossbench plan``: each matrix step's GPU time and
    server starts in the design ``crossbench matrix`` runs it in, timed from the round's
    ``plan.timings_from`` (measured where they hold the engine kind, else assumed: the plan
    says which), its command steps as not planned, the setup the round's entry gives, and
    the lease they add up to. The variants are made into ``work``."""
    import json

    work.mkdir(parents=True, exist_ok=True)
    for argv in commands(r, str(work)):
        if argv[1:3] == ["benchmarks/gpu_time_per_verdict.py", "variant"]:
            made = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                                  check=False)
            if made.returncode != 0:
                print(f"study.py: {' '.join(argv[1:4])} failed: {_last(made.stderr)}",
                      file=sys.stderr)
                return 1
    sources = [a for src in r.timings_from for a in ("--from", src)]
    total, starts = 0.0, 0.0
    print(f"round {r.name}" + (f" part {r.part}" if r.part else "") + ": timings from "
          + (", ".join(r.timings_from) or "none (every figure assumed)"))
    for step in r.steps:
        if step.command is not None:
            print(f"  {step.name}: a command step, not planned")
            continue
        matrix = _sub(step.matrix or "", str(work))
        done = subprocess.run([sys.executable, "-m", "crossbench", "plan", matrix,
                               *_selection(step),
                               *sources, "--json"], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            print(f"study.py: {step.name}: crossbench plan failed: {_last(done.stderr)}",
                  file=sys.stderr)
            return 1
        own = json.loads(done.stdout)["matrix_design"]
        total += own["gpu_s"]
        starts += own["server_starts"]
        print(f"  {step.name}: {_hms(own['gpu_s'])} of GPU time, "
              f"{own['server_starts']:g} server starts, {own['cells']} cells ({own['design']})")
    setup = (f"{_hms(r.setup_s)} ({r.setup_from})" if r.setup_s is not None else
             "not given (rounds.yaml plan.setup_s)")
    print(f"  cells {_hms(total)}, {starts:g} server starts; setup {setup}")
    if r.setup_s is not None:
        print(f"  lease: {_hms(total + r.setup_s)}")
    if r.vllm and starts:
        parts, why = cache_pick(r, REPO)
        if parts:  # crossbench plan prices every start from the timings, cold or warm alike
            print(f"  starts are priced as timed; {why} goes with the calls, so the starts of "
                  "the configurations it holds come warm and the lease can be shorter "
                  "(2026-12-07: `mtp2 PART=3`, priced at 14.4 min of cells, took 7.9)")
    return 0


def only_steps(r: Round, names: str | None) -> Round:
    """Round ``r`` with only the steps named in ``names`` (comma-separated; None or empty:
    all), in the round's own order; a name the round lacks is a RoundsError naming them."""
    if not names:
        return r
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    have = [s.name for s in r.steps]
    unknown = [n for n in wanted if n not in have]
    if unknown:
        label = r.name + (f" PART={r.part}" if r.part else "")
        raise RoundsError(f"STEPS: round {label} has no step {', '.join(unknown)}; its steps: "
                          + ", ".join(str(n) for n in have))
    return replace(r, steps=tuple(s for s in r.steps if s.name in wanted))


def env_lines(r: Round) -> list[str]:
    """Shell assignments of round ``r``'s kind and needs (a ``lanes`` round's also its matrix
    and --skip arrays), for the driver to ``eval``."""
    out = [f"need_{k}={1 if getattr(r, k) else 0}" for k in FLAGS] + [f"kind={r.kind}"]
    out.append("fixtures_args=(" + " ".join(shlex.quote(a) for a, _ in r.fixtures) + ")")
    out.append("fixtures_min_gb=(" + " ".join(str(g) for _, g in r.fixtures) + ")")
    if r.kind == "lanes":
        out.append(f"study_matrix={shlex.quote(r.matrix or '')}")
        for lane, skips in (*r.lanes, ("solo", r.solo)):
            args = " ".join(shlex.quote(a) for s in skips for a in ("--skip", s))
            out.append(f"skips_{lane}=({args})")
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); a bad round or part is a one-line error, exit 2."""
    p = argparse.ArgumentParser(prog="study.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="each round (and part) with its purpose")
    wp = sub.add_parser("wheels", help="download the wheels the GPU image lacks into .whl/")
    wp.add_argument("--dest", type=Path, default=Path(".whl"))
    wp.add_argument("--constraints", type=Path, default=REPO / "constraints.txt")
    for cmd in ("env", "dry", "run", "land", "plan", "calls", "room"):
        sp = sub.add_parser(cmd)
        sp.add_argument("round")
        if cmd == "run":
            sp.add_argument("dir")
        if cmd == "room":
            sp.add_argument("--cache", type=Path, required=True,
                            help="the machine's crossbench cache ($CROSSBENCH_CACHE)")
            sp.add_argument("--min-free-gb", type=float, default=ROOM_GB)
        if cmd == "land":
            sp.add_argument("files_at", type=Path, help="the folder with run.tgz, logs.tgz")
            sp.add_argument("dest", type=Path, help="where the archives and reports go, "
                            "e.g. examples/h200-methods/round5")
            sp.add_argument("--work", type=Path, default=None, help="where run.tgz is "
                            "unpacked (default: /tmp/crossbench-land-ROUND-PART; emptied first)")
            sp.add_argument("--creator", default=CREATOR)
            sp.add_argument("--carry-dir", type=Path, default=None, help="where the vLLM "
                            "compile cache's parts go (default: .carry/vllm-compile)")
            sp.add_argument("--carry-from", type=Path, action="append", default=[],
                            help="another call folder of the lease whose compile-cache and "
                            "kernel-cache parts to keep too (repeatable; a cache returns "
                            "over several calls)")
            sp.add_argument("--kernel-dir", type=Path, default=None, help="where SGLang's "
                            "kernel cache's parts go (default: .carry/sglang-kernels)")
        if cmd == "dry":
            sp.add_argument("--dir", default="DIR")
        sp.add_argument("--part", type=int, default=None)
        if cmd != "land":
            sp.add_argument("--steps", default=None, help="only these steps, comma-separated "
                            "(default: the environment's STEPS, else every step)")
        sp.add_argument("--rounds", type=Path, default=ROUNDS)
    a = p.parse_args(argv)
    if a.cmd == "wheels":
        try:
            download = wheels_argv(a.constraints.read_text(), a.dest)
        except (OSError, ValueError) as e:
            print(f"study.py: {e}", file=sys.stderr)
            return 2
        print(" ".join(shlex.quote(c) for c in download), flush=True)
        return subprocess.run(download, check=False).returncode
    try:
        rounds = load_rounds(getattr(a, "rounds", ROUNDS))
        if a.cmd == "list":
            for name in rounds:
                for part in parts(rounds, name) or [None]:
                    r = get_round(rounds, name, part)
                    label = name + (f" PART={part}" if part else "")
                    print(f"{label:<16} {r.purpose}")
            return 0
        env_part = os.environ.get("PART") or None
        chosen = a.part if a.part is not None else int(env_part) if env_part else None
        r = get_round(rounds, a.round, chosen)
        if a.cmd != "land":
            r = only_steps(r, a.steps if a.steps is not None else os.environ.get("STEPS"))
    except (RoundsError, ValueError) as e:
        print(f"study.py: {e}", file=sys.stderr)
        return 2
    if a.cmd == "run" and r.kind != "cross":
        print(f"study.py: round {r.name} is of kind {r.kind}: run it with "
              f"ROUND={r.name} bash benchmarks/study/run.sh", file=sys.stderr)
        return 2
    if a.cmd == "env":
        print("\n".join(env_lines(r)))
        return 0
    if a.cmd == "room":
        for line in make_room(r, a.cache, a.min_free_gb):
            print(line, flush=True)
        return 0
    if a.cmd == "dry":
        if r.kind != "cross":
            print(f"study.py: round {r.name} is of kind {r.kind}: benchmarks/study/run.sh "
                  "runs its commands", file=sys.stderr)
            return 2
        for c in commands(r, a.dir):
            print(shlex.join(c[:-1]) + " &" if c[-1] == "&" else
                  f"{c[-1]}: {c[2]}" if c[0] == "bash" else shlex.join(c))
        return 0
    if a.cmd == "plan":
        if r.kind != "cross":
            print(f"study.py: round {r.name} is of kind {r.kind}: plan its matrix with "
                  "`crossbench plan`", file=sys.stderr)
            return 2
        import tempfile

        with tempfile.TemporaryDirectory(prefix="crossbench-plan-") as tmp:
            return plan(r, Path(tmp))
    if a.cmd == "calls":
        try:
            calls = lease_calls(r, Path.cwd())
        except ValueError as e:
            print(f"study.py: {e}", file=sys.stderr)
            return 2
        if r.vllm:
            print(cache_pick(r, Path.cwd())[1])
        if r.sglang:
            print(kernel_pick(r, Path.cwd())[1])
        carry = _carry_module()
        if not carry.is_lean(Path.cwd()):
            mb = [carry.tree_bytes(Path.cwd(), *u) / 1e6 for u in ((carry.LEAN,), ())]
            print(f"study.py: {carry.LEAN}/ travels with every call ({mb[0]:.1f} MB of the "
                  f"{mb[1]:.1f} MB tree); `python3 benchmarks/study/carry.py lean on` leaves "
                  "it behind (docs/h200-rounds.md \"What a call carries\")", file=sys.stderr)
        changed = uncommitted_code(Path.cwd())
        if changed:
            print(f"study.py: {len(changed)} code file(s) differ from the last commit "
                  f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}): every "
                  "call carries the tree as it is then, so a change written during the lease "
                  "runs in its round (2026-12-07); commit or stash it before the first call",
                  file=sys.stderr)
        for i, (env, carried) in enumerate(calls, 1):
            print(f"call {i}: OUT=$OUT {env} bash benchmarks/study/run.sh 2>&1 | tail -30")
            print(f"  carry: {json.dumps([str(q) for q in carried])}")
        metas = json.dumps([str(q) for q in calls[-1][1] if q.name == "pack.json"])
        back = " and ".join(w for need, w in ((r.vllm, "the compile cache"),
                                              (r.sglang, "the kernel cache")) if need)
        print(f"then: BUDGET_S=560 calls carrying {metas} until the round has ended"
              + (f"; then BUDGET_S=20 calls until calls.txt says `every part returned` "
                 f"({back})" if back else ""))
        return 0
    if a.cmd == "land":
        if r.kind != "cross":
            print(f"study.py: round {r.name} is of kind {r.kind}: land its files by hand "
                  "(docs/h200-rounds.md)", file=sys.stderr)
            return 2
        work = a.work or Path("/tmp") / f"crossbench-land-{r.name}-{r.part or 0}"
        return land(r, a.files_at, a.dest, work, a.creator, a.carry_dir, a.carry_from,
                    a.kernel_dir)
    return run(r, a.dir)


if __name__ == "__main__":
    sys.exit(main())
