"""The binding audit: findings on recorded ranks (synthetic records for what this machine has not:
a second NUMA node, GPUs), and real 2-rank runs whose launcher binds them right and wrong
(MPICH's own ``-bind-to core`` and ``-bind-to user:0,0``, which pins both ranks to CPU 0)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from results_db import connect, query
from results_db.binding import audit
from results_db.ingest import ingest_run
from results_db.runs import PlannedRun, register_runs
from workloads.spec import RunSpec

from conftest import BIN, env_with_bin, write_spec


def start(rank, cpus, threads=1, host="h1", host_cpus=4, **extra):
    return {"rank": rank, "host": host, "cpus": cpus, "threads": threads, "host_cpus": host_cpus, **extra}


def test_ranks_bound_to_the_same_cpus_are_flagged_when_the_host_had_room():
    assert audit([start(0, [0]), start(1, [0])]) == ["h1: ranks 0 and 1 share CPUs 0: 2 threads on 1 CPU(s) of the host's 4"]
    assert audit([start(0, [0, 1]), start(1, [1, 2])]) == ["h1: ranks 0 and 1 share CPUs 1"]   # bound, overlapping
    assert audit([start(0, [0, 1]), start(1, [2, 3])]) == []             # bound apart
    assert audit([start(0, [0, 1, 2, 3]), start(1, [0, 1, 2, 3])]) == []  # unbound: the OS places them
    # 6 threads on a 4-CPU host share CPUs by design: not a binding mistake
    assert audit([start(0, [0, 1], threads=3), start(1, [1, 2, 3], threads=3)]) == \
        ["h1: rank 0 runs 3 threads on 2 CPU(s) (0-1)"]
    # other hosts are not this one's neighbours
    assert audit([start(0, [0], host="a"), start(1, [0], host="b")]) == []


def test_threads_beyond_the_cores_granted_are_flagged():
    assert audit([start(0, [2, 3], threads=4)]) == ["h1: rank 0 runs 4 threads on 2 CPU(s) (2-3)"]
    # unbound on a host with fewer CPUs than the run asked threads of: sharing by design, not flagged
    assert audit([start(0, [0, 1], threads=4, host_cpus=2)]) == []


def test_gpus_shared_or_far_from_their_ranks_are_flagged():
    a = start(0, [0, 1], numa=[0], gpu={"uuid": "GPU-a", "pci_bus_id": "0000:07:00.0", "numa_node": 0})
    b = start(1, [2, 3], numa=[0], gpu={"uuid": "GPU-a", "pci_bus_id": "0000:07:00.0", "numa_node": 0})
    assert audit([a, b], device="cuda") == ["h1: ranks 0 and 1 share one GPU (GPU-a)"]
    far = start(0, [0, 1], numa=[0], gpu={"uuid": "GPU-b", "pci_bus_id": "0000:c1:00.0", "numa_node": 3})
    assert audit([far], device="cuda") == ["h1: rank 0's GPU (0000:c1:00.0) is on NUMA node 3, its CPUs on 0"]
    unknown = start(0, [0, 1], numa=[0], gpu={"uuid": "GPU-c", "numa_node": None})
    assert audit([unknown], device="cuda") == []


def test_nothing_recorded_is_nothing_checked():
    assert audit([{"rank": 0, "host": "h"}]) is None


@pytest.mark.mpi
@pytest.mark.parametrize("binding, expected", [("core", []), ("user:0,0", ["share CPUs 0"])])
def test_a_real_launchers_binding_is_audited(tmp_path, binding, expected):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs to bind 2 ranks apart")
    spec = write_spec(tmp_path / "r", workers_per_node=2, threads_per_node=2, steps_per_epoch=2)
    proc = subprocess.run([str(BIN / "mpiexec"), "-n", "2", "-bind-to", binding, sys.executable, "-m", "workloads",
                           str(spec)], capture_output=True, text=True, env=env_with_bin(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    [d] = register_runs(engine, "bind", [PlannedRun("k", RunSpec.load(spec).to_dict(), str(tmp_path / "r"))])
    ingest_run(engine, d.run_id, tmp_path / "r")
    [row] = query.runs(engine, study="bind").to_dict("records")
    found = row["binding"]
    assert isinstance(found, list) and len(found) == len(expected)
    assert all(e in f for e, f in zip(expected, found))
    if expected:
        status = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", "--db",
                                 f"sqlite:///{tmp_path / 'r.db'}"], capture_output=True, text=True, env=env_with_bin())
        assert f"WARNING binding: run {d.run_id} (study bind): " in status.stdout
