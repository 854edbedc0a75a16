"""Read the results back as pandas DataFrames.

Filters are small expressions (``nodes>=2, algorithm=sync``) parsed into SQLAlchemy
conditions on typed columns: no user text is ever pasted into SQL.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import pandas as pd
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from .schema import Eval, Event, Round, Run, Step, StepStat, Study

RUN_COLUMNS = (
    "run_id", "study", "run_key", "status", "site", "nodes", "workers_per_node", "threads_per_node",
    "world_size", "batch_size", "global_batch_size", "algorithm", "model", "dataset", "epochs", "lr", "seed",
    "fusion_threshold_mb", "cycle_time_ms", "timeline", "device", "sync_every", "imbalance_kind",
    "imbalance_ranks", "imbalance_delay_ms",
    "throughput", "train_seconds", "wall_seconds", "steps", "final_top1", "final_loss", "job_id", "hosts",
    "run_dir", "error", "created_at", "started_at", "finished_at", "git_commit", "git_dirty", "versions",
    "environment", "config",
)
_OPS = {
    "=": lambda c, v: c == v, "==": lambda c, v: c == v, "!=": lambda c, v: c != v,
    ">=": lambda c, v: c >= v, "<=": lambda c, v: c <= v, ">": lambda c, v: c > v, "<": lambda c, v: c < v,
}
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|>=|<=|=|>|<)\s*([^=<>!\s].*?)\s*$")


class QueryError(ValueError):
    """A filter or column the database does not have."""


def _column(name: str):
    if name == "study":
        return Study.name
    if name == "run_id":
        return Run.id
    if name in RUN_COLUMNS and hasattr(Run, name):
        return getattr(Run, name)
    raise QueryError(f"unknown column {name!r}; known: {', '.join(RUN_COLUMNS)}")


def _value(text: str) -> Any:
    text = text.strip().strip("'\"")
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_where(where: str | Sequence[str] | None) -> list:
    """``"nodes>=2, algorithm=sync"`` (or a list of such) → SQLAlchemy conditions."""
    if not where:
        return []
    parts: list[str] = []
    for chunk in [where] if isinstance(where, str) else where:
        parts.extend(p for p in re.split(r",|\s+and\s+", chunk, flags=re.IGNORECASE) if p.strip())
    conditions = []
    for part in parts:
        m = _CLAUSE.match(part)
        if not m:
            raise QueryError(f"cannot read filter {part.strip()!r}; write e.g. nodes>=2 or algorithm=sync")
        name, op, raw = m.groups()
        conditions.append(_OPS[op](_column(name), _value(raw)))
    return conditions


def _ids(run_ids: Sequence[int]) -> list[int]:
    """Plain ints: a pandas column of numpy integers would not bind."""
    return [int(i) for i in run_ids]


def runs(engine: Engine, study: str | None = None, where: str | Sequence[str] | None = None,
         columns: Sequence[str] | None = None, run_ids: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per run, with every sweep axis and the headline measurements."""
    cols = list(columns or RUN_COLUMNS)
    selected = [_column(c).label(c) for c in cols]
    stmt = select(*selected).join(Study, Run.study_id == Study.id)
    if study:
        stmt = stmt.where(Study.name == study)
    if run_ids is not None:
        stmt = stmt.where(Run.id.in_(_ids(run_ids)))
    for cond in parse_where(where):
        stmt = stmt.where(cond)
    stmt = stmt.order_by(Study.name, Run.nodes, Run.workers_per_node, Run.threads_per_node, Run.batch_size, Run.id)
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(stmt).all(), columns=cols)


def steps(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per-rank, per-step timings of the given runs."""
    stmt = select(Step).where(Step.run_id.in_(_ids(run_ids))).order_by(Step.run_id, Step.rank, Step.step)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def events(engine: Engine, run_ids: Sequence[int], phases: Sequence[str] | None = None,
           steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """Timeline intervals (``timeline=true`` runs): per rank, step, tensor or fused buffer, phase.

    ``steps=(first, last)`` reads only those steps (inclusive), through the (run, step) index."""
    stmt = select(Event).where(Event.run_id.in_(_ids(run_ids)))
    if phases:
        stmt = stmt.where(Event.phase.in_(list(phases)))
    if steps is not None:
        stmt = stmt.where(Event.step >= int(steps[0]), Event.step <= int(steps[1]))
    with engine.connect() as conn:
        return pd.read_sql(stmt.order_by(Event.run_id, Event.rank, Event.t0), conn)


def step_stats(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per-step arrival skew, hidden allreduce fraction and update delay, derived from the timeline."""
    stmt = select(StepStat).where(StepStat.run_id.in_(_ids(run_ids))).order_by(StepStat.run_id, StepStat.step)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def rounds(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """eager-SGD rounds: initiator, fresh / stale / null contributions, latency."""
    stmt = select(Round).where(Round.run_id.in_(_ids(run_ids))).order_by(Round.run_id, Round.round)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def time_to_accuracy(engine: Engine, run_ids: Sequence[int], target: float) -> pd.DataFrame:
    """Per run: wall seconds and samples until the first eval at or above ``target`` top-1 (NaN if never)."""
    frame = evals(engine, run_ids)
    rows = []
    for run_id in _ids(run_ids):
        hit = frame[(frame["run_id"] == run_id) & (frame["top1"] >= target)]
        first = hit.iloc[0] if len(hit) else None
        rows.append({"run_id": run_id, "target": target,
                     "seconds": float(first["wall"]) if first is not None else float("nan"),
                     "epoch": int(first["epoch"]) if first is not None else None,
                     "samples": int(first["samples_seen"]) if first is not None else None})
    return pd.DataFrame(rows)


def evals(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    stmt = select(Eval).where(Eval.run_id.in_(_ids(run_ids))).order_by(Eval.run_id, Eval.epoch)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def status_counts(engine: Engine, study: str | None = None) -> pd.DataFrame:
    """Runs per study and state: the overview ``scalestudy status`` shows."""
    stmt = (select(Study.name.label("study"), Run.status, func.count(Run.id).label("runs"))
            .join(Study, Run.study_id == Study.id).group_by(Study.name, Run.status).order_by(Study.name))
    if study:
        stmt = stmt.where(Study.name == study)
    with Session(engine) as session:
        rows = session.execute(stmt).all()
    frame = pd.DataFrame(rows, columns=["study", "status", "runs"])
    if frame.empty:
        return pd.DataFrame(columns=["study", "pending", "running", "done", "failed", "total"])
    wide = frame.pivot_table(index="study", columns="status", values="runs", fill_value=0, aggfunc="sum")
    for state in ("pending", "running", "done", "failed"):
        if state not in wide:
            wide[state] = 0
    wide = wide[["pending", "running", "done", "failed"]].astype(int)
    wide["total"] = wide.sum(axis=1)
    return wide.reset_index()
