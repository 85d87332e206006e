"""Run a matrix: every (cell, trial) of the schedule, resumable after any interruption.

The run directory (matrix.yaml, state.json, journal.jsonl, cells/<cell>/, summary.json), what
a kill or a torn journal line costs and how ``--resume`` repairs it: docs/matrix.md "Run
directory". Who runs the trials is an :class:`Executor`: :class:`LocalExecutor` (the default,
one trial at a time in this process) or ``crossbench.runner.ray_exec.RayExecutor`` (lanes on
the GPUs of a Ray cluster; a lost worker's trial runs again up to :data:`LOST_RETRIES` times:
docs/matrix.md "Running on several GPUs or hosts (Ray)"). Both run each trial through
:class:`TrialRunner` and leave the journal to one writer, the process that called
:func:`run_matrix`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

from crossbench.engines.base import EngineServer
from crossbench.errors import UserError
from crossbench.host import hardware_mismatch
from crossbench.runner.config import RunConfig
from crossbench.runner.matrix import (
    Cell,
    Matrix,
    MatrixSource,
    ThermalGate,
    expand,
    matrix_start_spread,
    read_matrix,
    run_order,
    server_groups,
    validate_cells,
)
from crossbench.runner.single import Look, RunSession, SharedStart
from crossbench.store import rundir
from crossbench.store.atomic import (
    JsonlAppender,
    cut_torn_tail,
    scan_jsonl,
    torn_tail,
    write_bytes_atomic,
    write_json_atomic,
)
from crossbench.store.rundir import (
    IMPORT_KIND,
    MATRIX_KIND,
    check_new_out,
    check_state,
    make_out_dir,
    read_json_object,
    read_predictions,
    read_stops,
)
from crossbench.store.rundir import STATE_SCHEMA as STATE_SCHEMA

STATE_FIX = ("journal.jsonl and cells/ are intact: restore state.json from a copy, or run the "
             "matrix again with a new --out (each folder under cells/ is a run directory that "
             "`crossbench analyze` reads on its own)")
"""The fix of a state.json that cannot be used."""
RESUME_KEYS = ("schema_version", "kind", "study", "trials", "cells", "matrix_sha256", "order")
"""What --resume needs of state.json (``store.rundir.STATE_KEYS``)."""
STATUS_KEYS = ("study", "trials", "cells")
"""What ``crossbench status`` needs of state.json (an import's has them too)."""
JOURNAL_FIX = ("a crash only ever tears the last line: restore journal.jsonl from a copy, or "
               "run the matrix again with a new --out")
TORN_TEXT_MAX = 4096
"""Most characters of a torn journal tail kept in its ``journal_repairs`` note."""
LOST_RETRIES = 2
"""Times a trial runs again after its worker process was lost (then it is left failed): a
worker lost once is bad luck (a node restarted, the OOM killer); lost three times on the same
trial, the trial itself is the likely cause."""
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Tick:
    """Where a matrix run stands: emitted before (``ended=False``) and after each trial."""

    index: int  # 0-based position in this invocation's to-do list
    total: int  # trials this invocation runs
    done_before: int  # trials a resumed run found finished
    cell: str
    trial: int  # 0-based
    trials: int
    failures: int  # failed trials so far, including earlier invocations
    eta_s: float | None
    last_tok_s: float | None
    ended: bool = False
    status: str | None = None  # the trial's outcome when ended


def cell_dir(out: Path, cell_id: str) -> Path:
    """Folder of one cell's run directory."""
    return out / rundir.cell_folder(cell_id)


def _resolve(ref: str) -> str:
    """A model reference as a local path (fixtures are made, hf files fetched, on first use)."""
    if ref.startswith("fixture:"):
        from crossbench.fixtures.resolve import (
            DRAFTER_ROLES,
            MTP_ROLES,
            ensure_drafter,
            ensure_fixtures,
            ensure_hf_fixture,
            ensure_mtp_target,
            ensure_mtp_target_hf,
            quantize,
        )
        from crossbench.runner.matrix import parse_fixture_ref

        shape, role, quant = parse_fixture_ref(ref, "model")
        if role in MTP_ROLES and quant == "hf":  # the HF folder alone: no conversion
            return str(ensure_mtp_target_hf(shape, role=role))
        if role in DRAFTER_ROLES or role in MTP_ROLES:  # converted by llama.cpp's converter
            hf_dir, gguf = (ensure_mtp_target(shape, role=role) if role in MTP_ROLES
                            else ensure_drafter(shape, role))
            return str(hf_dir if quant == "hf" else quantize(gguf, quant) if quant else gguf)
        if quant == "hf":  # the Hugging Face folder of the same tensors (vLLM)
            return str(ensure_hf_fixture(shape, role))
        target, draft = ensure_fixtures(shape)
        path = target if role == "target" else draft
        return str(quantize(path, quant) if quant else path)
    if ref.startswith("hf://") and ref.count("/") < 4:
        return ref  # a whole repository (hf://OWNER/REPO@REV): the engine fetches it
    if ref.startswith("hf://"):
        from crossbench.models import parse_model_ref, resolve_model

        return str(resolve_model(parse_model_ref(ref)))
    return ref


def run_config(cell: Cell, trials: int, fresh_server: bool, resolve: bool = True,
               telemetry_hz: float = 10.0, gpu_busy: str = "warn",
               trials_per_start: int = 1) -> RunConfig:
    """The `crossbench run` configuration of one cell, with model files resolved."""
    cfg = copy.deepcopy(cell.engine_config)  # resolved below; the cell stays as expanded
    if resolve:
        cfg["model"] = _resolve(cfg["model"])
        if "draft_model" in cfg["spec"]:
            cfg["spec"]["draft_model"] = _resolve(cfg["spec"]["draft_model"])
    return RunConfig.model_validate({"engine": cell.engine_kind, "engine_config": cfg,
                                     "load": cell.load, "trials": trials,
                                     "fresh_server": fresh_server,
                                     "trials_per_start": trials_per_start,
                                     "telemetry_hz": telemetry_hz, "gpu_busy": gpu_busy,
                                     "model_refs": cell.model_refs})


def select(cells: list[Cell], only: tuple[str, ...], skip: tuple[str, ...]) -> list[Cell]:
    """Cells chosen by ``--only`` and ``--skip``. Each flag's value is ``KEY=VALUE`` or several
    joined by commas (``arm=draft-a0.9,n=2``), which match together. A cell is run when, for
    every key named by ``--only``, it matches one of that key's values (``--only n=2 --only
    n=4``: n is 2 or 4; ``--only engine=vllm --only n=2``: both), and it matches no ``--skip``
    in full (``--skip arm=draft-a0.9,n=2`` leaves out only that arm's n=2 cells)."""
    def parse(items: tuple[str, ...], flag: str) -> list[list[tuple[str, str]]]:
        out = []
        for it in items:
            conj = []
            for part in it.split(","):
                key, sep, val = part.strip().partition("=")
                if not sep or key not in cells[0].coords:
                    raise UserError(f"{flag} {it!r} is not KEY=VALUE[,KEY=VALUE...] with "
                                    "known keys", f"keys: {', '.join(cells[0].coords)}")
                conj.append((key, val))
            out.append(conj)
        return out

    o, s = parse(only, "--only"), parse(skip, "--skip")
    only_by_key: dict[str, list[list[tuple[str, str]]]] = {}
    for conj in o:  # a multi-key --only is grouped under its first key
        only_by_key.setdefault(conj[0][0], []).append(conj)

    def hit(c: Cell, conj: list[tuple[str, str]]) -> bool:
        return all(str(c.coords[k]) == v for k, v in conj)

    return [c for c in cells
            if all(any(hit(c, conj) for conj in group) for group in only_by_key.values())
            and not any(hit(c, conj) for conj in s)]


def read_journal(out: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Finished trials by (cell id, trial), from the journal's complete lines (a torn last
    line, left by a crash during an append, is skipped); a line that is not a journal entry
    is a :class:`UserError` naming the file and line."""
    path = out / rundir.JOURNAL
    if not path.exists():
        return {}
    scan = scan_jsonl(path)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    for r, line in zip(scan.records, scan.lines, strict=True):
        cell, trial, status = r.get("cell"), r.get("trial"), r.get("status")
        if not (isinstance(cell, str) and type(trial) is int and trial >= 0
                and isinstance(status, str)):
            raise UserError(f"{path} line {line} is not a journal entry (it needs a cell, a "
                            "trial number and a status)", JOURNAL_FIX)
        done[(cell, trial)] = r
    return done


def repair_journal(out: Path, state: dict[str, Any], progress: Progress) -> None:
    """Cut a torn last line off the journal before anything is appended to it: the cut is
    recorded in state.json ``journal_repairs`` first (a kill in between records it again,
    once), then made, then said on ``progress``."""
    path = out / rundir.JOURNAL
    torn = torn_tail(path)
    if not torn:
        return
    note = {"offset": path.stat().st_size - len(torn), "bytes": len(torn),
            "text": torn.decode("utf-8", "replace")[:TORN_TEXT_MAX]}
    notes = state.setdefault("journal_repairs", [])
    if not notes or {k: notes[-1].get(k) for k in note} != note:
        notes.append({"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **note})
        write_json_atomic(out / rundir.STATE, state)
    cut_torn_tail(path)
    progress(f"warning: {path} ended in an incomplete line ({len(torn)} bytes without a "
             "newline, left by a crash during a write); removed it before appending "
             "(recorded in state.json journal_repairs); the trial it was for runs again")


def read_state(out: Path, need: tuple[str, ...] = RESUME_KEYS) -> dict[str, Any]:
    """``out/state.json``, checked: a :class:`UserError` names the file and what to do when it
    cannot be read, is of a newer format, or lacks (or has malformed) any key of ``need``."""
    path = out / rundir.STATE
    state = read_json_object(path, STATE_FIX)
    kinds = (MATRIX_KIND,) if "order" in need else (MATRIX_KIND, IMPORT_KIND)
    if state.get("kind") == IMPORT_KIND and IMPORT_KIND not in kinds:
        raise UserError(f"--out {out} holds an import (state.json), not a matrix run",
                        "choose a new --out (an import is never written into)")
    check_state(path, state, kinds, need, STATE_FIX)
    return state


@dataclass
class _Live:
    """The one shared server start alive (``share_servers``): its group and round, who
    started it, and each cell's first trial on it."""

    group: int
    round: int
    server: EngineServer
    started_by: tuple[str, int]
    starter: RunSession
    """The session of the cell that started it: its server.log holds the server's output."""
    firsts: dict[str, int] = field(default_factory=dict)
    served: int = 0


class TrialRunner:
    """Runs trials of a matrix's cells in this process: the per-trial step every executor
    shares. Each cell's :class:`RunSession` is opened on its first trial (continuing the
    cell's directory when it exists); the thermal gate is applied before each trial.
    ``placement`` (where a scheduler put this process) goes into every trial's provenance.

    With ``share_servers`` one server start serves every cell of its server group
    (:func:`crossbench.runner.matrix.server_groups`) in a round of the schedule: the runner
    keeps it across the cells' trials while the next trial of the schedule belongs to the
    same group and round, and each trial records the start as its own (its first trial on
    it) and who started it (``reuse.started_by``)."""

    def __init__(self, m: Matrix, out: Path, cells: Mapping[str, Cell],
                 progress: Progress = lambda _: None,
                 placement: Mapping[str, Any] | None = None) -> None:
        self.m, self.out, self.cells, self.progress = m, out, cells, progress
        self.placement = placement
        self.sessions: dict[str, RunSession] = {}
        self.groups = server_groups(list(cells.values())) if m.share_servers else None
        self.live: _Live | None = None

    def _config(self, cid: str) -> RunConfig:
        return run_config(self.cells[cid], self.m.trials, self.m.fresh_server,
                          telemetry_hz=self.m.telemetry_hz, gpu_busy=self.m.gpu_busy,
                          trials_per_start=self.m.trials_per_start)

    def open(self, cid: str) -> RunSession:
        """The session of cell ``cid``, opened (model files resolved, inputs checked) on
        first use."""
        if cid not in self.sessions:
            d = cell_dir(self.out, cid)
            self.sessions[cid] = RunSession(self._config(cid), d, progress=self.progress,
                                            resume=rundir.is_run(d),
                                            placement=self.placement,
                                            share_servers=self.groups is not None)
        return self.sessions[cid]

    def run(self, cid: str, t: int, on_start: Callable[[], None] = lambda: None,
            after: tuple[str, int] | None = None,
            look: Look | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run trial ``t`` of cell ``cid``; ``on_start`` is called once the session is open
        and the gate passed; ``after`` is the schedule's next trial (with shared servers:
        whether the start is kept for it); ``look``: the looks inside the trial
        (``sequential.look_every``). Returns (the journal line, the trial's manifest
        entry)."""
        session = self.open(cid)
        shared = self._shared(cid, t, after) if self.groups is not None else None
        gate = _gate(self.m.thermal_gate, self.progress)
        on_start()
        entry = session.run_trial(t, shared, look)
        if self.live is not None and self.live.server.pid is None:
            self.live = None  # stopped: at its group's last trial of the round, or failed
        line = {"cell": cid, "trial": t, "status": entry["status"], "error": entry["error"],
                **({"thermal_gate": gate} if gate is not None else {})}
        return line, entry

    def _shared(self, cid: str, t: int, after: tuple[str, int] | None) -> SharedStart:
        """The shared start trial ``t`` of ``cid`` runs on: the live one when it serves this
        trial's group and round, else a new one (any other still alive is stopped first:
        one server at a time)."""
        assert self.groups is not None
        group, rnd, block = self.groups[cid], t // self.m.block, self.m.block
        live = self.live
        if live is not None and (live.group, live.round) != (group, rnd):
            self.stop_live()
            live = None
        if live is None:
            session = self.sessions[cid]
            live = self.live = _Live(group, rnd, session.new_server(), (cid, t), session)
        first = live.firsts.setdefault(cid, t)
        keep = after is not None and after[0] in self.groups and \
            (self.groups[after[0]], after[1] // block) == (group, rnd)
        start = SharedStart(live.server, first, live.served, keep,
                            None if live.started_by[0] == cid else live.started_by,
                            live.starter.scrub_log)
        live.served += 1
        return start

    def stop_live(self) -> None:
        """Stop the shared start still alive, if any (its log scrubbed)."""
        if self.live is not None:
            self.live.server.stop()
            self.live.starter.scrub_log()
            self.live = None

    def finish(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Close every cell opened here and those of ``ids`` that have a directory (stop
        any server, write the summary); returns their summaries."""
        self.stop_live()
        for cid in ids:
            if cid not in self.sessions and rundir.is_run(cell_dir(self.out, cid)):
                self.sessions[cid] = RunSession(self._config(cid), cell_dir(self.out, cid),
                                                resume=True)
        return {cid: s.finish() for cid, s in self.sessions.items()}


