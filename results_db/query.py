"""Read the results back as pandas DataFrames.

Filters are small expressions (``nodes>=2, algorithm=sync``, ``params.hidden=128``)
parsed into SQLAlchemy conditions on typed columns: no user text is ever pasted into
SQL, and a value that does not fit its column (``nodes>=two``) is an error, not an
empty table. Conditions are joined by commas or ``and``; every one must hold.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Sequence

import pandas as pd
from sqlalchemy import JSON, Boolean, DateTime, Engine, Float, Integer, select
from sqlalchemy.orm import Session

from .schema import Eval, Event, Round, Run, Step, StepStat, Study, runs_table

from .columns import JSON_FIELDS, RUN_COLUMNS, QueryError, check_column  # noqa: F401 - re-exported
_OPS = {
    "=": lambda c, v: c == v, "==": lambda c, v: c == v, "!=": lambda c, v: c != v,
    ">=": lambda c, v: c >= v, "<=": lambda c, v: c <= v, ">": lambda c, v: c > v, "<": lambda c, v: c < v,
}
_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?"
_CLAUSE = re.compile(rf"^\s*({_NAME})\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


def _column(name: str):
    if name == "study":
        return Study.name
    if name == "run_id":
        return Run.id
    check_column(name)
    return getattr(Run, name)


def _literal(text: str) -> Any:
    """A value whose type the column does not fix (a params. or metrics. key)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _typed(name: str, column, text: str) -> Any:
    raw = text.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1]
    if not raw:
        raise QueryError(f"cannot read filter on {name}: no value given")
    kind = getattr(column, "type", None)
    try:
        if isinstance(kind, Boolean):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if isinstance(kind, Integer):
            return int(raw)
        if isinstance(kind, Float):
            return float(raw)
        if isinstance(kind, DateTime):
            return datetime.fromisoformat(raw)
    except ValueError:
        what = {Boolean: "true or false", Integer: "an integer", Float: "a number", DateTime: "an ISO date"}
        expected = next(v for k, v in what.items() if isinstance(kind, k))
        raise QueryError(f"filter on {name}: {raw!r} is not {expected}") from None
    return raw


class JsonFilter:
    """A condition on one key of ``params`` or ``metrics``, applied to the rows SQL returned.

    JSON values carry their own types, which SQL's casts do not respect alike on every
    database (SQLite reads 'adam' as 0.0; PostgreSQL fails the whole query): here a number
    compares only with numbers, a boolean with booleans, text with text, and a run without
    the key matches nothing but ``!=``."""

    def __init__(self, name: str, op: str, text: str) -> None:
        self.name, self.op = name, op
        self.field, _, self.key = name.partition(".")
        self.value = _literal(text.strip().strip("'\""))

    def _kind(self, v: Any) -> str | None:
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "number"
        if isinstance(v, str):
            return "text"
        return None

    def matches(self, values: Any) -> bool:
        present = isinstance(values, dict) and self.key in values
        v = values.get(self.key) if present else None
        if self.op == "!=":
            return not present or self._kind(v) != self._kind(self.value) or v != self.value
        if not present or self._kind(v) is None or self._kind(v) != self._kind(self.value):
            return False
        return bool(_OPS[self.op](v, self.value))


def parse_where(where: str | Sequence[str] | None) -> list:
    """``"nodes>=2, algorithm=sync"`` (or a list of such) → conditions, all of which must hold:
    SQLAlchemy conditions on columns, and ``JsonFilter``s on ``params.``/``metrics.`` keys."""
    if not where:
        return []
    parts: list[str] = []
    for chunk in [where] if isinstance(where, str) else where:
        if re.search(r"\s+or\s+|\|\|", chunk, flags=re.IGNORECASE):
            raise QueryError(f"cannot read filter {chunk.strip()!r}: conditions are joined with ',' or 'and' "
                             "(all must hold); 'or' is not supported — run one query per alternative")
        parts.extend(p for p in re.split(r",|\s+and\s+", chunk, flags=re.IGNORECASE) if p.strip())
    conditions = []
    for part in parts:
        m = _CLAUSE.match(part)
        if not m:
            raise QueryError(f"cannot read filter {part.strip()!r}; write e.g. nodes>=2, algorithm=sync or "
                             "params.hidden=128")
        name, op, raw = m.groups()
        if not raw.strip().strip("'\""):
            raise QueryError(f"cannot read filter {part.strip()!r}: no value given")
        if re.search(r"(==|!=|>=|<=|=|>|<)", raw):
            raise QueryError(f"cannot read filter {part.strip()!r}: one comparison per condition")
        check_column(name)
        if name.partition(".")[0] in JSON_FIELDS and "." in name:
            conditions.append(JsonFilter(name, op, raw))
            continue
        column = _column(name)
        value = _typed(name, column, raw)
        if isinstance(getattr(column, "type", None), JSON):
            raise QueryError(f"filter on {name}: a JSON column; filter on one of its keys, e.g. {name}.NAME=VALUE")
        conditions.append(_OPS[op](column, value))
    return conditions


def _tuples(rows) -> list[tuple]:
    """SQLAlchemy rows as plain tuples for pandas: given ``Row`` objects, pandas probes each for
    attributes (``hasattr``), and every miss raises and catches an exception inside SQLAlchemy —
    2 s for 100,000 runs of two columns, against 0.1 s for the tuples."""
    return [tuple(r) for r in rows]


