"""The sweep's progress display: one live line in a terminal for large sweeps, one line per event in a log."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from orchestrator.sweep.progress import RUN_LINES_UP_TO, SweepProgress


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200, highlight=False), out


def _text(out: io.StringIO) -> str:
    """What the terminal shows, less its colour and cursor codes."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())


def test_a_log_gets_one_line_per_event_with_rate_and_time_left():
    console, out = _console(terminal=False)
    progress = SweepProgress(console, total=4)
    progress.t0 = time.monotonic() - 10.0   # 10 s into the sweep
    progress.started("#0 a")
    progress.done("#0 a", "12 samples/s", running=0)
    progress.failed("#1 b", "rank 1 exited 3", running=0)
    progress.stop()
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "done", "fail"]
    # 2 runs in 10 s: 0.2 runs/s, 2 left: ~10 s
    assert "2/4 finished" in lines[2] and "0.2 runs/s" in lines[2] and "~10 s left" in lines[2], lines[2]


def test_a_large_sweep_in_a_terminal_stays_one_live_line():
    console, out = _console(terminal=True)
    total = RUN_LINES_UP_TO * 40
    progress = SweepProgress(console, total=total)
    for i in range(total - 1):
        progress.started(f"#{i}")
        progress.done(f"#{i}", "ok", running=0)
    progress.failed(f"#{total - 1}", "rank 0 exited 1", running=0)
    progress.stop()
    text = _text(out)
    assert "start" not in text and "done " not in text     # no line per run
    assert text.count("rank 0 exited 1") == 1              # failures are always said
    assert f"{total}/{total}" in text and "runs/s" in text  # the live line's last state


def test_a_small_sweep_in_a_terminal_keeps_its_run_lines():
    console, out = _console(terminal=True)
    progress = SweepProgress(console, total=2)
    progress.done("#0 a", "12 samples/s", running=1)
    progress.stop()
    assert "done  #0 a: 12 samples/s" in _text(out)
