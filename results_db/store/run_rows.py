"""Runs read from SQL as plain rows (column names + tuples), grouped and aggregated in plain
Python: what ``query.runs`` and ``compare.aggregate`` hand to pandas, and what the reading
commands print without it.

Why not pandas here: importing it costs 0.4-1.1 s on a login node, more than ``query`` on
100,000 runs takes in SQL (benchmarks/RESULTS.md, issue 14). Reading commands that print a
table, CSV or JSON never import it; the DataFrame API builds its frames from these rows.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sqlalchemy import JSON, Engine, Float, Integer, and_, cast, func, literal, select

from workloads.spec import BUILTIN_ONLY_FIELDS

from .columns import JSON_FIELDS, RUN_COLUMNS, QueryError, check_column
from .schema import Run, Study
from .where import JsonFilter, column_of, parse_where

ATTEMPTS = ("latest", "all")
# mean_low / mean_high: the mean's t-interval over the group's runs; median_low / median_high: the
# median's distribution-free interval, from 6 runs (results_db/stats/confidence.py says what each assumes)
AGGREGATES = ("count", "mean", "std", "min", "max", "median", "sum", "mean_low", "mean_high", "median_low",
              "median_high")


@dataclass
class Rows:
    """A table: ``columns`` names, ``rows`` tuples of the same length."""

    columns: list[str]
    rows: list[tuple]

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def select(self, names: Sequence[str]) -> "Rows":
        idx = [self.columns.index(n) for n in names]
        return Rows(list(names), [tuple(r[i] for i in idx) for r in self.rows])

    def __len__(self) -> int:
        return len(self.rows)


class AggregateError(QueryError):
    """A grouping or aggregate the data cannot answer."""


def plain_ids(run_ids: Sequence[int]) -> list[int]:
    """Plain ints: numpy integers would not bind."""
    return [int(i) for i in run_ids]


def json_keys(values: Sequence[Any]) -> list[str]:
    """Every key of a JSON column's values, sorted."""
    return sorted({k for v in values if isinstance(v, dict) for k in v})


def expand_json(table: Rows, field: str, keys: Sequence[str] | None = None) -> Rows:
    """``table`` with a ``field.KEY`` column for each key of the JSON column ``field`` (all
    keys present, or ``keys``); a run without the key gets None."""
    if field not in table.columns:
        return table
    i = table.columns.index(field)
    values = [r[i] if isinstance(r[i], dict) else {} for r in table.rows]
    wanted = list(keys) if keys is not None else json_keys(values)
    names = [f"{field}.{k}" for k in wanted]
    keep = [j for j, c in enumerate(table.columns) if c not in names]   # a re-expansion replaces
    return Rows([table.columns[j] for j in keep] + names,
                [tuple(r[j] for j in keep) + tuple(v.get(k) for k in wanted) for r, v in zip(table.rows, values)])


def _selection(stmt, study: str | None, where, run_ids: Sequence[int] | None, attempts: str):
    """``stmt`` (a select over runs) restricted to a study, runs or their latest attempts and
    the SQL conditions of ``where``; and the JSON filters left to apply to the rows."""
    if attempts not in ATTEMPTS:
        raise QueryError(f"attempts={attempts!r}: expected one of {', '.join(ATTEMPTS)}")
    stmt = stmt.select_from(Run).join(Study, Run.study_id == Study.id)
    if study:
        stmt = stmt.where(Study.name == study)
    if run_ids is not None:
        stmt = stmt.where(Run.id.in_(plain_ids(run_ids)))
    elif attempts == "latest":
        stmt = stmt.where(Run.latest.is_(True))
    conditions = parse_where(where)
    for cond in conditions:
        if not isinstance(cond, JsonFilter):
            stmt = stmt.where(cond)
    return stmt, [c for c in conditions if isinstance(c, JsonFilter)]


