"""Parsl's worker pool (``process_worker_pool.py``), with its MPI backlog fixed.

In MPI mode the pool's ``MPITaskScheduler`` keeps tasks whose nodes are not free in a
backlog, and each time a task ends ``_schedule_backlog_tasks`` takes the smallest one out
and offers it again; one that still does not fit goes straight back in, and the method
calls itself again — forever, until ``RecursionError`` kills the thread that returns
results, and the sweep waits for ever (found with a packed sweep of 1-, 2- and 4-node
runs: the 4-node run waited while a 1-node run held a node). Parsl PR #3800 ("Fix
infinite loop in MPITaskScheduler", open as of parsl 2026.10.26, the version installed)
replaces it with what is below: take every backlogged task out once and offer each
again; those that do not fit go back to wait for the next task to end.

Parsl's ``put_task`` (the thread that pulls tasks) and the backlog rescan (the thread that
returns results) share no lock either: a task found not to fit could reach the backlog just
after a rescan that freed its nodes, and wait for the next task to end — for ever, if none is
running. Both are taken under one lock here.

``parsl_config`` starts blocks with this environment's ``python3 -m orchestrator.pools.worker_pool``
in place of ``process_worker_pool.py``, same arguments.
"""

from __future__ import annotations

import os
import queue
import runpy
import shutil
import sys
import threading

# one per worker pool: placing a task and rescanning the backlog never interleave
_PLACING = threading.RLock()


def schedule_backlog_tasks(self) -> None:
    """Offer every backlogged task once (``put_task`` backlogs again those that do not fit)."""
    with _PLACING:
        waiting = []
        while True:
            try:
                waiting.append(self._backlog_queue.get(block=False))
            except queue.Empty:
                break
        for item in waiting:
            self.put_task(item.task)


def locked_put_task(original):
    def put_task(self, task_package: dict):
        with _PLACING:
            return original(self, task_package)
    put_task.__doc__ = original.__doc__
    return put_task


def install(scheduler) -> bool:
    """Replace the backlog rescan and serialise it with ``put_task`` on ``scheduler`` (Parsl's
    ``MPITaskScheduler``); where a Parsl release has renamed them, leave it and say so in the
    pool's log (packed runs may then wait as described above), returning False."""
    missing = [name for name in ("_schedule_backlog_tasks", "put_task") if not hasattr(scheduler, name)]
    if missing:
        print(f"orchestrator.pools.worker_pool: this Parsl's {getattr(scheduler, '__name__', scheduler)} has no "
              f"{', '.join(missing)}: its MPI backlog is not fixed (packed sweeps may wait for ever; see Parsl PR "
              f"#3800)", file=sys.stderr)
        return False
    scheduler.put_task = locked_put_task(scheduler.put_task)
    scheduler._schedule_backlog_tasks = schedule_backlog_tasks
    return True


def main() -> None:
    from parsl.executors.high_throughput import mpi_resource_management

    install(mpi_resource_management.MPITaskScheduler)
    program = shutil.which("process_worker_pool.py",
                           path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if program is None:
        sys.exit("orchestrator.pools.worker_pool: Parsl's process_worker_pool.py is not on PATH")
    sys.argv[0] = program
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