@dataclass
class Job:
    """What an executor is given: the trials to run, in the schedule's order, and where the
    run stands."""

    matrix: Matrix
    out: Path
    cells: dict[str, Cell]  # the selected cells by id
    todo: list[tuple[str, int]]  # (cell id, trial) in the schedule's order
    done_before: int  # trials a resumed run found finished
    failures: int  # failed trials so far (earlier invocations)
    progress: Progress = lambda _: None
    on_tick: Callable[[Tick], None] = lambda _: None
    attempts: dict[tuple[str, int], int] = field(default_factory=dict)
    """Attempts a trial of ``todo`` already had that ended with a lost worker."""
    order: list[tuple[str, int]] = field(default_factory=list)
    """The whole schedule of the selected cells, finished trials included."""


class Executor(Protocol):
    """Who runs a matrix's trials. The caller (:func:`run_matrix`) owns the journal: an
    executor appends one line per finished trial to the journal it is given, from this
    process only."""

    def connect(self, progress: Progress) -> None:
        """Get ready (e.g. join a cluster) once ``--out`` has been checked and before
        anything is written to it; a :class:`UserError` here leaves nothing behind. Called
        at most once; :meth:`close` is called even when it never was."""

    def execute(self, job: Job, journal: JsonlAppender) -> dict[str, dict[str, Any]]:
        """Run ``job.todo``, journaling each trial as it ends; returns the summary of every
        selected cell that has a directory and was closed."""
        ...

    def close(self) -> None:
        """Release what :meth:`connect` took (also after an error or an interrupt)."""


