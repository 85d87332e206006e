"""The requests frame's ``retries`` and ``failed_attempts``: a request the load client sent
again on a fresh connection (llama-server closed a reused connection before any response
byte) is counted per request, never hidden; exports carry the columns with their meaning."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from standins.study import Arm, study

from crossbench.frames.columns import FRAMES

PROMPTS = [(f"p{i}", "code") for i in range(6)]


def _retried(arm: Arm, pid: str, trial: int, occ: int) -> dict[str, Any]:
    """The client's fields: p2 of trial 1 was resent once after a stale connection, p4 of
    trial 0 twice failed (the resend failed too: recorded as an error with both attempts)."""
    if (pid, trial) == ("p2", 1):
        return {"retries": 1, "failed_attempts": [
            {"t_sent_ns": 1, "t_done_ns": 2, "error": "ServerDisconnectedError: Server "
                                                      "disconnected"}]}
    if (pid, trial) == ("p4", 0) and arm.method == "none":
        return {"retries": 1, "status": "error", "error": "ClientOSError: Can not write "
                "request body", "failed_attempts": [
                    {"t_sent_ns": 1, "t_done_ns": 2, "error": "ServerDisconnectedError"}]}
    return {"retries": 0, "failed_attempts": []}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    study(tmp_path / "s", PROMPTS, [Arm("none"), Arm("d", "draft-simple", 2)],
          lambda a, p, t, o: 100.0, trials=2, extra=_retried)
    return tmp_path / "s"


def test_the_requests_frame_counts_each_request_s_resends(run_dir: Path) -> None:
    pytest.importorskip("pandas")
    from crossbench.frames import open_run

    req = open_run(run_dir).requests
    assert [c.name for c in FRAMES["requests"]][-2:] == ["retries", "failed_attempts"]
    assert str(req["retries"].dtype) == "Int64" and str(req["failed_attempts"].dtype) == "Int64"
    resent = req[req["retries"] > 0].sort_values(["method", "trial"])
    assert list(zip(resent["method"], resent["trial"], resent["prompt_id"],
                    resent["status"], strict=True)) == [
        ("draft-simple", 1, "p2", "ok"), ("none", 0, "p4", "error"), ("none", 1, "p2", "ok")]
    assert resent["failed_attempts"].tolist() == [1, 1, 1]
    assert int(req["retries"].sum()) == 3 and len(req) == 2 * 6 * 2


def test_records_without_the_fields_read_na(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    from crossbench.frames import open_run

    study(tmp_path / "s", PROMPTS, [Arm("none")], lambda a, p, t, o: 100.0, trials=1)
    req = open_run(tmp_path / "s").requests
    assert req["retries"].isna().all() and req["failed_attempts"].isna().all()


def test_the_csv_export_carries_the_columns_and_their_meaning(run_dir: Path) -> None:
    pytest.importorskip("pandas")
    from crossbench.frames import open_run
    from crossbench.frames.export import export

    out = run_dir.parent / "csv"
    out.mkdir()
    export(open_run(run_dir), "csv", out)
    with (out / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["retries"] for r in rows).count("1") == 3
    with (out / "columns.csv").open() as f:
        meaning = {(r["frame"], r["column"]): r for r in csv.DictReader(f)}
    assert "fresh connection" in meaning[("requests", "retries")]["description"]
