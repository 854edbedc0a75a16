"""``eager_solo`` / ``eager_majority``: eager-SGD (Li et al., PPoPP 2020).

Each step's gradients go through one round of a partial allreduce
(``workloads.comm.partial``): the round fires without waiting for late ranks, whose
gradients join a later round. Every rank applies the same reduced sum divided by
the world size, so models stay identical; as a bound on staleness, every
``sync_every`` steps (and at the last step) the round is fully synchronous and the
weights are averaged.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from mpi4py import MPI
from torch import nn

from ..comm.partial import PartialAllreduce
from .base import GradientSync, SyncOptions


class EagerSGD(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions, mode: str) -> None:
        super().__init__(model, comm, options)
        self._flat = torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float32)
        offset = 0
        for p in self.params:
            p.grad = self._flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
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

    def synchronize(self) -> None:
        res = self.engine.round(self._flat.numpy(), self._step, synchronous=self._synchronous)
        self._flat.copy_(torch.from_numpy(res.total)).div_(self.comm.Get_size())
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
        size = self.comm.Get_size()
        drift = 0.0
        with torch.no_grad():
            for p in self.params:
                buf = p.detach().contiguous().clone()
                self.comm.Allreduce(MPI.IN_PLACE, buf.numpy(), op=MPI.SUM)
                buf.div_(size)
                drift = max(drift, float((p - buf).abs().max()))
                p.copy_(buf)
        return drift

    def drain_rounds(self) -> list[dict[str, Any]]:
        rounds, self._rounds = self._rounds, []
        return rounds

    def close(self) -> None:
        self.engine.close()
