"""``crossbench run``: one engine configuration, N trials, a self-describing run directory.

The run directory (``--out DIR``: manifest, raw records, server log, ``/metrics`` snapshots,
telemetry, summary) is laid out and written by :mod:`crossbench.store.rundir`
(:class:`~crossbench.store.rundir.RunWriter`). Each record is persisted as its request
completes, so a crash or kill loses only requests in flight; the summary is always
recomputed from the raw files (``crossbench summarize DIR``).

No secret is recorded: command lines go through
:func:`~crossbench.confounds.provenance.redact_argv`, and the API key and secret values are
scrubbed from the manifest and, once the server has stopped, from server.log (docs/confounds.md).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from crossbench import __version__
from crossbench.analysis.summary import request_metrics, summarize_run_dir
from crossbench.archive.secrets import SECRET_HASHES, declare_secrets
from crossbench.confounds.provenance import (
    MIN_SCRUB_LEN,
    REDACTED,
    collect,
    is_secret,
    redact_argv,
    scrub,
    secret_values,
)
from crossbench.engines import registry
from crossbench.engines.auth import UNAUTHORIZED, unauthorized
from crossbench.engines.base import EngineServer, MetricsSnapshot
from crossbench.engines.prometheus import total
from crossbench.errors import RunError, UserError
from crossbench.host import HostWindow, cpu_model
from crossbench.load.client import ClientConfig, ConcurrencyMode, LoadStats, RateMode, run_load
from crossbench.load.workloads import RequestSpec, load_workload
from crossbench.models import file_record
from crossbench.runner.config import RunConfig
from crossbench.store.atomic import JsonlAppender, replace_in_file
from crossbench.store.rundir import MANIFEST_SCHEMA as MANIFEST_SCHEMA
from crossbench.store.rundir import (
    RUN_KIND,
    RunWriter,
    check_new_out,
    make_out_dir,
    read_resume_manifest,
)
from crossbench.telemetry import checks as gpu_checks
from crossbench.telemetry.derive import TrialPhases, derive_trial
from crossbench.telemetry.gpu import process_tree
from crossbench.telemetry.sampler import GpuSampler, clock_anchor

Progress = Callable[[str], None]

#: what must be unchanged for a run to resume on a rebuilt or reinstalled engine binary:
#: engine kind, version string, build number and commit, the build recipe of a
#: crossbench-built llama.cpp (variant, CMake flags) and, for engines installed from a pack
#: (crossbench engines install vllm|sglang --from), the pack's payload
SOURCE_IDENTITY: tuple[str, ...] = ("kind", "version", "build_number", "commit",
                                    "build.variant", "build.cmake_flags",
                                    "install.payload_sha256")


def _source_value(engine: dict[str, Any], key: str) -> Any:
    value: Any = engine
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _quiet(_: str) -> None:
    return None


def model_vocab_size(model: Path) -> int | None:
    """Vocabulary size from a GGUF's tokenizer metadata (for random-token workloads)."""
    try:
        from gguf import GGUFReader

        field = GGUFReader(str(model)).fields.get("tokenizer.ggml.tokens")
        return len(field.data) if field is not None else None
    except Exception:
        return None


OTHER_ENGINES_WITHIN = "CROSSBENCH_OTHER_ENGINES_WITHIN"
"""Environment variable: a pid. When set, :func:`other_engine_processes` counts only the
servers that descend from that process: the test suite sets it to its own pid, so servers
that other programs run on the host change no test (unset: every server on the host)."""


def other_engine_processes(own: set[int], within: int | None = None) -> list[tuple[int, str]]:
    """(pid, name) of inference servers running on this host that crossbench did not start
    (every registered engine's process names: ``process_names`` of its registration).

    ``within``: count only servers descended from this pid (default: the pid in
    :data:`OTHER_ENGINES_WITHIN`, else every server)."""
    if within is None and os.environ.get(OTHER_ENGINES_WITHIN, "").isdigit():
        within = int(os.environ[OTHER_ENGINES_WITHIN])
    names = registry.process_names()
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        pid = int(entry.name)
        if pid not in own and pid != os.getpid() and comm.startswith(names):
            found.append((pid, comm))
    if within is not None and found:
        tree = process_tree([within])
        found = [(pid, comm) for pid, comm in found if pid in tree]
    return found


