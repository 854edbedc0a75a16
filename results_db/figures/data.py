"""The tidy tables behind each figure, computed from SQL.

Each function returns exactly the numbers its figure draws (and ``scalestudy
figures`` writes them beside the image as CSV), so a figure can be checked, and
redrawn by other tools, without re-deriving anything. Repeats are runs that differ
only in ``seed`` or ``repeat``: they are averaged. A *configuration* is named by the sweep axes
that actually vary in the study, so labels stay short ("nodes=2, workers per node=4").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd
from sqlalchemy import Engine, case, func, select

from workloads.spec import FIELD

from .. import compare, query
from ..schema import Event, Round, Step

# The axes a configuration is made of (compare's, seed being the repeat), in the order labels name them.
_NAMED_FIRST = ("algorithm", "model", "dataset")
CONFIG_AXES = (*_NAMED_FIRST, *(a for a in compare.CONFIG_AXES if a not in _NAMED_FIRST))
SCALING_AXES = ("nodes", "workers_per_node", "threads_per_node", "batch_size")


def label_of(axis: str) -> str:
    """An axis as tables and figures name it: the registry's label, or a parameter's own name."""
    if axis in FIELD:
        return FIELD[axis].label
    head, _, key = axis.partition(".")
    return key if head in ("params", "metrics") and key else axis
STEP_PHASES = ("data", "forward", "delay", "backward", "comm_wait", "update")
TIMELINE_LANES = ("forward", "delay", "backward", "wait", "update")


class FigureDataError(ValueError):
    """The study cannot give what a figure or the user's choice needs."""


@dataclass(frozen=True)
class StudyRuns:
    """A study's finished runs and the configuration axes that vary across them."""

    study: str
    runs: pd.DataFrame   # one row per finished run (query.RUN_COLUMNS)
    varying: tuple[str, ...]   # the axes that vary and are not implied by the others (see independent_axes)

    def label(self, row, axes: Sequence[str] | None = None) -> str:
        axes = self.varying if axes is None else axes
        parts = [f"{label_of(a)}={_fmt(row[a])}" for a in axes]
        return ", ".join(parts) or "all runs"

    @property
    def ids(self) -> list[int]:
        return [int(i) for i in self.runs["run_id"]]

    def with_config(self, axes: Sequence[str] | None = None) -> pd.DataFrame:
        """The runs with a ``config`` label over ``axes`` (default: every varying axis)."""
        frame = self.runs.copy()
        frame["config"] = [self.label(row, axes) for _, row in frame.iterrows()]
        return frame


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def load_study(engine: Engine, study: str, where=None) -> StudyRuns:
    """The study's ``done`` runs; a clear error when there are none to draw."""
    every = query.runs(engine, study=study, columns=["run_id", "status"])
    if every.empty:
        known = sorted(set(query.status_counts(engine)["study"])) if not query.status_counts(engine).empty else []
        raise FigureDataError(f"study {study!r} has no runs in this database"
                              + (f"; studies here: {', '.join(known)}" if known else ""))
    runs = query.runs(engine, study=study, where=[*(_as_list(where)), "status=done"])
    if runs.empty:
        matching = query.runs(engine, study=study, where=_as_list(where), columns=["status"]) if where else every
        states = matching["status"].value_counts().to_dict()
        scope = f" matching {', '.join(_as_list(where))}" if where else ""
        raise FigureDataError(f"study {study!r} has no finished runs{scope} to draw (runs by state: {states or 'none'})")
    runs = compare.hashable(runs)
    axes = [*CONFIG_AXES[:len(_NAMED_FIRST)], *(a for a in compare.config_axes(runs) if a not in _NAMED_FIRST)]
    varying = [a for a in axes if runs[a].nunique(dropna=False) > 1]
    return StudyRuns(study, runs, independent_axes(runs, varying))


def independent_axes(runs: pd.DataFrame, varying: Sequence[str]) -> tuple[str, ...]:
    """Drop each axis that the other kept axes determine (e.g. threads_per_node swept
    in step with workers_per_node): naming it adds nothing to a label, and a plot
    against it would only repeat the plot against the axis it moves with. Later axes
    go first, so the more basic one (workers_per_node before threads) is kept."""
    kept = list(varying)
    for axis in reversed(list(varying)):
        others = [a for a in kept if a != axis]
        if others and (runs.groupby(others, dropna=False)[axis].nunique(dropna=False) <= 1).all():
            kept.remove(axis)
    return tuple(kept)


def _as_list(where) -> list[str]:
    if not where:
        return []
    return [where] if isinstance(where, str) else list(where)


