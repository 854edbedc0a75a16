"""Synchronous data parallelism with one blocking allreduce after backward.

The baseline every other engine is measured against: gradients are packed into one
contiguous buffer, summed with ``MPI.Allreduce`` and divided by the world size.
"""

from __future__ import annotations

import torch
from mpi4py import MPI
from torch import nn

from .base import GradientSync


class AllreduceAfterBackward(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm) -> None:
        super().__init__(model, comm)
        total = sum(p.numel() for p in self.params)
        self._flat = torch.zeros(total, dtype=torch.float32)

    def synchronize(self) -> None:
        size = self.comm.Get_size()
        if size == 1:
            return
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self._flat[offset:offset + n].zero_()
            else:
                self._flat[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        self.comm.Allreduce(MPI.IN_PLACE, self._flat.numpy(), op=MPI.SUM)
        self._flat.div_(size)
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(self._flat[offset:offset + n].view_as(p))
            offset += n
