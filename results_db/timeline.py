"""Measures derived from a run's fine-grain timeline, per step.

- arrival skew: at each fused collective, the spread across ranks of the moment the
  rank had all of that buffer's gradients ready (the straggler measure);
- hidden fraction: the share of allreduce time that overlapped the rank's own
  backward pass (what overlap bought);
- update delay: time from the end of one weight update to the start of the next.

All times are on rank 0's clock (the workload aligned them at start-up).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

STAT_COLUMNS = ["step", "collectives", "allreduce_seconds", "arrival_skew_max", "arrival_skew_mean",
                "hidden_fraction", "update_delay"]


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0.0, None)


def step_stats(events: pd.DataFrame) -> pd.DataFrame:
    """``events``: rank, step, tensor, phase, t0, t1, arrival (one run). One row per step."""
    if events.empty:
        return pd.DataFrame(columns=STAT_COLUMNS)
    coll = events[events["phase"] == "allreduce"]
    steps = pd.DataFrame({"step": sorted(events["step"].unique())}).set_index("step")

    if not coll.empty:
        per_rank = coll.assign(d=coll["t1"] - coll["t0"]).groupby(["step", "rank"])["d"].sum()
        steps["allreduce_seconds"] = per_rank.groupby("step").mean()
        steps["collectives"] = coll.groupby(["step", "rank"]).size().groupby("step").max()
        arrival = coll.groupby(["step", "tensor"])["arrival"]
        spread = arrival.max() - arrival.min()
        steps["arrival_skew_max"] = spread.groupby("step").max()
        steps["arrival_skew_mean"] = spread.groupby("step").mean()

        backward = events[events["phase"] == "backward"][["rank", "step", "t0", "t1"]]
        joined = coll.merge(backward, on=["rank", "step"], suffixes=("", "_bwd"))
        if not joined.empty:
            hidden = _overlap(joined["t0"].to_numpy(), joined["t1"].to_numpy(),
                              joined["t0_bwd"].to_numpy(), joined["t1_bwd"].to_numpy())
            joined = joined.assign(hidden=hidden, d=joined["t1"] - joined["t0"])
            sums = joined.groupby(["step", "rank"])[["hidden", "d"]].sum()
            frac = (sums["hidden"] / sums["d"].where(sums["d"] > 0)).groupby("step").mean()
            steps["hidden_fraction"] = frac

    updates = events[events["phase"] == "update"].sort_values(["rank", "step"])
    if not updates.empty:
        gap = updates["t0"] - updates.groupby("rank")["t1"].shift(1)
        steps["update_delay"] = updates.assign(gap=gap).groupby("step")["gap"].mean()

    steps = steps.reset_index()
    for col in STAT_COLUMNS:
        if col not in steps:
            steps[col] = np.nan
    steps["collectives"] = steps["collectives"].fillna(0).astype(int)
    steps["allreduce_seconds"] = steps["allreduce_seconds"].fillna(0.0)
    return steps[STAT_COLUMNS]
