"""The seam between the training loop and a communication engine."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from mpi4py import MPI
from torch import nn


class GradientSync(ABC):
    """Turns each rank's local gradients into the gradients every rank applies.

    The training loop calls ``synchronize`` after ``loss.backward()`` and before the
    optimizer step; engines that overlap communication with backprop do their work in
    hooks they install in ``__init__`` and only wait in ``synchronize``.
    """

    def __init__(self, model: nn.Module, comm: MPI.Comm) -> None:
        self.model = model
        self.comm = comm
        self.params = [p for p in model.parameters() if p.requires_grad]

    def broadcast_parameters(self, root: int = 0) -> None:
        """Start every rank from root's weights, whatever each rank's RNG did."""
        with torch.no_grad():
            for p in self.model.state_dict().values():
                if p.is_floating_point() or p.dtype in (torch.int64, torch.int32):
                    buf = p.detach().contiguous().numpy()
                    self.comm.Bcast(buf, root=root)
                    p.copy_(torch.from_numpy(buf))

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every parameter's ``.grad`` holds the global average."""

    def close(self) -> None:
        """Release background resources (threads, requests)."""
