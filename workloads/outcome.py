"""What a rank's training produced: its step records as it goes, its summary at the end.

Shared by every training loop (the data-parallel loop of ``train`` and the parameter
server's of ``algorithms.async_ps``), so that both write the same step records and
summarise a run the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from mpi4py import MPI

from .metrics import MetricsWriter
from .run_folder import STEP_PHASES
from .spec import RunSpec


@dataclass
class TrainOutcome:
    """What one rank knows at the end; rank 0's copy is the run summary."""

    summary: dict[str, Any]
    final_state: dict[str, torch.Tensor]
    final_params: dict[str, torch.Tensor]


def record_step(writer: MetricsWriter, phases: dict[str, float], step: int, epoch: int, samples: int,
                t_start: float, loss: float, marks: tuple[float, ...]) -> None:
    """One step record from the loop's seven time marks; also adds to the rank's phase totals."""
    timings = {name: b - a for name, a, b in zip(STEP_PHASES, marks, marks[1:])}
    for name, seconds in timings.items():
        phases[name] += seconds
    writer.step(step=step, epoch=epoch, samples=samples, t_start=t_start, loss=loss, **timings)


def make_outcome(spec: RunSpec, comm: MPI.Comm, model: torch.nn.Module, *, steps: int, samples: int,
                 train_seconds: float, wall_start: float, phases: dict[str, float], top1: float, loss: float,
                 global_batch: int, gradients: int | None = None) -> TrainOutcome:
    """The run summary, over the slowest rank's training time: ``throughput`` is the samples
    whose gradients the ranks computed per second, ``rounds_per_second`` the steps the job
    took (each one update of every model), ``gradients_per_second`` the gradients all ranks
    computed. With every rank computing every step (``gradients`` = steps x ranks, the
    default) they differ by constant factors; an eager-SGD rank that joins the round the
    others reached computes fewer gradients than there are rounds, and then they do not."""
    slowest = comm.allreduce(train_seconds, op=MPI.MAX)
    gradients = steps * comm.Get_size() if gradients is None else gradients
    rank_summary = {"steps": steps, "train_seconds": train_seconds,
                    **{f"{k}_seconds": v for k, v in phases.items()}}
    summary = {
        "status": "done",
        "world_size": comm.Get_size(),
        "steps": steps,
        "epochs": spec.epochs,
        "global_batch_size": global_batch,
        "samples": samples,
        "train_seconds": slowest,
        "wall_seconds": time.perf_counter() - wall_start,
        "throughput": samples / slowest if slowest > 0 else float("nan"),
        "rounds_per_second": steps / slowest if slowest > 0 else float("nan"),
        "gradients": gradients,
        "gradients_per_second": gradients / slowest if slowest > 0 else float("nan"),
        "final_top1": top1,
        "final_loss": loss,
        "rank_summary": rank_summary,
    }
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    params = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    return TrainOutcome(summary=summary, final_state=state, final_params=params)
