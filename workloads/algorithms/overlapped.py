"""``sync``: Horovod-style synchronous data parallelism on mpi4py.

Each parameter gets a post-accumulate-grad hook, so a gradient is handed to the
background engine (``workloads.comm.BackgroundAllreduce``) the moment backprop has
finished it; fused allreduces then run while backprop produces the rest, and the
optimizer waits only for what is still in flight.

Gradients live as views in one flat buffer laid out in the order backprop finishes
them (learned in the first step and checked to be the same on every rank, as DDP
rebuilds its buckets), so a fused group is one slice reduced in place. The buffer lives
on the parameters' device and a fused group travels the run's data path (host MPI,
NCCL, CUDA-aware MPI or pinned host staging): one engine for CPUs and GPUs, as DDP keeps
one reducer.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from mpi4py import MPI
from torch import nn

from ..comm import BackgroundAllreduce
from ..comm.cycle_tuner import CycleTimeTuner
from ..comm.data_path import open_data_path
from .base import GradientSync, SyncOptions


class OverlappedFusedAllreduce(GradientSync):
    def __init__(self, model: nn.Module, comm: MPI.Comm, options: SyncOptions) -> None:
        super().__init__(model, comm, options)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        named.reverse()  # until the first step shows the real order: roughly what backprop does
        self._named = named
        self._index: dict[int, int] = {}
        self._seen: list[int] | None = []  # slot order observed in the first backward
        device = named[0][1].device if named else torch.device("cpu")
        self.data_path = open_data_path(options.data_path, comm.Dup(), device)
        self.engine = BackgroundAllreduce(
            names=[n for n, _ in named],
            nbytes=[p.numel() * p.element_size() for _, p in named],
            comm=comm,
            fusion_threshold_bytes=int(options.fusion_threshold_mb * 1024 * 1024),
            cycle_time_s=options.cycle_time_ms / 1000.0,
            clock=options.clock or time.time,
            timeline=options.timeline,
            progress="thread" if options.engine_thread else "hooks",
            data_path=self.data_path,
        )
        self._layout(list(range(len(named))))
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook) for _, p in named]
        self._tuner = CycleTimeTuner(options.cycle_time_ms / 1000.0, options.total_steps) if options.autotune \
            else None
        self._step = -1
        self._step_began = 0.0

    def _layout(self, order: list[int]) -> None:
        """Slots in ``order``; each ``.grad`` a view into one buffer laid out the same way."""
        self._named = [self._named[i] for i in order]
        self._index = {id(p): i for i, (_, p) in enumerate(self._named)}
        params = [p for _, p in self._named]
        flat = offsets = None
        if params and all(p.dtype == torch.float32 and p.device == params[0].device for p in params):
            flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
            offsets, offset = [], 0
            for p in params:
                offsets.append(offset)
                view = flat[offset:offset + p.numel()].view_as(p)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view  # autograd accumulates into an existing .grad in place
                offset += p.numel()
        self.engine.set_slots([n for n, _ in self._named], [p.numel() * p.element_size() for p in params],
                              flat=flat, offsets=offsets)

    def _hook(self, param: torch.Tensor) -> None:
        index = self._index[id(param)]
        if self._seen is not None:
            self._seen.append(index)
        self.engine.ready(index, param.grad)

    def begin_step(self, step: int) -> None:
        if self._seen is not None and step > 0:
            self._adopt_observed_order()
        if self._tuner is not None:
            if self._tuner.due(step):
                self._tuner.decide(self.comm)
            self.engine.cycle_time = self._tuner.cycle_for(step)
        self.engine.begin_step(step)
        self._step, self._step_began = step, time.perf_counter()

    def step(self) -> None:
        super().step()
        if self._tuner is not None:
            self._tuner.observe(self._step, time.perf_counter() - self._step_began)

    def run_metrics(self) -> dict[str, Any]:
        return self._tuner.report() if self._tuner is not None else {}

    def _adopt_observed_order(self) -> None:
        seen, self._seen = self._seen, None
        complete = sorted(seen) == list(range(len(self._named)))
        orders = self.comm.allgather(tuple(seen) if complete else None)
        if complete and all(o == orders[0] for o in orders):
            self._layout(list(seen))

    def synchronize(self) -> None:
        # A parameter unused in this step gets no hook call: it contributes zeros.
        for i, (_, p) in enumerate(self._named):
            if not self.engine.is_ready(i):
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self.engine.ready(i, p.grad)
        self.engine.wait()

    def drain_events(self) -> list[dict[str, Any]]:
        events, self.engine.events = self.engine.events, []
        return events

    @property
    def data_path_label(self) -> str:
        return self.data_path.label

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self.engine.close()
        self.data_path.close()
        self.data_path.comm.Free()
