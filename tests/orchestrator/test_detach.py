"""``--detach``: the sweep outlives the shell that started it; its state lives in the DB."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import scalestudy

pytestmark = pytest.mark.mpi


def _states(db) -> list[str]:
    engine = connect(f"sqlite:///{db}")
    with Session(engine) as s:
        return [r.status for r in s.scalars(select(Run).order_by(Run.id))]


def test_detached_sweep_runs_on_and_is_resumed_not_duplicated(tmp_path):
    args = ["nodes=1", "workers_per_node=1,2", "epochs=1", "steps_per_epoch=2"]
    proc = scalestudy("sweep", "--detach", *args, f"hydra.sweep.dir={tmp_path / 'mr1'}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "sweep detached" in proc.stdout, proc.stderr
    db = tmp_path / "scalestudy.db"
    # returned without waiting for the runs: they are not both done yet (measured against the
    # runs themselves, not a number of seconds, which a busy machine stretches)
    assert not db.exists() or _states(db) != ["done", "done"]
    log = next((tmp_path / ".scalestudy" / "sweeps").glob("*.log"))

    # generous ceilings below: they only matter if the event never happens
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (db.exists() and len(_states(db)) == 2):
        time.sleep(0.5)
    assert len(_states(db)) == 2, log.read_text()[-3000:]

    # the same sweep again while the detached driver is alive: nothing is launched twice
    again = scalestudy("sweep", *args, f"hydra.sweep.dir={tmp_path / 'mr2'}", cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("in progress under sweep") + again.stderr.count("already done") == 2
    assert not list((tmp_path / "mr2").glob("*/spec.json"))

    status = scalestudy("status", cwd=tmp_path)
    assert status.returncode == 0 and "smoke" in status.stdout

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and _states(db) != ["done", "done"]:
        time.sleep(1)
    assert _states(db) == ["done", "done"], log.read_text()[-3000:]
    deadline = time.monotonic() + 300  # the driver prints its table after the last ingestion
    while time.monotonic() < deadline and "this sweep's runs" not in log.read_text():
        time.sleep(0.5)
    assert "this sweep's runs" in log.read_text()

    third = scalestudy("sweep", *args, f"hydra.sweep.dir={tmp_path / 'mr3'}", cwd=tmp_path, timeout=120)
    assert third.returncode == 0 and third.stderr.count("already done") == 2
    assert len(_states(db)) == 2


def test_detach_with_dry_run_is_refused(tmp_path):
    proc = scalestudy("sweep", "--detach", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2 and "make no sense" in proc.stderr


def test_detach_with_bad_input_fails_at_once_and_starts_nothing(tmp_path):
    proc = scalestudy("sweep", "--detach", "nodes=0", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "nodes=0" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "sweep detached" not in proc.stdout
    assert not (tmp_path / ".scalestudy" / "sweeps").exists() or not list((tmp_path / ".scalestudy" / "sweeps").iterdir())
