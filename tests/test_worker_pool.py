"""Parsl's MPI task scheduler with the backlog fix of orchestrator/worker_pool.py (Parsl PR #3800)."""

from __future__ import annotations

import pickle
import queue

import pytest
from parsl.executors.high_throughput.mpi_resource_management import MPITaskScheduler

from orchestrator.pools import worker_pool
from orchestrator.pools.worker_pool import schedule_backlog_tasks


def _task(tid: int, nodes: int) -> dict:
    return {"task_id": tid, "context": {"resource_spec": {"num_nodes": nodes}}}


def _finish(scheduler, tid: int) -> None:
    scheduler.pending_result_q.put(pickle.dumps({"type": "result", "task_id": tid}))
    scheduler.get_result(block=False)


def _scheduler(tmp_path, monkeypatch, fixed: bool) -> MPITaskScheduler:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("a\nb\nc\nd\n")
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    monkeypatch.setenv("PBS_NODEFILE", str(nodefile))
    if fixed:
        monkeypatch.setattr(MPITaskScheduler, "_schedule_backlog_tasks", MPITaskScheduler._schedule_backlog_tasks)
        monkeypatch.setattr(MPITaskScheduler, "put_task", MPITaskScheduler.put_task)   # restored after the test
        assert worker_pool.install(MPITaskScheduler)     # the installed Parsl still has both methods
        assert MPITaskScheduler._schedule_backlog_tasks is schedule_backlog_tasks
    return MPITaskScheduler(queue.Queue(), queue.Queue())


def _started(scheduler) -> list[int]:
    out = []
    while not scheduler.pending_task_q.empty():
        out.append(scheduler.pending_task_q.get()["task_id"])
    return out


def test_a_large_task_waits_for_its_nodes_and_then_runs(tmp_path, monkeypatch):
    """4 nodes: runs of 1, 1, 2 nodes start; a 4-node run and a 1-node run wait. When the first
    1-node run ends, the waiting 1-node run starts and the 4-node one keeps waiting (Parsl's own
    method recursed here until RecursionError); when every node is free it starts."""
    scheduler = _scheduler(tmp_path, monkeypatch, fixed=True)
    for tid, nodes in ((1, 1), (2, 1), (3, 2), (4, 4), (5, 1)):
        scheduler.put_task(_task(tid, nodes))
    assert _started(scheduler) == [1, 2, 3]
    _finish(scheduler, 1)
    assert _started(scheduler) == [5]
    for tid in (2, 3):
        _finish(scheduler, tid)
        assert _started(scheduler) == []
    _finish(scheduler, 5)
    assert _started(scheduler) == [4]
    assert set(scheduler._map_tasks_to_nodes[4]) == {"a", "b", "c", "d"}


def test_parsl_s_own_backlog_loops_on_a_task_that_does_not_fit(tmp_path, monkeypatch):
    """Why the fix exists: with Parsl's method the same situation never returns."""
    scheduler = _scheduler(tmp_path, monkeypatch, fixed=False)
    for tid, nodes in ((1, 1), (2, 4), (3, 1), (4, 1), (5, 1)):
        scheduler.put_task(_task(tid, nodes))
    try:
        _finish(scheduler, 1)
    except RecursionError:
        return
    pytest.skip("this Parsl's MPI backlog no longer loops: orchestrator/worker_pool.py can go")


def test_placing_a_task_and_rescanning_the_backlog_hold_one_lock(tmp_path, monkeypatch):
    """A task found not to fit must not reach the backlog between another thread's freeing of
    nodes and its rescan: every node lookup happens under the pool's lock."""
    scheduler = _scheduler(tmp_path, monkeypatch, fixed=True)
    held = []
    original = MPITaskScheduler._get_nodes

    def get_nodes(self, n):
        held.append(worker_pool._PLACING._is_owned())
        return original(self, n)

    monkeypatch.setattr(MPITaskScheduler, "_get_nodes", get_nodes)
    for tid, nodes in ((1, 4), (2, 1)):        # the second waits in the backlog
        scheduler.put_task(_task(tid, nodes))
    _finish(scheduler, 1)                        # the rescan places it
    assert _started(scheduler) == [1, 2] and held == [True, True, True]


def test_a_parsl_without_the_methods_is_said_not_patched(capsys):
    """A Parsl release that renamed the scheduler's methods: left as it is, and the pool's log
    says that its backlog is not fixed (no silent half-patch)."""
    class Renamed:
        def put_task(self, task):
            pass

    assert worker_pool.install(Renamed) is False
    assert "has no _schedule_backlog_tasks" in capsys.readouterr().err
    assert not hasattr(Renamed, "_schedule_backlog_tasks")


def test_the_task_module_reaches_the_fork_servers_preload_through_the_launch_command(tmp_path):
    """The driver names its task's module (``--preload=``); the pool strips it before Parsl's own
    argument parser and the fork server's preload imports it, surviving one that fails (that
    the pools import nothing of the sweep's is a layer of ``scripts/code_shape.py``)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from orchestrator.pools.parsl_config import worker_pool_launch_cmd
    from orchestrator.pools.worker_pool import take_preload

    cmd = worker_pool_launch_cmd(("orchestrator.sweep.job_returns",))
    assert "-m orchestrator.pools.worker_pool --preload=orchestrator.sweep.job_returns " in cmd
    with pytest.raises(ValueError, match="not a module name"):
        worker_pool_launch_cmd(("x; rm -rf ~",))
    assert take_preload(["pool", "--preload=a.b", "-p", "0", "--preload=c"]) == (["a.b", "c"], ["pool", "-p", "0"])

    (tmp_path / "broken_task_module.py").write_text("raise RuntimeError('broken at import')\n")
    program = ("import json, sys; import orchestrator.pools.worker_pool_preload; "
               "print(json.dumps({m: m in sys.modules for m in ('orchestrator.sweep.job_returns', 'hydra')}))")
    env = {**os.environ, "SCALESTUDY_POOL_PRELOAD": "broken_task_module,orchestrator.sweep.job_returns",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path(__file__).resolve().parent.parent}"}
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"orchestrator.sweep.job_returns": True, "hydra": True}