def _ids(run_ids: Sequence[int]) -> list[int]:
    """Plain ints: a pandas column of numpy integers would not bind."""
    return [int(i) for i in run_ids]


def expand_json(frame: pd.DataFrame, field: str, keys: Sequence[str] | None = None) -> pd.DataFrame:
    """Add a ``field.KEY`` column for each key of a JSON column (all keys present, or ``keys``)."""
    if field not in frame.columns:
        return frame
    values = [v if isinstance(v, dict) else {} for v in frame[field]]
    wanted = keys if keys is not None else sorted({k for v in values for k in v})
    out = frame.copy()
    for key in wanted:
        out[f"{field}.{key}"] = [v.get(key) for v in values]
    return out


ATTEMPTS = ("latest", "all")


def runs(engine: Engine, study: str | None = None, where: str | Sequence[str] | None = None,
         columns: Sequence[str] | None = None, run_ids: Sequence[int] | None = None,
         attempts: str = "latest") -> pd.DataFrame:
    """One row per run, with every sweep axis and the headline measurements.

    ``columns`` may name ``params.NAME`` and ``metrics.NAME``; without ``columns`` every
    run column comes back, ``params.*`` and ``metrics.*`` expanded beside ``params`` and ``metrics``.
    ``attempts="all"`` also returns the earlier attempts at each run (a rerun, a retried crash,
    a lost node), ``attempt`` telling them apart; by default only each run's latest, as
    every comparison and figure reads them. Runs named by ``run_ids`` come back whatever their attempt."""
    if attempts not in ATTEMPTS:
        raise QueryError(f"attempts={attempts!r}: expected one of {', '.join(ATTEMPTS)}")
    cols = [check_column(c) for c in (columns or RUN_COLUMNS)]
    dotted = [c for c in cols if "." in c]
    base = list(dict.fromkeys([c for c in cols if "." not in c] + [c.split(".")[0] for c in dotted]))
    selected = [_column(c).label(c) for c in base]
    stmt = select(*selected).join(Study, Run.study_id == Study.id)
    if study:
        stmt = stmt.where(Study.name == study)
    if run_ids is not None:
        stmt = stmt.where(Run.id.in_(_ids(run_ids)))
    elif attempts == "latest":
        stmt = stmt.where(Run.latest.is_(True))
    conditions = parse_where(where)
    json_filters = [c for c in conditions if isinstance(c, JsonFilter)]
    for cond in conditions:
        if not isinstance(cond, JsonFilter):
            stmt = stmt.where(cond)
    if json_filters:  # read the JSON columns the filters need, filter, then drop what was not asked for
        extra = [f for f in dict.fromkeys(j.field for j in json_filters) if f not in base]
        stmt = stmt.add_columns(*(getattr(Run, f).label(f"__{f}") for f in extra))
    stmt = stmt.order_by(Study.name, Run.nodes, Run.workers_per_node, Run.threads_per_node, Run.batch_size,
                         Run.run_key, Run.attempt, Run.id)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    if json_filters:
        names = base + [f"__{f}" for f in extra]
        rows = [r for r in rows if all(j.matches(r[names.index(j.field if j.field in base else f"__{j.field}")])
                                       for j in json_filters)]
        rows = [r[:len(base)] for r in rows]
    frame = pd.DataFrame(_tuples(rows), columns=base)
    for field in JSON_FIELDS:
        if field in frame.columns:
            keys = [c.split(".", 1)[1] for c in dotted if c.startswith(field + ".")] if columns else None
            frame = expand_json(frame, field, keys)
    return frame if not columns else frame[cols]


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


def _int_or_none(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def time_to_accuracy(engine: Engine, run_ids: Sequence[int], target: float) -> pd.DataFrame:
    """Per run: wall seconds and samples until the first eval at or above ``target`` top-1 (NaN if never)."""
    frame = evals(engine, run_ids)
    rows = []
    for run_id in _ids(run_ids):
        hit = frame[(frame["run_id"] == run_id) & (frame["top1"] >= target)]
        first = hit.iloc[0] if len(hit) else None
        rows.append({"run_id": run_id, "target": target,
                     "seconds": float(first["wall"]) if first is not None else float("nan"),
                     "epoch": _int_or_none(first["epoch"]) if first is not None else None,
                     # a user's script reporting evaluations may not count the samples seen
                     "samples": _int_or_none(first["samples_seen"]) if first is not None else None})
    return pd.DataFrame(rows, columns=["run_id", "target", "seconds", "epoch", "samples"])


def evals(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    stmt = select(Eval).where(Eval.run_id.in_(_ids(run_ids))).order_by(Eval.run_id, Eval.epoch)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def recent_run_ids(engine: Engine, study: str, limit: int) -> list[int]:
    """The ``limit`` runs of ``study`` registered last (latest attempts), for a short listing."""
    stmt = (select(Run.id).join(Study, Run.study_id == Study.id)
            .where(Study.name == study, Run.latest.is_(True)).order_by(Run.id.desc()).limit(limit))
    with Session(engine) as session:
        return list(session.scalars(stmt))


def status_counts(engine: Engine, study: str | None = None) -> pd.DataFrame:
    """Runs per study and state (of each run's latest attempt): the overview ``scalestudy status``
    shows; ``earlier_attempts`` counts the attempts kept beside them (reruns, retries)."""
    from .runs import status_table

    columns, rows = status_table(engine, study)
    return pd.DataFrame(rows, columns=columns)
