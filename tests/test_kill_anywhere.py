"""Kill -9 anywhere: a real CPU matrix SIGKILLed at 20+ seeded random points, resumed each time.

The matrix (baseline + draft-simple n=2 with synthetic acceptance, 2 trials each, few short
requests) is first run uninterrupted to measure its timeline: when each trial's header appears
in a server.log and when each trial is journaled. ``KILLS`` positions are drawn uniformly over
that run's duration (``random.Random(SEED)``; ``CROSSBENCH_KILL_SEED`` picks another seed) and
replayed in order on fresh ``crossbench matrix ... --resume`` processes: a position in the
set-up is a delay after the start; one inside trial i waits for trial i's header (the trials
the journal still lacks run first), then its offset into the trial; one after the last
journal line waits for it. The kills thus land across the whole run: set-up, server start-up,
warm-up, measured requests, server stop, between trials and the final summaries. One more kill
goes where no timer lands reliably: between a cell's manifest entry and the journal line of
the same trial.

After every kill: no process of the run is left (the children carry a unique environment
variable, ``TOKEN_VAR``, looked for in ``/proc/*/environ``; llama-server has its own session,
so only its parent-death signal can end it), the journal is whole and has no duplicate
(cell, trial), nothing journaled before was lost, at most one trial (the one in flight) was
started and not journaled, and every request record belongs to a trial its manifest records
(complete, with every request) or to that one trial in flight, which ``--resume`` drops.
After the last resume: every (cell, trial) exactly once, ``requests + warmup`` records per
trial, and ``crossbench analyze``, ``archive`` and ``archive verify`` pass.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import crossbench
from crossbench.store.atomic import read_jsonl

pytestmark = pytest.mark.server

SEED = int(os.environ.get("CROSSBENCH_KILL_SEED", "20240611"))
KILLS = 21  # random kill points; at least MIN_KILLS of them must land
MIN_KILLS = 20
REAIMS = 2  # a point whose run ended before it is aimed again this often, each half as far
REQUESTS, WARMUP, TRIALS = 2, 1, 2
TOKEN_VAR = "CROSSBENCH_KILL_TEST_TOKEN"
HEADER = b"===== crossbench trial "  # single.py's line in server.log before each server start
POLL_S = 0.02  # how often the test reads the run's files
GRACE_S = 10.0  # how long a server may take to die after its parent (it is usually < 0.1 s)

#: runs the matrix command with a SIGKILL of itself right before its first journal line:
#: the trial is then in its cell's manifest (complete records, status ok) but not journaled
WINDOW_DRIVER = """
import os, signal, sys
from crossbench.store.atomic import JsonlAppender
_write = JsonlAppender.write
def write(self, record):
    if self.path.name == "journal.jsonl":
        os.kill(os.getpid(), signal.SIGKILL)
    _write(self, record)
JsonlAppender.write = write
from crossbench.cli.main import main
sys.argv[0] = "crossbench"
main()
"""


def write_matrix(tmp_path: Path, binary: Path) -> Path:
    """Baseline and draft-simple n=2 with synthetic acceptance on the fixture pair."""
    data = {
        "schema_version": 1,
        "study": {"name": "kill-anywhere"},
        "engines": {"llama": {"kind": "llama-server", "binary": str(binary)}},
        "models": {"t": {"path": "fixture:target", "quant": "F16", "role": "target"},
                   "d": {"path": "fixture:draft", "quant": "F16", "role": "draft"}},
        "server": {"ctx_size": 1024},
        "load": {"requests": REQUESTS, "warmup": WARMUP, "max_tokens": 6,
                 "warmup_max_tokens": 2},
        "arms": [{"method": "none"},
                 {"name": "synth", "method": "draft-simple", "draft": "d", "n": 2,
                  "synth_rates": [0.8, 0.5]}],
        "axes": {"engine": ["llama"], "target": ["t"], "workload": ["builtin:code"]},
        "trials": TRIALS,
    }
    path = tmp_path / "kill.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@dataclass(frozen=True)
class Proc:
    """A live process of the run under test."""

    pid: int
    comm: str
    pgid: int
    sid: int


def run_processes(token: str) -> list[Proc]:
    """Live (not zombie) processes whose environment carries ``TOKEN_VAR=token``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # state, ppid, pgrp, session
            found.append(Proc(int(entry.name), comm, int(fields[2]), int(fields[3])))
    return found


