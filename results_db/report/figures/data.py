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
from sqlalchemy import Engine, func, select

from workloads.run_folder import STEP_PHASES
from workloads.spec import FIELD

from results_db.analysis import compare, configuration
from results_db.store import metric_facts, query
from results_db.store.schema import Round, Step
from .grid import Grid, build_grid

# The axes a configuration is made of (analysis/configuration.py), in the order labels name them.
_NAMED_FIRST = ("algorithm", "model", "dataset")
CONFIG_AXES = (*_NAMED_FIRST, *(a for a in configuration.CONFIG_AXES if a not in _NAMED_FIRST))
SCALING_AXES = ("nodes", "workers_per_node", "threads_per_node", "batch_size")
RESOURCE_AXES = ("nodes", "workers_per_node", "threads_per_node")   # more of them should mean more samples/s


def label_of(axis: str) -> str:
    """An axis as tables and figures name it: the registry's label, or a parameter's own name."""
    if axis in FIELD:
        return FIELD[axis].label
    head, _, key = axis.partition(".")
    return key if head in ("params", "metrics") and key else axis


def setting(axis: str, value) -> str:
    """``axis=value`` in words, a unit moved behind the value: "injected delay=100 ms", "nodes=2"."""
    name = label_of(axis)
    if name.endswith(")") and " (" in name:
        name, unit = name[:-1].rsplit(" (", 1)
        return f"{name}={_fmt(value)} {unit}"
    return f"{name}={_fmt(value)}"


TIMELINE_LANES = ("forward", "delay", "backward", "wait", "update")
# every phase in words, shared by the step-time breakdown and the timeline (the timeline's
# "wait" is the breakdown's comm_wait: the training thread waiting for the collectives)
PHASE_LABELS = {"data": "data loading", "forward": "forward pass", "delay": "injected delay",
                "backward": "backward pass", "comm_wait": "waiting for communication",
                "wait": "waiting for communication", "update": "weight update", "allreduce": "fused allreduce",
                "negotiate": "negotiation (which tensors are ready)", "grad_ready": "gradient ready"}


class FigureDataError(ValueError):
    """The study cannot give what a figure or the user's choice needs."""


@dataclass(frozen=True)
class StudyRuns:
    """A study's finished runs and the configuration axes that vary across them."""

    study: str
    runs: pd.DataFrame   # one row per finished run (query.RUN_COLUMNS)
    varying: tuple[str, ...]   # the axes that vary and are not implied by the others (see independent_axes)
    planned: pd.DataFrame | None = None   # every run of the selection, whatever its state
    grid: Grid | None = None              # holes in the sweep's grid, axes that move together

    def label(self, row, axes: Sequence[str] | None = None) -> str:
        axes = self.varying if axes is None else axes
        parts = [setting(a, row[a]) for a in axes]
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


def used(frame: pd.DataFrame, run_ids) -> pd.DataFrame:
    """Tag a figure's table with the runs it rests on (the caption counts them; CSV leaves it out)."""
    frame.attrs["run_ids"] = sorted({int(i) for i in run_ids})
    return frame


def load_study(engine: Engine, study: str, where=None) -> StudyRuns:
    """The study's ``done`` runs; a clear error when there are none to draw.

    The varying axes come from every run the study planned (any state), not only the
    finished ones: holes left by failed runs must not make one axis look determined by
    another, or a figure against nodes would silently compare along workers per node."""
    every = query.runs(engine, study=study, where=_as_list(where) or None)
    if every.empty and not where:
        counts = query.status_counts(engine)
        known = sorted(set(counts["study"])) if not counts.empty else []
        raise FigureDataError(f"study {study!r} has no runs in this database"
                              + (f"; studies here: {', '.join(known)}" if known else ""))
    if every.empty and query.runs(engine, study=study, columns=["run_id"]).empty:
        return load_study(engine, study)   # the study's own error, whatever the filter
    runs = every[every["status"] == "done"].reset_index(drop=True)
    if runs.empty:
        states = every["status"].value_counts().to_dict()
        scope = f" matching {', '.join(_as_list(where))}" if where else ""
        raise FigureDataError(f"study {study!r} has no finished runs{scope} to draw (runs by state: {states or 'none'})")
    # one conversion for both, so a parameter reads the same in the planned and the finished runs
    # (hashable() turns a mixed-type parameter into JSON text only where the types are mixed)
    planned = configuration.hashable(every)
    runs = planned[planned["status"] == "done"].reset_index(drop=True)
    axes = [*CONFIG_AXES[:len(_NAMED_FIRST)], *(a for a in configuration.config_axes(planned) if a not in _NAMED_FIRST)]
    varying = [a for a in axes if a in planned and planned[a].nunique(dropna=False) > 1]
    kept = independent_axes(planned, varying)
    grid = build_grid(planned, runs, kept, coupled_axes(planned, varying, kept))
    return StudyRuns(study, runs, kept, planned, grid)


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


