"""Process plumbing shared by engine adapters: spawning a server that dies with crossbench,
stopping it with every process of its session and waiting for its GPU memory
(:func:`stop_session`), free ports, plain HTTP probes and log tails, and :class:`LocalServer`,
the base of adapters whose engine runs as a child process serving HTTP on ``host:port``."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crossbench.engines.affinity import usable_cpus
from crossbench.engines.auth import (
    UNAUTHORIZED,
    ApiKey,
    ApiKeySettings,
    bearer,
    key_to_environment,
    resolve_key,
    unauthorized,
)
from crossbench.engines.base import EngineServer, MetricsSnapshot
from crossbench.engines.prometheus import parse_samples
from crossbench.errors import RunError, UserError

_PR_SET_PDEATHSIG = 1


def session_processes(sid: int) -> list[tuple[int, str, str]]:
    """(pid, command name, state) of every process in session ``sid``, from ``/proc``."""
    out: list[tuple[int, str, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        if len(fields) > 3 and int(fields[3]) == sid:
            out.append((int(entry.name), head.partition("(")[2], fields[0]))
    return out


def alive_processes(procs: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The processes of ``procs`` that are not zombies (zombies hold no memory)."""
    return [p for p in procs if p[2] not in ("Z", "X")]  # zombies hold no memory


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    """Send ``sig`` to every pid that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gpu_release(pids: set[int], timeout_s: float) -> str:
    """Wait until none of ``pids`` holds GPU memory; a one-line outcome for the record."""
    try:
        import pynvml
    except ImportError:
        return "no GPU (pynvml is not importable)"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return f"no GPU (NVML: {e})"
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        if not handles:
            return "no GPU"
        deadline = time.monotonic() + timeout_s
        while True:
            held = sorted({p.pid for h in handles
                           for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                           if p.pid in pids})
            if not held:
                return "released"
            if time.monotonic() > deadline:
                return f"still held by pids {held} after {timeout_s:g} s"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def stop_session(proc: subprocess.Popen[bytes], stop_timeout_s: float,
                 gpu_release_timeout_s: float) -> dict[str, Any]:
    """Stop a server started in its own session (``proc.pid`` is the session id): SIGTERM the
    group, then every process still in the session until ``stop_timeout_s``, SIGKILL what is
    left, and wait for the GPU memory of every process seen. Returns the stop report:
    ``sigkill`` (what needed it), ``leftover`` (what survived SIGKILL), ``gpu`` (outcome of
    :func:`wait_gpu_release`), ``stop_s``. Workers that left the group (engine cores, a
    scheduler's children) are found through the session."""
    sid, t0 = proc.pid, time.monotonic()
    seen = {p[0] for p in session_processes(sid)} | {sid}
    report: dict[str, Any] = {"sigkill": []}
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=stop_timeout_s)
    deadline = t0 + stop_timeout_s
    while True:  # workers that outlived the server's main process or left its group
        rest = alive_processes(session_processes(sid))
        seen |= {p[0] for p in rest}
        if not rest or time.monotonic() > deadline:
            break
        signal_all([p[0] for p in rest], signal.SIGTERM)
        time.sleep(0.1)
    if rest or proc.poll() is None:
        report["sigkill"] = [f"{pid} ({comm})" for pid, comm, _ in rest]
        signal_all([p[0] for p in rest] + [sid], signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    end = time.monotonic() + 5
    while (left := alive_processes(session_processes(sid))) and time.monotonic() < end:
        time.sleep(0.05)
    report["leftover"] = [f"{pid} ({comm}, state {st})" for pid, comm, st in left]
    report["gpu"] = wait_gpu_release(seen, gpu_release_timeout_s)
    report["stop_s"] = round(time.monotonic() - t0, 3)
    return report


def die_with_parent() -> None:
    """``preexec_fn`` of an engine server: its own session and process group (so the whole
    tree can be signalled), and SIGKILL when crossbench dies (Linux ``PR_SET_PDEATHSIG``).
    Runs in the child between fork and exec."""
    os.setsid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether a socket is bound to ``host:port`` (connections in TIME_WAIT do not count:
    servers, llama-server included, bind with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def configured_binary(binary: Path | None, default: str) -> Path | None:
    """A config's ``binary`` (which must exist), or None when it names none; ``default``
    says in words what runs without it (named in the fix)."""
    if binary is None:
        return None
    b = binary.expanduser()
    if not b.exists():
        raise UserError(f"binary: {b} does not exist",
                        f"fix the path, or drop `binary` to use {default}")
    return b


def on_path(name: str, fix: str) -> Path:
    """The executable ``name`` on PATH; a :class:`UserError` with ``fix`` when it is not."""
    found = shutil.which(name)
    if found is None:
        raise UserError(f"{name} is not on PATH", fix)
    return Path(found)


def log_tail(path: Path, n: int = 12) -> str:
    """The last ``n`` lines of a log file (empty if missing)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def http_get(url: str, timeout: float = 5.0,
             headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """GET a URL (with ``headers``, e.g. :func:`crossbench.engines.auth.bearer`); (status,
    body). Connection errors raise OSError."""
    return _http(urllib.request.Request(url, headers=dict(headers or {})), timeout)


def http_post(url: str, timeout: float = 10.0,
              headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """POST an empty body to a URL; (status, body). Connection errors raise OSError."""
    return _http(urllib.request.Request(url, data=b"", method="POST",
                                        headers=dict(headers or {})), timeout)


def _http(request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


class LocalServer(EngineServer):
    """An engine run as crossbench's child process on ``host:port``: its log, URL and pid, the
    spawn (own session, dies with crossbench, output appended to the log, its API key in its
    environment) and the reading of its ``/metrics``. Subclasses build :meth:`command` and
    the rest of the lifecycle."""

    #: the environment variable the engine reads its API key from (None: it reads none)
    api_key_variable: str | None = None
    #: (lower-case phrases of a failed start-up's log, the fix they call for), first match wins
    startup_hints: tuple[tuple[tuple[str, ...], str], ...] = ()

    def __init__(self, host: str, port: int | None, log_path: Path,
                 key_settings: ApiKeySettings | None = None,
                 extra_args: Sequence[str] = (), cpus: str | None = None) -> None:
        self._cpus = cpus
        self._host = host
        self._port = port
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._key_settings = key_settings or ApiKeySettings()
        self._extra_args = list(extra_args)
        self._key: ApiKey | None = None
        self._key_resolved = False

    def base_environment(self) -> dict[str, str]:
        """The environment the server starts with, before crossbench adds its API key:
        crossbench's own (adapters add their configured variables)."""
        return dict(os.environ)

    @property
    def api_key(self) -> ApiKey | None:
        """The key the server wants, from the config's ``api_key_env``/``api_key_file``,
        ``--api-key`` in ``extra_args`` or :attr:`api_key_variable` already set (resolved
        once; UserError naming the setting when a configured source is empty)."""
        if not self._key_resolved:
            self._key = resolve_key(self._key_settings, self._extra_args,
                                    self.api_key_variable, self.base_environment())
            self._key_resolved = True
        return self._key

    def server_environment(self) -> dict[str, str]:
        """:meth:`base_environment` plus the configured key in :attr:`api_key_variable`, so
        that the key is in no argv (``/proc/PID/environ`` is readable by its owner only)."""
        env = self.base_environment()
        key = self.api_key
        if key is not None and key.to_server:
            if self.api_key_variable is None:
                raise UserError(f"{key.source}: {self.kind} takes no API key from crossbench",
                                "drop api_key_env / api_key_file from its config")
            env[self.api_key_variable] = key.value
        return env

    def auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer KEY`` when the server wants a key, else nothing."""
        return bearer(self.api_key)

    @property
    def log_path(self) -> Path:
        """Captured stdout+stderr of the server (all its processes)."""
        return self._log_path

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self._host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the server (also its session and process-group id)."""
        return self._proc.pid if self._proc else None

    def _stop_session(self, stop_timeout_s: float, gpu_release_timeout_s: float) -> None:
        """``stop()`` of an engine that runs as several processes in its own session
        (:func:`stop_session`): the report in ``stop_report``, then a wait for the port;
        RunError naming the engine when processes survive SIGKILL. Safe to call twice."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        self.stop_report = stop_session(proc, stop_timeout_s, gpu_release_timeout_s)
        self._wait_port_free()
        if self.stop_report["leftover"]:
            raise RunError(f"{len(self.stop_report['leftover'])} process(es) of the {self.kind} "
                           f"server survived SIGKILL: {', '.join(self.stop_report['leftover'])}",
                           "they may hold GPU memory: wait or reboot before the next trial")

    def _wait_port_free(self, timeout_s: float = 10.0) -> None:
        """After a stop: wait until the server's port is free (at most ``timeout_s``)."""
        if self._port is None:
            return
        deadline = time.monotonic() + timeout_s
        while port_in_use(self._host, self._port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _spawn(self) -> None:
        """Run :meth:`command` (on a free port when none was set) in
        :meth:`server_environment`, with its output appended to the log, in its own session,
        killed if crossbench dies, on the configured ``cpus`` only (``engines.affinity``)."""
        if self._proc is not None:
            raise RuntimeError("server already started")
        if self._port is None:
            self._port = free_port(self._host)
        argv = self.command()
        env = self.server_environment()
        if self.api_key_variable is not None:  # --api-key KEY of extra_args: into the
            argv, key = key_to_environment(argv)  # environment, out of any log line
            if key is not None:
                env[self.api_key_variable] = key
        pinned = usable_cpus(self._cpus) if self._cpus is not None else None

        def child_setup() -> None:  # in the child, between fork and exec
            die_with_parent()
            if pinned is not None:
                os.sched_setaffinity(0, pinned)

        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=child_setup,
            )

    def _check_alive(self) -> None:
        """Raise a :class:`RunError` with the log's last lines when the server process has
        exited during start-up (stopping what is left), with :meth:`_startup_hint`'s fix."""
        proc = self._proc
        if proc is None:
            raise RuntimeError("wait_ready() before start()")
        rc = proc.poll()
        if rc is not None:
            tail = log_tail(self._log_path, 20)
            self.stop()
            raise RunError(f"{self.kind} exited with code {rc} during start-up; last log "
                           f"lines:\n{tail}", self._startup_hint(tail))

    def _startup_hint(self, tail: str) -> str:
        """The fix to name for a start-up that ended with the log lines ``tail``: that of the
        first of :attr:`startup_hints` whose phrases the lines hold (in any case)."""
        low = tail.lower()
        return next((fix for phrases, fix in self.startup_hints
                     if any(p in low for p in phrases)), "read the server log for the cause")

    def _check_port_free(self) -> None:
        """UserError when the configured port is taken (before anything starts)."""
        if self._port is not None and port_in_use(self._host, self._port):
            raise UserError(f"port {self._port} on {self._host} is in use",
                            "stop what holds it, or omit port to pick a free one")

    def _poll_openai_ready(self, timeout: float, hint: str) -> list[str]:
        """Poll ``/health`` until 200, then ``/v1/models`` until it answers, within
        ``timeout`` seconds, checking that the process lives; returns the served model ids.
        A 401/403 stops the server and names the key; a timeout stops it and shows the
        log's last lines with ``hint`` (what makes the engine slow to start)."""
        deadline = time.monotonic() + timeout
        served: list[str] = []
        for path in ("/health", "/v1/models"):
            while True:
                self._check_alive()
                try:
                    status, body = http_get(self.base_url + path, timeout=5.0,
                                            headers=self.auth_headers())
                    if status in UNAUTHORIZED:  # vLLM guards /v1/* only
                        self.stop()
                        raise unauthorized(status, path, self.api_key)
                    if status == 200:
                        if path == "/v1/models":
                            served = [str(m.get("id")) for m in
                                      json.loads(body).get("data", [])]
                        break
                except (OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    tail = log_tail(self._log_path)
                    self.stop()
                    raise RunError(f"{self.kind} did not answer {path} within {timeout:.0f} s; "
                                   f"last log lines:\n{tail}", f"raise ready_timeout_s for big "
                                   f"models ({hint}), or read {self._log_path}")
                time.sleep(0.1)
        return served

    def _read_metrics(self, off_hint: str) -> MetricsSnapshot:
        """GET ``/metrics`` (with the key, when the server wants one) and parse it; a RunError
        with the log tail when the server does not answer, one naming the key on HTTP 401 or
        403, and ``off_hint`` when it answers without metrics."""
        try:
            status, body = http_get(self.base_url + "/metrics", timeout=10.0,
                                    headers=self.auth_headers())
        except OSError as e:
            alive = self._proc is not None and self._proc.poll() is None
            state = "is not answering" if alive else "has exited"
            raise RunError(f"cannot read /metrics: {self.kind} {state} ({e}); last log lines:\n"
                           f"{log_tail(self._log_path)}",
                           f"see {self._log_path} for why it stopped") from e
        if status in UNAUTHORIZED:
            raise unauthorized(status, "/metrics", self.api_key)
        if status != 200:
            raise RunError(f"/metrics answered HTTP {status}", off_hint)
        text = body.decode()
        return MetricsSnapshot(t_ns=time.monotonic_ns(), text=text, samples=parse_samples(text))