def journal_keys(out: Path) -> list[tuple[str, int]]:
    """(cell, trial) of every journal line, in file order; asserts the file is whole."""
    path = out / "journal.jsonl"
    if not path.exists():
        return []
    raw = path.read_bytes()
    assert not raw or raw.endswith(b"\n"), f"torn journal line: {raw[-200:]!r}"
    return [(r["cell"], int(r["trial"])) for r in read_jsonl(path)]


def cell_dirs(out: Path) -> list[Path]:
    """The run's cell folders (those made so far)."""
    return sorted(p for p in (out / "cells").glob("*") if p.is_dir()) \
        if (out / "cells").exists() else []


class Starts:
    """Trials started so far, over every attempt: the server.log headers of all cells, read
    incrementally (the logs grow by every attempt; the test polls them every ``POLL_S``)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._seen: dict[Path, tuple[int, int]] = {}  # log: (bytes read, headers in them)

    def count(self) -> int:
        """Headers in every cell's server.log, up to its last complete line."""
        total = 0
        for d in cell_dirs(self.out):
            log = d / "server.log"
            if not log.exists():
                continue
            offset, n = self._seen.get(log, (0, 0))
            if log.stat().st_size < offset:  # rewritten: count again
                offset, n = 0, 0
            with log.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
            cut = data.rfind(b"\n") + 1
            n += data[:cut].count(HEADER)
            self._seen[log] = (offset + cut, n)
            total += n
        return total


@dataclass
class Reference:
    """The uninterrupted run's timeline (seconds from the process start)."""

    started_s: list[float]  # when the i-th trial header appeared (trial i of the schedule)
    journaled_s: list[float]  # when the journal reached 1, 2, ... lines
    duration_s: float

    def locate(self, position: float) -> tuple[str, int, float]:
        """Where the uninterrupted run stood at ``position``: (``setup``, 0, seconds since the
        start), (``trial``, i, seconds since trial i's header) or (``finish``, N, seconds since
        the last journal line)."""
        if position < self.started_s[0]:
            return "setup", 0, position
        if position >= self.journaled_s[-1]:
            return "finish", len(self.journaled_s), position - self.journaled_s[-1]
        i = max(k for k, s in enumerate(self.started_s) if s <= position)
        return "trial", i, position - self.started_s[i]


@dataclass
class KillPoint:
    """One kill and what it found."""

    index: int
    kind: str  # "random" or "window"
    position_s: float | None  # on the reference timeline
    target: tuple[str, int, float] | None  # Reference.locate(position)
    done_before: int
    delay_s: float | None = None  # after this process's start, as delivered
    done_after: int = 0
    killed: bool = False  # False: the process ended before its kill time
    phase: str = ""
    server_alive: bool = False
    lost: int = 0  # trials started and not journaled
    grace_s: float = 0.0
    orphans: int = 0  # request records of the trial in flight, left for --resume to drop
    reaimed: int = 0  # times aimed again, half as far, because the run ended first

    def row(self) -> str:
        """One line of :func:`table`."""
        pos = "-" if self.position_s is None else f"{self.position_s:.2f}"
        where = "-" if self.target is None else (
            f"{self.target[0][0]}{self.target[1]}+{self.target[2]:.2f}")
        dly = "-" if self.delay_s is None else f"{self.delay_s:.2f}"
        return (f"{self.index:>3} {self.kind:<6} {pos:>6} {where:>9} {dly:>6} "
                f"{self.done_before:>3}->{self.done_after:<3} {self.phase:<8} "
                f"{'yes' if self.server_alive else 'no':<6} {self.lost:>4} {self.orphans:>4} "
                f"{self.grace_s:5.2f}{f' (re-aimed {self.reaimed}x)' if self.reaimed else ''}")