def coupled_axes(runs: pd.DataFrame, varying: Sequence[str], kept: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Each dropped axis with the kept axes that determine it (one, where one does), so that
    figures can say what else changes along their axis. threads_per_node equal to
    workers_per_node in every run is the default (one thread per worker), not news."""
    out = []
    for axis in (a for a in varying if a not in kept):
        if axis == "threads_per_node" and (runs["threads_per_node"] == runs["workers_per_node"]).all():
            continue
        single = [k for k in kept if (runs.groupby(k, dropna=False)[axis].nunique(dropna=False) <= 1).all()]
        out.append((axis, (single[0],) if single else tuple(kept)))
    return out


def _as_list(where) -> list[str]:
    if not where:
        return []
    return [where] if isinstance(where, str) else list(where)


def throughput_vs(sr: StudyRuns, axis: str) -> pd.DataFrame:
    """Samples/s against one scaling axis, one series per setting of the other varying axes.

    For the resource axes (nodes, workers per node, threads per node) the ``ideal`` column
    is linear scaling from each series' smallest measured value (the reference line of a
    strong-scaling plot of throughput)."""
    others = [a for a in sr.varying if a != axis]
    frame = sr.with_config(others).rename(columns={"config": "series"})
    stats = (frame.groupby(["series", axis], dropna=False)["throughput"]
             .agg(throughput_mean="mean", throughput_std="std", repeats="count").reset_index())
    stats["throughput_std"] = stats["throughput_std"].fillna(0.0)
    if axis in RESOURCE_AXES:
        # the smallest value that has a measurement, taken as a whole row
        measured = stats.dropna(subset=["throughput_mean"]).sort_values(axis)
        first = measured.drop_duplicates("series").set_index("series")
        stats["ideal"] = [first.loc[s, "throughput_mean"] * n / first.loc[s, axis] if s in first.index
                          else float("nan") for s, n in zip(stats["series"], stats[axis])]
    out = stats.sort_values(["series", axis], key=lambda col: col.map(str) if col.name == axis and
                            col.map(type).nunique() > 1 else col).reset_index(drop=True)
    return used(out, frame.loc[frame["throughput"].notna(), "run_id"])


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
    out["runs"] = frame.groupby("config", sort=False)["run_id"].nunique().to_numpy()
    return used(out, frame["run_id"])


def step_stat_distribution(engine: Engine, sr: StudyRuns, column: str, scale: float = 1e3) -> pd.DataFrame:
    """Per configuration and step, one derived timeline measure (default in ms): the box plots' data."""
    ids = sr.ids
    stats = query.step_stats(engine, ids)
    if stats.empty or stats[column].notna().sum() == 0:
        return pd.DataFrame(columns=["config", "run_id", "step", "value"])
    frame = sr.with_config()[["run_id", "config"]].merge(stats[["run_id", "step", column]], on="run_id")
    frame = frame.dropna(subset=[column])
    frame["value"] = frame[column] * scale
    return used(frame[["config", "run_id", "step", "value"]].reset_index(drop=True), frame["run_id"])


