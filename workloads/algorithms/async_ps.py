"""``async_ps``: asynchronous centralized SGD with a parameter server (eager-SGD's other baseline).

Rank 0 is the server: it holds the model and the optimizer, applies each worker's
gradient the moment it arrives, and answers with the current weights. Ranks
1..P-1 are workers: pull weights, compute a gradient on their share of the data,
push it, repeat, never waiting for each other. Each update carries one worker's
batch, so the learning rate is divided by the number of workers to keep the step
per sample comparable with synchronous SGD on the global batch.

Messages go over MPI through host memory: on a GPU, gradients and weights are flat device
buffers with pinned host mirrors (``comm.data_path.HostMirror``), copied after the work
that produced them, on a stream of their own.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from mpi4py import MPI
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..clock import AlignedClock
from ..comm.data_path import Device, HostMirror
from ..data import Dataset, GlobalBatchSampler
from ..imbalance import DelayInjector
from .. import objective
from ..metrics import MetricsWriter
from ..device import StepClock
from ..outcome import make_outcome, record_step
from ..registry import computes_for_real
from ..run_folder import STEP_PHASES
from ..spec import RunSpec

GRAD_TAG, PARAMS_TAG = 11, 12
SERVER = 0


def _evaluate_here(model: nn.Module, data: Dataset, device: torch.device, batch: int = 512) -> tuple[float, float]:
    model.eval()
    correct, loss_sum, count = 0, 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(data.x_test), batch):
            c, s, n = objective.scores(model(data.x_test[lo:lo + batch].to(device)),
                                       data.y_test[lo:lo + batch].to(device))
            # a regression scores no top-1 (None): it stays None, and top1() makes it NaN
            correct = None if c is None or correct is None else correct + c
            loss_sum, count = loss_sum + s, count + n
    model.train()
    return objective.top1(correct, count), loss_sum / count


@dataclass
class _Shared:
    """What the server and the workers of one run both hold: the weights as one flat buffer on
    the run's device (``flat``) and its host mirror, which MPI sends and receives."""
    spec: RunSpec
    comm: MPI.Comm
    writer: MetricsWriter
    params: list
    flat: torch.Tensor
    weights: HostMirror
    device: torch.device
    phases: dict
    wall_start: float

    def load_weights(self) -> None:
        """The host mirror's weights into the model (after a receive)."""
        self.weights.to_device()
        vector_to_parameters(self.flat, self.params)

    def store_weights(self):
        """The model's weights, on the host, to send."""
        self.flat.copy_(parameters_to_vector(self.params).detach())
        return self.weights.to_host()