def settled(server: EngineServer, counters: Sequence[str] | None = None,
            timeout_s: float = 10.0, poll_s: float = 0.05) -> MetricsSnapshot:
    """Scrape until nothing runs (the adapter's in-flight gauge) and the counters stopped
    moving between two scrapes: ``counters`` by their totals, else every ``*_total`` sample
    (engines record a step's or a request's counts after they stream its tokens). After
    ``timeout_s`` the last scrape is returned as it is."""
    deadline = time.monotonic() + timeout_s
    prev = server.scrape()
    while True:
        time.sleep(poll_s)
        cur = server.scrape()
        gauge = server.in_flight_metric
        idle = not (total(cur.samples, gauge) if gauge else 0)
        if counters is None:
            still = all(prev.samples.get(k) == v for k, v in cur.samples.items()
                        if k.endswith("_total") or "_total{" in k)
        else:
            still = all(total(cur.samples, n) == total(prev.samples, n) for n in counters)
        if (still and idle) or time.monotonic() > deadline:
            return cur
        prev = cur


class RunSession:
    """One configuration's run directory, filled trial by trial.

    ``crossbench run`` runs its trials in a row; a matrix interleaves the trials of many
    sessions. Inputs are validated when the session is made, before any server starts. With
    ``resume=True`` an existing directory is continued: records of trials that never finished
    (a kill in the middle) are dropped, and a changed engine build, or a manifest that cannot
    be read or is of a newer format, is refused. A new session refuses an ``out`` that is a
    file, under a file, unwritable, or a non-empty directory (``store.rundir.check_new_out``)
    before it writes anything. ``placement`` (where a scheduler runs the trials: the Ray node
    and GPUs of ``crossbench matrix --executor ray``) goes into each trial's provenance.
    """

    def __init__(self, cfg: RunConfig, out: Path, progress: Progress = _quiet,
                 argv: list[str] | None = None, resume: bool = False,
                 placement: Mapping[str, Any] | None = None,
                 share_servers: bool = False) -> None:
        self.cfg, self.out, self.progress = cfg, out, progress
        self.placement = placement  # where a scheduler put the trials (provenance placement)
        self.writer = RunWriter(out)
        self.layout = layout = self.writer.layout
        exists = resume and layout.manifest.exists()
        if not exists:
            check_new_out(out, RUN_KIND)
        if cfg.block > 1 or share_servers:  # a server serves several trials: its reset needs
            cfg = cfg.model_copy(update={"engine_config": registry.reuse_settings(
                cfg.engine, cfg.engine_config, out)})
            self.cfg = cfg
        self._start_trial: int | None = None  # the trial that started the running server
        server = self.new_server()
        server.validate()  # every input checked before anything starts
        for warning in server.warnings():
            progress(f"warning: {warning}")
        self.secrets = _secrets(cfg, server, argv or [])
        model = Path(cfg.engine_config["model"])
        vocab = model_vocab_size(model) if cfg.load.workload.startswith("random:") else None
        workload = load_workload(cfg.load.workload, vocab_size=vocab, seed=cfg.load.seed,
                                 count=cfg.load.requests + cfg.load.warmup)
        if cfg.load.endpoint == "chat" and any(p.token_ids is not None
                                               for p in workload.prompts):
            raise UserError("random:N workloads are token ids, which the chat endpoint cannot "
                            "take", "use --endpoint completions with random:N, or a builtin: "
                            "workload")
        identity = server.identity()
        self._server: EngineServer | None = server
        prompts = workload.prompts
        self.warm = [RequestSpec(p, i) for i, p in enumerate(prompts[:cfg.load.warmup])]
        self.measured = [RequestSpec(p, cfg.load.warmup + i)
                         for i, p in enumerate(prompts[cfg.load.warmup:])]
        engine = {"kind": identity.kind, "version": identity.version,
                  "build_number": identity.build_number, "commit": identity.commit,
                  "binary": identity.binary, "sha256": identity.sha256,
                  "spec_metric_prefix": registry.spec_metric_prefix(cfg.engine),
                  "decode_histograms": registry.decode_histograms(cfg.engine),
                  **identity.extra}
        self.engine = engine
        if exists:
            self.manifest: dict[str, Any] = read_resume_manifest(out)
            self._check_same_engine(engine)
            self.writer.keep_trials(self.finished_trials())
            if self.secrets:  # this session's key may be another: declare it too
                self.manifest[SECRET_HASHES] = declare_secrets(
                    self.secrets, self.manifest.get(SECRET_HASHES))
                self.writer.write_manifest(self.manifest)
            return
        make_out_dir(out)
        self.manifest = {
            "schema_version": MANIFEST_SCHEMA,
            "kind": RUN_KIND,
            "crossbench_version": __version__,
            "created_utc": _now(),
            "argv": redact_argv(argv or []),
            "config": _redacted(cfg.model_dump(mode="json")),
            "engine": engine,
            "models": {k: file_record(Path(v), cfg.model_refs.get(k))
                       for k, v in _model_paths(cfg).items() if Path(v).is_file()},
            "workload": {"spec": workload.spec, "digest": workload.digest,
                         "prompts": len(workload.prompts)},
            "host": {"python": sys.version.split()[0], "platform": platform.platform(),
                     "machine": platform.machine(), "cpu": cpu_model(),
                     "cpus": os.cpu_count()},
            "status": "running",
            "trials": [],
        }
        self.manifest = scrub(self.manifest, self.secrets)
        if self.secrets:  # salted hashes, so that `archive verify` finds them anywhere
            self.manifest[SECRET_HASHES] = declare_secrets(self.secrets)
        self.writer.create(self.manifest)

    def _check_same_engine(self, engine: dict[str, Any]) -> None:
        """On resume: the same build, or the same source (:data:`SOURCE_IDENTITY`) rebuilt,
        recorded in ``engine_epochs``; a changed source is refused (docs/cross-engine.md
        "Resume across machines")."""
        old = self.manifest["engine"]
        epochs = self.manifest.setdefault("engine_epochs", [])
        current = epochs[-1]["sha256"] if epochs else old["sha256"]
        if current == engine["sha256"]:
            return
        changed = [k for k in SOURCE_IDENTITY if _source_value(old, k) !=
                   _source_value(engine, k)]
        if changed:
            what = "; ".join(f"{k}: {_source_value(old, k)} -> {_source_value(engine, k)}"
                             for k in changed)
            raise UserError(f"the engine changed since {self.out} started ({what})",
                            "resume with the same engine build, or start a new --out")
        epochs.append({"first_trial_count": len(self.finished_trials()),
                       "resumed_utc": _now(), "binary": engine["binary"],
                       "sha256": engine["sha256"]})
        self.progress(f"warning: {self.out.name}: the engine binary's hashes differ from the "
                      "run's (same source, rebuilt or reinstalled, e.g. on another machine); "
                      "resuming with the new build recorded in engine_epochs")
        self.writer.write_manifest(self.manifest)

    def finished_trials(self) -> set[int]:
        """Trials with a recorded outcome (ok or failed)."""
        return {int(e["trial"]) for e in self.manifest["trials"]}

    def new_server(self) -> EngineServer:
        """A server of this session's configuration, not started, logging to its server.log
        (a matrix's shared start is made by the session of the cell that starts it)."""
        return registry.create(self.cfg.engine, self.cfg.engine_config, self.layout.server_log)

    def run_trial(self, t: int, shared: SharedStart | None = None,
                  look: Look | None = None) -> dict[str, Any]:
        """Run trial ``t`` (a fresh server unless the config reuses one, or on ``shared``, a
        server start the matrix runner shares between cells); record its outcome. ``look``
        (:data:`Look`) is asked between measured requests whether the trial ends early."""
        cfg = self.cfg
        if t in self.finished_trials():
            # recorded here but run again: the caller's journal lacks it (a matrix killed
            # between this manifest write and its journal line); forget it, records included,
            # so that the trial is recorded once (manifest first: a kill in between leaves
            # records of an unrecorded trial, which a resume drops)
            self.manifest["trials"] = [e for e in self.manifest["trials"] if e["trial"] != t]
            self.writer.write_manifest(self.manifest)
            self.writer.keep_trials(self.finished_trials())
        reuse: dict[str, Any] | None
        if shared is not None:
            server, reuse, keep_running = shared.server, shared.record(), shared.keep_running
            if server.pid is not None:  # running: earlier trials, maybe other cells', used it
                reuse["cache_reset"] = server.reset_cache()
            if shared.started_by is not None:
                self.writer.log_shared(t, *shared.started_by)
        else:
            server, reuse, keep_running = self._own_server(t)
        scrub_log = shared.scrub_log if shared is not None else self.scrub_log
        with self.writer.append_records() as sink:
            try:
                entry = Trial(cfg, t, server, self.writer, self.progress, keep_running,
                              reuse, look).run(self.engine, self.warm, self.measured, sink,
                                               self.placement)
            except BaseException as e:
                server.stop()
                scrub_log()
                self.manifest["status"] = ("interrupted" if isinstance(e, KeyboardInterrupt)
                                           else "failed")
                self.manifest["error"] = scrub(str(e), self.secrets)
                self.writer.write_manifest(self.manifest)
                raise
        if not keep_running or entry.get("status") != "ok":
            if entry.get("status") != "ok":
                server.stop()  # a failed trial's server is not reused
            scrub_log()  # the server has stopped: its log (the starting cell's) is complete
        self.manifest["trials"] = [e for e in self.manifest["trials"] if e["trial"] != t]
        self.manifest["trials"].append(scrub(entry, self.secrets))
        self.writer.write_manifest(self.manifest)
        return entry

    def _own_server(self, t: int) -> tuple[EngineServer, dict[str, Any] | None, bool]:
        """(server, reuse record, keep it running after the trial) of trial ``t`` on this
        session's own server: a start serves a block of trials (block 1: every trial starts
        its own); a trial at a block's start, or after a kill or a failure, starts anew."""
        cfg, block = self.cfg, self.cfg.block
        running = self._server is not None and self._server.pid is not None
        if not running or t % block == 0:
            if running and self._server is not None:
                self._server.stop()
            if self._server is None or self.manifest["trials"] or running:
                self._server = self.new_server()
            self._start_trial = t
        assert self._server is not None
        reuse: dict[str, Any] | None = None
        if block > 1:
            assert self._start_trial is not None
            reuse = {"server_start": self._start_trial, "position": t - self._start_trial}
            if running and t % block != 0:
                reuse["cache_reset"] = self._server.reset_cache()
        keep_running = block > 1 and (t + 1) % block != 0 and t + 1 < cfg.trials
        return self._server, reuse, keep_running

    def scrub_log(self) -> None:
        """Replace the key and secret flag values in server.log (the server has stopped)."""
        replace_in_file(self.layout.server_log, [v.encode() for v in self.secrets],
                        REDACTED.encode())

    def finish(self) -> dict[str, Any]:
        """Stop any server, close the manifest, write and return the summary."""
        if self._server is not None:
            self._server.stop()
            self.scrub_log()
        failed = [e for e in self.manifest["trials"] if e["status"] != "ok"]
        complete = len(self.finished_trials()) >= self.cfg.trials
        self.manifest["status"] = ("failed" if failed else "complete") if complete \
            else "incomplete"
        self.writer.write_manifest(self.manifest)
        summary = summarize_run_dir(self.out)
        self.writer.write_summary(summary)
        return summary


