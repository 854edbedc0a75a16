"""Read the results back as pandas DataFrames.

Runs are selected by ``results_db.store.run_rows`` (plain rows, no pandas: what the reading
commands print) and filtered by ``results_db.store.where`` (``nodes>=2, algorithm=sync``,
``params.hidden=128``); this module turns them into frames.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd
from sqlalchemy import Engine, select

from . import run_rows
from .columns import JSON_FIELDS, RUN_COLUMNS, QueryError, check_column  # noqa: F401 - re-exported
from .run_rows import ATTEMPTS, check_study, plain_ids, recent_run_ids  # noqa: F401 - re-exported
from .schema import Eval, Event, RankSummary, Round, Run, Step, StepStat
from .where import JsonFilter, parse_where  # noqa: F401 - re-exported


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


def runs(engine: Engine, study: str | None = None, where: str | Sequence[str] | None = None,
         columns: Sequence[str] | None = None, run_ids: Sequence[int] | None = None,
         attempts: str = "latest") -> pd.DataFrame:
    """One row per run, with every sweep axis and the headline measurements.

    ``columns`` may name ``params.NAME`` and ``metrics.NAME``; without ``columns`` every
    run column comes back, ``params.*`` and ``metrics.*`` expanded beside ``params`` and ``metrics``.
    ``attempts="all"`` also returns the earlier attempts at each run (a rerun, a retried crash,
    a lost node), ``attempt`` telling them apart; by default only each run's latest, as
    every comparison and figure reads them. Runs named by ``run_ids`` come back whatever their attempt."""
    table = run_rows.run_rows(engine, study=study, where=where, columns=columns, run_ids=run_ids,
                              attempts=attempts)
    return frame_of(table)


def frame_of(table: run_rows.Rows) -> pd.DataFrame:
    """A DataFrame of plain rows (tuples: pandas probes SQLAlchemy ``Row`` objects for
    attributes, and every miss raised inside SQLAlchemy — 2 s for 100,000 runs)."""
    return pd.DataFrame(table.rows, columns=table.columns)


def steps(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per-rank, per-step timings of the given runs."""
    stmt = select(Step).where(Step.run_id.in_(plain_ids(run_ids))).order_by(Step.run_id, Step.rank, Step.step)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


EVENT_COLUMNS = ["run_id", "rank", "step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival"]


def event_files_of(engine: Engine, run_ids: Sequence[int]) -> dict[int, str]:
    """Run id -> its timeline's event file (``results_db.store.event_files``), for the runs that keep one."""
    stmt = select(Run.id, Run.events_file).where(Run.id.in_(plain_ids(run_ids)), Run.events_file.is_not(None))
    with engine.connect() as conn:
        return {int(r): str(name) for r, name in conn.execute(stmt)}


