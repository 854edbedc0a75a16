"""The real Slurm path: a 4-node virtual cluster (slurmctld + 4 slurmd on this host), sbatch, srun.

The cluster comes from scripts/local-slurm-cluster.sh; these tests start it when it is
not running, and are skipped (with the reason) only where Slurm cannot be installed
or started (no root, no package registry).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import RankSummary, Run

from conftest import REPO, overlapping_runs, run_lifetime, scalestudy

pytestmark = pytest.mark.mpi


def _job_ids() -> set[str]:
    out = subprocess.run(["scontrol", "show", "jobs", "-o"], capture_output=True, text=True).stdout
    return {w.split("=", 1)[1] for line in out.splitlines() for w in line.split() if w.startswith("JobId=")}


def _jobs_since(before: set[str]) -> set[str]:
    """Jobs submitted since `before` was taken.

    Not `_job_ids() == before`: slurmctld forgets finished jobs MinJobAge (300 s) after they end, so
    an earlier test's jobs can drop out of the listing while this test runs (a clean-clone CI run
    failed that way with nothing submitted)."""
    return _job_ids() - before


def test_sweep_spreads_ranks_over_the_right_virtual_nodes(tmp_path, slurm_cluster):
    # 1 and 4 nodes (one node, all of them): each node count is a batch job of its own, ~7 s of
    # Parsl's start-up each, so 2 nodes would add ~30 s and nothing these checks do not see
    proc = scalestudy("sweep", "site=local_slurm", "nodes=1,4", "workers_per_node=1,2", "epochs=1",
                      "steps_per_epoch=2", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "finished" in proc.stderr and "running" in proc.stderr and "elapsed" in proc.stderr  # progress lines
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    jobs = _job_ids()
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.nodes, Run.workers_per_node)).all()
        assert [(r.nodes, r.workers_per_node) for r in runs] == [(n, w) for n in (1, 4) for w in (1, 2)]
        for run in runs:
            assert run.status == "done"
            ranks = s.scalars(select(RankSummary).where(RankSummary.run_id == run.id)).all()
            assert len(ranks) == run.nodes * run.workers_per_node  # one MPI job of that size, not N singletons
            per_node = Counter(r.host for r in ranks)
            assert len(per_node) == run.nodes and set(per_node.values()) == {run.workers_per_node}
            assert set(per_node) <= {"n1", "n2", "n3", "n4"}
            assert run.job_id and run.job_id.split(".")[0] in jobs  # the Slurm job it ran in
    command = (tmp_path / "mr" / "3" / "command.txt").read_text()  # nodes=4, workers_per_node=2
    assert command.startswith("srun --ntasks 8 --ntasks-per-node 2") and "--mpi=pmi2" in command
    assert "--cpus-per-task=1" in command and "--kill-on-bad-exit=1" in command
    # max_runs_in_flight: 1 — runs of different sizes (different allocations) never overlap on the shared cores
    spans = []
    for job in range(4):
        lines = (tmp_path / "mr" / str(job) / "metrics" / "rank-0.jsonl").read_text().splitlines()
        spans.append((json.loads(lines[0])["t"], json.loads(lines[-1])["t"]))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_packed_sweep_runs_in_one_slurm_job_on_disjoint_nodes(tmp_path, slurm_cluster):
    """allocation=packed: 1-, 2- and 4-node runs in one 4-node batch job, several at a time
    (max_concurrent_runs 4) wherever their nodes fit, each on nodes of its own (Parsl's
    MPIExecutor hands them out; each rank's SLURMD_NODENAME says where it ran)."""
    site = tmp_path / "packed_slurm.yaml"
    site.write_text((REPO / "site_configs" / "local_slurm.yaml").read_text()
                    .replace("max_concurrent_runs: 1", "max_concurrent_runs: 4")
                    .replace("max_runs_in_flight: 1", "max_runs_in_flight: 0"))
    before = _job_ids()
    proc = scalestudy("sweep", f"site={site}", "allocation=packed", "allocation_nodes=4", "nodes=1,2,4", "workers_per_node=1",
                      "batch_size=16,32", "epochs=1", "steps_per_epoch=4", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    new_jobs = _jobs_since(before)
    assert len(new_jobs) == 1, new_jobs   # one batch job for the whole sweep
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    runs = {}
    with Session(engine) as s:
        rows = s.scalars(select(Run)).all()
        assert sorted(r.nodes for r in rows) == [1, 1, 2, 2, 4, 4] and {r.status for r in rows} == {"done"}
        for run in rows:
            assert run.job_id.split(".")[0] in new_jobs
            hosts = [r.host for r in s.scalars(select(RankSummary).where(RankSummary.run_id == run.id))]
            assert len(set(hosts)) == run.nodes and set(hosts) <= {"n1", "n2", "n3", "n4"}
            runs[str(run.id)] = (run_lifetime(Path(run.run_dir)), set(hosts))
    assert overlapping_runs(runs), f"no two runs ran at once: {runs}"   # packing happened


@pytest.mark.parametrize("overrides, shown", [
    (["allocation=packed", "allocation_nodes=2", "nodes=1,4"], "nodes=4: larger than the packed allocation of 2"),
    (["allocation=packd"], "allocation='packd': expected per_size or packed"),
    (["allocation=packed", "allocation_nodes=8"], "allocation_nodes=8: site local_slurm allows at most 4 nodes"),
])
def test_packed_sweeps_that_cannot_run_are_refused(tmp_path, slurm_cluster, overrides, shown):
    before = _job_ids()
    for dry in ([], ["--dry-run"]):
        proc = scalestudy("sweep", *dry, "site=local_slurm", *overrides, f"hydra.sweep.dir={tmp_path / 'mr'}",
                          cwd=tmp_path)
        assert proc.returncode == 2 and shown in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
    assert not _jobs_since(before) and not (tmp_path / "scalestudy.db").exists()


def test_dry_run_prints_and_submits_nothing(tmp_path, slurm_cluster):
    before = _job_ids()
    proc = scalestudy("sweep", "--dry-run", "--show-scripts", "site=local_slurm", "nodes=1,4", "workers_per_node=2",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "#SBATCH --nodes=4" in out and "#SBATCH --partition=debug" in out and "#SBATCH --no-requeue" in out
    assert "srun --ntasks 8 --ntasks-per-node 2" in out and "--mpi=pmi2" in out
    assert "charged at most: 4 node(s) x 00:20:00 = 1.33 node-hours" in out and "node-hours charged at most: 5.00" in out and "1.67 when the sweep goes as planned" in out
    assert not _jobs_since(before)
    assert not (tmp_path / "scalestudy.db").exists() or not connect(f"sqlite:///{tmp_path / 'scalestudy.db'}") \
        .connect().exec_driver_sql("select count(*) from runs").scalar()
    assert not list((tmp_path / "mr").glob("*/spec.json"))


@pytest.mark.parametrize("overrides, shown", [
    (["nodes=5"], "site local_slurm allows at most 4 nodes"),
    (["walltime=02:00:00"], "allows at most 01:00:00"),
    (["threads_per_node=4", "workers_per_node=1"], "nodes have 2 hardware threads"),
])
def test_runs_beyond_site_limits_are_refused(tmp_path, slurm_cluster, overrides, shown):
    for dry in ([], ["--dry-run"]):
        proc = scalestudy("sweep", *dry, "site=local_slurm", *overrides, f"hydra.sweep.dir={tmp_path / 'mr'}",
                          cwd=tmp_path)
        assert proc.returncode == 2 and shown in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


MARKER_CMD = "touch {m}"


@pytest.mark.parametrize("field, template", [
    ("account", "proj;touch {m}"),
    ("account", "proj$(touch {m})"),
    ("queue", "debug`touch {m}`"),
    ("walltime", "00:10:00\ntouch {m}"),
    ("study_name", "x;touch {m}"),
])
def test_shell_metacharacters_in_overrides_never_run(tmp_path, slurm_cluster, field, template):
    marker = tmp_path / "pwned"
    before = _job_ids()
    value = template.format(m=marker)
    proc = scalestudy("sweep", "site=local_slurm", f"{field}={value!r}" if "\n" not in value else f"{field}={value}",
                      "epochs=1", "steps_per_epoch=1", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and field.split("_")[0] in proc.stderr
    assert not marker.exists() and not _jobs_since(before)


@pytest.mark.parametrize("line", ["echo hi; touch {m}", "touch {m} &", "export X=$(touch {m})", "echo `touch {m}`",
                                  "echo hi > {m}", "echo hi | tee {m}"])
def test_worker_init_with_shell_metacharacters_is_refused(tmp_path, slurm_cluster, line):
    marker = tmp_path / "pwned"
    site = tmp_path / "evil.yaml"
    site.write_text((REPO / "site_configs" / "local_slurm.yaml").read_text()
                    + f"worker_init:\n  - {line.format(m=marker)!r}\n")
    before = _job_ids()
    proc = scalestudy("sweep", f"site={site}", "epochs=1", "steps_per_epoch=1", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      cwd=tmp_path)
    assert proc.returncode == 2 and "site.worker_init" in proc.stderr and "metacharacters" in proc.stderr
    assert not marker.exists() and not _jobs_since(before)


def test_plain_worker_init_runs_on_the_nodes(tmp_path, slurm_cluster):
    """A legitimate worker_init (with a $VAR) runs in the batch job before the worker."""
    site = tmp_path / "ok.yaml"
    site.write_text((REPO / "site_configs" / "local_slurm.yaml").read_text()
                    + f"worker_init:\n  - mkdir -p {tmp_path}/init-ran-in-job-$SLURM_JOB_ID\n")
    proc = scalestudy("sweep", f"site={site}", "nodes=1", "workers_per_node=1", "epochs=1", "steps_per_epoch=1",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = list(tmp_path.glob("init-ran-in-job-*"))
    assert len(made) == 1 and made[0].name.removeprefix("init-ran-in-job-").isdigit()


def test_slurm_energy_source_asks_the_real_sacct(tmp_path, slurm_cluster):
    """SCALESTUDY_ENERGY=slurm on the real cluster: each host's first rank names the run's
    srun step (the batch job's id and a step number) and the login node asks the real sacct
    for it. This cluster keeps no accounting, so the energy is missing with Slurm's own
    reason, not 0 (the values path is tested against a scripted sacct in test_energy.py)."""
    site = tmp_path / "energy_slurm.yaml"
    site.write_text((REPO / "site_configs" / "local_slurm.yaml").read_text()
                    .replace("\nenv:\n", "\nenv:\n  SCALESTUDY_ENERGY: slurm\n", 1))
    proc = scalestudy("sweep", f"site={site}", "nodes=2", "workers_per_node=1", "epochs=1", "steps_per_epoch=2",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Session(connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")) as s:
        run = s.scalars(select(Run)).one()
        readings = [r.summary["energy"] for r in s.scalars(select(RankSummary).where(RankSummary.run_id == run.id))
                    if isinstance(r.summary, dict) and "energy" in r.summary]
    assert run.energy_source == "slurm" and run.energy_joules is None and run.energy_watts is None
    assert run.energy_note == "sacct: Slurm accounting storage is disabled"
    assert readings                              # one per node MPI sees (the virtual nodes share a host)
    steps = {r["slurm_step"] for r in readings}
    assert len(steps) == 1 and steps.pop().startswith(f"{run.job_id}.")


def test_one_failing_rank_ends_the_whole_srun_job(tmp_path, slurm_cluster):
    """With the flags scalestudy adds, a rank that dies takes its job step down at once;
    without them srun lets the other ranks run on (they would spin in MPI_Init or a
    collective until the walltime)."""
    import sys
    import time

    from orchestrator.site.launchers import launch_flags
    from orchestrator.site.config import load_site

    site = load_site("local_slurm")
    program = "import os, sys, time; r = int(os.environ['SLURM_PROCID']); sys.exit(3) if r == 1 else time.sleep(120)"
    base = ["srun", "-N2", "--ntasks-per-node=2", *site.launcher_options.split()]
    t0 = time.monotonic()
    proc = subprocess.run([*base, *launch_flags(site, 1).split(), sys.executable, "-c", program],
                          capture_output=True, text=True, timeout=200, cwd=tmp_path)
    took = time.monotonic() - t0
    # the step did not wait for the ranks that sleep 120 s: anything well below that shows it,
    # however slowly a busy machine started the ranks
    assert proc.returncode != 0 and took < 90, (took, proc.stderr)
    # without the flags the same step is given twice as long as it took with them (measured
    # here), and at least 10 s, and does not end: margins a busy machine stretches alike
    given = min(max(10.0, 2 * took), 100.0)
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):  # the failure mode the flag removes
        subprocess.run([*base, sys.executable, "-c", program], capture_output=True, timeout=given, cwd=tmp_path)
    assert time.monotonic() - t0 >= given
    subprocess.run(["scancel", "--user", os.environ.get("USER", "root"), "--name", "python"], capture_output=True)
