"""``async_ps``: asynchronous centralized SGD with a parameter server (eager-SGD's other baseline).

Rank 0 is the server: it holds the model and the optimizer, applies each worker's
gradient the moment it arrives, and answers with the current weights. Ranks
1..P-1 are workers: pull weights, compute a gradient on their share of the data,
push it, repeat, never waiting for each other. Each update carries one worker's
batch, so the learning rate is divided by the number of workers to keep the step
per sample comparable with synchronous SGD on the global batch.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..clock import AlignedClock
from ..data import Dataset, GlobalBatchSampler
from ..imbalance import DelayInjector
from .. import objective
from ..metrics import MetricsWriter
from ..outcome import make_outcome, record_step
from ..run_folder import STEP_PHASES
from ..spec import RunSpec

GRAD_TAG, PARAMS_TAG = 11, 12
SERVER = 0


def _evaluate_here(model: nn.Module, data: Dataset, batch: int = 512) -> tuple[float, float]:
    model.eval()
    correct, loss_sum, count = 0, 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(data.x_test), batch):
            c, s, n = objective.scores(model(data.x_test[lo:lo + batch]), data.y_test[lo:lo + batch])
            correct, loss_sum, count = correct + c, loss_sum + s, count + n
    model.train()
    return correct / count, loss_sum / count


@dataclass
class _Shared:
    """What the server and the workers of one run both hold."""
    spec: RunSpec
    comm: MPI.Comm
    writer: MetricsWriter
    params: list
    flat: torch.Tensor
    phases: dict
    wall_start: float


def _serve(run: _Shared, data: Dataset, model: nn.Module, workers: int, steps_per_epoch: int):
    """Rank 0: apply each worker's gradient as it arrives and answer with the weights.
    Returns (updates applied, train seconds, last top-1, last loss)."""
    spec, comm, params = run.spec, run.comm, run.params
    optimizer = torch.optim.SGD(params, lr=spec.lr / workers, momentum=spec.momentum)
    grad = np.empty(run.flat.numel(), dtype=np.float32)
    status = MPI.Status()
    per_epoch = workers * steps_per_epoch
    top1 = loss_value = float("nan")
    for update in range(per_epoch * spec.epochs):
        t0 = time.perf_counter()
        comm.Recv(grad, source=MPI.ANY_SOURCE, tag=GRAD_TAG, status=status)
        t1 = time.perf_counter()
        offset = 0
        for p in params:
            p.grad = torch.from_numpy(grad[offset:offset + p.numel()].copy()).view_as(p)
            offset += p.numel()
        optimizer.step()
        flat = parameters_to_vector(params).detach().contiguous()
        comm.Send(flat.numpy(), dest=status.Get_source(), tag=PARAMS_TAG)
        run.phases["comm_wait"] += t1 - t0
        run.phases["update"] += time.perf_counter() - t1
        if (update + 1) % per_epoch == 0:
            epoch = update // per_epoch
            top1, loss_value = (_evaluate_here(model, data) if spec.compute == "real"
                                else (float("nan"), float("nan")))
            run.writer.eval(epoch=epoch, wall=time.perf_counter() - run.wall_start, top1=top1, loss=loss_value,
                            samples_seen=(update + 1) * spec.batch_size)
    return per_epoch * spec.epochs, time.perf_counter() - run.wall_start, top1, loss_value


def _work(run: _Shared, data: Dataset, model: nn.Module, clock: AlignedClock, delays: DelayInjector,
          sampler: GlobalBatchSampler) -> tuple[int, float]:
    """Ranks 1..P-1: pull, compute, push, never waiting for each other. Returns (steps, train seconds)."""
    spec, comm, params, flat = run.spec, run.comm, run.params, run.flat
    rank = comm.Get_rank()
    grad_flat = torch.zeros(flat.numel(), dtype=torch.float32)
    train_seconds = 0.0
    step = 0
    for epoch in range(spec.epochs):
        epoch_start = time.perf_counter()
        for idx in sampler.epoch(epoch):
            t_start = clock.now()
            t0 = time.perf_counter()
            x, y = data.x_train[idx], data.y_train[idx]
            t1 = time.perf_counter()
            for p in params:
                p.grad = None
            loss = objective.loss(model(x), y)
            t2 = time.perf_counter()
            d = delays.seconds(step, rank - 1)   # worker index: rank 1 is worker 0
            if d:
                time.sleep(d)
            t2d = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            offset = 0
            for p in params:
                grad_flat[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
                offset += p.numel()
            comm.Send(grad_flat.numpy(), dest=SERVER, tag=GRAD_TAG)
            comm.Recv(flat.numpy(), source=SERVER, tag=PARAMS_TAG)
            t4 = time.perf_counter()
            vector_to_parameters(flat, params)
            t5 = time.perf_counter()
            record_step(run.writer, run.phases, step, epoch, len(idx), t_start, loss.item(),
                        (t0, t1, t2, t2d, t3, t4, t5))
            step += 1
        train_seconds += time.perf_counter() - epoch_start
    return step, train_seconds


def train_async_ps(spec: RunSpec, comm: MPI.Comm, clock: AlignedClock, writer: MetricsWriter,
                   data: Dataset, model: nn.Module, delays: DelayInjector):
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("algorithm=async_ps needs at least 2 ranks: one server and one worker")
    workers = size - 1
    # stragglers are drawn among the workers only: the server computes no gradient, and a
    # draw that picked it (1 in P with one straggler) would leave that step without one
    delays = dataclasses.replace(delays, world_size=workers)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = parameters_to_vector(params).detach().contiguous()
    comm.Bcast(flat.numpy(), root=SERVER)
    vector_to_parameters(flat, params)
    sampler = GlobalBatchSampler(len(data.x_train), spec.batch_size, max(rank - 1, 0), workers, spec.seed,
                                 spec.steps_per_epoch)
    steps_per_epoch = sampler.steps_per_epoch()
    top1 = loss_value = float("nan")
    comm.Barrier()
    run = _Shared(spec, comm, writer, params, flat, dict.fromkeys(STEP_PHASES, 0.0), time.perf_counter())
    if rank == SERVER:
        _, train_seconds, top1, loss_value = _serve(run, data, model, workers, steps_per_epoch)
    else:
        _, train_seconds = _work(run, data, model, clock, delays, sampler)
    # every rank ends with the server's model, so final weights and accuracy are the server's
    flat = parameters_to_vector(params).detach().contiguous()
    comm.Bcast(flat.numpy(), root=SERVER)
    vector_to_parameters(flat, params)
    top1, loss_value = comm.bcast((top1, loss_value), root=SERVER)
    worker_steps = comm.bcast(steps_per_epoch * spec.epochs, root=SERVER)
    return make_outcome(spec, comm, model, steps=worker_steps, samples=worker_steps * workers * spec.batch_size,
                        train_seconds=train_seconds, wall_start=run.wall_start, phases=run.phases, top1=top1,
                        loss=loss_value, global_batch=workers * spec.batch_size)