def events(engine: Engine, run_ids: Sequence[int], phases: Sequence[str] | None = None,
           steps: tuple[int, int] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Timeline intervals (``timeline=true`` runs): per rank, step, tensor or fused buffer, phase.

    ``steps=(first, last)`` reads only those steps (inclusive): through the (run, step) index of
    the events table, or the step statistics of a run's event file; ``columns`` only those
    (``run_id`` always). A run's events come from its file where it has one, else from the table."""
    from . import event_files

    ids = plain_ids(run_ids)
    wanted = [c for c in (columns or EVENT_COLUMNS) if c != "run_id"]
    for c in wanted:
        if c not in EVENT_COLUMNS:
            raise QueryError(f"events: no column {c!r}; the columns are {', '.join(EVENT_COLUMNS)}")
    files = event_files_of(engine, ids)
    frames = []
    in_table = [i for i in ids if i not in files]
    if in_table:
        stmt = select(Event.run_id, *[getattr(Event, c) for c in wanted]).where(Event.run_id.in_(in_table))
        if phases:
            stmt = stmt.where(Event.phase.in_(list(phases)))
        if steps is not None:
            stmt = stmt.where(Event.step >= int(steps[0]), Event.step <= int(steps[1]))
        with engine.connect() as conn:
            frames.append(pd.read_sql(stmt, conn))
    for run_id, name in sorted(files.items()):
        frame = event_files.read(event_files.path_of(engine, run_id, name), wanted, phases, steps)
        frame.insert(0, "run_id", run_id)
        frames.append(frame)
    frames = [f for f in frames if len(f)] or frames[:1]
    if not frames:
        return pd.DataFrame(columns=["run_id", *wanted])
    out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    order = [c for c in ("run_id", "rank", "t0") if c in out.columns]
    return out.sort_values(order, kind="stable", ignore_index=True)


def timeline_sizes(engine: Engine, run_ids: Sequence[int]) -> dict[int, int]:
    """Run id -> number of timeline events, for the runs that have any (``timeline=true``)."""
    from sqlalchemy import func

    from . import event_files

    files = event_files_of(engine, run_ids)
    stmt = (select(Event.run_id, func.count()).where(Event.run_id.in_([i for i in plain_ids(run_ids) if i not in files]))
            .group_by(Event.run_id).order_by(Event.run_id))
    with engine.connect() as conn:
        sizes = {int(r): int(n) for r, n in conn.execute(stmt)}
    for run_id, name in files.items():
        sizes[run_id] = event_files.row_count(event_files.path_of(engine, run_id, name))
    return dict(sorted(sizes.items()))


def timeline_step_range(engine: Engine, run_id: int) -> tuple[int | None, int | None]:
    """The first and last step the run's timeline recorded (from the (run, step) index or the file's statistics)."""
    from sqlalchemy import func

    from . import event_files

    name = event_files_of(engine, [run_id]).get(int(run_id))
    if name is not None:
        return event_files.step_range(event_files.path_of(engine, run_id, name))
    with engine.connect() as conn:
        lo, hi = conn.execute(select(func.min(Event.step), func.max(Event.step)).where(Event.run_id == run_id)).one()
    return lo, hi


def collective_skews(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per run, step and fused collective: the spread of the ranks' arrival times (seconds) and how
    many ranks took part; the table's runs aggregated in SQL, the files' in pandas."""
    from sqlalchemy import func

    from . import event_files

    columns = ["run_id", "step", "collective", "skew", "ranks"]
    files = event_files_of(engine, run_ids)
    in_table = [i for i in plain_ids(run_ids) if i not in files]
    spread = (func.max(Event.arrival) - func.min(Event.arrival)).label("skew")
    stmt = (select(Event.run_id, Event.step, Event.tensor, spread, func.count(Event.id).label("ranks"))
            .where(Event.run_id.in_(in_table), Event.phase == "allreduce", Event.arrival.is_not(None))
            .group_by(Event.run_id, Event.step, Event.tensor))
    with engine.connect() as conn:
        frames = [pd.DataFrame(conn.execute(stmt).all(), columns=columns)]
    for run_id, name in sorted(files.items()):
        ev = event_files.read(event_files.path_of(engine, run_id, name), ["step", "tensor", "arrival"], ["allreduce"])
        ev = ev.dropna(subset=["arrival"])
        if ev.empty:
            continue
        per = ev.groupby(["step", "tensor"], sort=True)["arrival"].agg(["max", "min", "size"]).reset_index()
        frames.append(pd.DataFrame({"run_id": run_id, "step": per["step"], "collective": per["tensor"],
                                    "skew": per["max"] - per["min"], "ranks": per["size"]}))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def timeline_counts(engine: Engine, run_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Run id -> (timeline events, of which fused allreduces), for the runs that have any."""
    from sqlalchemy import case, func

    from . import event_files

    files = event_files_of(engine, run_ids)
    in_table = [i for i in plain_ids(run_ids) if i not in files]
    stmt = (select(Event.run_id, func.count(Event.id), func.sum(case((Event.phase == "allreduce", 1), else_=0)))
            .where(Event.run_id.in_(in_table)).group_by(Event.run_id))
    with engine.connect() as conn:
        counts = {int(r): (int(n), int(fused or 0)) for r, n, fused in conn.execute(stmt).all()}
    for run_id, name in files.items():
        opened = event_files.EventFile(event_files.path_of(engine, run_id, name))
        try:
            counts[run_id] = (opened.rows, len(opened.read(["phase"], ["allreduce"])))
        finally:
            opened.close()
    return counts


def step_stats(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Per-step arrival skew, hidden allreduce fraction and update delay, derived from the timeline."""
    stmt = select(StepStat).where(StepStat.run_id.in_(plain_ids(run_ids))).order_by(StepStat.run_id, StepStat.step)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def rounds(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """eager-SGD rounds: initiator, fresh / stale / null contributions, latency."""
    stmt = select(Round).where(Round.run_id.in_(plain_ids(run_ids))).order_by(Round.run_id, Round.round)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


TIMELINE_COST_COLUMNS = ["run_id", "rank", "events", "loop_seconds", "writer_cpu_seconds", "train_seconds", "share"]


def timeline_cost(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """What each ``timeline=true`` rank's timeline cost it, by its own count (``timeline_cost`` in
    its summary): the seconds its training loop spent handing events over, its writer thread's
    CPU seconds, and their ``share`` of its training time: the timeline's own count, which leaves
    out the stamps (a dict per gradient, ~0.16 us each) and what the writer thread's GIL and cache
    use cost the loop beyond its CPU time. Ranks without a timeline, or of runs written before the
    count, have no row."""
    stmt = (select(RankSummary.run_id, RankSummary.rank, RankSummary.summary)
            .where(RankSummary.run_id.in_(plain_ids(run_ids))).order_by(RankSummary.run_id, RankSummary.rank))
    rows = []
    with engine.connect() as conn:
        for run_id, rank, summary in conn.execute(stmt):
            cost = summary.get("timeline_cost") if isinstance(summary, dict) else None
            if not isinstance(cost, dict):
                continue
            spent = cost["loop_seconds"] + cost.get("writer_cpu_seconds", 0.0)
            rows.append([run_id, rank, cost["events"], cost["loop_seconds"], cost.get("writer_cpu_seconds"),
                         cost["train_seconds"], spent / cost["train_seconds"] if cost["train_seconds"] else None])
    return pd.DataFrame(rows, columns=TIMELINE_COST_COLUMNS)


ENERGY_BY_HOST_COLUMNS = ["run_id", "host", "source", "joules", "seconds", "watts", "domains", "kind", "note"]


def energy_by_host(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    """Each host's own energy reading of each run (the run's columns sum them): joules, mean
    watts over the run, what was read (``domains``: packages, GPUs or nodes); null joules with
    the reason where the host's counter was missing or lost. A ``slurm`` reading holds no
    joules of its own: Slurm accounts the whole step (the run's ``energy_joules``)."""
    stmt = (select(RankSummary.run_id, RankSummary.summary).where(RankSummary.run_id.in_(plain_ids(run_ids)))
            .order_by(RankSummary.run_id, RankSummary.rank))
    rows, seen = [], set()
    with engine.connect() as conn:
        for run_id, summary in conn.execute(stmt):
            reading = summary.get("energy") if isinstance(summary, dict) else None
            if not isinstance(reading, dict) or (run_id, reading.get("host")) in seen:
                continue     # one reading per machine, as ingestion counts it
            seen.add((run_id, reading.get("host")))
            joules, seconds = reading.get("joules"), reading.get("seconds")
            watts = joules / seconds if isinstance(joules, (int, float)) and seconds else None
            rows.append([run_id, reading.get("host"), reading.get("source"), joules, seconds, watts,
                         reading.get("domains"), reading.get("kind"), reading.get("note")])
    return pd.DataFrame(rows, columns=ENERGY_BY_HOST_COLUMNS)


def _int_or_none(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


TIME_TO_TARGET_COLUMNS = ["run_id", "target", "seconds", "epoch", "samples"]


def first_reaching(evals_frame: pd.DataFrame, run_ids: Sequence[int], target: float,
                   metric: str = "top1") -> pd.DataFrame:
    """Per run: wall seconds, epoch and samples of its first evaluation at or above ``target``
    top-1 (``metric="top1"``) or at or below ``target`` validation loss (``metric="loss"``); NaN
    seconds where none did. ``evals_frame``: rows of the evals table (``evals``)."""
    if metric not in ("top1", "loss"):
        raise QueryError(f"time to a target: metric {metric!r} is top1 or loss")
    rows = []
    for run_id in plain_ids(run_ids):
        mine = evals_frame[evals_frame["run_id"] == run_id].sort_values("epoch")
        values = pd.to_numeric(mine[metric], errors="coerce")
        hit = mine[values >= target] if metric == "top1" else mine[values <= target]   # NaN reaches nothing
        first = hit.iloc[0] if len(hit) else None
        rows.append({"run_id": run_id, "target": target,
                     "seconds": float(first["wall"]) if first is not None else float("nan"),
                     "epoch": _int_or_none(first["epoch"]) if first is not None else None,
                     # a user's script reporting evaluations may not count the samples seen
                     "samples": _int_or_none(first["samples_seen"]) if first is not None else None})
    return pd.DataFrame(rows, columns=TIME_TO_TARGET_COLUMNS)


def time_to_accuracy(engine: Engine, run_ids: Sequence[int], target: float) -> pd.DataFrame:
    """Per run: wall seconds and samples until the first eval at or above ``target`` top-1 (NaN if never)."""
    return first_reaching(evals(engine, run_ids), run_ids, target, "top1")


def time_to_loss(engine: Engine, run_ids: Sequence[int], target: float) -> pd.DataFrame:
    """Per run: wall seconds and samples until the first eval whose validation loss is at or
    below ``target`` (NaN if never): a regression's time to a validation MSE (its top-1 is NaN)."""
    return first_reaching(evals(engine, run_ids), run_ids, target, "loss")


def evals(engine: Engine, run_ids: Sequence[int]) -> pd.DataFrame:
    stmt = select(Eval).where(Eval.run_id.in_(plain_ids(run_ids))).order_by(Eval.run_id, Eval.epoch)
    with engine.connect() as conn:
        return pd.read_sql(stmt, conn)


def status_counts(engine: Engine, study: str | None = None) -> pd.DataFrame:
    """Runs per study and state (of each run's latest attempt): the overview ``scalestudy status``
    shows; ``earlier_attempts`` counts the attempts kept beside them (reruns, retries)."""
    from .runs import status_table

    columns, rows = status_table(engine, study)
    return pd.DataFrame(rows, columns=columns)

