"""The binding audit: findings on recorded ranks (synthetic records for what this machine has not:
a second NUMA node, GPUs, a cgroup's cpuset and CPU quota), the cgroup readers on a stand-in
``/sys/fs/cgroup`` tree (v2 and v1) and on this machine's, and real 2-rank runs whose launcher
binds them right and wrong (MPICH's own ``-bind-to core`` and ``-bind-to user:0,0``, which pins
both ranks to CPU 0) or leaves them unbound with more threads than CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from results_db import connect
from results_db.store import query
from results_db.analysis.binding import audit
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from workloads.cpu_grant import CpuGrant, cpu_record, host_cpus, read_grant
from workloads.spec import RunSpec

from conftest import BIN, env_with_bin, write_spec


def start(rank, cpus, threads=1, host="h1", host_cpus=4, **extra):
    return {"rank": rank, "host": host, "cpus": cpus, "threads": threads, "host_cpus": host_cpus, **extra}


def test_ranks_bound_to_the_same_cpus_are_flagged_when_the_host_had_room():
    assert audit([start(0, [0, 1]), start(1, [1, 2])]) == ["h1: ranks 0 and 1 share CPUs 1"]   # bound, overlapping
    assert audit([start(0, [0, 1]), start(1, [2, 3])]) == []             # bound apart
    assert audit([start(0, [0, 1, 2, 3]), start(1, [0, 1, 2, 3])]) == []  # unbound: the OS places them
    # 6 threads on a 4-CPU host, bound to overlapping sets: oversubscribed, and rank 0 is over its 2 CPUs
    assert audit([start(0, [0, 1], threads=3), start(1, [1, 2, 3], threads=3)]) == \
        ["h1: ranks 0 and 1 run 6 threads on the 4 CPU(s) they may use (0-3), not bound apart: oversubscribed",
         "h1: rank 0 runs 3 threads on 2 CPU(s) (0-1)"]
    # other hosts are not this one's neighbours
    assert audit([start(0, [0], host="a"), start(1, [0], host="b")]) == []
    # the message names what the job was granted, not the host's count
    assert audit([start(0, [0]), start(1, [0])]) == ["h1: ranks 0 and 1 share CPUs 0: 2 threads on 1 CPU(s) of the 4 granted"]


def test_threads_beyond_the_cores_granted_are_flagged():
    assert audit([start(0, [2, 3], threads=4)]) == ["h1: rank 0 runs 4 threads on 2 CPU(s) (2-3)"]
    # unbound on a host with fewer CPUs than its threads: oversubscribed (the control: as many threads as CPUs)
    assert audit([start(0, [0, 1], threads=4, host_cpus=2)]) == \
        ["h1: rank 0 runs 4 threads on the 2 CPU(s) it may use (0-1), unbound: oversubscribed"]
    assert audit([start(0, [0, 1], threads=2, host_cpus=2)]) == []


def test_unbound_oversubscription_is_flagged_and_ranks_bound_apart_are_not():
    """More threads on a host than the CPUs its ranks may use, while they are not bound apart."""
    unbound = [start(0, [0, 1], threads=2, host_cpus=2), start(1, [0, 1], threads=2, host_cpus=2)]
    assert audit(unbound) == ["h1: ranks 0 and 1 run 4 threads on the 2 CPU(s) they may use (0-1), unbound: "
                              "oversubscribed"]
    # the controls: the same ranks with one thread each; and bound apart, where each rank's own excess shows
    assert audit([{**s, "threads": 1} for s in unbound]) == []
    apart = [start(0, [0], threads=2, host_cpus=2), start(1, [1], threads=2, host_cpus=2)]
    assert audit(apart) == ["h1: rank 0 runs 2 threads on 1 CPU(s) (0)", "h1: rank 1 runs 2 threads on 1 CPU(s) (1)"]


def test_the_cgroups_grant_not_the_hosts_count_is_what_ranks_may_use():
    """A scheduler's cgroup grants 4 CPUs of a 64-CPU host: 8 unbound threads on them oversubscribe
    (the host's count alone would call it a binding that confined them); a CPU quota of 2 on a
    16-CPU affinity is 2 CPUs."""
    granted = [start(r, [0, 1, 2, 3], threads=4, host_cpus=64, cgroup_cpus=4) for r in (0, 1)]
    assert audit(granted) == ["h1: ranks 0 and 1 run 8 threads on the 4 CPU(s) they may use (0-3), unbound: "
                              "oversubscribed"]
    # the control: without the grant recorded (runs from before it was), the host's 64 are what the job had
    assert audit([{k: v for k, v in s.items() if k != "cgroup_cpus"} for s in granted]) == \
        ["h1: ranks 0 and 1 share CPUs 0-3: 8 threads on 4 CPU(s) of the 64 granted"]
    quota = [start(r, list(range(16)), threads=2, host_cpus=16, cgroup_cpus=16, cpu_quota=2.0,
                   cpu_quota_cgroup="/job_7/step_0") for r in (0, 1)]
    assert host_cpus(quota).usable == 2 and host_cpus(quota).allowed == 2   # one cgroup: its quota shared
    assert audit(quota) == ["h1: ranks 0 and 1 run 4 threads on the 2 CPU(s) they may use (0-15 under a CPU quota "
                            "of 2), unbound: oversubscribed"]
    # the controls: no quota; and each rank in a cgroup of its own with 2 CPUs each
    assert audit([{**s, "cpu_quota": None} for s in quota]) == []
    own = [{**s, "cpu_quota_cgroup": f"/job_7/task_{s['rank']}"} for s in quota]
    assert host_cpus(own).usable == 4 and audit(own) == []


def _v2_tree(root, path, files):
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = root.parent / "proc-self-cgroup"
    proc.write_text(f"0::{path}\n")
    return proc


def test_cgroup_v2_readers_on_a_stand_in_tree(tmp_path):
    """A stand-in /sys/fs/cgroup (cgroup v2) under tmp_path: a job step with a cpuset of 16 CPUs and a
    quota of 2 CPUs (cpu.max "200000 100000"); above it a looser quota; "max" means none."""
    root = tmp_path / "cgroup"
    root.mkdir()
    proc = _v2_tree(root, "/system.slice/job_7/step_0", {
        "system.slice/job_7/step_0/cpu.max": "200000 100000\n",
        "system.slice/job_7/step_0/cpuset.cpus.effective": "0-7,16-23\n",
        "system.slice/job_7/cpu.max": "400000 100000\n",
        "system.slice/cpu.max": "max 100000\n"})
    assert read_grant(root, proc) == CpuGrant(cpuset=16, quota=2.0, quota_cgroup="/system.slice/job_7/step_0")
    # a tighter quota above the process's cgroup binds (the kernel enforces every level)
    (root / "system.slice/job_7/cpu.max").write_text("150000 100000\n")
    assert read_grant(root, proc) == CpuGrant(cpuset=16, quota=1.5, quota_cgroup="/system.slice/job_7")
    # no quota anywhere, no cpuset file: nothing is guessed
    bare = tmp_path / "bare"
    bare.mkdir()
    proc = _v2_tree(bare, "/user.slice", {"user.slice/cpu.max": "max 100000\n"})
    assert read_grant(bare, proc) == CpuGrant(cpuset=None, quota=None, quota_cgroup=None)


def test_cgroup_v1_readers_on_a_stand_in_tree(tmp_path):
    """cgroup v1: one mount per controller (Slurm's task/cgroup: /slurm/uid_N/job_N/step_N)."""
    root = tmp_path / "cgroup"
    job = "/slurm/uid_1000/job_42/step_0"
    for rel, text in {f"cpu,cpuacct{job}/cpu.cfs_quota_us": "300000\n", f"cpu,cpuacct{job}/cpu.cfs_period_us": "100000\n",
                      "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
                      f"cpuset{job}/cpuset.effective_cpus": "0-3,8-11\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(f"12:cpuset:{job}\n4:cpu,cpuacct:{job}\n1:name=systemd:/\n0::/\n")
    assert read_grant(root, proc) == CpuGrant(cpuset=8, quota=3.0, quota_cgroup=job)
    (root / f"cpu,cpuacct{job}/cpu.cfs_quota_us").write_text("-1\n")   # -1: no quota
    assert read_grant(root, proc) == CpuGrant(cpuset=8, quota=None, quota_cgroup=None)


def test_this_machines_grant_and_a_real_taskset(tmp_path):
    """This machine's cgroups, read for real: the cpuset holds at least the CPUs this process may
    run on; a rank started under ``taskset -c 0`` records CPU 0 as its affinity and the same grant
    (a binding narrows the affinity, not what the job was granted)."""
    grant = read_grant()
    mine = len(os.sched_getaffinity(0))
    assert grant.cpuset is None or grant.cpuset >= mine
    assert grant.quota is None or grant.quota > 0
    probe = "import json; from workloads.cpu_grant import cpu_record; print(json.dumps(cpu_record()))"
    proc = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env_with_bin())
    assert proc.returncode == 0, proc.stderr
    pinned = json.loads(proc.stdout)
    assert pinned["cpus"] == [0] and pinned["cgroup_cpus"] == grant.cpuset and pinned["host_cpus"] == os.cpu_count()
    assert cpu_record()["cpus"] == sorted(os.sched_getaffinity(0))


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
@pytest.mark.parametrize("binding, crowd, expected", [("core", 1, []), ("user:0,0", 1, ["share CPUs 0"]),
                                                      ("none", 1, []), ("none", 2, ["unbound: oversubscribed"])])
def test_a_real_launchers_binding_is_audited(tmp_path, binding, crowd, expected):
    """``crowd`` x the CPUs this process may use, as threads over 2 unbound ranks: 2x oversubscribes."""
    usable = len(os.sched_getaffinity(0))
    if usable < 2:
        pytest.skip("needs 2 CPUs to bind 2 ranks apart")
    threads = 2 if crowd == 1 else 2 * usable
    spec = write_spec(tmp_path / "r", workers_per_node=2, threads_per_node=threads, steps_per_epoch=2)
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


def test_a_command_ranks_gpu_from_its_listing_on_a_stand_in_driver(tmp_path):
    """A command rank (no torch) records the GPU ``CUDA_VISIBLE_DEVICES`` gives it, from a stand-in
    /proc/driver/nvidia/gpus: its UUID matched; an index matched to the driver's bus order only under
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's default order is fastest first), else the model name
    alone, the host's GPUs being one model; several devices listed: none recorded. Two ranks given
    the same index on one host share it, and the audit says so."""
    from workloads.placement import listed_gpu

    for bus, uuid in (("0000:07:00.0", "GPU-aaaa"), ("0000:c1:00.0", "GPU-bbbb")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(f"Model: \t\t NVIDIA H100 NVL\nIRQ: \t\t 100\nGPU UUID: \t {uuid}\n"
                                                     f"Bus Location: \t {bus}\n")
    root = str(tmp_path)
    assert listed_gpu({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, root) == {
        "visible": "GPU-bbbb", "name": "NVIDIA H100 NVL", "uuid": "GPU-bbbb", "pci_bus_id": "0000:c1:00.0"}
    assert listed_gpu({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, root)["uuid"] == "GPU-bbbb"
    assert listed_gpu({"CUDA_VISIBLE_DEVICES": "1"}, root) == {
        "visible": "1", "name": "NVIDIA H100 NVL", "uuid": None, "pci_bus_id": None}
    assert listed_gpu({"CUDA_VISIBLE_DEVICES": "0,1"}, root) is None and listed_gpu({}, root) is None
    ranks = [start(r, [r], gpu=listed_gpu({"CUDA_VISIBLE_DEVICES": "1"}, root)) for r in (0, 1)]
    assert audit(ranks, device="cuda") == ["h1: ranks 0 and 1 share one GPU (1)"]
    ranks[1]["gpu"] = listed_gpu({"CUDA_VISIBLE_DEVICES": "0"}, root)
    assert audit(ranks, device="cuda") == []