@dataclass(frozen=True)
class Look:
    """Looks inside a trial (the matrix's ``sequential.look_every``): after every ``every``
    measured requests, ``ask(requests sent so far)`` says why the trial ends there, or None
    to go on."""

    every: int
    ask: Callable[[int], str | None]


@dataclass
class SharedStart:
    """A server start the matrix runner shares between cells (``share_servers``), as one
    trial of one cell sees it. The runner keeps the server; the trial starts it when it is
    not running yet, and stops it unless ``keep_running``."""

    server: EngineServer
    start: int
    """This cell's id of the start: its first trial on it (what the analysis resamples)."""
    position: int
    """Trials of any cell this start served before this one."""
    keep_running: bool
    """Whether the next trial of the schedule uses this start too."""
    started_by: tuple[str, int] | None
    """(cell, trial) that started the server, when another cell's trial did."""
    scrub_log: Callable[[], None]
    """Scrubs secrets from the starting cell's server.log once the server has stopped."""

    def record(self) -> dict[str, Any]:
        """The trial's ``reuse`` record (its cache reset is added when the server ran)."""
        rec: dict[str, Any] = {"server_start": self.start, "position": self.position}
        if self.started_by is not None:
            rec["started_by"] = {"cell": self.started_by[0], "trial": self.started_by[1]}
        return rec


