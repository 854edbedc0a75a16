"""What a long sweep shows while it runs: done, running, failed, elapsed, time left.

In a terminal a live rich progress bar; in a log (not a TTY) one line per event, so
a detached sweep's log reads as a history.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class SweepProgress:
    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.finished = self.failed_count = self.running = 0
        self.t0 = time.monotonic()
        self._bar: Progress | None = None
        if console.is_terminal and total:
            self._bar = Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                                 TextColumn("{task.fields[eta]}"), console=console, transient=False)
            self._task = self._bar.add_task("runs", total=total, state="", eta="")
            self._bar.start()
        self.refresh(0)

    def _summary(self) -> str:
        elapsed = time.monotonic() - self.t0
        left = self.total - self.finished
        eta = f", ~{elapsed / self.finished * left:.0f} s left" if self.finished and left else ""
        return (f"{self.finished}/{self.total} finished, {self.running} running, {self.failed_count} failed, "
                f"{elapsed:.0f} s elapsed{eta}")

    def refresh(self, running: int) -> None:
        self.running = running
        if self._bar is not None:
            elapsed = time.monotonic() - self.t0
            left = self.total - self.finished
            eta = f"~{elapsed / self.finished * left:.0f} s left" if self.finished and left else ""
            self._bar.update(self._task, completed=self.finished,
                             state=f"{self.running} running, {self.failed_count} failed", eta=eta)

    def started(self, label: str) -> None:
        self.console.print(f"[cyan]start[/cyan] {label}")

    def done(self, label: str, detail: str, running: int) -> None:
        self.finished += 1
        self.refresh(running)
        self.console.print(f"[green]done[/green]  {label}: {detail}  [{self._summary()}]")

    def failed(self, label: str, detail: str, running: int) -> None:
        self.finished += 1
        self.failed_count += 1
        self.refresh(running)
        self.console.print(f"[red]fail[/red]  {label}: {detail}  [{self._summary()}]")

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
