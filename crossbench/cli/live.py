"""Progress views of a matrix run on stderr: a rich live panel on terminals, plain lines else.

Both read the same :class:`~crossbench.runner.matrix_run.Tick` events, so what a log file
shows (plain) and what a terminal shows (live) never disagree. Data never goes to stderr.
"""

from __future__ import annotations

import sys
from collections import deque
from types import TracebackType
from typing import Literal

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from crossbench.cli.common import progress as plain_line
from crossbench.runner.matrix_run import Tick

Mode = Literal["auto", "live", "plain"]


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -"
    m, s = divmod(int(seconds + 0.5), 60)
    h, m = divmod(m, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


def _rate(tok_s: float | None) -> str:
    return "-" if tok_s is None else f"{tok_s:.1f} tok/s"


class PlainView:
    """One stderr line per trial start, plus warnings: for logs, CI and pipes."""

    def message(self, msg: str) -> None:
        """Runner messages: warnings are shown, step chatter is not."""
        if msg.startswith("warning"):
            plain_line(msg)

    def tick(self, t: Tick) -> None:
        """A trial starts (a line) or ends (nothing more to say)."""
        if t.ended:
            return
        plain_line(f"[{t.done_before + t.index + 1}/{t.done_before + t.total}] {t.cell} trial "
                   f"{t.trial + 1}/{t.trials} (failures so far: {t.failures}, {_eta(t.eta_s)}, "
                   f"last {_rate(t.last_tok_s)})")

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


class LiveView:
    """A live panel: overall bar (cell i of N, ETA), the trial in flight and its current step,
    last decode rate, failures so far, and the last few finished trials."""

    def __init__(self, console: Console | None = None, recent: int = 6) -> None:
        self.console = console or Console(stderr=True)
        self.bar = Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                            console=self.console)
        self.task = self.bar.add_task("matrix", total=None, eta="ETA -")
        self.current = Text("starting")
        self.step = Text("")
        self.recent: deque[tuple[str, int, str, str]] = deque(maxlen=recent)
        self.failures = 0
        self.last: float | None = None
        self.live = Live(self._render(), console=self.console, refresh_per_second=4,
                         transient=False)

    def _render(self) -> Group:
        table = Table(box=None, show_header=True, header_style="dim", pad_edge=False)
        table.add_column("finished cell")
        table.add_column("trial", justify="right")
        table.add_column("status")
        table.add_column("tok/s", justify="right")
        for cell, trial, status, rate in self.recent:
            style = "green" if status == "ok" else "bold red"
            table.add_row(cell, str(trial + 1), Text(status, style=style), rate)
        head = Text.assemble(("now ", "dim"), self.current, ("  ", ""), self.step)
        facts = Text.assemble(("last ", "dim"), _rate(self.last), ("   failures so far ", "dim"),
                              (str(self.failures), "bold red" if self.failures else "green"))
        return Group(self.bar, head, facts, table)

    def message(self, msg: str) -> None:
        """Warnings are printed above the panel; other messages become the current step."""
        if msg.startswith("warning"):
            self.console.print(Text(f"crossbench: {msg}", style="yellow"))
        else:
            self.step = Text(msg, style="dim")
        self.live.update(self._render())

    def tick(self, t: Tick) -> None:
        """Advance the bar and the panel."""
        self.failures, self.last = t.failures, t.last_tok_s
        self.bar.update(self.task, total=t.done_before + t.total, eta=_eta(t.eta_s),
                        completed=t.done_before + t.index + (1 if t.ended else 0))
        if t.ended:
            rate = _rate(t.last_tok_s) if t.status == "ok" else "-"
            self.recent.appendleft((t.cell, t.trial, t.status or "?", rate))
        else:
            self.current = Text(f"cell {t.cell}, trial {t.trial + 1}/{t.trials} "
                                f"({t.done_before + t.index + 1} of {t.done_before + t.total})",
                                style="bold")
            self.step = Text("")
        self.live.update(self._render())

    def __enter__(self) -> LiveView:
        self.live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.live.stop()


def make_view(mode: Mode) -> PlainView | LiveView:
    """The live panel on a terminal (``auto``) or when asked; plain lines otherwise."""
    if mode == "live" or (mode == "auto" and sys.stderr.isatty()):
        return LiveView()
    return PlainView()
