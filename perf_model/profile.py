"""A compute profile (``workloads.emulation.ComputeProfile``) from a stored real run.

The profile keeps every measured step of every rank after the warm-up, forward and
backward as measured by the training loop, so an emulated run draws the real spread and
the real forward/backward correlation. Profile a 1-rank run of the model, batch and
threads to be emulated: a multi-rank run's backward also holds what its engine did
inside it (cycles between gradient hooks, DDP's bucket waits), which the emulated run's
real engine then adds again.

Gradient ready times come from the timeline (``timeline=true``): per parameter, the
mean over steps and ranks of (ready - backward start) / backward length.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
from sqlalchemy.engine import Engine

from results_db.store import query
from workloads.emulation import ComputeProfile

DEFAULT_WARMUP = 5


class ProfileError(ValueError):
    """The run cannot give a profile; the message says why."""


def ready_fractions(events: pd.DataFrame) -> dict[str, float]:
    """Per tensor, the mean fraction of its step's backward elapsed when it was ready."""
    if events.empty:
        return {}
    keys = ["run_id", "rank", "step"]   # several runs pooled: steps and ranks repeat
    backward = events[events["phase"] == "backward"][keys + ["t0", "t1"]]
    ready = events[events["phase"] == "grad_ready"].merge(backward, on=keys, how="left", suffixes=("", "_b"))
    ready = ready.dropna(subset=["t0_b"])
    length = (ready["t1_b"] - ready["t0_b"]).to_numpy()
    fraction = np.where(length > 0, (ready["t0"].to_numpy() - ready["t0_b"].to_numpy()) / np.where(length > 0, length, 1), 1.0)
    ready = ready.assign(fraction=np.clip(fraction, 0.0, 1.0))
    return {str(k): float(v) for k, v in ready.groupby("tensor")["fraction"].mean().items()}


SAME_CONFIGURATION = ("model", "batch_size", "threads_per_worker")


def _source_of(engine: Engine, run_id: int, warmup: int) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """One run's description, its measured steps and its backward/grad_ready events."""
    table = query.runs(engine, where=f"run_id={int(run_id)}")
    if table.empty:
        raise ProfileError(f"run {run_id}: no such run in the database")
    run = table.iloc[0]
    if run.get("status") != "done":
        raise ProfileError(f"run {run_id}: status {run.get('status')}, not done")
    if run.get("compute") == "emulated":
        raise ProfileError(f"run {run_id}: an emulated run; profile a real one")
    if run.get("workload_kind") not in (None, "builtin"):
        raise ProfileError(f"run {run_id}: a command workload records no forward/backward phases")
    steps = query.steps(engine, [int(run_id)])
    steps = steps[steps["step"] >= warmup]
    if steps.empty:
        raise ProfileError(f"run {run_id}: no step after the first {warmup} (warm-up); lower --warmup "
                           "or profile a longer run")
    events = query.events(engine, [int(run_id)], phases=["backward", "grad_ready"], steps=(warmup, 1 << 30))
    threads = int(run["threads_per_node"]) // int(run["workers_per_node"])
    source = {"run_id": int(run_id), "study": run.get("study"), "model": run["model"], "dataset": run["dataset"],
              "batch_size": int(run["batch_size"]), "threads_per_worker": threads,
              "world_size": int(run["world_size"]), "algorithm": run["algorithm"], "site": run.get("site"),
              "steps": int(steps["step"].nunique())}
    return source, steps, events


def profile_of_runs(engine: Engine, run_ids: Sequence[int], warmup: int = DEFAULT_WARMUP) -> ComputeProfile:
    """The steps of every run pooled: runs spread over a session make a profile a sample
    of the machine, not of the minute one run happened to get. They must share model,
    batch size and threads per rank."""
    if not run_ids:
        raise ProfileError("no run to profile")
    parts = [_source_of(engine, r, warmup) for r in run_ids]
    first = parts[0][0]
    for source, _, _ in parts[1:]:
        differ = [f"{k} {source[k]!r} (run {first['run_id']}: {first[k]!r})" for k in SAME_CONFIGURATION
                  if source[k] != first[k]]
        if differ:
            raise ProfileError(f"run {source['run_id']}: {', '.join(differ)}; pool only runs of one configuration")
    steps = pd.concat([p[1] for p in parts], ignore_index=True)
    events = pd.concat([p[2] for p in parts], ignore_index=True)
    source = {**first, "run_id": first["run_id"] if len(parts) == 1 else [p[0]["run_id"] for p in parts],
              "world_size": max(p[0]["world_size"] for p in parts), "warmup": warmup,
              "steps": sum(p[0]["steps"] for p in parts)}
    return ComputeProfile(forward=tuple(float(x) for x in steps["forward"]),
                          backward=tuple(float(x) for x in steps["backward"]),
                          ready_fraction=ready_fractions(events), source=source)

