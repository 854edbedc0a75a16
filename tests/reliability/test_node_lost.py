"""A node of a run's allocation set DOWN on the real local Slurm cluster while the run is on
it: the batch job dies with it, the sweep notices (it asks the scheduler, it does not wait
for Parsl's heartbeat timeout), records the attempt as ``lost`` and runs it again on a new
allocation; the sweep completes and the lost attempt stays in the database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from workloads.run_folder import LOG_FILE
from orchestrator.sweep.attempts import node_failure as _node_failure
from results_db import connect
from results_db.store.schema import Run

from conftest import REPO, env_with_bin

needs_slurm = pytest.mark.slurm

SRUN_NAMES_NODE = "srun: error: Node failure on n2"
STEPD_NAMES_ITSELF = ("slurmstepd-n1: error: *** STEP 456.0 ON n1 CANCELLED AT 2026-12-02T05:50:40 DUE TO NODE "
                      "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")


@pytest.mark.parametrize("first, second", [(SRUN_NAMES_NODE, STEPD_NAMES_ITSELF), (STEPD_NAMES_ITSELF, SRUN_NAMES_NODE)],
                         ids=["srun-first", "slurmstepd-first"])
def test_the_line_naming_the_failed_node_leads_whatever_the_order(tmp_path, first, second):
    """srun and the surviving node's slurmstepd write to one log from two processes; a CI run
    saw slurmstepd's line first, and the recorded error then named only the node that survived."""
    (tmp_path / LOG_FILE).write_text(f"{first}\n{second}\nsrun: error: n2: task 1: Exited with exit code 143\n"
                                     f"{STEPD_NAMES_ITSELF}\n")
    said = _node_failure(tmp_path)
    assert said == f"; {SRUN_NAMES_NODE}; {STEPD_NAMES_ITSELF}"


def test_no_log_or_no_node_failure_says_nothing(tmp_path):
    assert _node_failure(tmp_path) == ""
    (tmp_path / LOG_FILE).write_text("srun: error: n2: task 1: Exited with exit code 3\n")
    assert _node_failure(tmp_path) == ""


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _running_job(run_dir):
    try:
        record = json.loads((run_dir / "job.json").read_text())
    except (OSError, ValueError):
        return None
    return record.get("job_id") if record.get("running") else None


@pytest.mark.mpi
@needs_slurm
def test_a_run_whose_node_goes_down_is_retried_on_a_new_allocation(tmp_path):
    sweep_dir = tmp_path / "mr"
    cmd = [sys.executable, "-m", "orchestrator.cli", "sweep", "site=local_slurm", "study_name=node_lost", "nodes=2",
           "workers_per_node=1", "workload.kind=command", "workload.command=[sleep,8]",
           f"hydra.sweep.dir={sweep_dir}"]
    driver = subprocess.Popen(cmd, cwd=tmp_path, env=env_with_bin({"PYTHONPATH": str(REPO)}), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = None
    try:
        def started():
            if driver.poll() is not None:
                raise AssertionError(f"the sweep ended early: {driver.communicate()[1][-3000:]}")
            return _running_job(sweep_dir / "0")

        job_id = _wait_for(started, 300, "the run to start in a batch job")
        # the ranks are up: each has written its first record, just before starting the command
        # (waited for, not slept on: a busy machine starts them late)
        _wait_for(lambda: len(list((sweep_dir / "0" / "metrics").glob("*"))) >= 2, 300, "the ranks to start")
        nodes = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%N"], capture_output=True,
                               text=True).stdout.strip()
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True).stdout.split()
        assert len(hosts) == 2, nodes
        victim = hosts[-1]
        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=down", "reason=scalestudy-test"],
                       check=True)
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
        if victim:
            subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"], capture_output=True)
    assert driver.returncode == 0, err[-3000:]
    assert "node lost retry 1 of 2" in err
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        lost, retried = s.scalars(select(Run).order_by(Run.id)).all()
    # the lost attempt is recorded, not hidden: its batch job, and what srun said about the node
    assert (lost.attempt, lost.latest, lost.status) == (1, False, "lost")
    assert lost.job_id == str(job_id) and f"batch job {job_id}" in lost.error
    assert f"Node failure on {victim}" in lost.error, lost.error
    assert lost.run_dir.endswith(f"attempt-{lost.id}") and os.path.isdir(lost.run_dir)
    # the retry ran once, in another batch job, to the end
    assert (retried.attempt, retried.latest, retried.status) == (2, True, "done")
    assert retried.job_id and retried.job_id != lost.job_id and retried.exit_code == 0
    # nothing of the sweep is left in the queue
    _wait_for(lambda: not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip(), 300,
              "the allocations to end")