def table(points: list[KillPoint], seed: int) -> str:
    """The kill points as a text table (test output and assertion messages)."""
    head = (f"kill points (seed {seed}; pos_s on the uninterrupted run's timeline, target "
            "s|t|f = set-up, trial i of the schedule, finish + seconds):\n"
            "  # kind    pos_s    target  delay journal landed   server lost recs grace")
    return "\n".join([head, *(p.row() for p in points)])


def phase(point: KillPoint, total: int) -> str:
    """Where a kill landed: ``trial`` (one started, not journaled: mid-trial), ``finish`` (every
    trial journaled), ``between`` (after a journal line, before the next trial's server) or
    ``setup`` (before this process started any trial)."""
    if point.kind == "window":
        return "window"
    if point.lost:
        return "trial"
    if point.done_after == total:
        return "finish"
    return "between" if point.done_after > point.done_before else "setup"


def check_after_kill(out: Path, order: list[tuple[str, int]], before: list[tuple[str, int]],
                     started: int, point: KillPoint, msg: str) -> None:
    """The run directory's invariants right after a kill (see the module docstring)."""
    keys = journal_keys(out)
    assert len(keys) == len(set(keys)), f"duplicate journal lines {keys}\n{msg}"
    assert set(before) <= set(keys), f"journaled trials lost: {set(before) - set(keys)}\n{msg}"
    point.done_after = len(keys)
    point.lost = started - (len(keys) - len(before))
    assert 0 <= point.lost <= 1, f"{point.lost} trials lost in one kill\n{msg}"
    in_flight = next(((c, t) for c, t in order if (c, t) not in set(keys)), None)
    state = json.loads((out / "state.json").read_text()) if (out / "state.json").exists() \
        else {"cells": []}
    recorded_only: list[tuple[str, int]] = []
    for cell in state["cells"]:
        d = out / cell["dir"]
        if not (d / "manifest.json").exists():
            assert not (d / "requests.jsonl").exists(), f"records without a manifest\n{msg}"
            continue
        trials = [int(e["trial"]) for e in json.loads((d / "manifest.json").read_text())["trials"]]
        assert len(trials) == len(set(trials)), f"{cell['id']}: manifest {trials}\n{msg}"
        journaled = {t for c, t in keys if c == cell["id"]}
        assert journaled <= set(trials), f"{cell['id']}: journaled, not in manifest\n{msg}"
        recorded_only += [(cell["id"], t) for t in set(trials) - journaled]
        recs = read_jsonl(d / "requests.jsonl") if (d / "requests.jsonl").exists() else []
        per_trial = Counter(int(r["trial"]) for r in recs)
        for t in trials:  # a recorded trial is complete: every request, once
            idx = sorted(int(r["request_index"]) for r in recs if int(r["trial"]) == t)
            assert idx == list(range(REQUESTS + WARMUP)), \
                f"{cell['id']} trial {t}: request indexes {idx}\n{msg}"
        orphans = sorted(t for t in per_trial if t not in trials)
        if orphans:  # records of an unfinished trial: only the one in flight, dropped on resume
            point.orphans += sum(per_trial[t] for t in orphans)
            assert [(cell["id"], t) for t in orphans] == [in_flight], \
                f"{cell['id']}: records of trials {orphans}, in flight {in_flight}\n{msg}"
    # a kill between a cell's manifest write and the journal line leaves one trial recorded
    # but not journaled: it is the one in flight, and --resume runs it again
    assert recorded_only in ([], [in_flight]), f"recorded, not journaled {recorded_only}\n{msg}"
    if point.kind == "window":
        assert recorded_only == [in_flight], f"the window kill missed its window\n{msg}"


def wait_gone(token: str) -> tuple[float, list[Proc]]:
    """Seconds until no process of the run is left (at most ``GRACE_S``), and any left."""
    t0 = time.monotonic()
    while True:
        left = run_processes(token)
        if not left or time.monotonic() - t0 > GRACE_S:
            return time.monotonic() - t0, left
        time.sleep(0.02)