def collective_skew(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Arrival skew at every fused collective (ms): the spread across ranks of the moment
    each rank had all of that buffer's gradients ready, one value per (run, step, buffer),
    per configuration, ordered by node count (the straggler picture as ranks grow)."""
    per = query.collective_skews(engine, sr.ids)
    per = per[per["ranks"] > 1]
    if per.empty:
        return pd.DataFrame(columns=["config", "nodes", "run_id", "step", "collective", "value"])
    runs = sr.with_config()[["run_id", "config", "nodes"]]
    frame = runs.merge(per, on="run_id").sort_values(["nodes", "config", "run_id", "step"], kind="stable")
    frame["value"] = frame["skew"].astype(float) * 1e3
    out = frame[["config", "nodes", "run_id", "step", "collective", "value"]].reset_index(drop=True)
    return used(out, out["run_id"])


def pick_timeline_run(engine: Engine, sr: StudyRuns, run_id: int | None = None) -> int | None:
    """``run_id`` if given (it must be in the study and have a timeline), else the best timeline run."""
    ids = sr.ids
    counts = {r: fused for r, (_, fused) in query.timeline_counts(engine, ids).items()}
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


def timeline_steps(engine: Engine, run_id: int) -> tuple[int | None, int | None]:
    """The first and last step the run's timeline recorded."""
    return query.timeline_step_range(engine, run_id)


def timeline_window(engine: Engine, run_id: int, steps: int = 2) -> pd.DataFrame:
    """Every rank's events over ``steps`` consecutive steps from the middle of the run, ms from the window's start."""
    # Read only the window (a long run holds millions of events): its steps come from the index.
    lo, hi = timeline_steps(engine, run_id)
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
    ids = frame.loc[frame["throughput"].notna(), "run_id"]
    try:
        speedups = compare.compare_runs(sr.runs, "algorithm=sync")
    except compare.CompareError:   # no sync run anywhere: bars without speedups
        stats["speedup_vs_sync"] = float("nan")
        return used(stats, ids)
    speedups = speedups.assign(setting=[sr.label(row, others) for _, row in speedups.iterrows()])
    out = stats.merge(speedups[["setting", "algorithm", "speedup"]].rename(columns={"speedup": "speedup_vs_sync"}),
                      on=["setting", "algorithm"], how="left")
    return used(out, ids)


def accuracy_curves(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Top-1 after each epoch, per configuration: mean over repeats of accuracy and of wall time.
    ``epochs_done`` counts epochs completed (the workload numbers epochs from 0), so a
    one-epoch run sits at 1, not at an epoch "0" that reads as before training."""
    ids = sr.ids
    evals = query.evals(engine, ids)
    evals = evals[evals["top1"].notna()]   # a regression's and an emulated run's evaluations have no top-1
    if evals.empty:
        return pd.DataFrame(columns=["config", "epoch", "epochs_done", "top1", "wall", "repeats"])
    frame = sr.with_config()[["run_id", "config"]].merge(evals[["run_id", "epoch", "top1", "wall"]], on="run_id")
    out = (frame.groupby(["config", "epoch"], sort=False)
           .agg(top1=("top1", "mean"), wall=("wall", "mean"), repeats=("run_id", "nunique")).reset_index())
    out.insert(2, "epochs_done", out["epoch"] + 1)
    return used(out, frame["run_id"])


def loss_curves(engine: Engine, sr: StudyRuns) -> pd.DataFrame:
    """Validation loss after each epoch, per configuration, for a study whose runs score no top-1
    (a regression: its loss is the MSE): mean over repeats of loss and of wall time. Empty for a
    study with a top-1 (its accuracy curves say more) or without losses."""
    evals = query.evals(engine, sr.ids)
    columns = ["config", "epoch", "epochs_done", "loss", "wall", "repeats"]
    if evals.empty or evals["top1"].notna().any() or evals["loss"].notna().sum() == 0:
        return pd.DataFrame(columns=columns)
    frame = sr.with_config()[["run_id", "config"]].merge(evals[["run_id", "epoch", "loss", "wall"]], on="run_id")
    out = (frame.groupby(["config", "epoch"], sort=False)
           .agg(loss=("loss", "mean"), wall=("wall", "mean"), repeats=("run_id", "nunique")).reset_index())
    out.insert(2, "epochs_done", out["epoch"] + 1)
    return used(out[columns], frame["run_id"])


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
    out["runs"] = frame.groupby("config", sort=False)["run_id"].nunique()
    return used(out.reset_index(), frame["run_id"])


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
    try:   # which way it is better, where its config declares it (metric_facts): said on the axis
        # the runs' own configs (with_config's "config" is the figure's label, not what a run declared)
        runs = sr.runs[sr.runs["run_id"].isin(frame["run_id"])]
        stats.attrs["better"] = metric_facts.measure_of(column, runs["config"] if "config" in runs else ()).better
    except metric_facts.MetricDirectionError:
        pass
    return used(stats, frame["run_id"])
