"""A study's stored runs, shaped into what each term is fitted to (through the query API).

- compute: per run, the median over its measured steps and ranks of forward + backward,
  against batch size and threads per rank (one point per run: a run's steps are not
  independent samples of the configuration);
- allreduce: each fused collective (timeline ``allreduce`` events), from the moment the
  last rank started it to the median of the ranks' ends: the time the data moved, not
  the time a rank waited for a late peer;
- straggler: each rank's compute per step, per run;
- overlap: ``step_stats.hidden_fraction``; participation: eager-SGD's rounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sqlalchemy.engine import Engine

from results_db import query

DEFAULT_WARMUP = 5


@dataclass
class StudyData:
    runs: pd.DataFrame
    compute: pd.DataFrame       # run_id, batch, threads, seconds
    per_step: pd.DataFrame      # run_id, step, rank, seconds
    allreduce: pd.DataFrame     # run_id, ranks, bytes, seconds
    step_stats: pd.DataFrame
    rounds: pd.DataFrame


def collective_times(events: pd.DataFrame, ranks: pd.Series) -> pd.DataFrame:
    """One row per fused collective of a run: bytes, the run's rank count, seconds from its
    last start to its ranks' median end."""
    if events.empty:
        return pd.DataFrame(columns=["run_id", "ranks", "bytes", "seconds"])
    g = events.groupby(["run_id", "step", "tensor"])
    out = pd.DataFrame({"bytes": g["bytes"].max(), "start": g["t0"].max(), "end": g["t1"].median(),
                        "seen": g["rank"].nunique()}).reset_index()
    out["ranks"] = out["run_id"].map(ranks)
    out = out[out["seen"] == out["ranks"]]          # a collective every rank recorded
    out["seconds"] = (out["end"] - out["start"]).clip(lower=0.0)
    return out[out["seconds"] > 0][["run_id", "ranks", "bytes", "seconds"]]


def load_study(engine: Engine, study: str, warmup: int = DEFAULT_WARMUP) -> StudyData:
    runs = query.runs(engine, study=study, where="status=done")
    if runs.empty:
        raise ValueError(f"study {study!r}: no finished runs")
    runs = runs[runs.get("workload_kind", "builtin").fillna("builtin") == "builtin"]
    ids = [int(i) for i in runs["run_id"]]
    steps = query.steps(engine, ids)
    steps = steps[steps["step"] >= warmup]
    steps = steps.assign(seconds=steps["forward"] + steps["backward"])
    info = runs.set_index("run_id")
    threads = info["threads_per_node"] // info["workers_per_node"]
    compute = steps.groupby("run_id")["seconds"].median().rename("seconds").reset_index()
    compute["batch"] = compute["run_id"].map(info["batch_size"])
    compute["threads"] = compute["run_id"].map(threads)
    events = query.events(engine, ids, phases=["allreduce"], steps=(warmup, 1 << 30))
    return StudyData(runs=runs, compute=compute, per_step=steps[["run_id", "step", "rank", "seconds"]],
                     allreduce=collective_times(events, info["world_size"]),
                     step_stats=query.step_stats(engine, ids), rounds=query.rounds(engine, ids))