def run_rows(engine: Engine, study: str | None = None, where: str | Sequence[str] | None = None,
             columns: Sequence[str] | None = None, run_ids: Sequence[int] | None = None,
             attempts: str = "latest") -> Rows:
    """One row per run: ``query.runs``'s selection, as plain rows (its docstring says what
    ``columns``, ``run_ids`` and ``attempts`` select)."""
    cols = [check_column(c) for c in (columns or RUN_COLUMNS)]
    dotted = [c for c in cols if "." in c]
    base = list(dict.fromkeys([c for c in cols if "." not in c] + [c.split(".")[0] for c in dotted]))
    stmt, json_filters = _selection(select(*(column_of(c).label(c) for c in base)), study, where, run_ids, attempts)
    extra = [f for f in dict.fromkeys(j.field for j in json_filters) if f not in base]
    if extra:   # read the JSON columns the filters need, filter, then drop what was not asked for
        stmt = stmt.add_columns(*(getattr(Run, f).label(f"__{f}") for f in extra))
    stmt = stmt.order_by(Study.name, Run.nodes, Run.workers_per_node, Run.threads_per_node, Run.batch_size,
                         Run.run_key, Run.attempt, Run.id)
    with engine.connect() as conn:
        rows = [tuple(r) for r in conn.execute(stmt)]
    if json_filters:
        names = base + [f"__{f}" for f in extra]
        where_is = {j.field: names.index(j.field if j.field in base else f"__{j.field}") for j in json_filters}
        rows = [r[:len(base)] for r in rows if all(j.matches(r[where_is[j.field]]) for j in json_filters)]
    table = Rows(base, rows)
    for field in JSON_FIELDS:
        if field in table.columns:
            keys = [c.split(".", 1)[1] for c in dotted if c.startswith(field + ".")] if columns else None
            table = expand_json(table, field, keys)
    return table if not columns else table.select(cols)


def with_json_keys(engine: Engine, table: Rows, study=None, where=None, run_ids=None,
                   attempts: str = "latest") -> Rows:
    """``table`` (from ``run_rows``) with a column per free parameter and reported metric these
    runs have (a key no run has a value for is left out)."""
    if "run_id" not in table.columns:
        return table
    extra = run_rows(engine, study=study, where=where, run_ids=run_ids, columns=["run_id", "params", "metrics"],
                     attempts=attempts)
    by_id: dict[int, dict[str, Any]] = {}
    for run_id, params, metrics in extra.rows:
        values = {f"params.{k}": v for k, v in (params or {}).items()}
        values.update({f"metrics.{k}": v for k, v in (metrics or {}).items()})
        by_id[run_id] = values
    present = {k for values in by_id.values() for k, v in values.items() if not missing(v)}
    keys = [f"{f}.{k}" for f in JSON_FIELDS for k in sorted({k.split(".", 1)[1] for k in present
                                                             if k.startswith(f + ".")})]
    keys = [k for k in keys if k not in table.columns]
    if not keys:
        return table
    i = table.columns.index("run_id")
    return Rows(table.columns + keys,
                [r + tuple(by_id.get(r[i], {}).get(k) for k in keys) for r in table.rows])


def blank_not_applicable(engine: Engine, table: Rows) -> Rows:
    """``table`` with the fields that describe our training loop (``BUILTIN_ONLY_FIELDS``:
    algorithm, model, learning rate, ...) blanked in the rows of command workloads. Those runs
    ran the user's own program and hold only the defaults there: a table must not say that
    such a run trained ``algorithm=sync``. Needs the ``run_id`` column; for display only
    (``query``'s and ``status``'s tables and files), never for grouping."""
    blanked = [i for i, c in enumerate(table.columns) if c in BUILTIN_ONLY_FIELDS]
    if not blanked or "run_id" not in table.columns or not table.rows:
        return table
    at = table.columns.index("run_id")
    with engine.connect() as conn:
        commands = set(conn.scalars(select(Run.id).where(Run.id.in_(plain_ids(r[at] for r in table.rows)),
                                                         Run.workload_kind == "command")))
    if not commands:
        return table
    return Rows(table.columns, [tuple(None if i in blanked and r[at] in commands else v for i, v in enumerate(r))
                                for r in table.rows])


def with_run_seed(engine: Engine, table: Rows) -> Rows:
    """``table`` with its ``seed`` cells the seed each run actually used (``RunSpec.run_seed``:
    the swept seed + 1000 x the repeat, where repeats vary the seed), sorted by run id: a
    summary that folds ``seed`` into "in every row: seed=0" hid that its repeats differed
    (issue 62). For display only, as ``blank_not_applicable``."""
    if "seed" not in table.columns or "run_id" not in table.columns or not table.rows:
        return table
    from workloads.spec import REPEAT_SEED_STRIDE

    at, seed_at = table.columns.index("run_id"), table.columns.index("seed")
    with engine.connect() as conn:
        specs = dict(conn.execute(select(Run.id, Run.spec).where(Run.id.in_(plain_ids(r[at] for r in table.rows)))).all())

    def used(row: tuple):
        spec = specs.get(row[at]) or {}
        if row[seed_at] is None or not spec.get("seed_per_repeat"):
            return row[seed_at]
        return int(row[seed_at]) + REPEAT_SEED_STRIDE * int(spec.get("repeat") or 0)

    rows = [tuple(used(r) if i == seed_at else v for i, v in enumerate(r)) for r in table.rows]
    return Rows(table.columns, sorted(rows, key=lambda r: (r[at] is None, r[at] or 0)))


