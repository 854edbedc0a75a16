"""Data-parallel algorithms: how gradients computed on each rank become one update."""

from __future__ import annotations

from mpi4py import MPI
from torch import nn

from .base import GradientSync, SyncOptions


class SingleProcess(GradientSync):
    """One rank: its gradients already are the global average. ``sync`` on one rank is plain
    SGD, and is what the weak-scaling benchmark measures as the no-communication limit."""

    def synchronize(self) -> None:
        pass


def build_gradient_sync(name: str, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> GradientSync:
    """Imports lazily: ``ddp`` pulls in torch.distributed, ``horovod`` needs Horovod."""
    if name == "sync" and comm.Get_size() == 1:
        return SingleProcess(model, comm, options)   # no peers: nothing to reduce, no engine thread
    if name == "sync":
        from .overlapped import OverlappedFusedAllreduce as cls
    elif name == "ddp":
        from .ddp import TorchDDP as cls
    elif name == "horovod":
        from .horovod import HorovodReference as cls
    elif name in ("eager_solo", "eager_majority"):
        from .eager import EagerSGD

        return EagerSGD(model, comm, options, mode=name.split("_", 1)[1])
    else:
        raise ValueError(f"algorithm={name!r} is unknown; known: sync, ddp, horovod, eager_solo, eager_majority")
    return cls(model, comm, options)


__all__ = ["GradientSync", "SyncOptions", "build_gradient_sync"]
