"""Which runs go to a batch job now: only those whose nodes are free in it.

Parsl's ``MPIExecutor`` gives each task nodes of its own inside its block; a task whose nodes
are not free waits in the worker pool's backlog. That backlog has a bug that Parsl has not
fixed (Parsl PR #3800, "Fix infinite loop in MPITaskScheduler", open as of parsl 2026.10.26):
when a task ends, the pool takes the backlog's smallest task out and offers it again, and one
that still does not fit goes straight back in and is offered again, recursively, until
``RecursionError`` kills the pool's thread that returns results, and the sweep waits for ever
(found with a packed sweep of 1-, 2- and 4-node runs).

Rather than patch Parsl's worker pool in the batch job, the driver never lets a task reach
the pool before its nodes are free there: per executor (one block each: ``max_blocks=1``) it
counts the block's free nodes and worker slots, hands Parsl a run only when both suffice,
and keeps the others here, in submission order, until a run of that block ends. The pool's
backlog then stays empty by construction, on every Parsl release. The count is exact: a
pool gives its nodes back before it sends the result on, so a run's nodes are free in the
block by the time the driver hears that it ended. A run whose batch job ended under it
(``release``) gives its nodes back at once: the next block is a new one.

Everything here runs on one thread of its own (``dispatch``): Parsl's callbacks only queue a
release there, and no lock is needed for the counts.
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Run:
    nodes: int
    start: Callable[[], concurrent.futures.Future]   # hands the run to Parsl; Parsl's future
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    holding: bool = False      # its nodes and slot are counted as taken


class _Block:
    def __init__(self, nodes: int, slots: int) -> None:
        self.nodes = nodes
        self.free_nodes, self.free_slots = nodes, slots
        self.waiting: list[_Run] = []

    def fits(self, run: _Run) -> bool:
        return run.nodes <= self.free_nodes and self.free_slots > 0


class BlockPlacement:
    """``blocks``: label -> (nodes, runs at once) of each executor's one block."""

    def __init__(self, blocks: dict[str, tuple[int, int]]) -> None:
        self.blocks = {label: _Block(nodes, slots) for label, (nodes, slots) in blocks.items()}
        self.dispatch = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalestudy-place")
        self.closed = False
        self._runs: dict[concurrent.futures.Future, tuple[_Block, _Run]] = {}

    def submit(self, label: str, nodes: int,
               start: Callable[[], concurrent.futures.Future]) -> concurrent.futures.Future:
        """The run's future; ``start()`` is called (on the dispatch thread) once its nodes are free."""
        block = self.blocks[label]
        run = _Run(nodes, start)
        if nodes > block.nodes:   # admission refuses such a sweep first (site.allocation.check_runs_fit)
            run.future.set_exception(ValueError(f"a {nodes}-node run cannot start in a {block.nodes}-node batch job"))
            return run.future
        self.dispatch.submit(self._enqueue, block, run)
        return run.future

    def release(self, future: concurrent.futures.Future) -> None:
        """The driver stopped waiting on this run (its batch job ended under it): its nodes and
        slot are free for the runs that wait (the block that held them is gone)."""
        self._call(self._release_future, future)

    def close(self) -> int:
        """Start nothing more; the runs still waiting are cancelled (how many)."""
        try:
            return self.dispatch.submit(self._close).result()
        except RuntimeError:   # closed already
            return 0
        finally:
            self.dispatch.shutdown(wait=True)

    # -- on the dispatch thread --------------------------------------------------------------

    def _call(self, fn: Callable, *args: Any) -> None:
        try:
            self.dispatch.submit(fn, *args)
        except RuntimeError:   # the pool has closed: nothing waits any more
            pass

    def _enqueue(self, block: _Block, run: _Run) -> None:
        if self.closed:
            run.future.cancel()
            return
        block.waiting.append(run)
        self._start_fitting(block)

    def _start_fitting(self, block: _Block) -> None:
        for run in list(block.waiting):
            if self.closed:
                return
            if run.future.cancelled():
                block.waiting.remove(run)
            elif block.fits(run):
                block.waiting.remove(run)
                self._start(block, run)

    def _start(self, block: _Block, run: _Run) -> None:
        if not run.future.set_running_or_notify_cancel():
            return
        block.free_nodes -= run.nodes
        block.free_slots -= 1
        run.holding = True
        self._runs[run.future] = (block, run)
        try:
            parsl_future = run.start()
        except BaseException as exc:  # noqa: BLE001 - the run fails with it, as Parsl's own submit would
            self._release(block, run)
            run.future.set_exception(exc)
            return
        parsl_future.add_done_callback(lambda done: self._ended(block, run, done))

    def _ended(self, block: _Block, run: _Run, done: concurrent.futures.Future) -> None:
        """Parsl's callback (any thread): the nodes go back first, then the driver hears."""
        self._call(self._release, block, run)
        if run.future.done():
            return
        exc = done.exception()
        if exc is not None:
            run.future.set_exception(exc)
        else:
            run.future.set_result(done.result())

    def _release(self, block: _Block, run: _Run) -> None:
        self._runs.pop(run.future, None)
        if not run.holding:
            return
        run.holding = False
        block.free_nodes += run.nodes
        block.free_slots += 1
        self._start_fitting(block)

    def _release_future(self, future: concurrent.futures.Future) -> None:
        found = self._runs.get(future)
        if found is not None:
            self._release(*found)

    def _close(self) -> int:
        self.closed = True
        waiting = [run for block in self.blocks.values() for run in block.waiting]
        for block in self.blocks.values():
            block.waiting.clear()
        return sum(run.future.cancel() for run in waiting)
