"""A sweep driver on the real local Slurm cluster (Parsl's MPIExecutor, one run in flight at
a time: ``max_runs_in_flight: 1``), stopped two ways:

- SIGKILL: Parsl's interchange goes with it (it would otherwise keep the batch job alive
  until its walltime), and the same command run again at once cancels the stopped
  sweep's batch job (its id was recorded when the run started) and runs each run to
  the end exactly once — the one that was waiting behind the cap too.
- Ctrl-C (SIGINT to the process group, as a terminal sends it): one line, exit 130
  within seconds, the batch job cancelled, no interchange traceback, nothing left.
"""

from __future__ import annotations

import json
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

from conftest import env_with_bin, scalestudy, sigint_default

pytestmark = [pytest.mark.mpi, pytest.mark.slurm]


def _args(tmp_path, study: str) -> list[str]:
    return ["sweep", "site=local_slurm", f"study_name={study}", "nodes=1", "workers_per_node=1",
            "workload.kind=command", "workload.command=[sleep,8]", "+params.i=0,1",
            f"hydra.sweep.dir={tmp_path / 'mr'}"]


def _start(tmp_path, study: str) -> tuple[subprocess.Popen, str]:
    """The driver in a session of its own, once its first run is running in a batch job."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *_args(tmp_path, study)], cwd=tmp_path,
                            env=env_with_bin(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=sigint_default)
    deadline = time.monotonic() + 300   # a generous ceiling: only a run that never starts reaches it
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended early: {proc.communicate()[1][-3000:]}")
        try:
            record = json.loads((tmp_path / "mr" / "0" / "job.json").read_text())
            if record.get("running") and record.get("job_id"):
                time.sleep(1.0)
                return proc, str(record["job_id"])
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("the first run did not start")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _queue() -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split()


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return predicate()


def test_sigkill_ends_the_interchange_and_the_same_command_cancels_the_allocation(tmp_path):
    proc, job_id = _start(tmp_path, "killed_slurm")
    interchanges = [p for p in _children(proc.pid) if "interchange" in
                    open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")]
    assert interchanges, "no interchange process under the driver"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    # generous ceilings: they only matter if the event never happens
    assert _wait(lambda: not any(_alive(p) for p in interchanges), 120), "the interchange outlived its driver"
    assert job_id in _queue()   # the batch job would live on until its workers miss the interchange
    # its run held where it is (suspended, still in the queue), so that it cannot end in this job
    # before the same command cancels it: otherwise that had to happen within the run's 8 s,
    # which a busy machine's start-up of the command exceeds (run 0 was then recovered instead)
    subprocess.run(["scontrol", "suspend", job_id], check=True, capture_output=True)

    again = scalestudy(*_args(tmp_path, "killed_slurm"), cwd=tmp_path, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"cancelled batch job(s) {job_id} of a sweep that stopped" in again.stderr
    assert "in progress under sweep" not in again.stderr
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
    # every run once, done, in the new sweep's batch job; no earlier attempt hidden or duplicated
    assert [(r.params, r.status, r.attempt, r.latest) for r in runs] == [({"i": 0}, "done", 1, True),
                                                                         ({"i": 1}, "done", 1, True)]
    assert all(r.job_id and r.job_id != job_id for r in runs)
    assert _wait(lambda: not _queue(), 300), f"batch jobs left: {_queue()}"


def test_ctrl_c_stops_a_slurm_sweep_in_seconds_and_cancels_its_batch_job(tmp_path):
    t0 = time.monotonic()
    proc, job_id = _start(tmp_path, "ctrl_c_slurm")
    started_in = time.monotonic() - t0
    interchanges = [p for p in _children(proc.pid) if "interchange" in
                    open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")]
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    elapsed = time.monotonic() - t0
    # in seconds: stopping takes no longer than starting took, measured here (the driver's and
    # Slurm's work, which a busy machine stretches alike), nor than 20 s on an idle machine
    assert proc.returncode == 130 and elapsed < max(20.0, started_in), (proc.returncode, elapsed, started_in,
                                                                        err[-2000:])
    assert "interrupted: 0 runs done, 2 stopped; rerun the same command to resume" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert _wait(lambda: job_id not in _queue(), 120), "the batch job outlived the interrupted sweep"
    assert not any(_alive(p) for p in interchanges)
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        statuses = [r.status for r in s.scalars(select(Run).order_by(Run.id))]
    assert statuses == ["interrupted", "interrupted"]   # resumed by the same command