class LocalExecutor:
    """The schedule in this process, one trial at a time, in order (``--executor local``)."""

    def connect(self, progress: Progress) -> None:
        """Nothing to join."""

    def close(self) -> None:
        """Nothing to release."""

    def execute(self, job: Job, journal: JsonlAppender) -> dict[str, dict[str, Any]]:
        """Run every trial of ``job.todo`` in order (module docstring)."""
        m, todo = job.matrix, job.todo
        runner = TrialRunner(m, job.out, job.cells, job.progress)
        t0 = time.monotonic()
        failures = job.failures
        last: float | None = None
        stops = None
        if m.sequential is not None:
            from crossbench.runner.stopping import StopController

            stops = StopController(m, job.out, job.cells,
                                   {cid: cell_dir(job.out, cid) for cid in job.cells})
            done = read_journal(job.out)
        for i, (cid, t) in enumerate(todo):
            if stops is not None and stops.skip(cid):
                continue
            def start(i: int = i, cid: str = cid, t: int = t, failures: int = failures,
                      last: float | None = last) -> None:
                eta = (time.monotonic() - t0) / i * (len(todo) - i) if i else None
                job.on_tick(Tick(i, len(todo), job.done_before, cid, t, m.trials, failures,
                                 eta, last))

            after = next((x for x in islice(todo, i + 1, None)  # no copy per trial
                          if stops is None or not stops.skip(x[0])), None)
            look = stops.look(cid, t, done, job.progress) if stops is not None else None
            line, entry = runner.run(cid, t, on_start=start, after=after, look=look)
            if entry["status"] != "ok":
                failures += 1
            last = (entry.get("load") or {}).get("pooled_tok_s") or last
            journal.write(line)
            if stops is not None:
                done[(cid, t)] = line
                stops.after_trial(cid, done, job.progress)
            eta = (time.monotonic() - t0) / (i + 1) * (len(todo) - i - 1)
            job.on_tick(Tick(i, len(todo), job.done_before, cid, t, m.trials, failures, eta,
                             last, ended=True, status=entry["status"]))
            if m.cooldown_s and i + 1 < len(todo):
                time.sleep(m.cooldown_s)
        return runner.finish(job.cells)


