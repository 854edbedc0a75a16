"""Data-parallel algorithms: how gradients computed on each rank become one update."""

from __future__ import annotations

import time
from typing import Any

from mpi4py import MPI
from torch import nn

from .base import GradientSync, SyncOptions


class SingleProcess(GradientSync):
    """One rank: its gradients already are the global average. ``sync`` on one rank is plain
    SGD, and is what the weak-scaling benchmark measures as the no-communication limit.

    With ``timeline=true`` it still stamps each gradient's ``grad_ready`` (a hook per
    parameter, nothing else): a 1-rank run is what ``scalestudy profile`` should read,
    and emulated runs hand gradients over at those moments of backward."""

    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        super().__init__(model, comm, options)
        self._events: list[dict[str, Any]] = []
        self._step = -1
        self._hooks = []
        if options.timeline:
            clock = options.clock or time.time
            for name, p in model.named_parameters():
                if p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(
                        lambda p, name=name: self._stamp(name, p, clock())))

    def _stamp(self, name: str, p, t: float) -> None:
        self._events.append({"step": self._step, "tensor": name, "phase": "grad_ready", "t0": t, "t1": t,
                             "bytes": p.numel() * p.element_size()})

    def begin_step(self, step: int) -> None:
        self._step = step

    def synchronize(self) -> None:
        pass

    @property
    def data_path_label(self) -> str:
        return "none"   # one rank: no gradient travels

    def run_metrics(self) -> dict[str, Any]:
        # one rank has no engine and no cycle: autotune=true has nothing to choose
        return {"autotune_tuned": False} if self.options.autotune else {}

    def drain_events(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


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
