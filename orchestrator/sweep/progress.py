"""What a long sweep shows while it runs: done, running, failed, elapsed, runs per second, time left.

In a terminal a live rich progress bar, with a line per run above it only for small
sweeps (a sweep of thousands of runs stays one live line; failures are always printed);
in a log (not a TTY) one line per event, so a detached sweep's log reads as a history.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workloads.spec import FIELD, FIELDS, RunSpec

from ..terminal.tables import cell, duration_text


# above this many runs a terminal shows only the live line (and failures)
RUN_LINES_UP_TO = 50


def run_label(spec: RunSpec, swept: Sequence[str] = ()) -> str:
    """A run in the progress lines and the dry run: its size, what it trains (or runs), its
    free parameters, and every other key its sweep varies (``swept``: ``varying_keys``), so
    that no two lines of one sweep read alike (the injected delay of an imbalance study)."""
    size = f"nodes={spec.nodes} workers_per_node={spec.workers_per_node} threads_per_node={spec.threads_per_node}"
    shown = {"nodes", "workers_per_node", "threads_per_node", "params"}
    if spec.workload_kind == "command":
        what = f"command={Path(spec.command[0]).name}"
        shown.add("command")
    else:
        what = f"batch_size={spec.batch_size} algorithm={spec.algorithm}" + \
            ("" if spec.model in ("small_cnn",) else f" model={spec.model}")
        shown.update(("batch_size", "algorithm", "model"))
    params = "".join(f" params.{k}={v}" for k, v in spec.params.items())
    more = "".join(f" {FIELD[name].config or name}={getattr(spec, name)}" for name in swept if name not in shown)
    return f"{size} {what}{more}{params}"


def varying_keys(specs: Iterable[RunSpec]) -> list[str]:
    """The spec fields whose values differ between these runs (in the registry's order)."""
    specs = list(specs)
    return [f.name for f in FIELDS if f.identity and len({repr(getattr(s, f.name)) for s in specs}) > 1]


def headline(result: dict) -> str:
    """A finished run in a few words: throughput, accuracy, the metrics a command reported;
    numbers as the tables show them (``terminal.tables.cell``: 4 digits, no exponent)."""
    parts = []
    if result.get("throughput") is not None:
        parts.append(f"{cell(float(result['throughput']))} samples/s")
    if result.get("final_top1") is not None:
        classes = result.get("classes")
        at_chance = bool(classes) and result["final_top1"] <= 1.0 / classes + 0.01
        parts.append(f"top-1 {result['final_top1']:.3f}" + (f" (chance is {1.0 / classes:.3f}: diverged, or did not "
                                                              "learn; check lr and momentum)" if at_chance else ""))
    parts.extend(f"{k} {cell(float(v))}" for k, v in (result.get("metrics") or {}).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool))
    return ", ".join(parts) or "done"


class SweepProgress:
    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.run_lines = not console.is_terminal or total <= RUN_LINES_UP_TO
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

    def _rate(self) -> str:
        """Runs finished per second so far, and the time left at that rate."""
        elapsed = time.monotonic() - self.t0
        left = self.total - self.finished
        if not self.finished or elapsed <= 0:
            return ""
        rate = self.finished / elapsed
        return (f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}") + " runs/s" + (f", ~{duration_text(left / rate)} left" if left else "")

    def _summary(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self._rate()
        return (f"{self.finished}/{self.total} finished, {self.running} running, {self.failed_count} failed, "
                f"{elapsed:.0f} s elapsed" + (f", {rate}" if rate else ""))

    def refresh(self, running: int) -> None:
        self.running = running
        if self._bar is not None:
            self._bar.update(self._task, completed=self.finished,
                             state=f"{self.running} running, {self.failed_count} failed", eta=self._rate())

    def started(self, label: str) -> None:
        if self.run_lines:
            self.console.print(f"[cyan]start[/cyan] {label}")

    def done(self, label: str, detail: str, running: int) -> None:
        self.finished += 1
        self.refresh(running)
        if self.run_lines:
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