def run(cfg: RunConfig, out: Path, progress: Progress = _quiet,
        argv: list[str] | None = None) -> dict[str, Any]:
    """Execute a run and write its directory; returns the summary. See module docstring."""
    session = RunSession(cfg, out, progress, argv)
    try:
        for t in range(cfg.trials):
            session.run_trial(t)
    finally:
        summary = session.finish()
    failures = [f"trial {e['trial']}: {e['error']}" for e in session.manifest["trials"]
                if e["status"] != "ok"]
    if failures:
        raise RunError(f"{len(failures)} of {cfg.trials} trials failed: {'; '.join(failures)}",
                       f"records so far are kept in {out}; see server.log for the cause")
    return summary


class Trial:
    """One trial, step by step: :meth:`run` calls, in order, :meth:`note_reuse`,
    :meth:`preflight` (GPU checks and competing engines, on a server this trial starts),
    :meth:`start_server`, :meth:`record_provenance`, :meth:`drive` (warm-up, the metrics
    snapshot before, the measured requests, the settled snapshot after) and, however the
    trial ends, :meth:`teardown` (stop unless the server is kept for the next trial, VRAM
    release, telemetry, the phase times). Each step records into :attr:`entry`, the trial's
    manifest entry; a step that fails the trial sets its status and error."""

    def __init__(self, cfg: RunConfig, t: int, server: EngineServer, writer: RunWriter,
                 progress: Progress, keep_running: bool,
                 reuse: dict[str, Any] | None, look: Look | None = None) -> None:
        self.cfg, self.t, self.server, self.writer = cfg, t, server, writer
        self.progress, self.keep_running, self.reuse = progress, keep_running, reuse
        self.look = look
        self.entry: dict[str, Any] = {"trial": t, "argv": redact_argv(server.command()),
                                      "status": "ok", "error": None, "started_utc": _now()}
        self.extra: dict[str, Any] = {}  # fields every request record of the trial carries
        self.clock = time.monotonic
        self.t0 = self.clock()
        self.phases: dict[str, float] = {}
        self.entry["phase_s"] = self.phases  # where the trial's wall time went
        self.marks = {"start": time.time_ns()}  # wall-clock marks for the telemetry trace
        self.sampler = (GpuSampler(writer.layout.telemetry(t), rate_hz=cfg.telemetry_hz)
                        if cfg.telemetry_hz else None)
        if self.sampler is not None:
            self.sampler.path.parent.mkdir(exist_ok=True)
        self.idle: dict[int, int] = {}  # GPU memory in use before a server this trial starts

    def warn(self, msg: str) -> None:
        """A warning of this trial: recorded in its entry and said on progress."""
        self.entry.setdefault("warnings", []).append(msg)
        self.progress(f"warning: {msg}")

    def fail(self, error: str) -> dict[str, Any]:
        """End the trial as failed with ``error``; returns its entry."""
        self.entry.update(status="failed", error=error, ended_utc=_now())
        return self.entry

    def run(self, engine: dict[str, Any], warm: list[RequestSpec],
            measured: list[RequestSpec], sink: JsonlAppender,
            placement: Mapping[str, Any] | None) -> dict[str, Any]:
        """Every step in order (class docstring); returns the manifest entry."""
        self.note_reuse()
        started_here = self.server.pid is None
        if started_here:
            if not self.preflight():
                return self.entry
            if not self.start_server():
                return self.entry
        elif self.sampler is not None:
            self.sampler.start()
        self.marks["ready"] = time.time_ns()
        self.record_provenance(engine, placement)
        try:
            self.drive(warm, measured, sink)
        except RunError as e:
            self.entry["status"], self.entry["error"] = "failed", e.one_line()
        finally:
            self.teardown()
        return self.entry

    def note_reuse(self) -> None:
        """On a reused server: record the start this trial shares and whether the cache
        reset worked (a failed reset is a warning)."""
        if self.reuse is None:
            return
        self.entry["reuse"] = self.reuse  # trials share starts: the analysis resamples starts
        self.extra["server_start"] = self.reuse["server_start"]
        reset = self.reuse.get("cache_reset")
        if reset is not None and not reset.get("ok"):
            why = reset.get("reason") or reset.get("error")
            self.warn(f"the server was reused without a cache reset ({why}): earlier "
                      "requests' cache may speed this trial up")

    def preflight(self) -> bool:
        """Before a server this trial starts: GPU checks (``gpu_busy: refuse`` fails the
        trial on a busy GPU), the memory in use, competing inference processes."""
        cfg = self.cfg
        for check in gpu_checks.before_trial():
            if check.status in ("warn", "fail"):
                msg = check.message + (f"; {check.action}" if check.action else "")
                if cfg.gpu_busy == "refuse" and check.id in ("gpu-processes", "gpu-idle"):
                    self.fail(f"refused by gpu_busy: refuse: {msg}")
                    self.progress(f"trial {self.t + 1}/{cfg.trials} refused: {check.message}")
                    return False
                self.warn(msg)
        self.idle = gpu_checks.memory_used_now()
        others = other_engine_processes(set())
        self.entry["other_engines"] = [{"pid": pid, "name": name} for pid, name in others]
        if others:
            listed = ", ".join(f"{name} (pid {pid})" for pid, name in others[:3])
            self.warn(f"other inference processes are running: {listed}; they compete for "
                      "the same cores or GPU and can slow this trial many times over (two "
                      "CPU llama-servers on 2 cores ran 100x slower here): stop them, or "
                      "treat this trial's speed as unreliable")
        return True

    def start_server(self) -> bool:
        """Start the server (the telemetry trace opens first, on the idle GPU) and wait until
        it is ready; a start that fails fails the trial."""
        server = self.server
        self.writer.log_header(self.t, redact_argv(server.command()))
        self.progress(f"trial {self.t + 1}/{self.cfg.trials}: starting {server.kind}")
        if self.sampler is not None:
            self.sampler.start()
        self.marks["start"] = time.time_ns()
        server.start()
        try:
            server.wait_ready()
            self.phases["startup"] = self.clock() - self.t0
        except RunError as e:
            server.stop()
            if self.sampler is not None:
                self.sampler.stop()
            self.fail(e.one_line())
            return False
        self.entry["argv"] = redact_argv(server.command())  # with the port actually bound
        return True

    def record_provenance(self, engine: dict[str, Any],
                          placement: Mapping[str, Any] | None) -> None:
        """The trial's provenance (engine identity, argv, models, placement); the server's
        processes join the telemetry trace."""
        pid = self.server.pid
        if self.sampler is not None and isinstance(pid, int):
            self.sampler.set_pids([pid])  # the server and its children, per-process memory
        self.entry["provenance"] = collect(engine, self.entry["argv"], _model_paths(self.cfg),
                                           self.cfg.model_refs, placement=placement)

    def drive(self, warm: list[RequestSpec], measured: list[RequestSpec],
              sink: JsonlAppender) -> None:
        """The server's props, the warm-up, the metrics snapshot before, the measured
        requests (every record to ``sink``), the settled snapshot after, the load figures."""
        cfg, server, t, entry, phases, clock = (self.cfg, self.server, self.t, self.entry,
                                                self.phases, self.clock)
        entry["server_props"] = _props_subset(server.props())
        client_cfg = _client_config(cfg, server)
        acc = [0.0, 0.0]  # decoded tokens after the first, decode seconds (measured only)
        refused: list[int] = []  # HTTP 401/403 statuses: the API wants a key

        def write(rec: dict[str, Any]) -> None:
            sink.write({"trial": t, **self.extra, **rec})
            if rec.get("http_status") in UNAUTHORIZED:
                refused.append(int(rec["http_status"]))
            if not rec["warmup"] and rec["status"] == "ok":
                m = request_metrics(rec)
                if m["decode_ms"] and m["tokens"]:
                    acc[0] += m["tokens"] - 1
                    acc[1] += m["decode_ms"] / 1e3

        mode: ConcurrencyMode | RateMode = (
            RateMode(rate=cfg.load.rate, seed=cfg.load.seed) if cfg.load.rate
            else ConcurrencyMode(concurrency=cfg.load.concurrency))
        t1 = clock()
        if warm:
            warm_cfg = client_cfg if cfg.load.warmup_max_tokens is None else \
                client_cfg.model_copy(update={"max_tokens": cfg.load.warmup_max_tokens})
            asyncio.run(run_load(warm_cfg, [], mode, write, warmup=warm))
        phases["warmup"] = clock() - t1
        if refused:
            raise unauthorized(refused[0], "the API (warm-up)", server.api_key)
        t1 = clock()
        before = server.scrape()
        self.writer.write_snapshot(t, "before", before.text)
        phases["scrape_write"] = clock() - t1
        self.progress(f"trial {t + 1}/{cfg.trials}: {len(measured)} requests, "
                      f"concurrency {cfg.load.concurrency}")
        window = HostWindow()  # the host side of the measured window, for every engine
        window.start()
        t1 = clock()
        self.marks["measured_start"] = time.time_ns()
        entry["clock"] = clock_anchor()  # maps the records' monotonic times onto the trace's
        stats = self.measure(client_cfg, measured, mode, write)
        self.marks["measured_end"] = time.time_ns()
        phases["measured"] = clock() - t1
        entry["host"] = window.stop(process_tree([server.pid])
                                    if isinstance(server.pid, int) else None)
        t1 = clock()
        after = settled(server)
        self.writer.write_snapshot(t, "after", after.text)
        phases["scrape_write"] += clock() - t1
        entry["load"] = {"ok": stats.n_ok, "error": stats.n_error,
                         "incomplete": stats.n_incomplete, "chunks": stats.n_chunks,
                         "wall_s": stats.wall_s,
                         "pooled_tok_s": acc[0] / acc[1] if acc[1] else None,
                         "retries": stats.n_retries}
        if stats.n_error or stats.n_incomplete:
            entry["status"] = "failed"
            entry["error"] = f"{stats.n_error} errors, {stats.n_incomplete} incomplete requests"
            if refused:
                entry["error"] += "; " + unauthorized(refused[0], "the API",
                                                      server.api_key).one_line()

    def measure(self, client_cfg: ClientConfig, measured: list[RequestSpec],
                mode: ConcurrencyMode | RateMode,
                write: Callable[[dict[str, Any]], None]) -> LoadStats:
        """The measured requests; with :attr:`look`, in parts of ``look.every`` requests, the
        look asked after each part but the last whether the trial ends there (recorded as
        ``ended_early``: the requests sent, of how many, and why)."""
        if self.look is None or self.look.every >= len(measured):
            return asyncio.run(run_load(client_cfg, measured, mode, write))
        parts: list[LoadStats] = []
        for i in range(0, len(measured), self.look.every):
            parts.append(asyncio.run(run_load(client_cfg, measured[i:i + self.look.every],
                                              mode, write)))
            sent = min(len(measured), i + self.look.every)
            if sent >= len(measured) or any(p.n_error or p.n_incomplete for p in parts):
                break
            why = self.look.ask(sent)
            if why is not None:
                self.entry["ended_early"] = {"after_requests": sent, "of": len(measured),
                                             "reason": why}
                self.progress(f"trial {self.t + 1}/{self.cfg.trials}: ended after {sent} of "
                              f"{len(measured)} requests: {why}")
                break
        return LoadStats.combined(parts)

    def teardown(self) -> None:
        """However the trial ended: stop the server unless it is kept for the next trial,
        its stop report, the VRAM release check, the telemetry trace, the phase times."""
        entry, clock = self.entry, self.clock
        entry["ended_utc"] = _now()
        t1 = clock()
        if not self.keep_running:
            self.server.stop()
        self.phases["stop"] = clock() - t1
        self.marks["stop"] = time.time_ns()
        report = self.server.stop_report
        if report:
            entry["stop_report"] = dict(report)  # signals needed, leftovers, GPU memory
        if self.idle and not self.keep_running:
            release = gpu_checks.wait_vram_released(self.idle)
            entry["vram_release"] = release.to_dict()
            if release.status == "fail":
                self.warn(release.message)
        if self.sampler is not None:
            self.sampler.stop()
            entry["telemetry"] = _telemetry(self.sampler, self.marks)
        self.phases["total"] = clock() - self.t0


