"""The fit's sampling uncertainty: refit the terms on the study's measurements resampled.

Each replicate draws, within every run, its measured steps with replacement (the same steps
for all of its ranks, so a step's slowest rank stays that step's) and its collectives with
replacement, recomputes the per-run compute points from the drawn steps, and refits
compute, allreduce and straggler. The spread of a prediction over the replicates
is the band ``model predict`` prints: how far the finite sample of steps moves the fit. It
is not the model's form error (a term that is wrong at scale); the validation in
``benchmarks/RESULTS.md`` measures that.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from .fit import FitError, fit_allreduce, fit_compute_any, fit_straggler
from .study import StudyData, compute_points

DEFAULT_REPLICATES = 100


def _within_runs(frame: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    if frame.empty:
        return frame
    parts = [run.iloc[rng.integers(0, len(run), len(run))] for _, run in frame.groupby("run_id")]
    return pd.concat(parts, ignore_index=True)


def _steps_within_runs(per_step: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    parts = []
    for run_id, run in per_step.groupby("run_id"):
        steps = run["step"].unique()
        drawn = rng.choice(steps, size=len(steps), replace=True)
        by_step = {s: g for s, g in run.groupby("step")}
        # renumber so that a step drawn twice stays two steps (the straggler check groups by step)
        parts += [by_step[s].assign(step=i) for i, s in enumerate(drawn)]
    return pd.concat(parts, ignore_index=True) if parts else per_step


def resample(data: StudyData, rng: np.random.Generator) -> StudyData:
    info = data.runs.set_index("run_id")
    per_step = _steps_within_runs(data.per_step, rng)
    return replace(data, per_step=per_step,
                   compute=compute_points(per_step, info["batch_size"],
                                          info["threads_per_node"] // info["workers_per_node"]),
                   allreduce=_within_runs(data.allreduce, rng))


FITTERS = {
    "compute": lambda d: fit_compute_any(d.compute),
    "allreduce": lambda d: fit_allreduce(d.allreduce),
    "straggler": lambda d: fit_straggler(d.per_step),
}   # not overlap: predictions take each algorithm's measured hidden share (perf_model.shape)


def bootstrap_params(data: StudyData, terms: set[str], replicates: int = DEFAULT_REPLICATES,
                     seed: int = 0) -> list[dict[str, Any]]:
    """``replicates`` refits of the ``terms`` fitted on the whole study: one ``{term: params}``
    per replicate (a term a replicate cannot fit is left out of it)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(replicates):
        drawn = resample(data, rng)
        params = {}
        for name in terms & FITTERS.keys():
            try:
                term = FITTERS[name](drawn)
            except FitError:
                continue
            params[name] = term.params
            if term.distribution:
                params[f"{name}_distribution"] = list(term.distribution)
        out.append(params)
    return out
