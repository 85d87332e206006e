"""Matrices across GPUs and hosts on Ray: ``crossbench matrix --executor ray``.

Install with ``pip install 'crossbench[ray]'``; Ray is imported only when this executor runs.
A *lane* (a baseline and its speculative cells) is one Ray actor (:class:`LaneWorker`) on
``lane_gpus`` GPUs, running its trials one at a time, so pairs never span cards; the driver
submits one trial at a time per lane and is the journal's only writer, and a lost worker's
trial runs again on a new actor (:func:`partners_elsewhere` reruns finished partners there).
The rules, what is recorded and what was tested: docs/matrix.md, "Running on several GPUs or
hosts (Ray)".
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from crossbench.analysis.confounding import Occasion, occasions, same_occasion
from crossbench.errors import CrossbenchError, RunError, UserError
from crossbench.runner.matrix import Cell, Matrix
from crossbench.runner.matrix_run import (
    LOST_RETRIES,
    Job,
    Progress,
    Tick,
    TrialRunner,
    cell_dir,
    read_journal,
)
from crossbench.store import rundir
from crossbench.store.atomic import JsonlAppender, file_lock
from crossbench.store.rundir import MANIFEST_FIX, read_json_object

RAY_INSTALL = "pip install 'crossbench[ray]'"
"""How to get Ray (the ``ray`` extra)."""


def import_ray() -> ModuleType:
    """The ``ray`` module; a one-line :class:`UserError` naming the extra when it is not
    installed."""
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray, which is not installed",
                        f"{RAY_INSTALL}, or run with --executor local") from None
    return ray


@dataclass
class Lane:
    """Cells that share a card, and their trials still to run (schedule order)."""

    name: str  # the id of the lane's baseline cell
    cells: list[str] = field(default_factory=list)
    todo: list[tuple[str, int]] = field(default_factory=list)


def plan_lanes(cells: Iterable[Cell], todo: Iterable[tuple[str, int]]) -> list[Lane]:
    """The lanes of ``cells``: one per baseline, its speculative cells with it, each with its
    part of ``todo`` in the given order. Lanes with trials to run come first, in the order of
    their first trial; then the others, in the order of their cells."""
    lanes: dict[str, Lane] = {}
    lane_of: dict[str, str] = {}
    for c in cells:
        name = c.baseline or c.id  # a cell's baseline shares its engine, target, load
        lanes.setdefault(name, Lane(name)).cells.append(c.id)
        lane_of[c.id] = name
    first: dict[str, int] = {}
    for i, (cid, t) in enumerate(todo):
        lanes[lane_of[cid]].todo.append((cid, t))
        first.setdefault(lane_of[cid], i)
    busy = sorted((lane for lane in lanes.values() if lane.todo),
                  key=lambda lane: first[lane.name])
    return busy + [lane for lane in lanes.values() if not lane.todo]


def needs_closing(cell: Path) -> bool:
    """Whether a cell directory's summary is missing or older than its manifest (a run
    stopped before the cell was closed)."""
    manifest, summary = cell / rundir.MANIFEST, cell / rundir.SUMMARY
    if not manifest.exists():
        return False
    return not summary.exists() or summary.stat().st_mtime_ns < manifest.stat().st_mtime_ns


def node_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock among the processes of this node (lanes resolving the same fixture
    or Hugging Face file at once make it once)."""
    from crossbench.paths import cache_dir

    return file_lock(cache_dir() / "locks" / f"{name}.lock")


