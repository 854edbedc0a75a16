"""Scoring the model on the held-out data, each epoch: with a collective, or without one.

``evaluate`` shards the test set over the ranks and sums the scores with an ``Allreduce``: every
rank waits for every other, which synchronous training does at each step anyway. eager-SGD must
not: a collective per epoch is a barrier that would hold every rank to the slowest, the very
wait the partial allreduce removes (and an evaluation on rank 0 alone would make rank 0 the
straggler each epoch). ``ShardedEvaluation`` has each rank score its own model on its shard and
send the scores to rank 0 with a nonblocking send; rank 0 gathers them as they come and writes
the epoch's evaluation once every rank's is in, stamped with the latest rank's finish. Where the
ranks' models are identical at the epoch's end (every eager mode but ``paper`` and ``latest``),
that is exactly the whole test set's score; where they drifted, it is the ranks' models' scores
pooled, each on its shard. The authors' processes each evaluate their own checkpoint, with no
synchronisation, after each 10-epoch run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from . import objective
from .data import Dataset, shard

_EVAL_TAG = 7300   # point-to-point scores to rank 0: one message per rank and epoch, in epoch order


def score(model: torch.nn.Module, x_all, y_all, device: torch.device, batch: int = 512) -> np.ndarray:
    """(correct, summed loss, count) over these samples; correct is NaN where the objective has
    no top-1 (regression: ``objective.scores`` gives None)."""
    model.eval()
    correct, loss_sum, count = 0.0, 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(x_all), batch):
            c, s, n = objective.scores(model(x_all[lo:lo + batch].to(device)), y_all[lo:lo + batch].to(device))
            correct = float("nan") if c is None else correct + c
            loss_sum, count = loss_sum + s, count + n
    model.train()
    return np.array([correct, loss_sum, count], dtype=np.float64)


def _top1_loss(totals: np.ndarray) -> tuple[float, float]:
    return (float(totals[0] / totals[2]), float(totals[1] / totals[2])) if totals[2] else (math.nan, math.nan)


def evaluate(model: torch.nn.Module, data: Dataset, comm: MPI.Comm, device: torch.device,
             batch: int = 512) -> tuple[float, float]:
    """Top-1 accuracy and mean loss on the test set, sharded over ranks and summed (a collective)."""
    part = shard(len(data.x_test), comm.Get_rank(), comm.Get_size())
    totals = score(model, data.x_test[part], data.y_test[part], device, batch)
    comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    return _top1_loss(totals)


class ShardedEvaluation:
    """Each rank scores its own model on its shard; rank 0 gathers the scores without a collective
    (module docstring). ``epoch(model, epoch, wall)`` after each epoch on every rank; ``poll()``
    between steps writes the epochs every rank has reported; ``finish()`` at the end waits for the
    rest and returns the last epoch's top-1 and loss (rank 0; NaN elsewhere)."""

    def __init__(self, comm: MPI.Comm, data: Dataset, device: torch.device, write) -> None:
        self.comm, self.data, self.device, self.write = comm, data, device, write
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        part = shard(len(data.x_test), self.rank, self.size)
        self.x, self.y = data.x_test[part], data.y_test[part]
        self.sends: list[tuple[MPI.Request, np.ndarray]] = []
        self.pending: list[tuple[int, dict[str, Any], list[MPI.Request], list[np.ndarray]]] = []   # rank 0
        self.last = (math.nan, math.nan)

    def epoch(self, model: torch.nn.Module, epoch: int, wall: float, fields: dict[str, Any]) -> None:
        mine = np.append(score(model, self.x, self.y, self.device), wall).astype(np.float64)
        if self.rank != 0:
            self.sends.append((self.comm.Isend(mine, dest=0, tag=_EVAL_TAG), mine))
            self.sends = [(r, b) for r, b in self.sends if not r.Test()]
            return
        bufs = [mine] + [np.empty(4, dtype=np.float64) for _ in range(1, self.size)]
        reqs = [self.comm.Irecv(bufs[src], source=src, tag=_EVAL_TAG) for src in range(1, self.size)]
        self.pending.append((epoch, fields, reqs, bufs))
        self.poll()

    def poll(self) -> None:
        """Rank 0: write, in epoch order, every epoch whose scores have all arrived."""
        while self.pending and MPI.Request.Testall(self.pending[0][2]):
            self._write(self.pending.pop(0))

    def _write(self, item) -> None:
        epoch, fields, _, bufs = item
        totals = np.sum([b[:3] for b in bufs], axis=0)
        self.last = _top1_loss(totals)
        self.write(epoch=epoch, wall=float(max(b[3] for b in bufs)), top1=self.last[0], loss=self.last[1], **fields)

    def finish(self) -> tuple[float, float]:
        if self.rank != 0:
            MPI.Request.Waitall([r for r, _ in self.sends])
            return math.nan, math.nan
        for item in self.pending:
            MPI.Request.Waitall(item[2])
            self._write(item)
        self.pending = []
        return self.last