def recent_run_ids(engine: Engine, study: str, limit: int) -> list[int]:
    """The ``limit`` runs of ``study`` registered last (latest attempts), for a short listing."""
    stmt = (select(Run.id).join(Study, Run.study_id == Study.id)
            .where(Study.name == study, Run.latest.is_(True)).order_by(Run.id.desc()).limit(limit))
    with engine.connect() as conn:
        return [int(i) for (i,) in conn.execute(stmt)]


# -- grouping ---------------------------------------------------------------------------------

def value_kind(value) -> str:
    """A value's type as run identity sees it (grouping must not merge 1, 1.0 and True)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, float) and value.is_integer():
        return "float-int"  # 1.0 beside 1: different run keys, equal to pandas
    return type(value).__name__


def hashable_values(name: str, values: Sequence[Any]) -> list | None:
    """A column's values made such that grouping does not merge what run_key tells apart, or
    None when they already are: lists and mappings (a command, the params) as canonical JSON
    text, and a free parameter whose values mix types (1, 1.0, True, "1" — which Python and
    pandas call equal) as the JSON text of each value. A parameter of one type keeps its values
    (numbers stay numbers). The one rule for ``group_rows`` and ``compare``'s frames."""
    if any(isinstance(v, (list, dict, tuple)) for v in values):
        return [json.dumps(list(v) if isinstance(v, tuple) else v, sort_keys=True)
                if isinstance(v, (list, dict, tuple)) else v for v in values]
    if name.startswith("params.") and len({value_kind(v) for v in values if not missing(v)}) > 1:
        return [None if missing(v) else json.dumps(v) for v in values]
    return None


def hashable_columns(table: Rows) -> Rows:
    """``table`` with every column through ``hashable_values``."""
    columns = [list(c) for c in zip(*table.rows)] if table.rows else [[] for _ in table.columns]
    for j, name in enumerate(table.columns):
        changed = hashable_values(name, columns[j])
        if changed is not None:
            columns[j] = changed
    return Rows(list(table.columns), list(zip(*columns)) if table.rows else [])


def missing(v) -> bool:
    """A value never measured: None, a float NaN, or numpy's / pandas' missing values (NaN, NaT,
    NA) without importing either. The one test of missing for grouping and for printing."""
    if v is None:
        return True
    if isinstance(v, float):
        return math.isnan(v)
    if isinstance(v, (int, str, list, dict, tuple)):
        return False
    try:
        return type(v).__name__ in ("NaTType", "NAType") or bool(v != v)
    except (TypeError, ValueError):
        return False


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not missing(v)


def _sort_key(value) -> tuple:
    """Group keys in pandas' order: missing last, numbers by value, others as text."""
    if missing(value):
        return (2, 0, "")
    if isinstance(value, (int, float)):
        return (0, value, "")
    return (1, 0, str(value))


def _std(xs: list[float]) -> float:
    """Sample standard deviation (ddof 1); NaN for fewer than two values or a non-finite one,
    as pandas gives (``statistics.stdev`` raises on an infinity)."""
    if len(xs) < 2 or not all(math.isfinite(x) for x in xs):
        return float("nan")
    return statistics.stdev(xs)


_REDUCE: dict[str, Callable[[list], Any]] = {
    "mean": lambda xs: statistics.fmean(xs) if xs else float("nan"),
    "std": _std,
    "min": lambda xs: min(xs) if xs else float("nan"),
    "max": lambda xs: max(xs) if xs else float("nan"),
    "median": lambda xs: statistics.median(xs) if xs else float("nan"),
    "sum": lambda xs: sum(xs),
    "mean_low": lambda xs: _mean_interval(xs)[0],
    "mean_high": lambda xs: _mean_interval(xs)[1],
    "median_low": lambda xs: _median_interval(xs)[0],
    "median_high": lambda xs: _median_interval(xs)[1],
}


def _mean_interval(xs: list) -> tuple[float, float]:
    from results_db.stats.confidence import mean_interval   # numpy and scipy only when asked for

    return mean_interval(xs)


