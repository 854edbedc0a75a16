"""One fused allreduce: pack, sum over ranks, unpack (averaged if asked).

A single contiguous float32 tensor skips the copies and is reduced in place, so a large
gradient costs what a raw ``MPI.Allreduce`` costs. Without a ``data_path`` the sum is host
MPI on CPU tensors; with one, the tensors may live on any device the path serves (the
buffer is packed on their device) and the sum travels that path.

``poll_seconds`` chooses how to wait. ``None``: a blocking ``MPI_Allreduce``, which
spins a core until the peers arrive — best when every rank owns its cores. A number:
``MPI_Iallreduce`` tested every ``poll_seconds`` with the thread asleep in between,
so a background thread that waits on slower peers leaves the core to backprop —
best when ranks share cores (oversubscribed nodes, hyper-threads).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch
from mpi4py import MPI

from .fusion import FusionBuffer


def wait_polling(request: MPI.Request, poll_seconds: float, max_poll_seconds: float = 1e-3) -> None:
    """Test, sleep, test again, doubling the sleep up to ``max_poll_seconds``.

    Short sleeps keep latency low when peers are about to arrive; the back-off
    keeps a long wait for a straggler from waking the thread (and taking the core
    and the GIL from backprop) tens of thousands of times a second.
    """
    while not request.Test():
        time.sleep(poll_seconds)
        poll_seconds = min(poll_seconds * 2, max_poll_seconds)


def wait_for(request: MPI.Request, poll_seconds: float | None) -> None:
    """``None``: block in ``MPI_Wait`` (MPI's progress loop, the GIL released); else poll."""
    if poll_seconds is None:
        request.Wait()
    else:
        wait_polling(request, poll_seconds)


class FusedAllreduce:
    def __init__(self, comm: MPI.Comm, average: bool = True, poll_seconds: float | None = None,
                 data_path=None) -> None:
        self.comm = comm
        self.average = average
        self.poll_seconds = poll_seconds
        self.data_path = data_path
        self.buffer = FusionBuffer()

    def _sum_in_place(self, tensor: torch.Tensor, blocking: bool) -> None:
        if self.data_path is not None:
            transfer = self.data_path.start(tensor)
            if blocking or self.poll_seconds is None:
                transfer.wait()
            else:
                poll = self.poll_seconds
                while not transfer.test():
                    time.sleep(poll)
                    poll = min(poll * 2, 1e-3)
        elif self.poll_seconds is None:
            self.comm.Allreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)
        else:
            # the same collective on every rank (MPI never matches blocking with
            # nonblocking ones); only the way this rank waits for it differs
            wait_for(self.comm.Iallreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM),
                     None if blocking else self.poll_seconds)

    def __call__(self, tensors: Sequence[torch.Tensor], blocking: bool = False) -> int:
        """Sum (or average) ``tensors`` over all ranks, in place; returns the bytes moved.

        ``blocking`` waits in ``MPI_Wait`` instead of polling, for this call: when
        nothing else on this rank needs the core, that answers soonest."""
        size = self.comm.Get_size()
        scale = 1.0 / size if self.average else 1.0
        if len(tensors) == 1 and tensors[0].is_contiguous() and tensors[0].dtype == torch.float32:
            t = tensors[0]
            if size > 1:
                self._sum_in_place(t, blocking)
            if scale != 1.0:
                t.mul_(scale)
            return t.numel() * 4
        flat = self.buffer.pack(tensors)
        if size > 1:
            self._sum_in_place(flat, blocking)
        self.buffer.unpack(flat, tensors, scale)
        return flat.numel() * 4