def run_reference(cmd: list[str], out: Path, env: dict[str, str], log: Path) -> Reference:
    """Run the matrix uninterrupted, polling its files for the timeline."""
    t0 = time.monotonic()
    with log.open("wb") as err:
        proc = subprocess.Popen([*cmd, "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    started: list[float] = []
    journaled: list[float] = []
    starts = Starts(out)
    while proc.poll() is None:
        now = time.monotonic() - t0
        started += [now] * (starts.count() - len(started))
        journaled += [now] * (len(journal_keys(out)) - len(journaled))
        assert now < 300, f"the uninterrupted run takes over 300 s; see {log}"
        time.sleep(POLL_S)
    duration = time.monotonic() - t0
    assert proc.returncode == 0, log.read_text()[-2000:]
    journaled += [duration] * (len(journal_keys(out)) - len(journaled))
    assert len(started) == len(journaled) == 2 * TRIALS, (started, journaled)
    return Reference(started, journaled, duration)


def wait_for_kill(proc: subprocess.Popen[bytes], t0: float, out: Path, starts: Starts,
                  target: tuple[str, int, float], done: int, base: int) -> float | None:
    """Wait until the run stands where ``target`` says; seconds since ``t0`` (the process
    start), or None when the process ended first.

    A trial position waits for that trial's header (this process first runs the trials the
    journal lacks before it), then its offset; when the run is already past that trial, the
    offset counts from the first trial this process starts.
    """
    phase, trial, offset = target
    anchor: float | None = None
    while proc.poll() is None:
        now = time.monotonic()
        if anchor is None:
            if phase == "setup":
                anchor = t0
            elif phase == "trial":
                anchor = now if starts.count() - base >= max(0, trial - done) + 1 else None
            else:
                anchor = now if len(journal_keys(out)) >= 2 * TRIALS else None
        if anchor is not None and now >= anchor + offset:
            return now - t0
        assert now - t0 < 300, f"no kill point reached in 300 s ({target})"
        time.sleep(POLL_S)
    return None


def test_kill_9_anywhere_then_resume(llama_server: Path, fixture_models: tuple[Path, Path],
                                     tmp_path: Path) -> None:
    started_at = time.monotonic()
    matrix = write_matrix(tmp_path, llama_server)
    token = uuid.uuid4().hex
    source = str(Path(crossbench.__file__).resolve().parents[1])  # the crossbench under test
    env = {**os.environ, TOKEN_VAR: token,
           "PYTHONPATH": os.pathsep.join([source, *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "crossbench", "matrix", str(matrix), "--progress", "plain"]
    logs = tmp_path / "logs"
    logs.mkdir()
    ref = run_reference(cmd, tmp_path / "reference", env, logs / "reference.err")
    assert not run_processes(token), "the uninterrupted run left a process behind"
    timeline = (f"uninterrupted run {ref.duration_s:.2f} s: trial headers at "
                f"{', '.join(f'{t:.2f}' for t in ref.started_s)} s, journal lines at "
                f"{', '.join(f'{t:.2f}' for t in ref.journaled_s)} s")
    print(timeline)

    rng = random.Random(SEED)
    positions = sorted(rng.uniform(0.0, ref.duration_s) for _ in range(KILLS))
    out = tmp_path / "run"
    order: list[tuple[str, int]] = []
    points: list[KillPoint] = [KillPoint(0, "window", None, None, 0)]
    points += [KillPoint(i + 1, "random", p, ref.locate(p), 0) for i, p in enumerate(positions)]
    starts = Starts(out)
    for point in points:
        while True:  # once, or again where the run ended before its kill (re-aimed)
            before = journal_keys(out)
            point.done_before = len(before)
            base = starts.count()
            argv = [*cmd, "--out", str(out), *(["--resume"] if out.exists() else [])]
            if point.kind == "window":
                argv = [sys.executable, "-c", WINDOW_DRIVER, *argv[3:]]
            target = point.target
            if target is not None and target[0] == "trial" and len(before) == 2 * TRIALS:
                # every trial is journaled already: the kill hits a resume of a finished run
                target = point.target = ("setup", 0, target[2] % ref.started_s[0])
            t0 = time.monotonic()
            with (logs / f"kill-{point.index:02d}.err").open("wb") as err:
                proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            if target is None:
                proc.wait(timeout=300)
                point.killed = proc.returncode == -signal.SIGKILL  # the driver's own kill
                point.delay_s = time.monotonic() - t0
            else:
                point.delay_s = wait_for_kill(proc, t0, out, starts, target, len(before),
                                              base)
                if point.delay_s is not None:
                    point.server_alive = any(p.comm == "llama-server" for p in run_processes(token))
                    os.killpg(proc.pid, signal.SIGKILL)
                    point.killed = True
                proc.wait()
            if not order and (out / "state.json").exists():
                order = [(c, int(t)) for c, t in json.loads((out / "state.json").read_text())["order"]]
            msg = f"{timeline}\n{table(points, SEED)}\nlogs: {logs}"
            if not point.killed:
                assert proc.returncode == 0, f"kill {point.index}: exit {proc.returncode}\n{msg}"
                point.done_after = len(journal_keys(out))
                if target is not None and point.reaimed < REAIMS:
                    # the run outran the reference's timeline (a loaded host stretched one
                    # run, not the next): aim again, at half the offset into the same place
                    point.reaimed += 1
                    point.target = (target[0], target[1], target[2] / 2)
                    continue
                point.phase = "ended"
                break
            point.grace_s, left = wait_gone(token)
            assert not left, f"kill {point.index}: processes left after {GRACE_S} s: {left}\n{msg}"
            check_after_kill(out, order, before, starts.count() - base, point, msg)
            point.phase = phase(point, 2 * TRIALS)
            break
    msg = f"{timeline}\n{table(points, SEED)}\nlogs: {logs}"
    print(msg)
    killed = [p for p in points if p.killed]
    assert len([p for p in killed if p.kind == "random"]) >= MIN_KILLS, msg
    # the leftover check is not vacuous: it saw the servers that it later found gone
    assert any(p.server_alive for p in killed), msg

    r = subprocess.run([*cmd, "--out", str(out), "--resume"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:] + "\n" + msg
    assert not run_processes(token), msg
    keys = journal_keys(out)
    assert sorted(keys) == sorted(order) and len(keys) == len(set(keys)) == 2 * TRIALS, msg
    assert all(j["status"] == "ok" for j in read_jsonl(out / "journal.jsonl")), msg
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"] == {"done": 2 * TRIALS, "failed": 0, "missing": 0}, msg
    for d in cell_dirs(out):
        man = json.loads((d / "manifest.json").read_text())
        assert sorted(e["trial"] for e in man["trials"]) == list(range(TRIALS)), msg
        assert man["status"] == "complete", msg
        recs = read_jsonl(d / "requests.jsonl")
        seen = [(int(x["trial"]), int(x["request_index"])) for x in recs]
        assert sorted(seen) == [(t, k) for t in range(TRIALS)
                                for k in range(REQUESTS + WARMUP)], f"{d.name}: {seen}\n{msg}"
        assert all(x["warmup"] == (x["request_index"] < WARMUP) for x in recs), msg
        assert all(x["status"] == "ok" for x in recs), msg
        ref_recs = read_jsonl(tmp_path / "reference" / "cells" / d.name / "requests.jsonl")
        assert len(ref_recs) == len(recs), msg

    r = subprocess.run([sys.executable, "-m", "crossbench", "analyze", str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "analysis.json").exists()
    deposit = tmp_path / "deposit"
    r = subprocess.run([sys.executable, "-m", "crossbench", "archive", str(out), "--out",
                        str(deposit), "--creator", "Tester, Kill"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    zip_path = Path(r.stdout.splitlines()[0])
    assert zip_path.name == "kill-anywhere.zip" and zip_path.exists()
    r = subprocess.run([sys.executable, "-m", "crossbench", "archive", "verify", str(zip_path)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.rstrip().endswith(f"{zip_path}: verified")

    landed = Counter(p.phase for p in points)
    print(f"{len(killed)} kills ({', '.join(f'{n} {k}' for k, n in sorted(landed.items()))}), "
          f"{sum(p.lost for p in points)} trials lost, {sum(p.server_alive for p in killed)} "
          f"with a server up, grace at most {max(p.grace_s for p in killed):.2f} s; "
          f"test took {time.monotonic() - started_at:.1f} s")
