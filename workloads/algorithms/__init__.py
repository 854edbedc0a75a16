"""Data-parallel algorithms: how gradients computed on each rank become one update."""

from __future__ import annotations

from mpi4py import MPI
from torch import nn

from .base import GradientSync
from .sync import AllreduceAfterBackward

_ALGORITHMS = {"sync": AllreduceAfterBackward}


def build_gradient_sync(name: str, model: nn.Module, comm: MPI.Comm) -> GradientSync:
    try:
        cls = _ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm={name!r} is unknown; known: {', '.join(sorted(_ALGORITHMS))}") from None
    return cls(model, comm)


__all__ = ["GradientSync", "AllreduceAfterBackward", "build_gradient_sync"]