def _serve(run: _Shared, data: Dataset, model: nn.Module, workers: int, steps_per_epoch: int):
    """Rank 0: apply each worker's gradient as it arrives and answer with the weights.
    Returns (updates applied, train seconds, last top-1, last loss)."""
    spec, comm, params = run.spec, run.comm, run.params
    optimizer = torch.optim.SGD(params, lr=spec.lr / workers, momentum=spec.momentum)
    grad_device = torch.zeros_like(run.flat)
    grad = HostMirror(Device(run.device), grad_device)
    status = MPI.Status()
    per_epoch = workers * steps_per_epoch
    top1 = loss_value = float("nan")
    for update in range(per_epoch * spec.epochs):
        t0 = time.perf_counter()
        comm.Recv(grad.writable(), source=MPI.ANY_SOURCE, tag=GRAD_TAG, status=status)
        t1 = time.perf_counter()
        grad.to_device()
        offset = 0
        for p in params:
            p.grad = grad_device[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        optimizer.step()
        comm.Send(run.store_weights(), dest=status.Get_source(), tag=PARAMS_TAG)
        run.phases["comm_wait"] += t1 - t0
        run.phases["update"] += time.perf_counter() - t1
        if (update + 1) % per_epoch == 0:
            epoch = update // per_epoch
            top1, loss_value = (_evaluate_here(model, data, run.device) if computes_for_real(spec.compute)
                                else (float("nan"), float("nan")))
            run.writer.eval(epoch=epoch, wall=time.perf_counter() - run.wall_start, top1=top1, loss=loss_value,
                            samples_seen=(update + 1) * spec.batch_size)
    return per_epoch * spec.epochs, time.perf_counter() - run.wall_start, top1, loss_value


def _work(run: _Shared, data: Dataset, model: nn.Module, clock: AlignedClock, delays: DelayInjector,
          sampler: GlobalBatchSampler) -> tuple[int, float]:
    """Ranks 1..P-1: pull, compute, push, never waiting for each other. Returns (steps, train seconds)."""
    spec, comm, params = run.spec, run.comm, run.params
    rank = comm.Get_rank()
    grad_device = torch.zeros_like(run.flat)
    grad = HostMirror(Device(run.device), grad_device)
    mark = StepClock(run.device)
    train_seconds = 0.0
    step = 0
    for epoch in range(spec.epochs):
        epoch_start = time.perf_counter()
        for idx in sampler.epoch(epoch):
            t_start = clock.now()
            t0 = mark()
            x, y = data.x_train[idx].to(run.device), data.y_train[idx].to(run.device)
            t1 = mark()
            for p in params:
                p.grad = None
            loss = objective.loss(model(x), y)
            t2 = mark()
            d = delays.seconds(step, rank - 1)   # worker index: rank 1 is worker 0
            if d:
                time.sleep(d)
            t2d = mark()
            loss.backward()
            t3 = mark()
            offset = 0
            for p in params:
                grad_device[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
                offset += p.numel()
            comm.Send(grad.to_host(), dest=SERVER, tag=GRAD_TAG)
            comm.Recv(run.weights.writable(), source=SERVER, tag=PARAMS_TAG)
            t4 = mark()
            run.load_weights()
            t5 = mark()
            record_step(run.writer, run.phases, step, epoch, len(idx), t_start, loss.item(),
                        (t0, t1, t2, t2d, t3, t4, t5))
            step += 1
        train_seconds += time.perf_counter() - epoch_start
    return step, train_seconds


def train_async_ps(spec: RunSpec, comm: MPI.Comm, clock: AlignedClock, writer: MetricsWriter,
                   data: Dataset, model: nn.Module, delays: DelayInjector, device: torch.device | None = None):
    device = device or torch.device("cpu")
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("algorithm=async_ps needs at least 2 ranks: one server and one worker")
    workers = size - 1
    # stragglers are drawn among the workers only: the server computes no gradient, and a
    # draw that picked it (1 in P with one straggler) would leave that step without one
    delays = dataclasses.replace(delays, world_size=workers)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = parameters_to_vector(params).detach().clone().contiguous()
    run = _Shared(spec, comm, writer, params, flat, HostMirror(Device(device), flat), device,
                  dict.fromkeys(STEP_PHASES, 0.0), 0.0)
    comm.Bcast(run.store_weights(), root=SERVER)
    run.load_weights()
    sampler = GlobalBatchSampler(len(data.x_train), spec.batch_size, max(rank - 1, 0), workers, spec.seed,
                                 spec.steps_per_epoch)
    steps_per_epoch = sampler.steps_per_epoch()
    top1 = loss_value = float("nan")
    comm.Barrier()
    run.wall_start = time.perf_counter()
    if rank == SERVER:
        _, train_seconds, top1, loss_value = _serve(run, data, model, workers, steps_per_epoch)
    else:
        _, train_seconds = _work(run, data, model, clock, delays, sampler)
    # every rank ends with the server's model, so final weights and accuracy are the server's
    comm.Bcast(run.store_weights(), root=SERVER)
    run.load_weights()
    top1, loss_value = comm.bcast((top1, loss_value), root=SERVER)
    worker_steps = comm.bcast(steps_per_epoch * spec.epochs, root=SERVER)
    outcome = make_outcome(spec, comm, model, steps=worker_steps, samples=worker_steps * workers * spec.batch_size,
                           gradients=worker_steps * workers,
                           train_seconds=train_seconds, wall_start=run.wall_start, phases=run.phases, top1=top1,
                           loss=loss_value, global_batch=workers * spec.batch_size)
    outcome.summary["data_path_used"] = "host_staging:mpi" if device.type == "cuda" else "mpi"
    outcome.summary["classes"] = data.num_classes
    return outcome
