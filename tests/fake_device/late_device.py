"""A stand-in for a GPU's asynchrony, on a CPU: copies and events that complete late, at random.

On a CPU every copy is done when ``copy_()`` returns and every event has passed, so a data
path that reads a host buffer before its device-to-host copy is done, or issues collectives
in the order its copies happen to finish, works here and fails on a GPU. ``LateDevice``
replaces ``workloads.comm.data_path.Device`` with the timing a CUDA device has:

- ``mark()`` is an event on the producing stream that passes a random while later;
- ``copy_after`` queues the copy on a copy stream (first in, first out, after ``after``) and
  performs it only when its event completes, a random while later, per rank and per seed;
  until then the destination holds what it held (host buffers start as NaN, so an early read
  shows);
- ``passed`` answers from the clock, ``wait`` sleeps until the event completes, and ``join``
  (the consumer's stream waits for the copy) completes it before the host reads on, because
  on a CPU the consumer is the host.

Nothing else of the real code changes: the engines, data paths and algorithms run as they
do on a GPU, over real MPI. ``install(seed)`` puts the class in ``data_path.Device``'s place
before the workload's modules bind it; ``LateDevice.made`` counts what it delayed, so a test
can check the stand-in was in use (a check that cannot fail is a defect).
"""

from __future__ import annotations

import os
import random
import time
from collections import deque

import torch

from workloads.comm import data_path

# a copy takes a few microseconds to a few milliseconds, and one rank in two is slower: on a
# GPU a small copy is done within the engine's next few Python statements, a large one or one
# behind other work is not
SHORT_S, LONG_S, LONG_SHARE = 10e-6, 2e-3, 0.3
PAUSE_S, PAUSE_SHARE = 1e-3, 0.3


class _LateEvent:
    def __init__(self, done_at: float, action=None) -> None:
        self.done_at, self.action, self.completed = done_at, action, False


class LateDevice(data_path.Device):
    seed = 0
    made = {"devices": 0, "late_copies": 0, "late_reads": 0}

    def __init__(self, device: torch.device) -> None:
        super().__init__(torch.device("cpu"))
        self.copies_are_async = True
        rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
        self.rng = random.Random(hash((LateDevice.seed, rank, LateDevice.made["devices"])))
        self.slowness = 1.0 + 2.0 * self.rng.random()
        self.stream: deque[_LateEvent] = deque()   # the copy stream's queued copies, in order
        self.stream_free_at = 0.0
        LateDevice.made["devices"] += 1

    def _later(self, after: float) -> float:
        longest = LONG_S if self.rng.random() < LONG_SHARE else SHORT_S
        return max(after, time.perf_counter()) + self.slowness * self.rng.uniform(0.0, longest)

    def host_buffer(self, numel: int, dtype=torch.float32) -> torch.Tensor:
        return torch.full((numel,), float("nan"), dtype=dtype)

    def mark(self):
        return _LateEvent(self._later(0.0))

    def copy_after(self, dst: torch.Tensor, src: torch.Tensor, after) -> object:
        start = max(self.stream_free_at, after.done_at if after is not None else 0.0)
        event = _LateEvent(self._later(start), action=lambda: dst.copy_(src))
        self.stream_free_at = event.done_at
        self.stream.append(event)
        LateDevice.made["late_copies"] += 1
        return event

    def _complete(self, event: _LateEvent) -> None:
        if event.completed:
            return
        if event.action is None:
            event.completed = True
            return
        while self.stream:   # a stream completes its copies in the order they were queued
            head = self.stream.popleft()
            head.action()
            head.completed = True
            if head is event:
                return

    def passed(self, event) -> bool:
        if event is None or event.completed:
            return True
        if time.perf_counter() < event.done_at:
            LateDevice.made["late_reads"] += 1
            self._lose_the_core()
            return False
        self._complete(event)
        return True

    def _lose_the_core(self) -> None:
        """The thread that asked is descheduled, or waits for the GIL, right after the answer:
        by the time it acts on "not done", later copies may be done (what a GPU's copy engine
        does while the host's Python is busy elsewhere)."""
        if self.rng.random() < PAUSE_SHARE:
            time.sleep(self.rng.uniform(0.0, PAUSE_S))

    def wait(self, event) -> None:
        if event is None:
            return
        delay = event.done_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        self._complete(event)

    def join(self, event) -> None:
        self.wait(event)


def install(seed: int) -> None:
    """Make every device the workload opens from now on a ``LateDevice`` (seeded)."""
    LateDevice.seed = seed
    data_path.Device = LateDevice