def retry_attempts(done: Mapping[tuple[str, int], Mapping[str, Any]]
                   ) -> dict[tuple[str, int], int]:
    """Trials whose last journal line is a lost worker with attempts left
    (:data:`LOST_RETRIES`), with the attempts they had: ``--resume`` runs them again."""
    out: dict[tuple[str, int], int] = {}
    for key, r in done.items():
        attempt = r.get("attempt")
        if r.get("worker_lost") is True and type(attempt) is int and \
                attempt <= LOST_RETRIES:
            out[key] = attempt
    return out


def run_matrix(path: Path | MatrixSource, out: Path, resume: bool = False,
               only: tuple[str, ...] = (), skip: tuple[str, ...] = (), dry_run: bool = False,
               progress: Progress = lambda _: None,
               on_tick: Callable[[Tick], None] = lambda _: None,
               executor: Executor | None = None) -> dict[str, Any]:
    """Run (or with ``dry_run`` print) a matrix's schedule; returns the matrix summary.

    ``progress`` gets messages (warnings, each trial's steps); ``on_tick`` gets a :class:`Tick`
    before and after every trial (the CLI draws its live view from them). ``executor`` runs
    the trials (default :class:`LocalExecutor`); it is connected once ``out`` has been checked
    (a new run's directory may be made, a run to resume continued), before anything is
    written, and closed when the run ends, however it ends. ``path`` may be the file already
    read (:func:`crossbench.runner.matrix.read_matrix`): it is read once either way, and the
    bytes parsed are the bytes digested and copied into ``out``.
    """
    source = path if isinstance(path, MatrixSource) else read_matrix(path)
    m, path = source.matrix, source.path
    cells = expand(m, path)
    for note in validate_cells(m, cells, path):  # what validate prints, also before a run
        progress(f"note: {note}")
    cells = select(cells, only, skip)
    if not cells:
        raise UserError("--only/--skip leave no cells", "loosen the filters")
    order = run_order(m, cells)
    by_id = {c.id: c for c in cells}
    if dry_run:
        return {"dry_run": [{"cell": cid, "trial": t,
                             "argv": _unstarted(m, by_id[cid]).command()}
                            for cid, t in order]}
    _check_versions(m, cells)
    executor = executor or LocalExecutor()
    if m.share_servers and not isinstance(executor, LocalExecutor):
        executor.close()
        raise UserError("share_servers: a shared start serves cells one after the other in "
                        "this process, and this executor runs them apart (Ray lanes)",
                        "run the matrix with --executor local, or set share_servers: false")
    if m.sequential is not None and m.sequential.look_every is not None and \
            not isinstance(executor, LocalExecutor):
        executor.close()
        raise UserError("sequential.look_every: a look inside a trial is taken in the process "
                        "that runs it, and this executor runs trials in Ray lanes",
                        "run the matrix with --executor local, or drop look_every")
    try:
        cell_summaries = _run(m, source, out, resume, cells, order, executor, progress,
                              on_tick)
    finally:
        executor.close()
    summary = matrix_status(out, cell_summaries)
    write_json_atomic(out / rundir.SUMMARY, summary)
    return summary