def _redacted(config: dict[str, Any]) -> dict[str, Any]:
    """The run config with the values of secret-looking environment settings and of secret
    flags in ``extra_args`` replaced."""
    ec = config.get("engine_config") or {}
    env = ec.get("env")
    if isinstance(env, dict):
        ec["env"] = {k: REDACTED if is_secret(k) else v for k, v in env.items()}
    if isinstance(ec.get("extra_args"), list):
        ec["extra_args"] = redact_argv([str(a) for a in ec["extra_args"]])
    return config


def _secrets(cfg: RunConfig, server: EngineServer, argv: list[str]) -> list[str]:
    """Strings never to record: the server's API key, the values of secret flags in the
    server's extra arguments and on crossbench's own command line, and the values of secret
    environment settings given to the server (long enough to scrub without collisions)."""
    ec = cfg.engine_config
    env = ec.get("env") if isinstance(ec.get("env"), dict) else {}
    key = server.api_key
    values = [key.value] if key is not None else []
    values += secret_values([str(a) for a in ec.get("extra_args") or []])
    values += secret_values(argv)
    values += [str(v) for k, v in (env or {}).items() if is_secret(k)]
    return sorted({v for v in values if len(v) >= MIN_SCRUB_LEN}, key=lambda v: (-len(v), v))


