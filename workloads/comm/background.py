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
interleave with the training loop's, and it polls the tiny negotiation collective
with short sleeps rather than spinning, leaving the core to backprop.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from mpi4py import MPI

from .fused_allreduce import FusedAllreduce, wait_for
from .fusion import plan_fusion

_POLL_SECONDS = 50e-6


def require_thread_multiple(what: str) -> None:
    level = MPI.Query_thread()
    if level < MPI.THREAD_MULTIPLE:
        names = {MPI.THREAD_SINGLE: "SINGLE", MPI.THREAD_FUNNELED: "FUNNELED", MPI.THREAD_SERIALIZED: "SERIALIZED"}
        raise RuntimeError(
            f"{what} runs MPI from a background thread and needs MPI_THREAD_MULTIPLE, but this MPI library "
            f"({MPI.Get_library_version().splitlines()[0].strip()}) provides MPI_THREAD_{names.get(level, level)}; "
            "use an MPI built with thread support (e.g. the mpich wheel)"
        )


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
    """

    def __init__(self, names: Sequence[str], nbytes: Sequence[int], comm: MPI.Comm,
                 fusion_threshold_bytes: int, cycle_time_s: float,
                 clock: Callable[[], float] = time.time, timeline: bool = False,
                 flat: torch.Tensor | None = None, offsets: Sequence[int] | None = None,
                 poll_seconds: float | None = _POLL_SECONDS) -> None:
        require_thread_multiple("the fused allreduce engine")
        self.comm = comm.Dup()
        self.threshold = int(fusion_threshold_bytes)
        self.cycle_time = float(cycle_time_s)
        self.clock = clock
        self.timeline = timeline
        self.events: list[dict[str, Any]] = []
        self._allreduce = FusedAllreduce(self.comm, average=True, poll_seconds=poll_seconds)
        self._poll_seconds = poll_seconds if poll_seconds is not None else _POLL_SECONDS  # the negotiation always polls while backward runs
        self.set_slots(names, nbytes, flat, offsets)
        self._cv = threading.Condition()
        self._pending = False
        self._complete = threading.Event()
        self._error: BaseException | None = None
        self._stop = False
        self._last_cycle = -float("inf")
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

    def begin_step(self, step: int) -> None:
        n = len(self.names)
        with self._cv:
            self._state = _Step(number=step, ready_local=np.zeros(n, np.uint8), done=np.zeros(n, bool),
                                tensors=[None] * n, ready_time=[0.0] * n)
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
            if not self._pending or st.ready_count == len(self.names):
                self._pending = True
                self._cv.notify()
        if self.timeline:
            self.events.append({"step": st.number, "tensor": self.names[index], "phase": "grad_ready",
                                "t0": t, "t1": t, "bytes": self.nbytes[index]})

    def is_ready(self, index: int) -> bool:
        return bool(self._state.ready_local[index])

    def wait(self) -> None:
        """Block until every slot of this step is reduced on this rank."""
        while not self._complete.wait(timeout=1.0):
            if self._error is not None or not self._thread.is_alive():
                break
        if self._error is not None:
            raise RuntimeError(f"background allreduce failed: {self._error}") from self._error

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.comm.Free()

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
        global_ready = np.empty_like(st.ready_local)
        while True:
            # The cycle time exists to let more tensors arrive for fusion; once all of
            # this rank's are in, waiting out the cycle only delays the step.
            with self._cv:
                while st.ready_count < len(self.names):
                    delay = self._last_cycle + self.cycle_time - time.perf_counter()
                    if delay <= 0:
                        break
                    self._cv.wait(timeout=delay)
            self._last_cycle = time.perf_counter()
            t0 = self.clock()
            with self._cv:
                local = st.ready_local.copy()
            # While backprop runs it needs the core: wait in polled sleeps. Once this
            # rank's backward is done the training thread only waits for us, so wait
            # in MPI's own progress loop (GIL released): it answers soonest. Always a
            # nonblocking collective, whichever way we wait: MPI never matches a
            # blocking collective on one rank with a nonblocking one on another.
            backward_done = bool(local.all())
            wait_for(self.comm.Iallreduce(local, global_ready, op=MPI.BAND),
                     None if backward_done else self._poll_seconds)
            todo = [i for i in np.flatnonzero(global_ready) if not st.done[i]]
            if self.timeline:
                self.events.append({"step": st.number, "tensor": "negotiate", "phase": "negotiate",
                                    "t0": t0, "t1": self.clock(), "bytes": 0, "tensors": len(todo)})
            for group in plan_fusion(todo, self.nbytes, self.threshold):
                a0 = self.clock()
                moved = self._reduce(st, group, blocking=backward_done)
                a1 = self.clock()
                st.done[group] = True
                if self.timeline:
                    self.events.append({
                        "step": st.number, "tensor": f"fused-{st.collectives}", "phase": "allreduce",
                        "t0": a0, "t1": a1, "bytes": moved, "tensors": [self.names[i] for i in group],
                        "arrival": max(st.ready_time[i] for i in group),
                    })
                st.collectives += 1
            if st.done.all():
                self._complete.set()
                return

    def _reduce(self, st: _Step, group: list[int], blocking: bool) -> int:
        if self._flat is not None and len(group) > 1 and group[-1] - group[0] == len(group) - 1:
            start = self._offsets[group[0]]
            end = self._offsets[group[-1]] + self.nbytes[group[-1]] // 4
            return self._allreduce([self._flat[start:end]], blocking)
        return self._allreduce([st.tensors[i] for i in group], blocking)
