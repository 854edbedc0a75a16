"""``eager_solo`` / ``eager_majority``: eager-SGD (Li et al., PPoPP 2020).

Each step's gradients go through one round of a partial allreduce
(``workloads.comm.partial``): the round fires without waiting for late ranks, whose
gradients join a later round. A rank that was late finds the rounds the others completed
meanwhile and does not compute them: it goes on at the round after the last (the paper's
persistent schedules, sec. 4.1 and 5: a delayed process contributes passively and does not
carry its delay into later steps). What it does with the results it missed is ``catch_up``:

- ``apply_all`` (default): applies each missed round's result in order, one optimizer step
  each, as every other rank did, so all models stay identical (beyond the paper, at the cost
  of an optimizer step per missed round);
- ``latest``: applies only the latest result, as the paper's receive buffer shows a process
  that lagged more than one step; its weights drift until the next re-synchronisation;
- ``lockstep``: computes every round in order, the missed ones too (the earlier behaviour:
  a rank carries every delay it drew).

Every ``sync_every`` steps (``resync_epochs`` epochs by default, as the authors' scripts: 10)
and at the last step the round is fully synchronous and the weights are averaged.

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
from ..registry import EAGER_CATCH_UP
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
        self._taken: list = []                   # the rounds' results this step takes, in order
        if options.catch_up not in EAGER_CATCH_UP:
            raise ValueError(f"eager-SGD catch_up {options.catch_up!r}; known: {', '.join(EAGER_CATCH_UP)}")

    def begin_step(self, step: int) -> None:
        self._step = step
        every = self.options.sync_every
        last = self.options.total_steps - 1
        self._synchronous = (every > 0 and (step + 1) % every == 0) or step == last

    @property
    def data_path_label(self) -> str:
        return "host_staging:mpi" if self._host.host is not self._flat else "mpi"

    def synchronize(self) -> None:
        self._taken = self.engine.round(self._host.to_host(), self._step, synchronous=self._synchronous,
                                        catch_up=self.options.catch_up != "lockstep")
        for res in self._taken:
            self._rounds.append({"round": res.round, "initiator": res.initiator, "fresh": res.fresh,
                                 "stale": res.stale, "null": res.null, "local": res.local,
                                 "staleness": res.staleness,
                                 "synchronous": res.synchronous, "t0": res.t0, "t1": res.t1,
                                 "latency": res.t1 - res.t0})
        self._load(self._taken[0])

    def _load(self, res) -> None:
        """This round's reduced sum, divided by the world size, as every parameter's ``.grad``."""
        self._host.fill(torch.from_numpy(res.total)).div_(self.comm.Get_size())
        self._host.to_device()

    def step(self) -> None:
        applied = self._taken if self.options.catch_up != "latest" else self._taken[-1:]
        for res in applied:
            if res is not self._taken[0]:
                self._load(res)
            super().step()
        if any(res.synchronous for res in self._taken):
            drift = self.average_parameters()
            [record] = [r for r in self._rounds[-len(self._taken):] if r["synchronous"]][-1:]
            record["drift"] = drift

    def next_step(self, step: int) -> int:
        return self._taken[-1].round + 1 if self._taken else step + 1

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