def _model_paths(cfg: RunConfig) -> dict[str, str]:
    ec = cfg.engine_config
    files = {"model": ec.get("model"), "draft": (ec.get("spec") or {}).get("draft_model")}
    return {k: str(v) for k, v in files.items() if v is not None}


def _telemetry(sampler: GpuSampler, marks: dict[str, int]) -> dict[str, Any]:
    """The trial's GPU figures from its trace (or why there are none)."""
    res = sampler.result()
    if not res.available:
        return {"available": False, "reason": res.reason, "trace": sampler.path.name}
    ready = marks.get("ready", marks["start"])
    phases = TrialPhases(marks["start"], ready, marks.get("measured_start", ready),
                         marks.get("measured_end", ready), marks.get("stop", time.time_ns()))
    return {"available": True, "trace": sampler.path.name,
            **derive_trial(sampler.path, phases).to_dict()}


def _client_config(cfg: RunConfig, server: EngineServer) -> ClientConfig:
    ld = cfg.load
    extra: dict[str, Any] = dict(server.request_extras(ld.cache_prompt))
    if ld.endpoint == "chat" and ld.thinking is not None:
        extra["chat_template_kwargs"] = {"enable_thinking": ld.thinking}
    key = server.api_key
    return ClientConfig(base_url=server.base_url, model=server.served_model_name,
                        api_key=SecretStr(key.value) if key is not None else None,
                        endpoint=ld.endpoint, max_tokens=ld.max_tokens,
                        temperature=ld.temperature, top_p=ld.top_p, seed=ld.seed,
                        ignore_eos=ld.ignore_eos, extra_body=extra,
                        request_timeout_s=ld.request_timeout_s)


def _props_subset(props: dict[str, Any]) -> dict[str, Any]:
    keep = ("build_info", "default_generation_settings", "total_slots", "model_path",
            "chat_template_caps", "n_ctx", "startup", "startup_cut", "served_models",
            "standin")
    return {k: props[k] for k in keep if k in props}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