def _run(m: Matrix, source: MatrixSource, out: Path, resume: bool, cells: list[Cell],
         order: list[tuple[str, int]], executor: Executor, progress: Progress,
         on_tick: Callable[[Tick], None]) -> dict[str, dict[str, Any]]:
    """Check ``out``, connect ``executor``, open (or continue) the run directory and have
    ``executor`` run what the journal lacks; returns the cell summaries."""
    path, digest = source.path, source.digest
    state_path = out / rundir.STATE
    try:
        started = state_path.exists()
    except OSError as e:
        raise UserError(f"--out {out} cannot be read ({e.strerror or e})",
                        "choose an --out you can read and write") from None
    if started:
        state = read_state(out)  # refused when damaged, newer, or not a matrix's
        if not resume:
            raise UserError(f"--out {out} already holds a matrix run",
                            "add --resume to continue it, or choose a new --out")
        if state["matrix_sha256"] != digest:
            raise UserError(f"{path} changed since {out} started (sha256 "
                            f"{state['matrix_sha256'][:12]} then, {digest[:12]} now)",
                            "resume with the same matrix file, or start a new --out")
        _check_held(out, state, cells)
        executor.connect(progress)
        if not (out / rundir.MATRIX_FILE).exists():  # a kill fell between state.json and the copy
            write_bytes_atomic(out / rundir.MATRIX_FILE, source.data)
        if m.start_spread is not None and not (out / rundir.START_SPREAD).exists():
            _copy_start_spread(m, path, out)
        repair_journal(out, state, progress)
    else:
        check_new_out(out, MATRIX_KIND)
        executor.connect(progress)
        make_out_dir(out)
        warning = hardware_mismatch(m.hardware.gpu, m.hardware.gpu_count)
        if warning:
            progress(f"warning: {warning}")
        # state.json first: a directory holding it is a matrix run, which --resume completes
        write_json_atomic(state_path, {
            "schema_version": STATE_SCHEMA, "kind": MATRIX_KIND,
            "matrix_sha256": digest, "study": m.study.name, "trials": m.trials,
            "schedule": {"order": m.schedule.order, "seed": m.schedule.seed},
            "cells": [{"id": c.id, "coords": c.coords, "baseline": c.baseline,
                       "dir": str(cell_dir(out, c.id).relative_to(out))} for c in cells],
            "order": [[cid, t] for cid, t in order],
            "warnings": [warning] if warning else [],
        })
        write_bytes_atomic(out / rundir.MATRIX_FILE, source.data)
        if m.start_spread is not None:
            _copy_start_spread(m, path, out)
    done = read_journal(out)
    again = retry_attempts(done)  # lost workers: their trials run again
    todo = [(cid, t) for cid, t in order if (cid, t) not in done or (cid, t) in again]
    failures = sum(1 for k, r in done.items() if r["status"] != "ok" and k not in again)
    job = Job(m, out, {c.id: c for c in cells}, todo, len(done) - len(again), failures,
              progress, on_tick, again, order)
    with JsonlAppender(out / rundir.JOURNAL) as journal:
        if m.probe_predict is None:
            return executor.execute(job, journal)
        return _run_probed(job, executor, journal)


