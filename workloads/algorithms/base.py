"""The seam between the training loop and a communication engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import torch
from mpi4py import MPI
from torch import nn


@dataclass(frozen=True)
class SyncOptions:
    """What an engine may need beyond the model: the spec's communication settings."""

    fusion_threshold_mb: float = 64.0
    cycle_time_ms: float = 5.0
    autotune: bool = False
    engine_thread: bool = True
    timeline: bool = False
    clock: Callable[[], float] = None  # type: ignore[assignment]
    device: str = "cpu"
    data_path: str = "mpi"       # how the gradients travel (workloads/comm/data_path.py), already resolved
    seed: int = 0
    sync_every: int = 10         # eager-SGD's synchronous rounds, in steps (train resolves resync_epochs)
    catch_up: str = "apply_all"  # eager-SGD: what a rank that missed rounds does (EagerSGD)
    total_steps: int = 0
    run_dir: str | None = None   # where an engine may leave its own records (Horovod's autotune log)


class GradientSync(ABC):
    """Turns each rank's local gradients into the gradients every rank applies.

    The loop calls ``begin_step`` before forward, runs forward/backward on
    ``self.module``, then ``synchronize`` (block until gradients are averaged) and
    ``step`` (the optimizer). Engines that overlap communication with backprop work
    from hooks they install and only wait in ``synchronize``.
    """

    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        self.model = model
        self.module: nn.Module = model
        self.comm = comm
        self.options = options
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer: torch.optim.Optimizer | None = None

    def broadcast_parameters(self, root: int = 0) -> None:
        """Start every rank from root's weights, whatever each rank's RNG did (over MPI through
        the host: once per run, whatever the device)."""
        with torch.no_grad():
            for p in self.model.state_dict().values():
                buf = p.detach().cpu().contiguous()
                self.comm.Bcast(buf.numpy(), root=root)
                p.copy_(buf)

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def begin_step(self, step: int) -> None:
        """A new step starts (before forward)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every parameter's ``.grad`` holds the global average."""

    def zero_grad(self) -> None:
        """Clear gradients in place: engines that made ``.grad`` views of their own
        buffers (the fused engine) must keep those tensors between steps."""
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=False)

    def step(self) -> None:
        assert self.optimizer is not None
        self.optimizer.step()

    def next_step(self, step: int) -> int:
        """The step this rank computes next: the one after ``step``, or, where the engine lets
        a late rank join the round the others have reached (eager-SGD), that round."""
        return step + 1

    def drain_events(self) -> list[dict[str, Any]]:
        """Timeline events recorded by the engine since the last call."""
        return []

    @property
    def data_path_label(self) -> str:
        """The path the run's gradients took, as the run records it (``runs.data_path_used``)."""
        return self.options.data_path

    def run_metrics(self) -> dict[str, Any]:
        """What the engine decided during the run (e.g. the autotuned cycle time), for the
        run's ``metrics``."""
        return {}

    def drain_rounds(self) -> list[dict[str, Any]]:
        """Per-round records of partial collectives since the last call (eager-SGD)."""
        return []

    def close(self) -> None:
        """Release background resources (threads, process groups)."""
