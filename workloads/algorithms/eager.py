"""``eager_solo`` / ``eager_majority``: eager-SGD (Li et al., PPoPP 2020).

Each step's gradients go through one round of a partial allreduce
(``workloads.comm.partial``): the round fires without waiting for late ranks, whose
gradients join a later round. Every rank applies the same reduced sum divided by
the world size, so models stay identical; as a bound on staleness, every
``sync_every`` steps (and at the last step) the round is fully synchronous and the
weights are averaged.

The partial collectives progress on the host, over MPI; on a GPU the gradients are views in
one device buffer whose pinned host mirror (``comm.data_path.HostMirror``) is what each
round reduces: one device-to-host copy per step after backprop, one back after the round.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..comm.data_path import Device, HostMirror
from ..comm.partial import PartialAllreduce
from .base import GradientSync, SyncOptions


class EagerSGD(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions, mode: str) -> None:
        super().__init__(model, comm, options)
        device = self.params[0].device if self.params else torch.device("cpu")
        self._flat = torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float32, device=device)
        offset = 0
        for p in self.params:
            p.grad = self._flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self._host = HostMirror(Device(device), self._flat, separate=options.data_path == "host_staging")
        self.engine = PartialAllreduce(self._flat.numel(), comm, mode, seed=options.seed,
                                       clock=options.clock or time.time)
        self._step = 0
        self._rounds: list[dict[str, Any]] = []
        self._synchronous = False

    def begin_step(self, step: int) -> None:
        self._step = step
        every = self.options.sync_every
        last = self.options.total_steps - 1
        self._synchronous = (every > 0 and (step + 1) % every == 0) or step == last

    @property
    def data_path_label(self) -> str:
        return "host_staging:mpi" if self._host.host is not self._flat else "mpi"

    def synchronize(self) -> None:
        res = self.engine.round(self._host.to_host(), self._step, synchronous=self._synchronous)
        self._host.host.copy_(torch.from_numpy(res.total)).div_(self.comm.Get_size())
        self._host.to_device()
        self._rounds.append({"round": res.round, "initiator": res.initiator, "fresh": res.fresh,
                             "stale": res.stale, "null": res.null, "local": res.local,
                             "staleness": res.staleness,
                             "synchronous": res.synchronous, "t0": res.t0, "t1": res.t1,
                             "latency": res.t1 - res.t0})

    def step(self) -> None:
        super().step()
        if self._synchronous:
            drift = self.average_parameters()
            if self._rounds:
                self._rounds[-1]["drift"] = drift

    def average_parameters(self) -> float:
        """Model averaging after a synchronous round: no rank can drift from the others.

        Returns how far this rank's weights were from the average before it (largest absolute
        difference): every rank applies the same reduced sum, so this should be 0 up to
        rounding; the tests check it, since averaging would hide a rank that drifted."""
        if not self.params:
            return 0.0
        with torch.no_grad():
            mine = parameters_to_vector(self.params)
            host = mine.detach().cpu().numpy().copy()   # over MPI through the host, whatever the device
            average = np.empty_like(host)
            self.comm.Allreduce(host, average, op=MPI.SUM)
            average /= self.comm.Get_size()
            vector_to_parameters(torch.from_numpy(average).to(mine.device), self.params)
        return float(np.abs(host - average).max())

    def drain_rounds(self) -> list[dict[str, Any]]:
        rounds, self._rounds = self._rounds, []
        return rounds

    def close(self) -> None:
        self.engine.close()