def _check_held(out: Path, state: dict[str, Any], cells: list[Cell]) -> None:
    """Refuse a resume whose cells (the matrix's, within ``--only``, less ``--skip``) include
    cells the run's state.json does not list: their trials would run, but no reader (status,
    analyze) would ever see them. A run started with filters (or merged from pieces,
    ``crossbench merge``) is resumed with those filters or narrower ones."""
    held = {c["id"] for c in state["cells"]}
    extra = [c.id for c in cells if c.id not in held]
    if extra:
        listed = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3
                                         else "")
        raise UserError(f"--out {out} holds {len(held)} cell(s) and this resume selects "
                        f"{len(extra)} it does not hold ({listed}); a resume only continues "
                        "the cells its state.json lists",
                        "resume with the --only/--skip filters the run was made with (or "
                        "narrower ones), or run the other cells into a new --out and combine "
                        "the runs with `crossbench merge`")


def _copy_start_spread(m: Matrix, path: Path, out: Path) -> None:
    """Write the matrix's start spread into the run directory (what its decisions use)."""
    known = matrix_start_spread(m, path)
    assert known is not None
    write_json_atomic(out / rundir.START_SPREAD, known.to_record())


def _run_probed(job: Job, executor: Executor, journal: JsonlAppender
                ) -> dict[str, dict[str, Any]]:
    """Probe-and-predict (crossbench.runner.probe): the probe phase, the decisions once, the
    cells decided ``measure`` or ``holdout``, then the predicted cells of any sweep whose
    holdout missed; one executor, up to three jobs (``job``: every trial the journal lacks)."""
    from crossbench.runner.probe import ProbeController

    m, progress = job.matrix, job.progress
    assert m.probe_predict is not None
    probe = ProbeController(m.probe_predict, job.out, job.cells)
    summaries: dict[str, dict[str, Any]] = {}

    def later(trials: list[tuple[str, int]], done: dict[tuple[str, int], dict[str, Any]],
              attempts: dict[tuple[str, int], int]) -> None:
        failures = sum(1 for r in done.values() if r["status"] != "ok")
        summaries.update(executor.execute(replace(job, todo=trials, done_before=len(done),
                                                  failures=failures, attempts=attempts),
                                          journal))

    first = [x for x in job.todo if probe.first_phase(x[0])]
    if first or not probe.decided:
        progress(f"probe-and-predict: phase 1, {len(first)} trials (probes, baselines and "
                 "cells outside long sweeps)")
        summaries.update(executor.execute(replace(job, todo=first), journal))
    probe.decide(progress)
    second = [x for x in job.todo if not probe.first_phase(x[0]) and probe.runs(x[0])]
    progress(f"probe-and-predict: phase 2, {len(second)} trials of "
             f"{len({c for c, _ in second})} cells decided measure or holdout")
    later(second, read_journal(job.out), job.attempts)
    rejected = probe.check_holdouts(progress)  # a holdout missed: measure the sweep's rest
    done = read_journal(job.out)
    third = [x for x in job.order if x[0] in rejected and x not in done]
    if third:
        progress(f"probe-and-predict: phase 3, {len(third)} trials of {len(rejected)} "
                 "predicted cells whose sweep's holdout missed its prediction")
        later(third, done, {})
    return summaries


