"""The sweep's progress display: one live line in a terminal for large sweeps, one line per event in a log."""

from __future__ import annotations

import io
import re
import time
import types

import pytest

from rich.console import Console

from orchestrator.sweep.progress import RUN_LINES_UP_TO, SweepProgress


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200, highlight=False), out


def _text(out: io.StringIO) -> str:
    """What the terminal shows, less its colour and cursor codes."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())


def test_a_log_gets_one_line_per_event_with_rate_and_time_left(monkeypatch):
    console, out = _console(terminal=False)
    progress = SweepProgress(console, total=4)
    # 10 s into the sweep, on a clock that stands still: on a busy machine 30 ms between these
    # lines would print 0.199 runs/s
    now = time.monotonic()
    monkeypatch.setattr("orchestrator.sweep.progress.time", types.SimpleNamespace(monotonic=lambda: now))
    progress.t0 = now - 10.0
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


def test_a_runs_line_shows_every_key_its_sweep_varies():
    """The eager_sgd study sweeps the injected delay: its lines, alike before, now differ."""
    from orchestrator.sweep.progress import run_label, varying_keys
    from workloads.spec import RunSpec

    specs = [RunSpec(algorithm=a, imbalance_kind="injected", imbalance_delay_ms=d, seed=0)
             for a in ("sync", "eager_solo") for d in (50.0, 100.0)]
    swept = varying_keys(specs)
    assert swept == ["algorithm", "imbalance_delay_ms"]
    labels = [run_label(s, swept) for s in specs]
    assert len(set(labels)) == 4
    assert labels[1].endswith("algorithm=sync imbalance.delay_ms=100.0")
    assert run_label(specs[0]) == "nodes=1 workers_per_node=1 threads_per_node=1 batch_size=32 algorithm=sync"


def test_the_dry_run_of_the_eager_study_shows_the_swept_delay(tmp_path):
    from conftest import scalestudy

    proc = scalestudy("sweep", "study=eager_sgd", "--dry-run", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    assert len(lines) == 12 and len(set(lines)) == 12
    assert sum("imbalance.delay_ms=200.0" in line for line in lines) == 4


@pytest.mark.sweep
def test_a_study_named_on_the_command_line_says_which_preset_it_is_built_on(tmp_path):
    """A study of one's own (study_name=, no study=) takes the default preset's settings, not its
    grid, and says so; a named preset's grid is swept, and the axes that came from it are named."""
    from conftest import scalestudy

    named = scalestudy("sweep", "study_name=mine", "--dry-run", f"hydra.sweep.dir={tmp_path / 'a'}", cwd=tmp_path)
    assert named.returncode == 0, named.stderr[-2000:]
    text = named.stdout + named.stderr
    assert "study mine: a study of your own, built on the smoke preset" in text and "epochs=10" in text
    assert "not swept: the preset's grid (nodes=1,2 workers_per_node=1,2)" in text
    assert "1 run of study mine" in named.stdout
    preset = scalestudy("sweep", "study=eager_sgd", "--dry-run", f"hydra.sweep.dir={tmp_path / 'b'}", cwd=tmp_path)
    assert preset.returncode == 0
    assert "swept by the eager_sgd preset (not by this command line): algorithm=sync,eager_solo,eager_majority," \
           "async_ps imbalance.delay_ms=50,100,200" in preset.stdout
    assert "a study of your own" not in preset.stdout + preset.stderr


def test_a_finished_runs_numbers_read_as_in_the_tables():
    from orchestrator.sweep.progress import headline
    from orchestrator.terminal.tables import cell

    line = headline({"throughput": 14530.2, "final_top1": 0.91234, "metrics": {"loss": 6573.4, "ok": True}})
    assert line == "14530 samples/s, top-1 0.912, loss 6573"
    assert cell(14530.2) == "14530" and cell(0.000123456) == "0.0001235" and "e+" not in line


@pytest.mark.sweep
def test_oversubscription_is_said_once_at_sweep_time(tmp_path):
    """On this host (2 CPUs here): a 4-rank run is more threads than CPUs, a 1-rank run is not."""
    import os

    from conftest import scalestudy

    cpus = len(os.sched_getaffinity(0))
    crowded = scalestudy("sweep", "study_name=o", f"workers_per_node={cpus * 2}", "nodes=1", "--dry-run",
                         f"hydra.sweep.dir={tmp_path / 'a'}", cwd=tmp_path)
    assert crowded.returncode == 0, crowded.stderr[-2000:]
    said = (crowded.stdout + crowded.stderr).count("their ranks share cores")
    assert said == 1
    alone = scalestudy("sweep", "study_name=o", "workers_per_node=1", "nodes=1", "--dry-run",
                       f"hydra.sweep.dir={tmp_path / 'b'}", cwd=tmp_path)
    assert "share cores" not in alone.stdout + alone.stderr


def test_a_summary_of_runs_fits_80_columns_without_cutting_a_cell():
    """The smoke study's summary at 80 columns showed every cell as 's…', '1…' (issue 39): the
    columns with one value in every row go to the caption, headers are short, cells wrap."""
    from orchestrator.terminal.output import SUMMARY_COLUMNS
    from orchestrator.terminal.tables import cell, rows_table

    columns = list(SUMMARY_COLUMNS)
    rows = []
    for i, (nodes, workers) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2)]):
        values = {"run_id": i + 1, "study": "smoke", "status": "done", "nodes": nodes, "workers_per_node": workers,
                  "threads_per_node": workers, "batch_size": 32, "algorithm": "sync", "model": "small_cnn",
                  "seed": 0, "device": "cpu", "compute": "real", "throughput": 14530.2 / (i + 1),
                  "final_top1": 0.9 + i / 100, "train_seconds": 12.345 * (i + 1)}
        rows.append([cell(values.get(c)) for c in columns])
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(rows_table(columns, rows, "study smoke", [True] * len(columns), fold_constant=True))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for value in ("14530", "7265", "0.93", "49.38", "workers/node", "samples/s"):
        assert value in text, value
    assert "in every row:" in text and "algorithm=sync" in " ".join(text.split())


def test_a_run_at_chance_says_so_in_its_line():
    from orchestrator.sweep.progress import headline

    assert "chance is 0.100: diverged, or did not learn" in headline({"final_top1": 0.098, "classes": 10})
    assert "chance" not in headline({"final_top1": 0.5, "classes": 10})
    assert "chance" not in headline({"final_top1": 0.098})     # classes not recorded: nothing said
