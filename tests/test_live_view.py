"""The matrix progress views: what a terminal and a log show for the same events."""

from __future__ import annotations

import io

from rich.console import Console

from crossbench.cli.live import LiveView, PlainView
from crossbench.runner.matrix_run import Tick


def ticks() -> list[Tick]:
    return [
        Tick(0, 3, 1, "llama/t/none/c1", 0, 2, 0, None, None),
        Tick(0, 3, 1, "llama/t/none/c1", 0, 2, 0, 20.0, 341.7, ended=True, status="ok"),
        Tick(1, 3, 1, "llama/t/synth/n2/c1", 1, 2, 0, 20.0, 341.7),
        Tick(1, 3, 1, "llama/t/synth/n2/c1", 1, 2, 1, 75.0, 341.7, ended=True,
             status="failed"),
    ]


def test_live_view_shows_position_eta_rate_failures_and_recent_trials() -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, force_terminal=True, width=120, color_system=None))
    with view:
        for i, t in enumerate(ticks()):
            view.tick(t)
            if i == 2:
                view.message("trial 2/2: starting llama-server")
                view.message("warning: other inference processes are running")
    out = buf.getvalue()
    assert "3/4" in out  # one trial from an earlier invocation plus two of three here
    assert "ETA 1:15" in out and "341.7 tok/s" in out
    assert "failures so far 1" in out
    assert "llama/t/synth/n2/c1, trial 2/2 (3 of 4)" in out
    assert "starting llama-server" in out
    assert "crossbench: warning: other inference processes are running" in out
    assert "failed" in out and "ok" in out


def test_plain_view_prints_a_line_per_trial_and_only_warnings(capsys) -> None:  # type: ignore[no-untyped-def]
    view = PlainView()
    with view:
        for t in ticks():
            view.tick(t)
        view.message("trial 2/2: starting llama-server")
        view.message("warning: hardware differs")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "crossbench: [2/4] llama/t/none/c1 trial 1/2 (failures so far: 0, ETA -, last -)",
        "crossbench: [3/4] llama/t/synth/n2/c1 trial 2/2 (failures so far: 0, ETA 0:20, "
        "last 341.7 tok/s)",
        "crossbench: warning: hardware differs",
    ]
