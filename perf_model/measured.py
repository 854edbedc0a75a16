"""Measured throughput of stored runs, on the same footing as a prediction: the steps after
``warmup`` only (start-up, the first steps' allocations and evaluation left out)."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
from sqlalchemy.engine import Engine

from results_db.store import query
from workloads.run_folder import STEP_PHASES


def step_times(steps: pd.DataFrame) -> pd.Series:
    """A step's seconds: as reported, else the sum of its phases."""
    phases = steps[list(STEP_PHASES)].fillna(0.0).sum(axis=1)
    return steps["seconds"].fillna(phases) if "seconds" in steps else phases


def rank0_steps(steps: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """Per run (index run_id): ``mean`` and ``count`` of rank 0's step seconds from step
    ``warmup`` on: the footing of a measured throughput, and of the model's step residuals."""
    first = steps[(steps["rank"] == 0) & (steps["step"] >= warmup)]
    return step_times(first).groupby(first["run_id"]).agg(["mean", "count"])


def measured_throughput(engine: Engine, run_ids: Sequence[int], warmup: int) -> pd.DataFrame:
    """Per run: ranks, measured steps, mean step seconds of rank 0 after ``warmup``, and
    samples/s = global batch / that mean (rank 0's clock: every rank runs as many steps, and a
    synchronous round every few steps keeps eager-SGD's ranks together)."""
    runs = query.runs(engine, run_ids=list(run_ids)).set_index("run_id")
    steps = query.steps(engine, list(run_ids))
    per_run = rank0_steps(steps, warmup)
    out = pd.DataFrame({"run_id": per_run.index, "ranks": per_run.index.map(runs["world_size"]),
                        "nodes": per_run.index.map(runs["nodes"]), "algorithm": per_run.index.map(runs["algorithm"]),
                        "steps": per_run["count"].to_numpy(), "step_seconds": per_run["mean"].to_numpy()})
    out["throughput"] = out["run_id"].map(runs["global_batch_size"]) / out["step_seconds"]
    return out.reset_index(drop=True)
