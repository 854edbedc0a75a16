"""What each algorithm's runs measured that a prediction needs beside the fitted terms.

The terms (``perf_model.fit``) say how long compute, a collective and a straggler take; a
step of an algorithm is made of them in its own way: how many collectives, of how many
bytes, how much of them hidden behind backprop, how long the update, which ranks sleep
how long (injected imbalance) and how often a synchronous round comes (eager-SGD). These
are *measured* per algorithm, not fitted, and stored with the fit (``model_fits.workloads``).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from workloads.catch_up import catch_up

from .study import StudyData

# Collectives a step holds when the timeline cannot say (no engine events): eager-SGD's
# partial round reduces one flat buffer; Horovod and DDP fuse a small model's gradient
# into one buffer of at most this many bytes (Horovod's HOROVOD_FUSION_THRESHOLD default,
# DDP's bucket_cap_mb default).
FUSION_BYTES = {"horovod": 64 << 20, "ddp": 25 << 20}
ONE_BUFFER = ("eager_solo", "eager_majority")


def _mode(series: pd.Series):
    values = series.dropna()
    return values.mode().iloc[0] if len(values) else None


def gradient_bytes(data: StudyData) -> dict[str, float]:
    """Per model: the median over steps of the bytes a step's collectives reduce (each
    collective counted once, at its largest size over ranks), from the engine's events; else
    the bytes of the gradients a step computes (``grad_ready`` stamps: a 1-rank run)."""
    per_step = data.step_bytes.groupby("run_id")["bytes"].median() if not data.step_bytes.empty else pd.Series(dtype=float)
    if per_step.empty:
        per_step = data.grad_bytes
    if per_step.empty:
        return {}
    model = data.runs.set_index("run_id")["model"]
    return {str(m): float(v.median()) for m, v in per_step.groupby(per_step.index.map(model))}


def _overhead(runs: pd.DataFrame) -> float:
    spent = (runs["wall_seconds"] - runs["train_seconds"]).clip(lower=0).dropna()
    return float(spent.median()) if len(spent) else 0.0


def workload_shapes(data: StudyData) -> dict[str, dict[str, Any]]:
    """``{algorithm: shape}`` for every algorithm of the study; a shape's ``notes`` say what
    was assumed for lack of a measurement."""
    grads = gradient_bytes(data)
    shapes: dict[str, dict[str, Any]] = {}
    for algorithm, runs in data.runs.groupby("algorithm"):
        ids = set(int(i) for i in runs["run_id"])
        notes: list[str] = []
        steps = data.per_step[data.per_step["run_id"].isin(ids)]
        stats = data.step_stats[data.step_stats["run_id"].isin(ids)]
        model = str(_mode(runs["model"]))
        nbytes = grads.get(model)
        if nbytes is None:
            notes.append(f"no timeline of {model} (timeline=true): gradient bytes unknown, communication left out")
        multi = stats[stats["run_id"].isin(set(runs[runs["world_size"] > 1]["run_id"]))]
        counted = multi["collectives"][multi["collectives"] > 0] if "collectives" in multi else multi.iloc[:0]
        if len(counted):
            per_step = float(counted.median())
        elif algorithm in ONE_BUFFER:
            per_step = 1.0
        elif nbytes is not None:
            threshold = FUSION_BYTES.get(str(algorithm)) or float(_mode(runs["fusion_threshold_mb"]) or 64) * (1 << 20)
            per_step = float(max(1, math.ceil(nbytes / threshold)))
            notes.append(f"collectives per step not recorded: {per_step:g}, the gradient over the default "
                         "fusion buffer")
        else:
            per_step = 1.0
        hidden = multi["hidden_fraction"].dropna() if "hidden_fraction" in multi else pd.Series(dtype=float)
        if not len(hidden):
            notes.append("hidden share not measured (no multi-rank timeline): nothing hidden assumed")
        kind = str(_mode(runs["imbalance_kind"]) or "none")
        if kind not in ("none", "injected"):
            notes.append(f"imbalance {kind!r} is not modelled: predicted as if none")
        shapes[str(algorithm)] = {
            "model": model,
            "dataset": str(_mode(runs["dataset"])) if "dataset" in runs else "",
            "batch_size": int(_mode(runs["batch_size"])),
            "threads_per_worker": int(_mode(runs["threads_per_node"] // runs["workers_per_node"])),
            "workers_per_node": int(_mode(runs["workers_per_node"])),
            "workers_per_node_seen": sorted(int(w) for w in runs["workers_per_node"].unique()),
            "ranks": sorted(int(p) for p in runs["world_size"].unique()),
            "gradient_bytes": nbytes,
            "collectives_per_step": per_step,
            "hidden": float(hidden.mean()) if len(hidden) else 0.0,
            "update_seconds": float(steps["update"].median()) if len(steps) else 0.0,
            "sync_every": _resync_steps(runs),
            # eager-SGD's catch-up (lockstep: a fit of runs from before it existed, column null)
            "catch_up": catch_up(_mode(runs["eager_catch_up"]) if "eager_catch_up" in runs else None).name,
            "injected_ranks": int(_mode(runs["imbalance_ranks"]) or 0) if kind == "injected" else 0,
            "injected_delay": float(_mode(runs["imbalance_delay_ms"]) or 0.0) / 1e3 if kind == "injected" else 0.0,
            "steps": int(_mode(runs["steps"]) or 0),   # steps a run ran (rank 0)
            # start-up, evaluation and shut-down: what a run costs beside its steps
            "overhead_seconds": _overhead(runs),
            "notes": notes,
        }
    return shapes


def _resync_steps(runs) -> int:
    """eager-SGD's synchronous-round period in steps, as the runs ran it (``RunSpec.resync_period``:
    ``sync_every`` where set, else ``resync_epochs`` epochs; runs recorded before
    ``resync_epochs`` existed have it null and their period in ``sync_every``)."""
    from workloads.spec import RunSpec

    periods = []
    for _, row in runs.iterrows():
        every = int(row.get("sync_every") or 0)
        epochs = int(row.get("resync_epochs") or 0) if "resync_epochs" in row else 0
        per_epoch = int(row.get("steps") or 0) // max(1, int(row.get("epochs") or 1))
        periods.append(RunSpec(sync_every=every, resync_epochs=epochs).resync_period(per_epoch))
    return int(max(set(periods), key=periods.count)) if periods else 0
