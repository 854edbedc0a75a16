"""A study's stored runs, shaped into what each term is fitted to (through the query API).

- compute: per run, the mean over its measured steps and ranks of forward + backward,
  against batch size and threads per rank (one point per run: a run's steps are not
  independent samples of the configuration);
- allreduce: each fused collective (timeline ``allreduce`` events), from the moment the
  last rank started it to the median of the ranks' ends: the time the data moved, not
  the time a rank waited for a late peer;
- straggler: each rank's compute per step, per run;
- overlap: ``step_stats.hidden_fraction``; participation: eager-SGD's rounds;
- oversubscription: per run, rank 0's mean step (``measured.rank0_steps``), the footing
  of a measured throughput, against which the other terms' prediction is compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sqlalchemy.engine import Engine

from results_db.store import query

from .measured import rank0_steps

DEFAULT_WARMUP = 5


@dataclass
class StudyData:
    runs: pd.DataFrame
    compute: pd.DataFrame       # run_id, batch, threads, seconds
    per_step: pd.DataFrame      # run_id, step, rank, seconds (forward + backward), update, delay
    allreduce: pd.DataFrame     # run_id, step, ranks, bytes, seconds
    step_stats: pd.DataFrame
    rounds: pd.DataFrame
    step_bytes: pd.DataFrame    # run_id, step, bytes: what a step's collectives reduced, in all
    grad_bytes: pd.Series       # run_id -> gradient bytes of one step (grad_ready stamps)
    step_seconds: pd.Series     # run_id -> rank 0's mean step (measured.rank0_steps)


def collective_times(events: pd.DataFrame, ranks: pd.Series) -> pd.DataFrame:
    """One row per fused collective of a run that started after every rank's backward had
    ended: bytes, the run's rank count, seconds from its last start to its ranks' median end.

    Only those: while backward runs, the engine looks at a collective once a cycle (5 ms by
    default), so the end it records is the cycle that noticed it, not when the data had
    moved (on this machine the times cluster at 10 and 24 ms whatever the bytes); after
    backward it waits in ``MPI_Wait``, and the end is the end."""
    allreduce = events[events["phase"] == "allreduce"] if "phase" in events else events
    if allreduce.empty:
        return pd.DataFrame(columns=["run_id", "step", "ranks", "bytes", "seconds"])
    backward = events[events["phase"] == "backward"] if "phase" in events else events.iloc[:0]
    backward_end = backward.groupby(["run_id", "step"])["t1"].max()
    g = allreduce.groupby(["run_id", "step", "tensor"])
    out = pd.DataFrame({"bytes": g["bytes"].max(), "start": g["t0"].max(), "end": g["t1"].median(),
                        "seen": g["rank"].nunique()}).reset_index()
    out["ranks"] = out["run_id"].map(ranks)
    out = out[out["seen"] == out["ranks"]]          # a collective every rank recorded
    ends = pd.Series(list(zip(out["run_id"], out["step"])), index=out.index).map(backward_end)
    out = out[ends.notna() & (out["start"] >= ends)]
    out["seconds"] = (out["end"] - out["start"]).clip(lower=0.0)
    return out[out["seconds"] > 0][["run_id", "step", "ranks", "bytes", "seconds"]]


def compute_points(per_step: pd.DataFrame, batch: pd.Series, threads: pd.Series) -> pd.DataFrame:
    """One compute point per run: the mean of forward + backward over its steps and ranks (a
    run's throughput is the inverse of its mean step; on a loaded machine the median sat 9 %
    below the mean, the slow steps left out)."""
    compute = per_step.groupby("run_id")["seconds"].mean().rename("seconds").reset_index()
    compute["batch"] = compute["run_id"].map(batch)
    compute["threads"] = compute["run_id"].map(threads)
    return compute


def load_study(engine: Engine, study: str, warmup: int = DEFAULT_WARMUP) -> StudyData:
    runs = query.runs(engine, study=study, where="status=done")
    if runs.empty:
        raise ValueError(f"study {study!r}: no finished runs")
    runs = runs[runs.get("workload_kind", "builtin").fillna("builtin") == "builtin"]
    ids = [int(i) for i in runs["run_id"]]
    steps = query.steps(engine, ids)
    steps = steps[steps["step"] >= warmup]
    mean_step = rank0_steps(steps, warmup)["mean"]   # before "seconds" is made forward + backward below
    steps = steps.assign(seconds=steps["forward"] + steps["backward"])
    info = runs.set_index("run_id")
    threads = info["threads_per_node"] // info["workers_per_node"]
    steps = steps.assign(delay=steps["delay"].fillna(0.0))
    events = query.events(engine, ids, phases=["allreduce", "backward"], steps=(warmup, 1 << 30))
    return StudyData(runs=runs, compute=compute_points(steps, info["batch_size"], threads),
                     per_step=steps[["run_id", "step", "rank", "seconds", "update", "delay"]],
                     allreduce=collective_times(events, info["world_size"]),
                     step_stats=_from(query.step_stats(engine, ids), "step", warmup),
                     rounds=_from(query.rounds(engine, ids), "round", warmup),
                     step_bytes=bytes_per_step(events),
                     grad_bytes=_grad_bytes(query.events(engine, ids, phases=["grad_ready"], steps=(warmup, warmup))),
                     step_seconds=mean_step)


def _grad_bytes(ready: pd.DataFrame) -> pd.Series:
    """Per run, the bytes of the gradients one step computes (rank 0's ``grad_ready`` stamps):
    what a collective must reduce, known even where nothing was reduced (1 rank)."""
    if ready.empty:
        return pd.Series(dtype=float)
    return ready[ready["rank"] == ready["rank"].min()].groupby("run_id")["bytes"].sum().astype(float)


def bytes_per_step(events: pd.DataFrame) -> pd.DataFrame:
    """Per run and step, the bytes of its fused collectives (each once, at its largest over ranks)."""
    allreduce = events[events["phase"] == "allreduce"] if "phase" in events else events
    if allreduce.empty:
        return pd.DataFrame(columns=["run_id", "step", "bytes"])
    per_tensor = allreduce.groupby(["run_id", "step", "tensor"])["bytes"].max()
    return per_tensor.groupby(["run_id", "step"]).sum().rename("bytes").reset_index()


def _from(frame: pd.DataFrame, column: str, first: int) -> pd.DataFrame:
    return frame[frame[column] >= first] if column in frame else frame