def _check_versions(m: Matrix, cells: list[Cell]) -> None:
    """Refuse to start when an engine build misses its ``requires`` constraint."""
    from crossbench.runner.versions import unmet

    for eid, entry in m.engines.items():
        cell = next((c for c in cells if c.coords["engine"] == eid), None)
        if entry.requires is None or cell is None:
            continue
        why = unmet(entry.requires, _unstarted(m, cell).identity())
        if why:
            raise UserError(f"engines.{eid}.requires: {why}",
                            "install a build that satisfies it, or change `requires`")


def _unstarted(m: Matrix, cell: Cell) -> EngineServer:
    """A server of ``cell`` as it would run, never started (model references unresolved)."""
    from crossbench.engines import registry

    rc = run_config(cell, m.trials, m.fresh_server, resolve=False,
                    trials_per_start=m.trials_per_start)
    return registry.create(rc.engine, rc.engine_config, Path("/dev/null"))


def _gate(gate: ThermalGate | None, progress: Progress) -> dict[str, Any] | None:
    """Run the thermal gate if the matrix has one; warn when it cannot check or times out."""
    if gate is None:
        return None
    from crossbench.telemetry.gpu import thermal_gate

    res = thermal_gate(gate.max_temp_c, gate.timeout_s, gate.poll_s)
    if not res.checked:
        progress(f"warning: thermal gate not applied: {res.reason}; the trial runs ungated "
                 "(remove thermal_gate on hosts without NVIDIA GPUs)")
    elif not res.passed:
        progress(f"warning: thermal gate: {res.reason}; the trial runs hot (raise "
                 "thermal_gate.timeout_s or cooldown_s, or improve cooling)")
    return res.to_dict()


