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
    stats = StepStats()
    stats.add(events)
    return stats.result()


class ArrivalSpread:
    """The first and last arrival over ranks of each (step, fused buffer), as three sorted numpy
    arrays: 24 bytes a pair. Why not a pandas frame on (step, tensor): its MultiIndex and the
    regrouping on every fold took ~0.5 KB a step, which grew with a run's length (ranks come one
    after another, so every pair waits for the last rank)."""

    _CODE_BITS = 20   # a buffer's name as a code under a step's bits in one int64 key

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}   # a buffer's name -> its code (a run has hundreds)
        self.keys = np.empty(0, np.int64)
        self.first = np.empty(0)
        self.last = np.empty(0)

    def add(self, step: np.ndarray, tensor: pd.Series, arrival: np.ndarray) -> None:
        """A chunk's arrivals merged in: every pair's extremes kept sorted by key (the chunk's
        pairs and those held, sorted together and reduced), so chunks fold in any order."""
        local, names = pd.factorize(tensor, use_na_sentinel=False)
        codes = np.array([self._codes.setdefault(n, len(self._codes)) for n in names], dtype=np.int64)
        if len(self._codes) >= 1 << self._CODE_BITS:
            raise ValueError(f"more than {1 << self._CODE_BITS} fused buffers' names in one run")
        keys = np.concatenate([self.keys, (step.astype(np.int64) << self._CODE_BITS) | codes[local]])
        first = np.concatenate([self.first, arrival])
        last = np.concatenate([self.last, arrival])
        order = np.argsort(keys, kind="stable")
        keys, first, last = keys[order], first[order], last[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        # fmin/fmax: a rank without an arrival (NaN) leaves the others' extremes, as pandas' min does
        self.keys, self.first, self.last = keys[starts], np.fmin.reduceat(first, starts), np.fmax.reduceat(last, starts)

    def per_step(self) -> tuple[pd.Series, pd.Series]:
        """The largest and the mean spread (last - first) over each step's buffers."""
        spread = pd.Series(self.last - self.first, index=self.keys >> self._CODE_BITS).groupby(level=0)
        return spread.max(), spread.mean()


class StepStats:
    """The per-step measures, folded over chunks of a run's events.

    Why: ingestion sees a run one rank at a time; folding each rank's events as they are parsed
    saves reading the whole timeline back (and holding it), and keeps memory to a few numbers
    per step whatever the ranks. A chunk must hold all the events of each (rank, step) in it, and
    a rank's previous update where its update delay is wanted: a rank's whole timeline, or a
    window of steps of every rank (whose first step is then partial and dropped by the caller).

    Every measure is a mean, max or min over ranks (or fused buffers) of what each rank's own
    events give, kept as sums, counts and extremes per step, so chunks fold in any order."""

    def __init__(self) -> None:
        self._steps: pd.Index = pd.Index([], dtype="int64")
        self._sums = pd.DataFrame(dtype="float64")      # step -> sums and counts of the means
        self._collectives = pd.Series(dtype="float64")  # step -> most fused collectives on a rank
        self._arrival = ArrivalSpread()
        self._any_allreduce = False

    def add(self, events: pd.DataFrame) -> None:
        if events.empty:
            return
        self._steps = self._steps.union(pd.Index(events["step"].unique()).astype("int64"))
        sums: dict[str, pd.Series] = {}
        coll = events[events["phase"] == "allreduce"]
        if not coll.empty:
            self._any_allreduce = True
            per_rank = coll.assign(d=coll["t1"] - coll["t0"]).groupby(["step", "rank"])["d"].sum()
            sums["allreduce_sum"] = per_rank.groupby("step").sum()
            sums["allreduce_n"] = per_rank.groupby("step").count()
            count = coll.groupby(["step", "rank"]).size().groupby("step").max().astype("float64")
            self._collectives = pd.concat([self._collectives, count]).groupby(level=0).max()
            named = coll[coll["tensor"].notna()]   # a buffer without a name is no group (as groupby drops it)
            self._arrival.add(named["step"].to_numpy(), named["tensor"], named["arrival"].to_numpy(dtype="float64"))

            backward = events[events["phase"] == "backward"][["rank", "step", "t0", "t1"]]
            joined = coll.merge(backward, on=["rank", "step"], suffixes=("", "_bwd"))
            if not joined.empty:
                hidden = _overlap(joined["t0"].to_numpy(), joined["t1"].to_numpy(),
                                  joined["t0_bwd"].to_numpy(), joined["t1_bwd"].to_numpy())
                joined = joined.assign(hidden=hidden, d=joined["t1"] - joined["t0"])
                per = joined.groupby(["step", "rank"])[["hidden", "d"]].sum()
                frac = per["hidden"] / per["d"].where(per["d"] > 0)
                sums["hidden_sum"] = frac.groupby("step").sum()
                sums["hidden_n"] = frac.groupby("step").count()

        updates = events[events["phase"] == "update"].sort_values(["rank", "step"], kind="stable")
        if not updates.empty:
            gap = updates["t0"] - updates.groupby("rank")["t1"].shift(1)
            gaps = updates.assign(gap=gap).groupby("step")["gap"]
            sums["update_sum"], sums["update_n"] = gaps.sum(), gaps.count()
        if sums:
            chunk = pd.DataFrame(sums).astype("float64")
            self._sums = chunk if self._sums.empty else self._sums.add(chunk, fill_value=0.0)

    def result(self) -> pd.DataFrame:
        if not len(self._steps):
            return pd.DataFrame(columns=STAT_COLUMNS)
        steps = pd.DataFrame(index=self._steps.sort_values().rename("step"))   # a chunk may be unordered

        def mean(name: str) -> pd.Series:
            if name + "_sum" not in self._sums:
                return pd.Series(np.nan, index=steps.index)
            n = self._sums[name + "_n"]
            return (self._sums[name + "_sum"] / n.where(n > 0)).reindex(steps.index)

        if self._any_allreduce:
            steps["allreduce_seconds"] = mean("allreduce")
            steps["collectives"] = self._collectives.reindex(steps.index)
            skew_max, skew_mean = self._arrival.per_step()
            steps["arrival_skew_max"] = skew_max.reindex(steps.index)
            steps["arrival_skew_mean"] = skew_mean.reindex(steps.index)
            steps["hidden_fraction"] = mean("hidden")
        steps["update_delay"] = mean("update")
        steps = steps.reset_index()
        for col in STAT_COLUMNS:
            if col not in steps:
                steps[col] = np.nan
        steps["collectives"] = steps["collectives"].fillna(0).astype(int)
        steps["allreduce_seconds"] = steps["allreduce_seconds"].fillna(0.0)
        return steps[STAT_COLUMNS]