class LaneWorker:
    """One lane's trials, in a Ray actor that holds the lane's GPUs (made remote by
    :class:`RayExecutor`). Messages of a trial (warnings) are returned with its result: the
    driver shows them; nothing is printed here.

    A synchronous actor of one call at a time (Ray's default) runs its methods on the worker
    process's main thread: the thread that starts the servers, whose end their parent-death
    signal follows, so a server lives exactly as long as the worker process.
    """

    def __init__(self, matrix: Matrix, out: str, cells: dict[str, Cell], cwd: str,
                 lane: str) -> None:
        if os.path.isdir(cwd):  # relative model paths mean what they mean to the driver
            os.chdir(cwd)
        ray: Any = import_ray()
        ctx = ray.get_runtime_context()
        self.placement: dict[str, Any] = {
            "executor": "ray", "lane": lane, "node_id": ctx.get_node_id(),
            "actor_id": ctx.get_actor_id(), "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        self.messages: list[str] = []
        self.runner = TrialRunner(matrix, Path(out), cells, self.messages.append,
                                  placement=self.placement)

    def start(self) -> dict[str, Any]:
        """Where this worker runs: ``where`` (the lane, Ray's node id, the actor id and pid,
        the GPU ids Ray assigned and ``CUDA_VISIBLE_DEVICES``; no host name, no address) and
        ``occasion`` (boot id and GPUs, as a trial's provenance would record them)."""
        from crossbench.analysis.confounding import occasion_of
        from crossbench.confounds.provenance import boot_id, engine_environment, gpu_facts

        occasion = occasion_of({"host": {"boot_id": boot_id()}, "gpu": gpu_facts(),
                                "env": engine_environment()})
        return {"where": self.placement, "occasion": occasion}

    def run(self, cid: str, t: int, cooldown_s: float = 0.0) -> dict[str, Any]:
        """Run trial ``t`` of cell ``cid`` after ``cooldown_s``; returns its journal line
        (without attempt and worker), decode rate and messages."""
        self.messages.clear()
        if cooldown_s:
            time.sleep(cooldown_s)
        if cid not in self.runner.sessions:
            with node_lock("models"):
                self.runner.open(cid)
        line, entry = self.runner.run(cid, t)
        return {"line": line, "tok_s": (entry.get("load") or {}).get("pooled_tok_s"),
                "messages": list(self.messages)}

    def finish(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Close the lane's cells (servers stopped, summaries written); their summaries."""
        with node_lock("models"):
            return self.runner.finish(ids)


def partners_elsewhere(lane: Lane, pending: Iterable[tuple[str, int]],
                       ran: Mapping[str, Mapping[int, Occasion]], here: Occasion,
                       order: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Finished trials of ``lane`` that pair with a ``pending`` one but ran on another
    occasion than ``here`` (``ran``: each cell's trials and where they ran, from its
    manifest): they run again first, here, so that no pair spans two cards. A pair is trial
    k of a speculative cell and trial k of the lane's baseline. In the schedule's order."""
    todo = set(pending)
    redo: set[tuple[str, int]] = set()
    for cid, k in todo:
        partners = [c for c in lane.cells if c != cid] if cid == lane.name else [lane.name]
        for p in partners:
            where = ran.get(p, {}).get(k)
            if (p, k) not in todo and where is not None and not same_occasion(where, here):
                redo.add((p, k))
    return [x for x in order if x in redo]


@dataclass
class _Active:
    """A lane being run: its actor, what is left, where its worker runs."""

    lane: Lane
    actor: Any
    queue: deque[tuple[str, int]]
    placement: dict[str, Any] | None = None
    attempt: int = 0  # attempts of the trial at the queue's head (lost workers)
    ran: bool = False  # a trial ran on this worker (cooldown before the next)
    starts_lost: int = 0  # workers lost before they reported where they run
    closing_attempts: int = 0
    rerun: set[tuple[str, int]] = field(default_factory=set)  # run again for pairing


class RayExecutor:
    """Lanes on Ray actors, one trial at a time per lane (module docstring).

    ``address``: an existing cluster (``ray.init(address=...)``); else Ray's own lookup
    (``RAY_ADDRESS``, then a cluster started with ``ray start`` on this host), else a local
    cluster is started for the run and stopped after it. A process that already called
    ``ray.init`` is used as it is and left connected. ``init_options`` go to ``ray.init`` when
    this executor calls it (e.g. ``num_gpus`` for a local cluster of logical GPUs).
    """

    def __init__(self, address: str | None = None, lane_gpus: int = 1,
                 init_options: Mapping[str, Any] | None = None) -> None:
        if lane_gpus < 1:
            raise UserError(f"--lane-gpus {lane_gpus}: a lane needs at least one GPU",
                            "use --lane-gpus 1 (or more for a server spread over GPUs)")
        self.address, self.lane_gpus = address, lane_gpus
        self.init_options = dict(init_options or {})
        self.ray: Any = import_ray()
        self.slots = 0
        self._owned = False
        self._actors: list[Any] = []

    def connect(self, progress: Progress) -> None:
        """Join (or start) the cluster and count how many lanes fit at once."""
        ray = self.ray
        if not ray.is_initialized():
            self._init()
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            per_node = [int(float(n.get("Resources", {}).get("GPU", 0)) // self.lane_gpus)
                        for n in nodes]
            self.slots = sum(per_node)
            if not self.slots:
                gpus = ", ".join(f"{n.get('Resources', {}).get('GPU', 0):g}" for n in nodes)
                raise UserError(f"no node of the Ray cluster has {self.lane_gpus} GPU(s) for a "
                                f"lane (GPUs per node: {gpus or 'no nodes'})",
                                "add GPU nodes, lower --lane-gpus, or run with --executor "
                                "local")
        except BaseException:
            self.close()
            raise
        total = sum(float(n.get("Resources", {}).get("GPU", 0)) for n in nodes)
        progress(f"ray: {len(nodes)} node(s), {total:g} GPU(s): up to {self.slots} lane(s) at "
                 f"once, {self.lane_gpus} GPU(s) each")

    def _init(self) -> None:
        """``ray.init``: join ``address`` (else the cluster Ray finds), else start a local
        one."""
        ray = self.ray
        options: dict[str, Any] = {"log_to_driver": False, **self.init_options}
        if self.address is None:
            options.setdefault("include_dashboard", False)
        try:
            ray.init(address=self.address, **options)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
            why = " ".join(str(e).split())[:300]
            if self.address is not None:
                raise UserError(f"cannot connect to the Ray cluster at --address "
                                f"{self.address} ({why})",
                                "start it (`ray start --head` on its head node) or fix "
                                "--address (the head's host:port, 6379 by default)") from None
            raise RunError(f"could not start or join a Ray cluster ({why})",
                           "see Ray's logs under /tmp/ray/session_latest/logs, check "
                           "RAY_ADDRESS, or join a running cluster with --address") from None
        self._owned = True

    def close(self) -> None:
        """Kill this run's actors (their servers die with them); disconnect from the cluster
        if this executor connected (a local cluster it started stops)."""
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self._actors.clear()
        if self._owned:
            self.ray.shutdown()
            self._owned = False

    @staticmethod
    def _check_started(e: BaseException, lane: str) -> None:
        """A worker whose ``__init__`` failed was never running: starting another one would
        fail alike, so the run stops (:class:`RunError`) instead of journaling lost trials."""
        if getattr(e, "actor_init_failed", False):
            raise RunError(f"the Ray worker of lane {lane} could not start ({_one_line(e)})",
                           "install this crossbench version (and the engines) on every node "
                           "of the cluster; Ray's worker logs hold the traceback") from None

    def execute(self, job: Job, journal: JsonlAppender) -> dict[str, dict[str, Any]]:
        """Run the lanes of ``job``, as many at once as there are slots; journal each trial
        here, as it ends (module docstring)."""
        ray = self.ray
        m = job.matrix
        lanes = plan_lanes(job.cells.values(), job.todo)
        waiting = deque(lane for lane in lanes if lane.todo or any(
            needs_closing(cell_dir(job.out, cid)) for cid in lane.cells))
        worker_cls = ray.remote(num_gpus=self.lane_gpus, num_cpus=0, max_restarts=0,
                                max_task_retries=0)(LaneWorker)
        out, cwd = str(job.out.resolve()), os.getcwd()
        ex = ray.exceptions  # Ray's errors of a worker process or node that went away
        lost = (ex.RayActorError, ex.WorkerCrashedError, ex.NodeDiedError, ex.ObjectLostError,
                ex.OutOfMemoryError)
        # ref -> (lane, what: "start" | "trial" | "finish", cell, trial)
        pending: dict[Any, tuple[_Active, str, str, int]] = {}
        summaries: dict[str, dict[str, Any]] = {}
        total, finished, failures = len(job.todo), 0, job.failures
        last: float | None = None
        t0 = time.monotonic()
        stops = None  # the sequential rule, consulted by the driver alone
        if m.sequential is not None:
            from crossbench.runner.stopping import StopController

            stops = StopController(m, job.out, job.cells,
                                   {cid: cell_dir(job.out, cid) for cid in job.cells})
            done = read_journal(job.out)

        def eta() -> float | None:
            return ((time.monotonic() - t0) / finished * (total - finished)) if finished \
                else None

        def new_actor(st: _Active) -> None:
            st.actor = worker_cls.remote(
                m, out, {cid: job.cells[cid] for cid in st.lane.cells}, cwd, st.lane.name)
            self._actors.append(st.actor)
            st.placement, st.ran = None, False
            pending[st.actor.start.remote()] = (st, "start", "", -1)

        def retire(st: _Active) -> None:
            with contextlib.suppress(Exception):
                ray.kill(st.actor, no_restart=True)
            if st.actor in self._actors:
                self._actors.remove(st.actor)

        def submit(st: _Active) -> None:
            while stops is not None and st.queue and not st.attempt and \
                    stops.skip(st.queue[0][0]):
                st.queue.popleft()  # its cell stopped: the trial is not needed
            if st.queue:
                cid, t = st.queue[0]
                if not st.attempt:
                    st.attempt = job.attempts.get((cid, t), 0) + 1
                job.on_tick(Tick(finished, total, job.done_before, cid, t, m.trials,
                                 failures, eta(), last))
                ref = st.actor.run.remote(cid, t, m.cooldown_s if st.ran else 0.0)
                pending[ref] = (st, "trial", cid, t)
            else:
                pending[st.actor.finish.remote(st.lane.cells)] = (st, "finish", "", -1)

        def started(st: _Active, result: dict[str, Any]) -> None:
            """The worker runs: first run again, here, what pairs with its trials but ran
            elsewhere (another card, or another machine)."""
            nonlocal total
            st.placement = result["where"]
            ran = {cid: occasions(read_json_object(cell_dir(job.out, cid) / rundir.MANIFEST,
                                                   MANIFEST_FIX))
                   for cid in st.lane.cells if rundir.is_run(cell_dir(job.out, cid))}
            redo = partners_elsewhere(st.lane, st.queue, ran, tuple(result["occasion"]),
                                      job.order)
            if redo:
                total += len(redo)
                listed = ", ".join(f"{cid} trial {t + 1}" for cid, t in redo)
                job.progress(f"warning: lane {st.lane.name} now runs on other GPUs "
                             f"({_gpus(st.placement)}) than {listed}, which pair with trials "
                             "still to run: running them again here, so that no pair spans "
                             "two cards")
                st.rerun.update(redo)
                head = st.queue.popleft() if st.attempt and st.queue else None
                st.queue.extendleft(reversed(redo))
                if head is not None:  # a lost trial keeps its attempt count: it runs after
                    st.queue.insert(len(redo), head)
                    job.attempts[head] = st.attempt - 1
                    st.attempt = 0
            submit(st)

        def start_next() -> None:
            lane = waiting.popleft()
            new_actor(_Active(lane, None, deque(lane.todo)))

        def where(st: _Active) -> dict[str, Any]:
            return st.placement or {"executor": "ray", "lane": st.lane.name}

        for _ in range(min(self.slots, len(waiting))):
            start_next()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            st, what, cid, t = pending.pop(ref)
            try:
                result = ray.get(ref)
            except lost as e:
                self._check_started(e, st.lane.name)
                reason = _one_line(e)
                if what == "start":
                    st.starts_lost += 1
                    if st.starts_lost > LOST_RETRIES:
                        raise RunError(f"lane {st.lane.name}: {st.starts_lost} Ray workers "
                                       f"were lost before they could run a trial ({reason})",
                                       "check the nodes (Ray's logs under "
                                       "/tmp/ray/session_latest/logs), then --resume") from None
                elif what == "trial":
                    again = st.attempt <= LOST_RETRIES
                    journal.write({"cell": cid, "trial": t, "status": "failed",
                                   "error": f"worker lost: {reason}", "worker_lost": True,
                                   "attempt": st.attempt, "worker": where(st)})
                    if again:  # not a failure yet: the trial runs again
                        st.attempt += 1
                        job.progress(f"warning: lane {st.lane.name}: the worker running {cid} "
                                     f"trial {t + 1} was lost ({reason}); running it again "
                                     f"on a new worker (attempt {st.attempt} of "
                                     f"{LOST_RETRIES + 1})")
                    else:
                        st.queue.popleft()
                        st.attempt = 0
                        finished += 1
                        failures += 1
                        job.progress(f"warning: lane {st.lane.name}: {cid} trial {t + 1} lost "
                                     f"its worker {LOST_RETRIES + 1} times ({reason}); left "
                                     "failed")
                        job.on_tick(Tick(finished - 1, total, job.done_before, cid, t,
                                         m.trials, failures, eta(), last, ended=True,
                                         status="failed"))
                else:
                    st.closing_attempts += 1
                    if st.closing_attempts > LOST_RETRIES:
                        retire(st)
                        job.progress(f"warning: lane {st.lane.name}: its worker was lost while "
                                     f"closing its cells ({reason}); their summary.json is "
                                     "written by the next --resume")
                        if waiting:
                            start_next()
                        continue
                retire(st)
                new_actor(st)
                continue
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, CrossbenchError | KeyboardInterrupt):
                    raise cause from None
                raise
            if what == "start":
                started(st, result)
                continue
            if what == "finish":  # the lane is closed
                summaries.update(result)
                retire(st)
                if waiting:
                    start_next()
                continue
            line = {**result["line"], "attempt": st.attempt, "worker": where(st)}
            if (cid, t) in st.rerun:
                line["rerun"] = "pairing"
                st.rerun.discard((cid, t))
            journal.write(line)
            if stops is not None:
                done[(cid, t)] = line
                stops.after_trial(cid, done, job.progress)
            st.queue.popleft()
            st.attempt, st.ran = 0, True
            finished += 1
            if line["status"] != "ok":
                failures += 1
            last = result["tok_s"] or last
            for msg in result["messages"]:
                if msg.startswith("warning: "):
                    job.progress(f"warning: {cid} trial {t + 1}: "
                                 f"{msg.removeprefix('warning: ')}")
            job.on_tick(Tick(finished - 1, total, job.done_before, cid, t, m.trials, failures,
                             eta(), last, ended=True, status=line["status"]))
            submit(st)
        return summaries


def _gpus(placement: Mapping[str, Any]) -> str:
    """A worker's GPUs as a short phrase: Ray's GPU ids and node."""
    ids = ",".join(placement.get("gpu_ids") or []) or "none"
    return f"GPU {ids} of Ray node {str(placement.get('node_id'))[:12]}"


def _one_line(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__
