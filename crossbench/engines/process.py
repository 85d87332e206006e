"""Process plumbing shared by engine adapters: spawning a server that dies with crossbench,
free ports, plain HTTP probes and log tails, and :class:`LocalServer`, the base of adapters
whose engine runs as a child process serving HTTP on ``host:port``."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from crossbench.engines.base import EngineServer, MetricsSnapshot
from crossbench.engines.prometheus import parse_samples
from crossbench.errors import RunError

_PR_SET_PDEATHSIG = 1


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


def log_tail(path: Path, n: int = 12) -> str:
    """The last ``n`` lines of a log file (empty if missing)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET a URL; (status, body). Connection errors raise OSError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


class LocalServer(EngineServer):
    """An engine run as crossbench's child process on ``host:port``: its log, URL and pid, the
    spawn (own session, dies with crossbench, output appended to the log) and the reading of
    its ``/metrics``. Subclasses build :meth:`command` and the rest of the lifecycle."""

    def __init__(self, host: str, port: int | None, log_path: Path) -> None:
        self._host = host
        self._port = port
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

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

    def _spawn(self, env: dict[str, str] | None = None) -> None:
        """Run :meth:`command` (on a free port when none was set) with its output appended to
        the log, in its own session, killed if crossbench dies."""
        if self._proc is not None:
            raise RuntimeError("server already started")
        if self._port is None:
            self._port = free_port(self._host)
        argv = self.command()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=die_with_parent,
            )

    def _read_metrics(self, engine: str, off_hint: str) -> MetricsSnapshot:
        """GET ``/metrics`` and parse it; a RunError with the log tail when the server does not
        answer, and ``off_hint`` when it answers without metrics."""
        try:
            status, body = http_get(self.base_url + "/metrics", timeout=10.0)
        except OSError as e:
            alive = self._proc is not None and self._proc.poll() is None
            state = "is not answering" if alive else "has exited"
            raise RunError(f"cannot read /metrics: {engine} {state} ({e}); last log lines:\n"
                           f"{log_tail(self._log_path)}",
                           f"see {self._log_path} for why it stopped") from e
        if status != 200:
            raise RunError(f"/metrics answered HTTP {status}", off_hint)
        text = body.decode()
        return MetricsSnapshot(t_ns=time.monotonic_ns(), text=text, samples=parse_samples(text))