def _median_interval(xs: list) -> tuple[float, float]:
    from results_db.stats.confidence import median_interval

    return median_interval(xs)


def check_aggregates(metrics: dict[str, Sequence[str]]) -> None:
    for agg in (a for aggs in metrics.values() for a in aggs):
        if agg not in AGGREGATES:
            raise AggregateError(f"unknown aggregate {agg!r}; known: {', '.join(AGGREGATES)}")


def group_rows(table: Rows, group_by: Sequence[str], metrics: dict[str, Sequence[str]]) -> Rows:
    """One row per distinct ``group_by`` key (missing values are a group of their own, as with
    pandas' ``dropna=False``), sorted by it; a ``COLUMN_AGG`` column per aggregate. ``count``
    counts the values present; the others skip missing values and need numbers."""
    check_aggregates(metrics)
    table = hashable_columns(table)
    for column, aggs in metrics.items():
        values = [v for v in table.column(column) if not missing(v)]
        if any(a != "count" for a in aggs) and not all(_number(v) for v in values):
            raise AggregateError(f"--agg {column}: not a numeric column (count is the only aggregate it takes)")
    keys_at = [table.columns.index(g) for g in group_by]
    metric_at = {c: table.columns.index(c) for c in metrics}
    groups: dict[tuple, list[tuple]] = {}
    for r in table.rows:
        # a NaN never equals itself: all missing values are one key
        key = tuple(None if missing(r[i]) else r[i] for i in keys_at)
        groups.setdefault(key, []).append(r)
    out = []
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        rows = groups[key]
        cells = list(key)
        for column, aggs in metrics.items():
            present = [r[metric_at[column]] for r in rows if not missing(r[metric_at[column]])]
            for agg in aggs:
                cells.append(len(present) if agg == "count" else _REDUCE[agg](present))
        out.append(tuple(cells))
    return Rows([*group_by, *(f"{c}_{a}" for c, aggs in metrics.items() for a in aggs)], out)


def aggregate_rows(engine: Engine, group_by: Sequence[str], metrics: dict[str, Sequence[str]] | None = None,
                   study: str | None = None, where=None, attempts: str = "latest") -> Rows:
    """``compare.aggregate`` as plain rows: the runs selected, grouped, aggregated. Grouped by
    the database (GROUP BY) when every axis is a typed column and every metric a numeric one,
    so that 100,000 runs are not read into Python; else (free parameters, JSON filters,
    median) by ``group_rows``. The two agree (``tests/results_db/test_run_rows.py``)."""
    metrics = metrics or {"throughput": ("count", "mean", "std")}
    if not group_by:
        raise AggregateError("give the axes to group by, e.g. --group-by nodes,algorithm")
    check_aggregates(metrics)
    for name in [*group_by, *metrics]:
        check_column(name)
    if _sql_can_group(group_by, metrics, where):
        return _sql_group(engine, group_by, metrics, study, where, attempts)
    table = run_rows(engine, study=study, where=where, columns=list(dict.fromkeys([*group_by, *metrics])),
                     attempts=attempts)
    return group_rows(table, group_by, metrics)


_SQL_AGGREGATES = {"count", "mean", "std", "min", "max", "sum"}


def _typed_column(name: str):
    """The SQL column of a plain, typed (not JSON) run column, else None."""
    if "." in name:
        return None
    column = column_of(name)
    return None if isinstance(column.type, JSON) else column


def _sql_can_group(group_by, metrics, where) -> bool:
    if any(_typed_column(g) is None for g in group_by):
        return False
    for column, aggs in metrics.items():
        typed = _typed_column(column)
        if typed is None or not set(aggs) <= _SQL_AGGREGATES:
            return False
        if any(a != "count" for a in aggs) and not isinstance(typed.type, (Integer, Float)):
            return False   # group_rows says why in its own words
    return not any(isinstance(c, JsonFilter) for c in parse_where(where))


