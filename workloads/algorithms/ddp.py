"""``ddp``: PyTorch DistributedDataParallel, the reference for the ``sync`` engine.

gloo on CPU, nccl on CUDA. The process group is bootstrapped over MPI (rank 0 picks
a free port and broadcasts its address), so it starts under the same launcher as
every other algorithm. DDP reduces inside ``backward()`` (bucketed, in reverse
parameter order), so ``synchronize`` has nothing left to wait for on CPU.
"""

from __future__ import annotations

import datetime
import socket
import warnings

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .base import GradientSync, SyncOptions


def _rendezvous(comm: MPI.Comm) -> str:
    hosts = comm.allgather(socket.gethostname())
    if comm.Get_rank() == 0:
        addr = "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(socket.gethostname())
        with socket.socket() as s:
            s.bind(("" if addr != "127.0.0.1" else addr, 0))
            port = s.getsockname()[1]
        url = f"tcp://{addr}:{port}"
    else:
        url = None
    return comm.bcast(url, root=0)


class TorchDDP(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        super().__init__(model, comm, options)
        cuda = options.device == "cuda"
        backend = "nccl" if cuda else "gloo"
        dist.init_process_group(backend, init_method=_rendezvous(comm), rank=comm.Get_rank(),
                                world_size=comm.Get_size(), timeout=datetime.timedelta(minutes=5))
        bucket_mb = options.fusion_threshold_mb if options.fusion_threshold_mb > 0 else 1e-6
        device_ids = [torch.cuda.current_device()] if cuda else None
        with warnings.catch_warnings():  # broadcast_buffers=False: buffers stay rank-local, as in `sync`
            warnings.simplefilter("ignore", FutureWarning)
            self.module = DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=bucket_mb,
                                                  broadcast_buffers=False)

    def broadcast_parameters(self, root: int = 0) -> None:
        """DDP broadcast rank 0's state when it wrapped the model."""

    def synchronize(self) -> None:
        if self.options.device == "cuda":
            torch.cuda.synchronize()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
