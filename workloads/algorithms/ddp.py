"""``ddp``: PyTorch DistributedDataParallel, the reference for the ``sync`` engine.

gloo on CPU, nccl on CUDA. The process group is bootstrapped over MPI (rank 0 picks
a free port and broadcasts its address), so it starts under the same launcher as
every other algorithm. DDP reduces inside ``backward()`` (bucketed, in reverse
parameter order), so ``synchronize`` has nothing left to wait for on CPU.
"""

from __future__ import annotations

import gc
import warnings

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..comm.data_path import init_process_group
from .base import GradientSync, SyncOptions


class TorchDDP(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        super().__init__(model, comm, options)
        cuda = options.device == "cuda"
        self.backend = "nccl" if cuda else "gloo"
        init_process_group(comm, self.backend)
        bucket_mb = options.fusion_threshold_mb if options.fusion_threshold_mb > 0 else 1e-6
        device_ids = [torch.cuda.current_device()] if cuda else None
        with warnings.catch_warnings():  # broadcast_buffers=False: buffers stay rank-local, as in `sync`
            warnings.simplefilter("ignore", FutureWarning)
            self.module = DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=bucket_mb,
                                                  broadcast_buffers=False)

    @property
    def data_path_label(self) -> str:
        return f"torch_distributed:{self.backend}"

    def broadcast_parameters(self, root: int = 0) -> None:
        """DDP broadcast rank 0's state when it wrapped the model."""

    def synchronize(self) -> None:
        """DDP's reductions ran inside ``backward()``, their results queued on the rank's stream
        (the step's marks wait for it, ``device.StepClock``)."""

    def close(self) -> None:
        # The DDP wrapper's reducer holds the process group in a reference cycle: collected only at
        # the interpreter's exit, gloo's run-loop threads may then still be freeing a collective's
        # work, which needs the GIL the exiting interpreter no longer gives ("terminate called
        # without an active exception", exit 134; pytorch/pytorch#190489). Unwrapped and collected
        # here, the group is destroyed and its threads joined while Python still runs.
        if isinstance(self.module, DistributedDataParallel):
            self.module = self.module.module
            gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()
