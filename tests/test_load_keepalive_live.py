"""Concurrent runs against the real llama-server lose no request and send none twice.

llama-server b11312 (cpp-httplib 0.58) answers a streamed request with ``Keep-Alive`` and
then closes the connection anyway (its content provider returns false after
``sink.done()``); a request the client wrote on such a connection before seeing the close
was dropped unread and failed with ``ServerDisconnectedError`` / ``ClientOSError``: 3 of 24
at concurrency 2, 2 of 24 at 4, 10 of 48 at 16 on a 2-core machine. This test on the code
before the fix: 2 of 24, 2 of 24 and 9 of 48 failed; after it none, with 1, 3 and 1
resends. Every request must complete, once: the server's own counters
(``tokens_predicted_total``, ``prompt_tokens_total`` between the trial's two ``/metrics``
snapshots) must equal what the records say was generated, so no request was processed twice
or lost, and every resend is in its record.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path

import pytest

from crossbench.errors import RunError
from crossbench.load.workloads import load_workload
from crossbench.runner.config import RunConfig
from crossbench.runner.single import run
from crossbench.store.rundir import read_records

pytestmark = pytest.mark.server

MAX_TOKENS = 8


def counter(path: Path, name: str) -> float:
    """One llama-server counter from a raw ``/metrics`` snapshot."""
    for line in path.read_text().splitlines():
        if line.startswith(f"llamacpp:{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in {path}")


@pytest.mark.parametrize(("concurrency", "requests"), [(2, 24), (4, 24), (16, 48)])
def test_every_request_completes_once(
    llama_server: Path, fixture_models: tuple[Path, Path], tmp_path: Path,
    concurrency: int, requests: int,
) -> None:  # fmt: skip
    target, _ = fixture_models
    cfg = RunConfig.model_validate({
        "engine_config": {"binary": str(llama_server), "model": str(target),
                          "spec": {"type": "none"}, "ctx_size": 4096,
                          "parallel": concurrency},
        "trials": 1, "telemetry_hz": 0,
        "load": {"requests": requests, "warmup": 1, "max_tokens": MAX_TOKENS,
                 "concurrency": concurrency}})  # fmt: skip
    out = tmp_path / f"c{concurrency}"
    with contextlib.suppress(RunError):  # a failed trial: its records say which requests
        run(cfg, out)
    records = read_records(out)
    measured = [r for r in records if not r["warmup"]]
    failed = [(r["request_index"], r["error"]) for r in records if r["status"] != "ok"]
    assert not failed, f"{len(failed)} of {len(records)} requests failed: {failed[:3]}"

    # each request sent is recorded once, with the prompt it was sent with
    sent = load_workload("builtin:mixed", count=requests + 1).prompts[1:]
    assert sorted(r["request_index"] for r in measured) == list(range(1, requests + 1))
    by_index = {r["request_index"]: r["prompt_id"] for r in measured}
    assert [by_index[i + 1] for i in range(requests)] == [p.id for p in sent]
    assert all(r["usage"]["completion_tokens"] == MAX_TOKENS for r in measured)

    # ... and the server processed each exactly once (its counters over the measured window)
    before, after = out / "metrics" / "t0-before.prom", out / "metrics" / "t0-after.prom"
    predicted = counter(after, "tokens_predicted_total") - counter(before, "tokens_predicted_total")
    prompt = counter(after, "prompt_tokens_total") - counter(before, "prompt_tokens_total")
    assert predicted == requests * MAX_TOKENS
    assert prompt == sum(r["usage"]["prompt_tokens"] for r in measured)

    # every resend is in its record, before the send that counts, and counted in the trial's
    retries = Counter(r["retries"] for r in records)
    assert set(retries) <= {0, 1}, retries
    for r in records:
        assert r["retries"] == len(r["failed_attempts"])
        for a in r["failed_attempts"]:
            assert a["t_sent_ns"] <= a["t_done_ns"] <= r["t_sent_ns"] and a["error"]
    (trial,) = json.loads((out / "manifest.json").read_text())["trials"]
    assert trial["load"]["retries"] == sum(r["retries"] for r in measured)
    # no reused connection of llama-server's ever answers, so the client stops reusing at
    # the first stale one: at most the sends already on their way are resent
    assert trial["load"]["retries"] <= concurrency
