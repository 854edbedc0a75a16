"""``eager_solo`` / ``eager_majority``: eager-SGD (Li et al., PPoPP 2020).

Each step's gradients go through one round of a partial allreduce
(``workloads.comm.partial``): the round fires without waiting for late ranks, whose
gradients join a later round. What a rank that was late does is ``catch_up``:

- ``paper``: the paper's mechanism, after the authors' code (``Shigangli/eager-SGD``, fflib2
  and ``opt_esgd_*_imagenet_imbalance.py``), with the two differences docs/explanation/eager-sgd.md
  names (here a late gradient always joins the next round, where the authors' op zeroes its send
  buffer each step and so may drop it; here the last step is a synchronous round): every process
  computes each of its own steps; its k-th gradient joins round k if that round has not fired
  yet, else the next round it takes part in; it applies the latest result in its receive buffer (a process that lagged sees
  only the newest round, and may apply it again at its next step), so models drift; solo runs
  every 33rd round synchronously (fflib2's limiter, ``LIMITER 32``: its only bound on staleness;
  majority has none); and every ``sync_every`` steps (``resync_epochs`` epochs, 10 by default as
  the authors' ImageNet job: ``synchm.sh`` copies rank 0's checkpoint to every process before
  each 10-epoch run) the models are re-synchronised to rank 0's weights and momentum;
- ``apply_all`` (default): an extension: a late rank goes on at the round the others reached,
  computing none of the rounds it missed, and applies each missed round's result in order, one
  optimizer step each, so all models stay identical (no drift to re-synchronise away);
- ``latest``: as ``apply_all``, but applies only the latest result (drifts);
- ``lockstep``: computes every round and applies every result in order (a late rank carries
  every delay it drew).

For all but ``paper``, every ``sync_every`` steps and the last step the round is fully
synchronous and the weights are averaged; ``paper`` ends on a synchronous round and rank 0's
weights.

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
from ..catch_up import catch_up
from .base import GradientSync, SyncOptions

# fflib2's solo limiter in the authors' training op: 32 asynchronous posts, then one synchronous
# allreduce every process joins (opt_esgd_solo_imagenet_imbalance.py, ``#define LIMITER 32``;
# ffsolo_limiter.c): every 33rd round
PAPER_SOLO_SYNC_EVERY = 33


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
        self.mode = mode
        self.engine = PartialAllreduce(self._flat.numel(), comm, mode, seed=options.seed,
                                       clock=options.clock or time.time)
        self._step = 0
        self._rounds: list[dict[str, Any]] = []
        self._synchronous = False
        self._resync = False
        self.resync_agreed: bool | None = None   # after the last re-synchronisation, every rank's model was rank 0's
        self._taken: list = []                   # the rounds' results this step takes, in order
        self.catch_up = catch_up(options.catch_up)   # a name not declared: ValueError

    def begin_step(self, step: int) -> None:
        self._step = step
        every = self.options.sync_every
        last = self.options.total_steps - 1
        self._resync = (every > 0 and (step + 1) % every == 0) or step == last
        if self._paper:   # fflib2's limiter (solo only) and the run's end
            self._synchronous = step == last or (self.mode == "solo" and (step + 1) % PAPER_SOLO_SYNC_EVERY == 0)
        else:
            self._synchronous = self._resync

    @property
    def _paper(self) -> bool:
        return self.catch_up.paper_buffer

    @property
    def data_path_label(self) -> str:
        return "host_staging:mpi" if self._host.host is not self._flat else "mpi"

    def synchronize(self) -> None:
        self._taken = self.engine.round(self._host.to_host(), self._step, synchronous=self._synchronous,
                                        catch_up=self.catch_up.skips_rounds,
                                        latest=self._paper)
        self._rounds.extend(self.engine.drain_log())
        self._load(self._taken[0])

    def _load(self, res) -> None:
        """This round's reduced sum, divided by the world size, as every parameter's ``.grad``."""
        self._host.fill(torch.from_numpy(res.total)).div_(self.comm.Get_size())
        self._host.to_device()

    def step(self) -> None:
        applied = self._taken if self.catch_up.applies_every else self._taken[-1:]
        for res in applied:
            if res is not self._taken[0]:
                self._load(res)
            super().step()
        self.engine.recycle(self._taken)
        if self._paper and self._resync:
            drift = self.resync_to_rank0()
        elif not self._paper and any(res.synchronous for res in self._taken):
            drift = self.average_parameters()
        else:
            return
        if self._paper:   # its own record: the resync step's round may have completed steps ago
            self._rounds.append({"round": self._step, "resync": True, "local": "resync", "staleness": 0,
                                 "drift": drift, "agreed": self.resync_agreed})
        elif self._rounds:
            self._rounds[-1]["drift"] = drift

    def next_step(self, step: int) -> int:
        if self._paper:
            return step + 1
        return self._taken[-1].round + 1 if self._taken else step + 1

    def resync_to_rank0(self) -> float:
        """The authors' re-synchronisation: every model becomes rank 0's, weights and momentum (its
        checkpoint copied over the others'). Returns how far this rank's weights were from rank
        0's before it (largest absolute difference): the drift the paper's mechanism lets grow."""
        if not self.params:
            return 0.0
        with torch.no_grad():
            mine = parameters_to_vector(self.params).detach().cpu().numpy().copy()
            root = mine.copy()
            self.comm.Bcast(root, root=0)
            vector_to_parameters(torch.from_numpy(root).to(self.params[0].device), self.params)
            assert self.optimizer is not None
            state = [self.optimizer.state.get(p, {}).get("momentum_buffer") for p in self.params]
            has = self.comm.bcast([m is not None for m in state], root=0)
            for p, momentum, present in zip(self.params, state, has):
                if not present:
                    self.optimizer.state.get(p, {}).pop("momentum_buffer", None)
                    continue
                buf = (momentum if momentum is not None else torch.zeros_like(p)).detach().cpu().contiguous().clone()
                self.comm.Bcast(buf.numpy(), root=0)
                self.optimizer.state.setdefault(p, {})["momentum_buffer"] = buf.to(p.device)
            # every rank now holds rank 0's model: checked across ranks, not assumed (a checksum's
            # least and largest value over ranks)
            check = float(parameters_to_vector(self.params).double().sum().item())
            self.resync_agreed = self.comm.allreduce(check, op=MPI.MAX) == self.comm.allreduce(check, op=MPI.MIN)
        return float(np.abs(mine - root).max())

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
