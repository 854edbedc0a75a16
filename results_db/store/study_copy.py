"""A study's rows copied from one database into another, whole: its runs (every attempt), and every
row that belongs to them (steps, evaluations, rounds, timelines, summaries) or to the study (model
fits), and the runs' event files. What ``scalestudy artifact`` packs a study with, and what
importing an artifact into a team's database does.

Nothing is lost: every table with a ``run_id`` is found in the schema (not listed by hand), so a
table added later is copied too; ``copy_study`` counts what it read and what it wrote and refuses
to finish on a difference. A run's identity is its study and ``run_key``: a target that already
holds the study is a clash, refused before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from sqlalchemy import Engine, Table, func, insert, select

from .schema import Base, ModelFit, Study, runs_table

BATCH = 5000


class StudyCopyError(ValueError):
    """A study that cannot be copied as asked (missing, or a clash in the target): one line."""


def run_tables() -> list[Table]:
    """Every table whose rows belong to a run (a ``run_id`` referencing ``runs.id``), in the
    schema's order: the steps, events, step statistics, rounds, evaluations, rank summaries, and
    whatever is added later."""
    out = []
    for table in Base.metadata.sorted_tables:
        column = table.columns.get("run_id")
        if column is not None and any(fk.column.table.name == "runs" for fk in column.foreign_keys):
            out.append(table)
    return out


@dataclass
class CopyReport:
    study: str
    run_ids: dict[int, int] = field(default_factory=dict)      # source run id -> target run id
    rows: dict[str, int] = field(default_factory=dict)         # table -> rows copied
    fits: int = 0


def _chunks(values: list[int], size: int = 900) -> Iterable[list[int]]:
    for i in range(0, len(values), size):
        yield values[i:i + size]


def study_id(engine: Engine, study: str) -> int | None:
    with engine.connect() as conn:
        return conn.execute(select(Study.id).where(Study.name == study)).scalar()


def study_run_ids(engine: Engine, study: str) -> list[int]:
    """Every run of ``study`` (every attempt), by id: what a copy of the study brings."""
    with engine.connect() as conn:
        return [int(i) for i in conn.execute(select(runs_table.c.id).join(Study, runs_table.c.study_id == Study.id)
                                             .where(Study.name == study)).scalars()]


def copy_study(source: Engine, study: str, target: Engine, keep_ids: bool = False,
               rewrite_run: Any = None) -> CopyReport:
    """Copy ``study`` from ``source`` into ``target`` (migrated to the same schema) in one
    transaction. ``keep_ids``: the runs keep their ids (a fresh database: an artifact's run 12 is
    the study's run 12); else the target numbers them and every reference follows.
    ``rewrite_run(row) -> row``: a last change to each run row (an artifact drops accounts)."""
    sid = study_id(source, study)
    if sid is None:
        raise StudyCopyError(f"study {study!r} is not in the source database")
    if study_id(target, study) is not None:
        raise StudyCopyError(f"study {study!r} is already in the target database: its runs would clash with "
                             "the ones there (a run is its study and run_key); nothing was written")
    report = CopyReport(study)
    with source.connect() as src, target.begin() as dst:
        new_sid = dst.execute(insert(Study).values(name=study).returning(Study.id)).scalar_one() if \
            target.dialect.insert_returning else None
        if new_sid is None:
            dst.execute(insert(Study).values(name=study))
            new_sid = dst.execute(select(Study.id).where(Study.name == study)).scalar_one()
        runs = [dict(r._mapping) for r in src.execute(select(runs_table).where(runs_table.c.study_id == sid)
                                                       .order_by(runs_table.c.id))]
        for row in runs:
            old = row.pop("id")
            row["study_id"] = new_sid
            if rewrite_run is not None:
                row = rewrite_run(row)
            if keep_ids:
                dst.execute(insert(runs_table).values(id=old, **row))
                report.run_ids[old] = old
            else:
                report.run_ids[old] = dst.execute(insert(runs_table).values(**row).returning(runs_table.c.id)).scalar_one()
        report.rows["runs"] = len(runs)
        ids = sorted(report.run_ids)
        for table in run_tables():
            copied = 0
            for chunk in _chunks(ids):
                for batch in _batches(src.execute(select(table).where(table.c.run_id.in_(chunk))
                                                  .order_by(table.c.id))):
                    rows = []
                    for r in batch:
                        r = dict(r._mapping)
                        r.pop("id", None)
                        r["run_id"] = report.run_ids[r["run_id"]]
                        rows.append(r)
                    dst.execute(insert(table), rows)
                    copied += len(rows)
            report.rows[table.name] = copied
        fits = [dict(r._mapping) for r in src.execute(select(ModelFit.__table__).where(ModelFit.study_id == sid))]
        for fit in fits:
            fit.pop("id")
            fit["study_id"] = new_sid
            fit["run_ids"] = [report.run_ids.get(int(i), int(i)) for i in fit.get("run_ids") or []]
            dst.execute(insert(ModelFit.__table__).values(**fit))
        report.fits = len(fits)
        _check_counts(dst, report, new_sid)
    return report


def _batches(result, size: int = BATCH):
    while True:
        rows = result.fetchmany(size)
        if not rows:
            return
        yield rows


def _check_counts(dst, report: CopyReport, new_sid: int) -> None:
    """Every row read was written: counted again in the target before the transaction commits."""
    ids = list(report.run_ids.values())
    have = {"runs": dst.execute(select(func.count()).select_from(runs_table)
                                .where(runs_table.c.study_id == new_sid)).scalar_one()}
    for table in run_tables():
        have[table.name] = sum(dst.execute(select(func.count()).select_from(table)
                                           .where(table.c.run_id.in_(chunk))).scalar_one() for chunk in _chunks(ids))
    lost = {name: (n, have.get(name)) for name, n in report.rows.items() if have.get(name) != n}
    if lost:
        raise StudyCopyError(f"copying study {report.study!r} lost rows (read, written): {lost}")
