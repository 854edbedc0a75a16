"""A rank that raises, or is killed, mid-run: the MPI job ends within seconds (no rank
left spinning), the run is failed with that rank's error, and the rest of the sweep goes on."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import scalestudy

pytestmark = pytest.mark.mpi


SITES = ["local", pytest.param("local_slurm", marks=pytest.mark.slurm)]


def _wall(run_dir) -> float:
    """How long the run's MPI job took, as its run folder records it."""
    return json.loads((run_dir / "job.json").read_text())["wall_seconds"]


@pytest.mark.parametrize("site", SITES)
def test_a_rank_that_raises_in_training_ends_its_run_not_the_sweep(tmp_path, site):
    """Built-in training: rank 1's model raises at its third forward pass; the others would
    wait for it in an allreduce forever."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "crashing.py").write_text(
        "import os, torch\n"
        "from workloads.models import build_model\n"
        "class Crash(torch.nn.Module):\n"
        "    def __init__(self, inner, crash):\n"
        "        super().__init__(); self.inner, self.crash, self.calls = inner, crash, 0\n"
        "    def forward(self, x):\n"
        "        self.calls += 1\n"
        "        if self.crash and self.calls == 3 and os.environ.get('PMI_RANK', os.environ.get('SLURM_PROCID')) == '1':\n"
        "            raise RuntimeError('rank 1 ran out of luck')\n"
        "        return self.inner(x)\n"
        "def make(input_shape, num_classes, params, seed):\n"
        "    return Crash(build_model('small_cnn', input_shape, num_classes, seed), params['crash'])\n")
    proc = scalestudy("sweep", f"site={site}", "study_name=crash", "nodes=1", "workers_per_node=2", "epochs=1",
                      "steps_per_epoch=30", "model=crashing:make", "+params.crash=true,false",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env={"PYTHONPATH": str(pkg)}, timeout=300)
    assert proc.returncode == 1 and "1 of 2 runs failed" in proc.stderr, proc.stderr[-3000:]
    # the crashed run's MPI job ended about as soon as the honest one, which ran ten times the
    # steps: a margin measured in this test (a busy machine stretches both), not a number of seconds
    walls = [_wall(tmp_path / "mr" / str(i)) for i in (0, 1)]
    assert walls[0] < 3 * walls[1], walls
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        crashed, fine = s.scalars(select(Run).order_by(Run.id)).all()
    assert crashed.status == "failed" and "rank 1: RuntimeError: rank 1 ran out of luck" in crashed.error
    assert fine.status == "done" and fine.throughput > 0


@pytest.mark.parametrize("site", SITES)
def test_a_rank_killed_by_a_signal_ends_its_job_in_seconds(tmp_path, site):
    marker = f"victim-{os.getpid()}-{time.time_ns()}"
    program = (f"import os, signal, time; r = os.environ['RANK']; time.sleep(1); "
               f"os.kill(os.getpid(), signal.SIGKILL) if r == '1' else None; time.sleep(120)  # {marker}")
    proc = scalestudy("sweep", f"site={site}", "study_name=killed_rank", "nodes=1", "workers_per_node=2",
                      "workload.kind=command", f"workload.command=[python,-c,{program!r}]",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    # the MPI job did not wait for rank 0, which sleeps 121 s: it ended well before that, however
    # slowly a busy machine started the ranks (the job's own wall time, not the sweep's)
    wall = _wall(tmp_path / "mr" / "0")
    assert proc.returncode == 1 and wall < 90, (wall, proc.stderr[-2000:])
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        [run] = s.scalars(select(Run)).all()
    assert run.status == "failed" and "exited with 137 (rank 1)" in run.error, run.error
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0