def matrix_status(out: Path, cell_summaries: dict[str, dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """Per cell: trials done / failed / missing, and headline figures where summarized."""
    state_path = out / rundir.STATE
    if not state_path.exists():
        raise UserError(f"{out} holds no matrix run (no state.json)",
                        "point at a `crossbench matrix --out` directory")
    state = read_state(out, STATUS_KEYS)
    journal = read_journal(out)
    warnings: list[str] = []
    torn = len(torn_tail(out / rundir.JOURNAL))
    if torn:
        warnings.append(f"{out / rundir.JOURNAL} ends in an incomplete line ({torn} bytes "
                        "without a newline, left by a crash during a write): it is not "
                        "counted; `crossbench matrix MATRIX_FILE --out "
                        f"{out} --resume` removes it and runs that trial again")
    stops = read_stops(out)
    predicted = {cid: r for cid, r in read_predictions(out).items()
                 if r.get("action") == "predict"}
    rows = []
    for c in state["cells"]:
        got = [journal[(c["id"], t)] for t in range(state["trials"]) if (c["id"], t) in journal]
        missing = state["trials"] - len(got)
        row: dict[str, Any] = {
            "id": c["id"], "baseline": c["baseline"],
            "done": sum(1 for r in got if r["status"] == "ok"),
            "failed": sum(1 for r in got if r["status"] != "ok"),
            "missing": 0 if c["id"] in stops or c["id"] in predicted else missing,
            "errors": [r["error"] for r in got if r["status"] != "ok"],
        }
        if c["id"] in stops:  # the sequential rule settled it: the rest never had to run
            row["stopped"] = missing
            row["stop"] = {k: stops[c["id"]].get(k) for k in ("action", "reason", "ratio",
                                                               "ci", "look")}
        if c["id"] in predicted:  # probe-and-predict: the cost model settled it unrun
            row["predicted"] = missing
            row["prediction"] = {k: predicted[c["id"]]["predicted"].get(k)
                                 for k in ("speedup", "ci95", "verdict")}
        s = (cell_summaries or {}).get(c["id"])
        if s is not None:
            row.update(_headline(s))
        elif (out / c["dir"] / rundir.SUMMARY).exists():
            row.update(read_cell_summary(out / c["dir"] / rundir.SUMMARY, out))
        rows.append(row)
    totals = {k: sum(r[k] for r in rows) for k in ("done", "failed", "missing")}
    if stops:
        totals["stopped"] = sum(r.get("stopped", 0) for r in rows)
    if predicted:
        totals["predicted"] = sum(r.get("predicted", 0) for r in rows)
    return {"schema_version": STATE_SCHEMA, "kind": rundir.MATRIX_SUMMARY_KIND,
            "study": state["study"], "cells": rows, "totals": totals, "warnings": warnings}


def read_cell_summary(path: Path, out: Path) -> dict[str, Any]:
    """A cell's ``summary.json`` for the status table: any version up to this crossbench's
    (the headline figures are alike in all), never a newer one; one that cannot be used is
    an error naming it."""
    fix = (f"`crossbench matrix MATRIX_FILE --out {out} --resume` writes every cell's "
           "summary.json again from its raw records")
    s = rundir.read_summary(path, fix)
    try:
        return _headline(s)
    except (KeyError, TypeError):
        raise UserError(f"{path} is not a complete run summary", fix) from None


def _headline(s: dict[str, Any]) -> dict[str, Any]:
    """A cell summary's figures in the status table."""
    return {"pooled_tok_s": s["throughput"]["pooled_tok_s"],
            "draft_acceptance_rate": s["acceptance"]["draft_acceptance_rate"],
            "mean_acceptance_length": s["acceptance"]["mean_acceptance_length"],
            "integrity_passed": s["integrity"]["passed"]}
