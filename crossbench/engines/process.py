"""Process plumbing shared by engine adapters: spawning a server that dies with crossbench,
free ports, plain HTTP probes and log tails."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

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
