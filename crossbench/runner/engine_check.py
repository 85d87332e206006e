"""What the live adapter checks (``crossbench engines check vllm|sglang``) share: the
:class:`Report` of ``ok``/``FAIL`` lines, and the steps every check takes (the server made,
validated, started, streamed to and stopped whatever happened). The engine modules
(:mod:`.vllm_check`, :mod:`.sglang_check`) add their own configuration, known truth and
per-request figures.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr

from crossbench.confounds.provenance import redact_argv
from crossbench.engines import registry
from crossbench.engines.base import MetricsSnapshot
from crossbench.engines.process import LocalServer
from crossbench.errors import CrossbenchError
from crossbench.load.client import ClientConfig, ConcurrencyMode, run_load_sync
from crossbench.load.workloads import load_workload
from crossbench.runner import single
from crossbench.store import rundir

S = TypeVar("S", bound=LocalServer)


class Report:
    """The check's output: one line per check, and how many failed."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say, self.failed = say, 0

    def check(self, name: str, ok: bool, detail: str) -> bool:
        """Print ``ok   NAME: DETAIL`` or ``FAIL NAME: DETAIL``; returns ``ok``."""
        self.failed += not ok
        self.say(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        return ok


def run_server(rep: Report, engine: str, cls: type[S], config: Mapping[str, Any], log: Path,
               origin: str, measure: Callable[[S], None]) -> int:
    """Make the ``engine`` adapter from ``config`` and validate it (the ``config`` line, which
    names the profile ``origin``), start it, run ``measure`` on it and stop it, whatever
    happened (the ``stop`` line); returns the number of checks failed."""
    try:
        srv = registry.create(engine, dict(config), log)
        assert isinstance(srv, cls)
        srv.validate()
    except CrossbenchError as e:
        rep.check("config", False, e.one_line())
        return rep.failed
    rep.check("config", True, f"validated against {origin}")
    srv.start()
    try:
        measure(srv)
    finally:
        check_stop(rep, srv)
    return rep.failed


def check_ready(rep: Report, srv: LocalServer) -> bool:
    """Wait until the server serves; the ``ready`` line names its argv (secrets redacted)."""
    try:
        srv.wait_ready()
    except CrossbenchError as e:
        return rep.check("ready", False, e.one_line())
    return rep.check("ready", True, " ".join(redact_argv(srv.command())))


def settled(srv: LocalServer, counters: Sequence[str]) -> MetricsSnapshot:
    """:func:`crossbench.runner.single.settled` on ``counters``, every 0.2 s for up to 30 s."""
    return single.settled(srv, counters, timeout_s=30.0, poll_s=0.2)


def stream_load(rep: Report, srv: LocalServer, model: str, out: Path, requests: int,
                max_tokens: int, counters: Sequence[str]
                ) -> tuple[MetricsSnapshot, MetricsSnapshot, list[dict[str, Any]]]:
    """Stream ``requests`` of ``builtin:mixed`` (4 at a time, greedy, ``max_tokens`` each,
    usage on every chunk) with crossbench's load client; keep both scrapes and the records
    under ``out``; report ``streaming`` (every request completed, some chunks carried several
    tokens). Returns (scrape before, settled scrape after, records)."""
    before = srv.scrape()
    records: list[dict[str, Any]] = []
    key = srv.api_key
    cfg = ClientConfig(base_url=srv.base_url, model=model,
                       api_key=SecretStr(key.value) if key is not None else None,
                       max_tokens=max_tokens, temperature=0.0, seed=0,
                       extra_body={"stream_options": {"include_usage": True,
                                                      "continuous_usage_stats": True}})
    work = load_workload("builtin:mixed", count=requests).requests()
    stats = run_load_sync(cfg, work, ConcurrencyMode(concurrency=4), records.append)
    after = settled(srv, counters)
    (out / rundir.CHECK_BEFORE).write_text(before.text)
    (out / rundir.CHECK_AFTER).write_text(after.text)
    rundir.RunWriter(out).write_records(records)
    multi = sum(1 for r in records for _, n in r["chunks"] if n and n > 1)
    rep.check("streaming", stats.n_ok == requests and multi > 0,
              f"{stats.n_ok}/{requests} ok, {multi} chunks carried several tokens")
    return before, after, records


def post_json(srv: LocalServer, path: str, body: dict[str, Any],
              timeout_s: float = 600.0) -> dict[str, Any]:
    """POST ``body`` to the server's ``path`` (with its key, if it has one); the JSON answer.
    HTTP and connection errors raise OSError (``urllib.error.HTTPError`` is one)."""
    req = urllib.request.Request(srv.base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          **srv.auth_headers()})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        answer = json.loads(r.read())
    if not isinstance(answer, dict):
        raise ValueError(f"{path} answered {type(answer).__name__}, not a JSON object")
    return answer


def check_stop(rep: Report, srv: LocalServer) -> None:
    """Stop the server and report ``stop`` from the adapter's ``stop_report``
    (:func:`crossbench.engines.process.stop_session`): fails when a process of its session is
    left or its GPU memory is still held (``no GPU ...`` on a machine without one is said,
    not counted as released)."""
    try:
        srv.stop()
    except CrossbenchError as e:
        rep.check("stop", False, e.one_line())
        return
    r = srv.stop_report
    killed = r.get("sigkill")
    sigkill = ", ".join(killed) if isinstance(killed, list) and killed else "none"
    leftover = list(r.get("leftover", []))
    gpu = str(r.get("gpu", "not looked at"))
    ok = not leftover and not gpu.startswith("still held")
    behind = f", left behind: {', '.join(leftover)}" if leftover else ""
    rep.check("stop", ok, f"{r.get('stop_s', '?')} s, SIGKILL needed for {sigkill}, "
              f"GPU: {gpu}{behind}")
