"""The Horovod-style background loop: negotiate what is ready everywhere, fuse, allreduce.

Backprop hands each gradient to ``ready()`` the moment it is accumulated. A
background thread runs *cycles*, at most one every ``cycle_time``: each cycle, all
ranks AND together bit vectors of what they hold ready (Horovod's response cache
does the same), so every rank learns the same set of tensors ready on *all* ranks,
fuses it into buffers of at most ``fusion_threshold`` bytes in one canonical order,
and allreduces each buffer while backprop goes on producing the next gradients.
Because every decision is derived from the same collective result, all ranks issue
the same collectives in the same order without a central coordinator.

The engine has its own communicator (a duplicate), so its collectives never
interleave with the training loop's. While backprop runs, a cycle never waits on MPI
(nonblocking collectives, tested at the next cycle). Where the cycles run:

- ``progress="thread"`` (the default): a background thread of its own, as Horovod's,
  waking once per cycle; on a node whose cores all compute, each wake-up is taken from
  backprop (benchmarks/RESULTS.md, weak scaling).
- ``progress="hooks"``: on the training thread, from the gradient hook that finds
  ``cycle_time`` passed since the last cycle, and the rest in ``wait()``. No second
  thread wakes up (no context switch, no GIL hand-over) and MPI needs no
  ``MPI_THREAD_MULTIPLE``; but collectives progress only when a hook fires, so a layer
  whose backward runs long without one holds them up. Measured on a 2-core VM (resnet20,
  2 ranks): a cycle costs about 180 us of CPU in either mode, and neither mode was
  faster within the VM's noise.

An earlier version waited for each collective in polled sleeps (50 us doubling to
1 ms): about 127 wake-ups per resnet20 step instead of about 25, and a backward 10-26 ms
slower.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from mpi4py import MPI

from ..site_mpi import thread_multiple_hint
from .data_path import DataPath, Device, HostMPI, Transfer
from .fused_allreduce import FusedAllreduce
from .fusion import plan_fusion

_POLL_SECONDS = 50e-6
# "thread": cycles run on a background thread of their own, as Horovod's;
# "hooks": on the training thread, from the gradient hooks and in wait()
PROGRESS_MODES = ("thread", "hooks")


def require_thread_multiple(what: str) -> None:
    level = MPI.Query_thread()
    if level < MPI.THREAD_MULTIPLE:
        names = {MPI.THREAD_SINGLE: "SINGLE", MPI.THREAD_FUNNELED: "FUNNELED", MPI.THREAD_SERIALIZED: "SERIALIZED"}
        raise RuntimeError(
            f"{what} runs MPI from a background thread and needs MPI_THREAD_MULTIPLE, but this MPI library "
            f"({MPI.Get_library_version().splitlines()[0].strip()}) provides MPI_THREAD_{names.get(level, level)}; "
            + thread_multiple_hint()
        )


@dataclass
class _Cycles:
    """Where a step's cycles stand: slots in a started allreduce, reductions not yet
    collected, the negotiation started and not yet answered."""
    started: np.ndarray
    in_flight: list = field(default_factory=list)
    negotiation: "_Negotiation | None" = None


@dataclass
class _Step:
    number: int = -1
    ready_local: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    done: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    tensors: list = field(default_factory=list)
    ready_time: list = field(default_factory=list)
    collectives: int = 0
    ready_count: int = 0


class BackgroundAllreduce:
    """Averages named tensors over all ranks as they become ready, in a background thread.

    ``names`` and ``nbytes`` describe the slots in the canonical order in which
    ready tensors are fused (for gradients: reverse parameter order, the order
    backprop produces them). ``clock`` stamps timeline events on rank 0's time base.

    If the slots' tensors are consecutive views of one float32 buffer ``flat`` (in
    slot order; ``offsets`` gives each slot's first element), a fused group of
    adjacent slots is reduced in place as one slice of it: no packing copies.

    The reductions' bytes travel through ``data_path`` (``comm.data_path``: host MPI, NCCL,
    CUDA-aware MPI or pinned host staging), on whatever device the tensors live; the
    negotiation always goes over MPI on the host.
    """

    def __init__(self, names: Sequence[str], nbytes: Sequence[int], comm: MPI.Comm,
                 fusion_threshold_bytes: int, cycle_time_s: float,
                 clock: Callable[[], float] = time.time, timeline: bool = False,
                 flat: torch.Tensor | None = None, offsets: Sequence[int] | None = None,
                 poll_seconds: float | None = _POLL_SECONDS, progress: str = "thread",
                 data_path: DataPath | None = None) -> None:
        if progress not in PROGRESS_MODES:
            raise ValueError(f"progress={progress!r}: expected one of {', '.join(PROGRESS_MODES)}")
        self.progress = progress
        if progress == "thread":
            require_thread_multiple("the fused allreduce engine")
        self.comm = comm.Dup()
        # the path's own communicator: its collectives never interleave with the negotiation's
        self.data_path = data_path if data_path is not None else HostMPI(self.comm.Dup(), Device(torch.device("cpu")))
        self._owns_path = data_path is None
        self.threshold = int(fusion_threshold_bytes)
        self.cycle_time = float(cycle_time_s)
        self.clock = clock
        self.timeline = timeline
        self.events: list[dict[str, Any]] = []
        self._allreduce = FusedAllreduce(self.comm, average=True, poll_seconds=poll_seconds, data_path=self.data_path)
        self.set_slots(names, nbytes, flat, offsets)
        self._cv = threading.Condition()
        self._pending = False
        self._complete = threading.Event()
        self._error: BaseException | None = None
        self._stop = False
        self._last_cycle = -float("inf")
        self._cycles = _Cycles(started=np.zeros(len(self.names), bool))
        self._thread: threading.Thread | None = None
        if progress == "thread":
            self._thread = threading.Thread(target=self._loop, name="fused-allreduce", daemon=True)
            self._thread.start()

    # -- called by the training thread -----------------------------------------------

    def set_slots(self, names: Sequence[str], nbytes: Sequence[int],
                  flat: torch.Tensor | None = None, offsets: Sequence[int] | None = None) -> None:
        """(Re)define the slots; only between steps, and identically on every rank."""
        self.names = list(names)
        self.nbytes = list(nbytes)
        self._flat = flat
        self._offsets = list(offsets) if offsets is not None else None
        n = len(self.names)
        state = _Step(ready_local=np.zeros(n, np.uint8), done=np.zeros(n, bool), tensors=[None] * n,
                      ready_time=[0.0] * n)
        lock = getattr(self, "_cv", None)   # None while __init__ runs, before the thread exists
        if lock is None:
            self._state = state
        else:
            with lock:
                self._state, self._pending = state, False
                self._cycles = _Cycles(started=np.zeros(n, bool))

    def begin_step(self, step: int) -> None:
        n = len(self.names)
        with self._cv:
            self._state = _Step(number=step, ready_local=np.zeros(n, np.uint8), done=np.zeros(n, bool),
                                tensors=[None] * n, ready_time=[0.0] * n)
            self._cycles = _Cycles(started=np.zeros(n, bool))
            self._complete.clear()

    def ready(self, index: int, tensor: torch.Tensor) -> None:
        """Hand over a tensor that will not change until the step's ``wait()`` returns."""
        t = self.clock()
        with self._cv:
            st = self._state
            st.tensors[index] = tensor
            st.ready_time[index] = t
            st.ready_local[index] = 1
            st.ready_count += 1
            # Wake the loop only when that changes what it does: the first tensor of
            # a step starts the cycles, the last one ends the cycle-time wait.
            last = st.ready_count == len(self.names)
            if self._thread is not None and (not self._pending or last):
                self._pending = True
                self._cv.notify()
        if self.timeline:
            self.events.append({"step": st.number, "tensor": self.names[index], "phase": "grad_ready",
                                "t0": t, "t1": t, "bytes": self.nbytes[index]})
        if self._thread is None and not last:
            now = time.perf_counter()
            if not math.isinf(self.cycle_time) and now - self._last_cycle >= self.cycle_time:
                # a cycle on the training thread, between two gradients: no wake-up of
                # another thread, so no context switch and no GIL hand-over
                self._last_cycle = now
                if self._cycle(st, self._cycles, st.ready_local.copy(), backward_done=False):
                    self._complete.set()

    def is_ready(self, index: int) -> bool:
        return bool(self._state.ready_local[index])

    def wait(self) -> None:
        """Block until every slot of this step is reduced on this rank."""
        if self._thread is None:
            st = self._state
            if not st.done.all():
                while not self._cycle(st, self._cycles, st.ready_local.copy(), backward_done=True):
                    pass
            return
        while not self._complete.wait(timeout=1.0):
            if self._error is not None or not self._thread.is_alive():
                break
        if self._error is not None:
            raise RuntimeError(f"background allreduce failed: {self._error}") from self._error

    def close(self) -> None:
        if self._thread is not None:
            with self._cv:
                self._stop = True
                self._cv.notify()
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                return
        self.comm.Free()
        if self._owns_path:
            self.data_path.comm.Free()

    # -- the background thread --------------------------------------------------------

    def _loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._pending and not self._stop:
                        self._cv.wait()
                    if self._stop:
                        return
                    self._pending = False
                    st = self._state
                if not st.done.all():
                    self._run_cycles(st)
        except BaseException as exc:  # surface in wait(); the training thread raises it
            self._error = exc
            self._complete.set()

    def _run_cycles(self, st: _Step) -> None:
        """One step's cycles on the engine thread, at most one every ``cycle_time``.
        Once every slot of this rank is ready, waiting out the cycle only delays the
        step, so the rest runs back to back (in ``MPI_Wait``)."""
        cycles = self._cycles
        while True:
            with self._cv:
                while st.ready_count < len(self.names):
                    if math.isinf(self.cycle_time):   # one cycle per step, once backward is done
                        if self._stop:
                            return
                        self._cv.wait()
                        continue
                    delay = self._last_cycle + self.cycle_time - time.perf_counter()
                    if delay <= 0:
                        break
                    self._cv.wait(timeout=delay)
                local = st.ready_local.copy()
            self._last_cycle = time.perf_counter()
            if self._cycle(st, cycles, local, backward_done=bool(local.all())):
                self._complete.set()
                return

    def _cycle(self, st: _Step, c: _Cycles, local: np.ndarray, backward_done: bool) -> bool:
        """One cycle; returns whether every slot of the step is reduced on this rank.

        While this rank's backward runs, a cycle never waits on MPI: it collects what
        completed since the last cycle, turns an answered negotiation into fused
        allreduces (started, not waited for) and starts the next negotiation. Once
        every slot of this rank is ready (``backward_done``), it waits in ``MPI_Wait``.

        Every rank starts the same collectives in the same order (negotiation k, the
        groups its result gives, negotiation k+1, ...), since each group comes from the
        same collective result and a new negotiation starts exactly when the previous
        one's groups have been started and some slot is still unreduced; when a rank
        runs its cycles is its own affair. A group's collective may wait for a local stage
        (a copy to the host, the producing stream): the data path issues collectives in the
        order they were started, never in the order those stages end
        (``data_path._Queued``; tests/workloads/test_collective_order.py)."""
        c.in_flight = [r for r in c.in_flight if not self._finish(st, r, wait=backward_done)]
        if c.negotiation is None:
            c.negotiation = self._negotiate(local)
        if backward_done:
            c.negotiation.request.Wait()
        elif not c.negotiation.request.Test():
            return False
        todo = [i for i in np.flatnonzero(c.negotiation.result) if not c.started[i]]
        self._record_negotiation(st, c.negotiation, len(todo))
        for group in plan_fusion(todo, self.nbytes, self.threshold):
            c.started[group] = True
            reduction = self._start(st, group, blocking=backward_done)
            if backward_done or not self._finish(st, reduction, wait=False):
                c.in_flight.append(reduction)
        c.negotiation = None
        if c.started.all():
            for reduction in c.in_flight:
                self._finish(st, reduction, wait=True)
            c.in_flight = []
            return True
        if not backward_done:
            # this cycle's negotiation, answered by a later cycle
            c.negotiation = self._negotiate(st.ready_local.copy())
        return False

    def _negotiate(self, local: np.ndarray) -> "_Negotiation":
        """Start the AND of every rank's ready bits. Always a nonblocking collective,
        however this rank then waits: MPI never matches a blocking collective on one
        rank with a nonblocking one on another."""
        result = np.empty_like(local)
        return _Negotiation(self.comm.Iallreduce(local, result, op=MPI.BAND), result, self.clock())

    def _record_negotiation(self, st: _Step, negotiation: "_Negotiation", tensors: int) -> None:
        if self.timeline:
            self.events.append({"step": st.number, "tensor": "negotiate", "phase": "negotiate",
                                "t0": negotiation.t0, "t1": self.clock(), "bytes": 0, "tensors": tensors})

    def _start(self, st: _Step, group: list[int], blocking: bool) -> "_Reduction":
        """Start reducing ``group`` in place: one slice of the flat buffer when the group
        is adjacent in it, the tensor itself when it is alone and contiguous. Anything
        else is packed and reduced now (``FusedAllreduce``), and returned finished."""
        t0 = self.clock()
        target = None
        if self._flat is not None and group[-1] - group[0] == len(group) - 1:
            start = self._offsets[group[0]]
            target = self._flat[start:self._offsets[group[-1]] + self.nbytes[group[-1]] // 4]
        elif len(group) == 1:
            t = st.tensors[group[0]]
            if t.is_contiguous() and t.dtype == torch.float32:
                target = t
        if target is None:
            moved = self._allreduce([st.tensors[i] for i in group], blocking)
            return _Reduction(None, None, group, t0, moved)
        return _Reduction(self.data_path.start(target), target, group, t0, target.numel() * 4)

    def _finish(self, st: _Step, reduction: "_Reduction", wait: bool) -> bool:
        """Complete ``reduction`` if it is done (or wait for it): average, mark, record.
        Returns whether it is complete."""
        if reduction.request is not None:
            if wait:
                reduction.request.wait()
            elif not reduction.request.test():
                return False
            reduction.target.mul_(1.0 / self.comm.Get_size())
            reduction.request = None
        if reduction.group is not None:
            st.done[reduction.group] = True
            if self.timeline:
                self.events.append({
                    "step": st.number, "tensor": f"fused-{st.collectives}", "phase": "allreduce",
                    "t0": reduction.t0, "t1": self.clock(), "bytes": reduction.moved,
                    "tensors": [self.names[i] for i in reduction.group],
                    "arrival": max(st.ready_time[i] for i in reduction.group),
                })
            st.collectives += 1
            reduction.group = None
        return True


@dataclass
class _Negotiation:
    request: MPI.Request
    result: np.ndarray
    t0: float


@dataclass
class _Reduction:
    """A fused allreduce started by the engine; ``request`` (its transfer) None once complete."""
    request: Transfer | None
    target: torch.Tensor | None
    group: list[int] | None
    t0: float
    moved: int
