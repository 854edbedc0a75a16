"""A study's measurements in Extra-P's JSON Lines input, so that the field's standard
empirical modeller can be fitted on exactly what ``model fit`` is fitted on.

Extra-P (https://github.com/extra-p/extrap) reads one measurement per line: ``{"params":
{...}, "callpath": ..., "metric": ..., "value": ...}``; lines with the same callpath,
metric and parameters are repetitions. Here a run is one repetition: its rank 0's mean step
after ``warmup`` (the footing of a measured throughput and of the model's residuals,
``perf_model.measured``) under callpath ``ALGORITHM``, and its parts under
``ALGORITHM->compute`` (forward + backward), ``ALGORITHM->update`` and ``ALGORITHM->other``
(the rest: waiting, exposed communication, data). Parameter ``p`` is the rank count;
``b`` (batch per rank) and ``t`` (threads per rank) are added when the study varies them.
Open the file with ``extrap --json FILE`` or Extra-P's GUI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from sqlalchemy.engine import Engine

from .study import DEFAULT_WARMUP, StudyData, load_study

METRIC = "time"
PHASES = ("compute", "update", "other")


def _parameters(runs: pd.DataFrame) -> dict[str, pd.Series]:
    threads = runs["threads_per_node"] // runs["workers_per_node"]
    params = {"p": runs["world_size"]}
    if runs["batch_size"].nunique() > 1:
        params["b"] = runs["batch_size"]
    if threads.nunique() > 1:
        params["t"] = threads
    return params


def extrap_records(data: StudyData) -> list[dict]:
    """One record per run and callpath (the step and its three parts), in seconds."""
    runs = data.runs.set_index("run_id")
    params = _parameters(runs)
    rank0 = data.per_step[data.per_step["rank"] == 0].groupby("run_id")[["seconds", "update"]].mean()
    out = []
    for run_id in runs.index:
        if run_id not in data.step_seconds.index:
            continue
        at = {name: int(series[run_id]) for name, series in params.items()}
        algorithm = str(runs.loc[run_id, "algorithm"])
        step = float(data.step_seconds[run_id])
        compute = float(rank0.loc[run_id, "seconds"]) if run_id in rank0.index else 0.0
        update = float(rank0.loc[run_id, "update"]) if run_id in rank0.index else 0.0
        values = {algorithm: step, f"{algorithm}->compute": compute, f"{algorithm}->update": update,
                  f"{algorithm}->other": max(step - compute - update, 0.0)}
        out += [{"params": at, "callpath": cp, "metric": METRIC, "value": v} for cp, v in values.items()]
    return out


def write_extrap(engine: Engine, study: str, path: Path, warmup: int = DEFAULT_WARMUP) -> int:
    """Write ``study``'s measurements to ``path`` (JSON Lines); returns the runs written."""
    records = extrap_records(load_study(engine, study, warmup))
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return sum(1 for r in records if "->" not in r["callpath"])
