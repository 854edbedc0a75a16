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

Parsl's pool starts its worker and its ``multiprocessing`` manager with the ``spawn`` method:
each is a new interpreter that imports the pool's script again (Parsl, ZeroMQ, psutil: 0.6-0.7 s
apiece on this VM, several seconds on a KNL node), one after the other, before the first task
can start. Here they come from a ``forkserver`` started before anything else, which imports the
pool's module once, alongside the pool's own start-up, and forks each of them ready-made
(``fast_start_context``). A fork server forks from a process with no threads, so nothing is
forked holding a lock; Python 3.14 makes it the default on Linux. The manager (a server process
that needs nothing of Parsl's) is forked at once, before anything but the standard library is
loaded, so it does not wait for the fork server's imports.

``parsl_config`` starts blocks with this environment's ``python3 -m orchestrator.pools.worker_pool``
in place of ``process_worker_pool.py``, same arguments.
"""

from __future__ import annotations

import multiprocessing
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


POOL_MODULE = "parsl.executors.high_throughput.process_worker_pool"
# what the fork server imports: the pool's module, without typeguard (worker_pool_preload)
PRELOAD_MODULE = "orchestrator.pools.worker_pool_preload"
PRELOAD_ENV = "SCALESTUDY_POOL_PRELOAD"   # the task's modules, for the fork server to import too


class ForkServerContext:
    """Parsl's ``SpawnContext`` in the pool's process, with processes from a fork server.

    The pool's script runs as ``__main__`` (``runpy``), so its worker function pickles as
    ``__main__.worker``, which a child would find only by running the script again as
    ``__mp_main__``; the same function of the installed module (the script is that module's
    copy), imported in the server already, is started instead."""

    def __init__(self, context, module_name: str = POOL_MODULE, manager=None):
        self._context = context
        self._module_name = module_name
        self._manager = manager

    def Manager(self):  # noqa: N802
        """The manager started with this context, the first time; new ones after."""
        manager, self._manager = self._manager, None
        return manager if manager is not None else self._context.Manager()

    def Process(self, *args, target=None, **kwargs):  # noqa: N802 (multiprocessing's name)
        if target is not None and getattr(target, "__module__", None) == "__main__":
            import importlib

            target = getattr(importlib.import_module(self._module_name), target.__name__, target)
        return self._context.Process(*args, target=target, **kwargs)

    def __getattr__(self, name):
        return getattr(self._context, name)


def fast_start_context(preload: tuple[str, ...] = (PRELOAD_MODULE,)):
    """Start a fork server now, importing ``preload`` in it while the caller goes on; None
    where the platform has none (the pool then spawns as Parsl does)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    forkserver.ensure_running()
    manager = None
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        manager = multiprocessing.get_context("fork").Manager()   # a bare process: safe to fork
    return ForkServerContext(context, manager=manager)


def take_preload(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the modules after ``--preload=``, the rest of ``argv`` for Parsl's own argument parser)."""
    preload = [a.split("=", 1)[1] for a in argv if a.startswith("--preload=")]
    return preload, [a for a in argv if not a.startswith("--preload=")]


def main() -> None:
    from .lean_parsl import hollow_packages, typechecks_off

    # the task's modules (``parsl_config.worker_pool_launch_cmd(preload)``), imported by the fork
    # server after the pool's own (worker_pool_preload, which reads them from the environment)
    preload, sys.argv = take_preload(sys.argv)
    os.environ[PRELOAD_ENV] = ",".join(preload)
    context = fast_start_context()
    hollow_packages()   # the pool's modules of Parsl, not its whole package (lean_parsl)
    with typechecks_off():   # this process builds no Parsl object from user input (lean_parsl)
        import parsl.multiprocessing
        from parsl.executors.high_throughput import mpi_resource_management

        if context is not None:
            parsl.multiprocessing.SpawnContext = context   # read by the script's `from ... import SpawnContext`
        install(mpi_resource_management.MPITaskScheduler)
        program = shutil.which("process_worker_pool.py",
                               path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if program is None:
            sys.exit("orchestrator.pools.worker_pool: Parsl's process_worker_pool.py is not on PATH")
        sys.argv[0] = program
        runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