def throughput_vs(sr: StudyRuns, axis: str) -> pd.DataFrame:
    """Samples/s against one scaling axis, one series per setting of the other varying axes.

    For ``nodes`` the ``ideal`` column is linear scaling from each series' smallest
    node count (the reference line of a strong-scaling plot of throughput)."""
    others = [a for a in sr.varying if a != axis]
    frame = sr.with_config(others).rename(columns={"config": "series"})
    stats = (frame.groupby(["series", axis], dropna=False)["throughput"]
             .agg(throughput_mean="mean", throughput_std="std", repeats="count").reset_index())
    stats["throughput_std"] = stats["throughput_std"].fillna(0.0)
    if axis == "nodes":
        # the smallest node count that has a measurement, taken as a whole row
        measured = stats.dropna(subset=["throughput_mean"]).sort_values("nodes")
        first = measured.drop_duplicates("series").set_index("series")
        stats["ideal"] = [first.loc[s, "throughput_mean"] * n / first.loc[s, "nodes"] if s in first.index
                          else float("nan") for s, n in zip(stats["series"], stats["nodes"])]
    return stats.sort_values(["series", axis], key=lambda col: col.map(str) if col.name == axis and
                             col.map(type).nunique() > 1 else col).reset_index(drop=True)


def step_time_breakdown(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Mean seconds per step in each phase, per configuration, pooled over every rank's
    step records of its runs (a longer repeat weighs more, as its steps do).

    Step 0 is left out: it pays for lazy initialisation (allocator, first
    collectives) that no later step does."""
    ids = sr.ids
    sums = [func.sum(func.coalesce(getattr(Step, p), 0.0)).label(p) for p in STEP_PHASES]
    stmt = (select(Step.run_id.label("run_id"), func.count(Step.id).label("records"), *sums)
            .where(Step.run_id.in_(ids), Step.step > 0).group_by(Step.run_id))
    with engine.connect() as conn:
        per_run = pd.DataFrame(conn.execute(stmt).all(), columns=["run_id", "records", *STEP_PHASES])
    if per_run.empty:
        return per_run
    per_run = per_run.astype({p: float for p in STEP_PHASES})
    frame = sr.with_config()[["run_id", "config"]].merge(per_run, on="run_id")
    pooled = frame.groupby("config", sort=False)[["records", *STEP_PHASES]].sum()
    out = pooled[list(STEP_PHASES)].div(pooled["records"], axis=0).reset_index()
    out["total"] = out[list(STEP_PHASES)].sum(axis=1)
    out["step_records"] = pooled["records"].to_numpy()
    return out


def step_stat_distribution(engine: Engine, sr: StudyRuns, column: str, scale: float = 1e3) -> pd.DataFrame:
    """Per configuration and step, one derived timeline measure (default in ms): the box plots' data."""
    ids = sr.ids
    stats = query.step_stats(engine, ids)
    if stats.empty or stats[column].notna().sum() == 0:
        return pd.DataFrame(columns=["config", "run_id", "step", "value"])
    frame = sr.with_config()[["run_id", "config"]].merge(stats[["run_id", "step", column]], on="run_id")
    frame = frame.dropna(subset=[column])
    frame["value"] = frame[column] * scale
    return frame[["config", "run_id", "step", "value"]].reset_index(drop=True)


def pick_timeline_run(engine: Engine, sr: StudyRuns, run_id: int | None = None) -> int | None:
    """``run_id`` if given (it must be in the study and have a timeline), else the best timeline run."""
    ids = sr.ids
    stmt = (select(Event.run_id, func.count(Event.id), func.sum(case((Event.phase == "allreduce", 1), else_=0)))
            .where(Event.run_id.in_(ids)).group_by(Event.run_id))
    with engine.connect() as conn:
        counts = {int(r): int(fused or 0) for r, _, fused in conn.execute(stmt).all()}
    if run_id is not None:
        if run_id not in ids:
            raise FigureDataError(f"--run-id {run_id}: not a finished run of study {sr.study!r}")
        if run_id not in counts:
            raise FigureDataError(f"--run-id {run_id}: the run has no timeline (sweep it with timeline=true)")
        return run_id
    candidates = sr.runs[sr.runs["run_id"].isin(list(counts))]
    if candidates.empty:
        return None
    # Prefer a run whose engine logged its collectives (the Horovod-style engine
    # does), then the most ranks: that is the picture the timeline is for.
    candidates = candidates.assign(fused=[counts[int(i)] > 0 for i in candidates["run_id"]])
    return int(candidates.sort_values(["fused", "world_size", "run_id"]).iloc[-1]["run_id"])


def timeline_window(engine: Engine, run_id: int, steps: int = 2) -> pd.DataFrame:
    """Every rank's events over ``steps`` consecutive steps from the middle of the run, ms from the window's start."""
    # Read only the window (a long run holds millions of events): its steps come from the index.
    with engine.connect() as conn:
        lo, hi = conn.execute(select(func.min(Event.step), func.max(Event.step)).where(Event.run_id == run_id)).one()
    if lo is None:
        return pd.DataFrame(columns=["rank", "step", "phase", "tensor", "start_ms", "end_ms", "bytes"])
    first = max(lo, (lo + hi) // 2 - steps // 2)
    window = query.events(engine, [run_id], steps=(first, first + steps - 1))
    t_ref = window["t0"].min()
    window["start_ms"] = (window["t0"] - t_ref) * 1e3
    window["end_ms"] = (window["t1"] - t_ref) * 1e3
    return window[["rank", "step", "phase", "tensor", "start_ms", "end_ms", "bytes"]].sort_values(
        ["rank", "start_ms"]).reset_index(drop=True)


def throughput_by_algorithm(sr: StudyRuns) -> pd.DataFrame:
    """Samples/s per algorithm within each setting of the other varying axes, with the
    speedup over ``sync`` from ``compare`` (NaN where a setting has no sync run)."""
    others = [a for a in sr.varying if a != "algorithm"]
    frame = sr.with_config(others).rename(columns={"config": "setting"})
    stats = (frame.groupby(["setting", "algorithm"], sort=False)["throughput"]
             .agg(throughput_mean="mean", throughput_std="std", repeats="count").reset_index())
    stats["throughput_std"] = stats["throughput_std"].fillna(0.0)
    try:
        speedups = compare.compare_runs(sr.runs, "algorithm=sync")
    except compare.CompareError:   # no sync run anywhere: bars without speedups
        stats["speedup_vs_sync"] = float("nan")
        return stats
    speedups = speedups.assign(setting=[sr.label(row, others) for _, row in speedups.iterrows()])
    return stats.merge(speedups[["setting", "algorithm", "speedup"]].rename(columns={"speedup": "speedup_vs_sync"}),
                       on=["setting", "algorithm"], how="left")


def accuracy_curves(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Top-1 after each epoch, per configuration: mean over repeats of accuracy and of wall time."""
    ids = sr.ids
    evals = query.evals(engine, ids)
    if evals.empty:
        return pd.DataFrame(columns=["config", "epoch", "top1", "wall", "repeats"])
    frame = sr.with_config()[["run_id", "config"]].merge(evals[["run_id", "epoch", "top1", "wall"]], on="run_id")
    return (frame.groupby(["config", "epoch"], sort=False)
            .agg(top1=("top1", "mean"), wall=("wall", "mean"), repeats=("run_id", "nunique")).reset_index())


def round_composition(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Partial-collective rounds: fresh, stale and null contributions per round, per
    configuration, pooled over every partial round of its runs (synchronous rounds are
    left out: everyone is fresh there by construction)."""
    ids = sr.ids
    stmt = (select(Round.run_id, func.count(Round.id), func.sum(Round.fresh), func.sum(Round.stale),
                   func.sum(Round.null), func.sum(Round.latency))
            .where(Round.run_id.in_(ids), Round.synchronous.is_(False)).group_by(Round.run_id))
    with engine.connect() as conn:
        per_run = pd.DataFrame(conn.execute(stmt).all(),
                               columns=["run_id", "rounds", "fresh", "stale", "null", "latency"])
    if per_run.empty:
        return per_run
    # PostgreSQL sums integers as NUMERIC/BIGINT: make every column a float like SQLite's
    per_run = per_run.astype({c: float for c in ("rounds", "fresh", "stale", "null", "latency")})
    frame = sr.with_config()[["run_id", "config"]].merge(per_run, on="run_id")
    pooled = frame.groupby("config", sort=False)[["rounds", "fresh", "stale", "null", "latency"]].sum()
    out = pooled[["fresh", "stale", "null"]].div(pooled["rounds"], axis=0)
    out["rounds"] = pooled["rounds"].astype(int)
    out["latency_ms"] = pooled["latency"] / pooled["rounds"] * 1e3
    return out.reset_index()


def metric_by_config(sr: StudyRuns, column: str) -> pd.DataFrame:
    """One reported metric, mean ± std over repeats, per configuration."""
    frame = sr.with_config()
    frame[column] = pd.to_numeric(frame[column], errors="coerce")
    frame = frame.dropna(subset=[column])
    if frame.empty:
        return pd.DataFrame()
    stats = (frame.groupby("config", sort=False)[column]
             .agg(value_mean="mean", value_std="std", repeats="count").reset_index())
    stats["value_std"] = stats["value_std"].fillna(0.0)
    return stats