def _sql_group(engine: Engine, group_by, metrics, study, where, attempts) -> Rows:
    """GROUP BY in the database. A float NaN (PostgreSQL keeps it; SQLite stores NULL) counts as
    missing, as in ``group_rows``. The standard deviation comes from the sums of x and x² of
    the same pass; where that formula would cancel (the spread under 1e-4 of the mean: the
    relative error grows as (mean / std)² x 1e-16) a second pass sums squared deviations from
    each group's mean instead."""
    k = len(group_by)
    def no_nan(column):   # PostgreSQL keeps NaN (a group of its own, a mean of NaN); SQLite stores NULL
        return func.nullif(column, literal(float("nan"), Float)) if isinstance(column.type, Float) else column

    keys = [no_nan(_typed_column(g)).label(f"g{i}") for i, g in enumerate(group_by)]
    values = [no_nan(_typed_column(column)).label(f"m{j}") for j, column in enumerate(metrics)]
    runs, _ = _selection(select(*keys, *values), study, where, None, attempts)
    runs = runs.subquery()
    g = [runs.c[f"g{i}"] for i in range(k)]
    m = [runs.c[f"m{j}"] for j in range(len(metrics))]
    numeric = [isinstance(_typed_column(c).type, (Integer, Float)) for c in metrics]
    # a column asked only for its count (text, times, flags too) gets only COUNT: PostgreSQL has
    # no AVG of text
    stats_of = [("n", func.count), ("mean", func.avg), ("min", func.min), ("max", func.max), ("sum", func.sum),
                ("sq", lambda x: func.sum(cast(x, Float) * cast(x, Float)))]
    wanted = [stats_of if numeric[j] and any(a != "count" for a in aggs) else stats_of[:1]
              for j, aggs in enumerate(metrics.values())]
    first = select(*g, *(f(x).label(f"{name}{j}") for j, x in enumerate(m) for name, f in wanted[j])).group_by(*g)
    with engine.connect() as conn:
        groups = [tuple(r) for r in conn.execute(first)]
        stats = {}
        for r in groups:
            at, row = k, []
            for names in wanted:
                row.append(dict(zip((n for n, _ in names), r[at:at + len(names)])))
                at += len(names)
            stats[r[:k]] = row
        wants_std = [j for j, aggs in enumerate(metrics.values()) if "std" in aggs]
        for s in (s for row in stats.values() for j, s in enumerate(row) if j in wants_std):
            if s["n"] < 2:
                s["ss"] = None
            elif not math.isfinite(float(s["sum"])):
                s["ss"] = None   # an infinity: NaN, as group_rows and pandas give
            elif s["min"] == s["max"]:
                s["ss"] = 0.0   # no spread: nothing to cancel
            else:
                s["ss"] = float(s["sq"]) - float(s["sum"]) ** 2 / s["n"]
                s["cancels"] = s["ss"] / (s["n"] - 1) < 1e-8 * float(s["mean"]) ** 2
        if any(s.get("cancels") for row in stats.values() for j, s in enumerate(row) if j in wants_std):
            means = first.subquery()
            on = and_(*(runs.c[f"g{i}"].is_not_distinct_from(means.c[f"g{i}"]) for i in range(k)))
            mg = [means.c[f"g{i}"] for i in range(k)]
            second = (select(*mg, *(func.sum((m[j] - means.c[f"mean{j}"]) * (m[j] - means.c[f"mean{j}"]))
                                    for j in wants_std))
                      .select_from(runs.join(means, on)).group_by(*mg))
            for r in conn.execute(second):
                row = stats.get(tuple(r[:k]))
                for i, j in enumerate(wants_std):
                    if row is not None and row[j].get("cancels"):
                        row[j]["ss"] = None if r[k + i] is None else float(r[k + i])
    out = []
    for key in sorted(stats, key=lambda key: tuple(_sort_key(v) for v in key)):
        cells = list(key)
        for s, aggs in zip(stats[key], metrics.values()):
            for agg in aggs:
                if agg == "count":
                    cells.append(int(s["n"]))
                elif s["n"] == 0:
                    cells.append(0 if agg == "sum" else float("nan"))
                elif agg == "std":
                    cells.append(math.sqrt(max(s["ss"], 0.0) / (s["n"] - 1)) if s.get("ss") is not None
                                 else float("nan"))
                else:
                    cells.append(float(s["mean"]) if agg == "mean" else s[agg])
        out.append(tuple(cells))
    return Rows([*group_by, *(f"{c}_{a}" for c, aggs in metrics.items() for a in aggs)], out)


def check_study(engine: Engine, study: str | None) -> None:
    """A study this database does not hold is an error naming the ones it does (a query of a
    misspelt study would otherwise print an empty table and succeed)."""
    if study is None:
        return
    with engine.connect() as conn:
        names = sorted(conn.execute(select(Study.name)).scalars())
    if study not in names:
        raise QueryError(f"--study {study!r}: no such study in this database"
                         + (f"; studies here: {', '.join(names)}" if names else " (it holds no study yet)"))
