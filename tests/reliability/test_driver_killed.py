"""A sweep driver killed with SIGKILL, and the same command run again at once: every run
ends exactly once, and the killed driver's MPI job does not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import env_with_bin, scalestudy

pytestmark = pytest.mark.mpi


def _args(tmp_path, marker: str, sweep_dir: str) -> list[str]:
    program = f"import time; time.sleep(4); print('throughput: 2 samples/s')  # {marker}"
    return ["sweep", "study_name=killed", "nodes=1", "workers_per_node=1", "workload.kind=command",
            f"workload.command=[python,-c,{program!r}]", "+workload.metrics.throughput.pattern='throughput: ([0-9.]+)'",
            "+params.i=0,1", f"hydra.sweep.dir={tmp_path / sweep_dir}"]


def test_sigkill_then_the_same_command_runs_everything_exactly_once(tmp_path):
    marker = f"killed-{os.getpid()}-{time.time_ns()}"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *_args(tmp_path, marker, "mr1")], cwd=tmp_path,
                            env=env_with_bin(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # run 0 is running: waited for (a generous ceiling, only a run that never starts reaches it)
    deadline = time.monotonic() + 300
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0   # run 0 is running
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the killed driver's MPI job goes with it (the launcher's parent-death signal)
    deadline = time.monotonic() + 120
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0, "the MPI job outlived its driver"
    # on this host a dead driver's pid tells at once: no waiting for its heartbeat to go stale.
    # The heartbeat goes stale only after an hour here, so that waiting for it is a hang the
    # ceiling catches, not a number of seconds a busy machine can exceed
    again = scalestudy(*_args(tmp_path, marker, "mr2"), cwd=tmp_path, env={"SCALESTUDY_HEARTBEAT_STALE": "3600"},
                       timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "in progress under sweep" not in again.stderr
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
    assert [(r.status, r.throughput) for r in runs] == [("done", 2.0), ("done", 2.0)]
    # each run executed to the end exactly once: only the second sweep's folders hold results
    assert not list((tmp_path / "mr1").glob("*/result.json"))
    assert len(list((tmp_path / "mr2").glob("*/result.json"))) == 2


def test_a_frozen_driver_whose_runs_were_taken_over_runs_none_of_them_again(tmp_path):
    """Driver A is frozen (SIGSTOP) with run 0 running and run 1 waiting behind the local site's
    one-at-a-time cap; its heartbeats go stale, and the same command, B, takes both over: run 0
    had finished in A's folder, so B ingests it from there instead of running it again; B runs
    run 1. Resumed, A re-checks run 1 before starting it and leaves it to B: every run ran once."""
    marker = f"frozen-{os.getpid()}-{time.time_ns()}"
    env = env_with_bin({"SCALESTUDY_HEARTBEAT_STALE": "3"})
    a = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *_args(tmp_path, marker, "mr1")], cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # generous ceilings: they only matter if the event never happens
    deadline = time.monotonic() + 300
    while not (tmp_path / "mr1" / "0" / "command.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        # A's MPI job runs on (its own process group) and may finish while A is frozen; whether it
        # has or not, B must take run 0 over: this wait is a best effort, not an assertion, so its
        # ceiling stays short (in a run under load it was reached, and a longer one only costs time)
        deadline = time.monotonic() + 30
        while not (tmp_path / "mr1" / "0" / "result.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3.5)       # A's heartbeats are stale now
        b = scalestudy(*_args(tmp_path, marker, "mr2"), cwd=tmp_path, env={"SCALESTUDY_HEARTBEAT_STALE": "3"},
                       timeout=300)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert b.returncode == 0, b.stderr[-3000:]
    assert "recovered #0" in b.stderr and "ingested from" in b.stderr
    out, err = a.communicate(timeout=300)
    assert a.returncode == 0, err[-3000:]
    assert "skip #1" in err and "another sweep has taken it over" in err
    assert not (tmp_path / "mr1" / "1" / "command.txt").exists()      # A never started run 1
    assert not (tmp_path / "mr2" / "0" / "command.txt").exists()      # B never started run 0
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
    assert [(r.status, r.throughput) for r in runs] == [("done", 2.0), ("done", 2.0)]
    assert runs[0].run_dir == str(tmp_path / "mr1" / "0") and runs[1].run_dir == str(tmp_path / "mr2" / "1")


def _quick_args(tmp_path, sweep_dir: str) -> list[str]:
    return ["sweep", "study_name=failpoints", "nodes=1", "workers_per_node=1", "workload.kind=command",
            "workload.command=[echo,rate 4.5]", "+workload.metrics.throughput.pattern='rate ([0-9.]+)'",
            "+params.i=0,1", f"hydra.sweep.dir={tmp_path / sweep_dir}"]


@pytest.mark.parametrize("point", [
    "register",     # mid-transaction, some runs' rows written, nothing committed
    "registered",   # runs recorded as this driver's, nothing submitted yet
    "ingest",       # the first run finished and its rows written, not committed
])
def test_sigkill_at_each_point_then_the_same_command_runs_everything_exactly_once(tmp_path, point):
    killed = scalestudy(*_quick_args(tmp_path, "mr1"), cwd=tmp_path, env={"SCALESTUDY_FAILPOINT": point},
                        timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    again = scalestudy(*_quick_args(tmp_path, "mr2"), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
    assert sorted((r.params["i"], r.status, r.throughput, r.attempt, r.latest) for r in runs) == \
        [(0, "done", 4.5, 1, True), (1, "done", 4.5, 1, True)]
    # each run executed exactly once: a run that had finished under the killed driver is
    # ingested from its folder, not run again
    executed = sorted(p.parent.name for p in tmp_path.glob("mr*/*/result.json"))
    assert len(executed) == 2, executed
    if point == "ingest":
        assert "recovered #0" in again.stderr and (tmp_path / "mr1" / "0" / "result.json").is_file()
        assert {r.run_dir for r in runs} == {str(tmp_path / "mr1" / "0"), str(tmp_path / "mr2" / "1")}


def _gone(pid: int) -> bool:
    """The process is gone (or a zombie no one has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_detached_driver_killed_shows_as_stopped_and_the_same_command_resumes(tmp_path):
    args = ["study_name=detached_kill", "nodes=1", "workers_per_node=1", "workload.kind=command",
            "workload.command=[sleep,12]", "+params.i=0,1"]
    proc = scalestudy("sweep", "--detach", *args, f"hydra.sweep.dir={tmp_path / 'mr1'}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "driver pid" in proc.stdout, proc.stderr
    pid = int(proc.stdout.split("driver pid ")[1].split(",")[0])
    # generous ceilings below, on events waited for: they only matter if the event never happens
    deadline = time.monotonic() + 300
    while not (tmp_path / "mr1" / "0" / "command.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    deadline = time.monotonic() + 120   # run 0 recorded as running (was: a 1 s sleep)
    while "1 running, 1 pending" not in (status := scalestudy("status", cwd=tmp_path)).stdout \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert f":{pid} (study detached_kill): alive, heartbeat" in status.stdout, status.stdout
    assert "1 running, 1 pending" in status.stdout
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120   # its process gone (was: a 0.5 s sleep)
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    status = scalestudy("status", cwd=tmp_path)
    assert f":{pid} (study detached_kill): stopped (its process is gone)" in status.stdout, status.stdout
    assert "the same sweep command resumes them" in status.stdout
    # resumed without waiting for the killed driver's heartbeat to go stale: it would go stale
    # only after an hour here, a hang the ceiling catches (was: done within 120 s)
    again = scalestudy("sweep", *args, f"hydra.sweep.dir={tmp_path / 'mr2'}", cwd=tmp_path,
                       env={"SCALESTUDY_HEARTBEAT_STALE": "3600"}, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        assert [r.status for r in s.scalars(select(Run).order_by(Run.id))] == ["done", "done"]
    assert "sweep " not in scalestudy("status", cwd=tmp_path).stdout   # no sweep holds runs any more
