"""The life cycle of a run row: planned, running, done or failed.

A run is identified by (study, run_key). Registering a sweep is idempotent: a run
already ``done`` is reported as skipped unless a rerun is forced, a ``failed`` or
interrupted one is planned again, so two sweeps of one study never duplicate a run.

Every attempt at a run is a row of its own (``attempt`` 1, 2, ...; the newest is
``latest``): a rerun, or a retry after a crash, a timeout or a lost node, starts a new
row and leaves the earlier one and its measurements as they were. Only an attempt
that never got anywhere (pending, or running under a sweep that stopped) is taken
over in place.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.orm import Session

from workloads.spec import FIELDS

from .connect import writer
from .failpoints import failpoint
from .schema import Eval, Event, RankSummary, Round, Run, Step, StepStat, Study, utcnow

# the spec's fields that have a runs column, with the value an older spec without them meant
_COLUMN_DEFAULTS = {f.name: f.default for f in FIELDS if f.column}
# what the next attempt at a run keeps from the one before: what the run is, not how it went
_IDENTITY_AND_PROVENANCE = ("study_id", "run_key", *_COLUMN_DEFAULTS, "world_size", "global_batch_size", "spec",
                            "run_dir", "git_commit", "git_dirty", "environment", "config", "predicted_seconds",
                            "predicted_by_fit")


@dataclass(frozen=True)
class PlannedRun:
    run_key: str
    spec: dict[str, Any]
    run_dir: str
    provenance: dict[str, Any] | None = None   # git_commit, git_dirty, environment, config
    # (model fit id, predicted run seconds) where the study's fit predicted this run: the run's
    # measured wall time then checks it (``model predict``, ``prediction_errors``)
    prediction: tuple[int, float] | None = None


@dataclass(frozen=True)
class RunDecision:
    run_id: int
    run_key: str
    submit: bool
    previous_status: str | None
    reason: str | None = None      # why not submitted: "done", or "in progress" (another live sweep drives it)
    driver: str | None = None
    heartbeat_age: float | None = None   # seconds since that sweep's last heartbeat
    taken_over_from: str | None = None   # the run folder of a stopped sweep this run was taken from
    taken_over_job: str | None = None    # the batch job that stopped sweep's run was in, if it had started


# A sweep that has not heartbeated its runs for this long is taken to have stopped (tests shorten it).
HEARTBEAT_STALE_SECONDS = float(os.environ.get("SCALESTUDY_HEARTBEAT_STALE", "60"))


def driver_alive(driver: str | None, now: float, beat: float | None) -> bool:
    """Whether the sweep ``driver`` ("host:pid") still drives its runs: on this host a dead
    pid tells at once; elsewhere a heartbeat older than ``HEARTBEAT_STALE_SECONDS`` does."""
    if not driver or not beat:
        return False
    host, _, pid = driver.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        if _zombie(int(pid)):   # killed, not yet reaped (a container whose init does not reap)
            return False
    return now - beat < HEARTBEAT_STALE_SECONDS


def _zombie(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"   # the state follows the parenthesised name


@dataclass(frozen=True)
class DriverState:
    """A sweep that holds unfinished runs, as ``scalestudy status`` shows it."""

    driver: str
    study: str
    pending: int
    running: int
    heartbeat_age: float | None   # seconds since its last heartbeat
    alive: bool


def sweep_drivers(engine: Engine, study: str | None = None) -> list[DriverState]:
    """Every sweep driver holding pending or running runs, and whether it still drives them."""
    from sqlalchemy import func

    stmt = (select(Run.driver, Study.name, Run.status, func.count(Run.id), func.max(Run.heartbeat))
            .join(Study, Run.study_id == Study.id)
            .where(Run.latest.is_(True), Run.status.in_(("pending", "running")), Run.driver.is_not(None))
            .group_by(Run.driver, Study.name, Run.status))
    if study:
        stmt = stmt.where(Study.name == study)
    with Session(engine) as session:
        rows = session.execute(stmt).all()
    now = time.time()
    merged: dict[tuple[str, str], dict] = {}
    for driver, name, status, count, beat in rows:
        entry = merged.setdefault((driver, name), {"pending": 0, "running": 0, "beat": None})
        entry[status] += count
        entry["beat"] = max(b for b in (entry["beat"], beat) if b is not None) if (entry["beat"] or beat) else None
    return [DriverState(driver, name, e["pending"], e["running"], None if e["beat"] is None else now - e["beat"],
                        driver_alive(driver, now, e["beat"]))
            for (driver, name), e in sorted(merged.items())]


def done_run_keys(engine: Engine, study: str, keys: Sequence[str]) -> set[str]:
    """Of these run_keys, those whose latest attempt in ``study`` is done (a sweep skips them)."""
    with Session(engine) as session:
        return set(session.scalars(select(Run.run_key).join(Study, Run.study_id == Study.id)
                                   .where(Study.name == study, Run.run_key.in_(list(keys)), Run.latest.is_(True),
                                          Run.status == "done")))


def get_or_create_study(session: Session, name: str) -> Study:
    study = session.scalars(select(Study).where(Study.name == name)).one_or_none()
    if study is None:
        study = Study(name=name)
        session.add(study)
        session.flush()
    return study


def _clear_measurements(session: Session, run_id: int) -> None:
    for table in (Step, Eval, RankSummary, Event, StepStat, Round):
        session.execute(delete(table).where(table.run_id == run_id))


def register_runs(engine: Engine, study_name: str, planned: Sequence[PlannedRun], rerun: bool = False,
                  driver: str | None = None) -> list[RunDecision]:
    """Record every planned run as pending, owned by ``driver``.

    Skipped: runs already done (unless ``rerun``), and runs pending or running under
    another sweep whose heartbeat is fresh — a second identical sweep resumes only
    what nobody is driving, and never duplicates a run.
    """
    decisions: list[RunDecision] = []
    now = time.time()
    with Session(writer(engine)) as session, session.begin():
        study = get_or_create_study(session, study_name)
        for p in planned:
            run = session.scalars(select(Run).where(Run.study_id == study.id, Run.run_key == p.run_key,
                                                    Run.latest.is_(True))).one_or_none()
            previous = run.status if run else None
            if run is not None and run.status == "done" and not rerun:
                decisions.append(RunDecision(run.id, p.run_key, False, previous, "done"))
                continue
            if (run is not None and run.status in ("pending", "running") and run.driver and run.driver != driver
                    and driver_alive(run.driver, now, run.heartbeat)):
                decisions.append(RunDecision(run.id, p.run_key, False, previous, "in progress", run.driver,
                                             now - run.heartbeat))
                continue
            taken_over = run.run_dir if run is not None and run.status in ("pending", "running") else None
            taken_over_job = run.job_id if taken_over is not None and run.status == "running" else None
            if run is None:
                run = Run(study_id=study.id, run_key=p.run_key)
                session.add(run)
            elif taken_over is None:   # an attempt that ended (done, failed, ...) stays as it was
                run.latest = False
                run = Run(study_id=study.id, run_key=p.run_key, attempt=run.attempt + 1)
                session.add(run)
            else:
                _clear_measurements(session, run.id)
            spec = p.spec
            for name, default in _COLUMN_DEFAULTS.items():
                setattr(run, name, spec.get(name, default))
            run.world_size = spec["nodes"] * spec["workers_per_node"]
            run.global_batch_size = spec["batch_size"] * run.world_size
            run.spec = spec
            run.run_dir = p.run_dir
            prov = p.provenance or {}
            run.git_commit, run.git_dirty = prov.get("git_commit"), prov.get("git_dirty")
            run.environment, run.config = prov.get("environment"), prov.get("config")
            run.predicted_by_fit, run.predicted_seconds = p.prediction if p.prediction else (None, None)
            run.status = "pending"
            run.driver, run.heartbeat = driver, now
            run.error = run.job_id = run.hosts = run.versions = run.host_cpus = None
            run.throughput = run.train_seconds = run.wall_seconds = run.final_top1 = run.final_loss = None
            run.steps = run.metrics = run.exit_code = run.output_tail = run.events_file = None
            run.started_at = run.finished_at = run.ingested_at = None
            session.flush()
            failpoint("register")   # the reliability suite: killed mid-transaction
            decisions.append(RunDecision(run.id, p.run_key, True, previous, taken_over_from=taken_over,
                                         taken_over_job=taken_over_job))
    return decisions


def new_attempt(engine: Engine, run_id: int, driver: str, run_dir: str | None = None) -> int | None:
    """Start the next attempt at run ``run_id`` (which has ended: failed, timeout, lost), owned by
    ``driver``; the ended one stays as it is, no longer ``latest``. Returns the new row's id, or
    None when the run is no longer this driver's (another sweep took it over while this one was
    frozen): then it is not retried here, or it would run twice."""
    with Session(writer(engine)) as session, session.begin():
        old = session.get(Run, run_id, with_for_update=engine.dialect.name != "sqlite")
        if old is None or not old.latest or old.driver != driver:
            return None
        old.latest = False
        run = Run(attempt=old.attempt + 1, **{name: getattr(old, name) for name in _IDENTITY_AND_PROVENANCE})
        run.run_dir = run_dir if run_dir is not None else old.run_dir
        run.driver, run.heartbeat = driver, time.time()
        session.add(run)
        session.flush()
        return run.id


def earlier_attempts_in(engine: Engine, run_dir: str, exclude: int) -> list[int]:
    """Ids of other attempts recorded in folder ``run_dir`` (a sweep reusing a fixed sweep
    folder), newest first: their files are moved aside before a new attempt writes there."""
    with Session(engine) as session:
        return list(session.scalars(select(Run.id).where(Run.run_dir == run_dir, Run.id != exclude)
                                    .order_by(Run.id.desc())))


def claim(engine: Engine, run_id: int, driver: str) -> bool:
    """Right before a run is submitted: is it still this driver's? (Another sweep takes over
    runs whose driver stopped heartbeating.) Refreshes the heartbeat when it is."""
    with Session(writer(engine)) as session, session.begin():
        result = session.execute(update(Run).where(Run.id == run_id, Run.driver == driver,
                                                   Run.status.in_(("pending", "running")))
                                 .values(heartbeat=time.time()))
        return result.rowcount == 1


def heartbeat(engine: Engine, run_ids: Iterable[int], driver: str) -> None:
    """Tell other sweeps these runs are still driven (see ``register_runs``)."""
    ids = list(run_ids)
    if not ids:
        return
    with Session(writer(engine)) as session, session.begin():
        session.execute(update(Run).where(Run.id.in_(ids), Run.driver == driver).values(heartbeat=time.time()))


def mark_running(engine: Engine, run_ids: Iterable[int], job_ids: dict[int, str] | None = None) -> None:
    """``job_ids``: run id -> the batch job it runs in, so that a sweep taking over from a
    stopped one can cancel that job (see ``RunDecision.taken_over_job``)."""
    job_ids = job_ids or {}
    with Session(writer(engine)) as session, session.begin():
        for run in session.scalars(select(Run).where(Run.id.in_(list(run_ids)))):
            if run.status == "pending":
                run.status, run.started_at = "running", utcnow()
            if job_ids.get(run.id):
                run.job_id = str(job_ids[run.id])


def mark_failed(engine: Engine, run_id: int, error: str, status: str = "failed", job_id: str | None = None,
                driver: str | None = None) -> bool:
    """``status``: ``failed``, ``timeout`` for a run stopped at its time limit, ``lost`` for
    one whose batch job or node died under it (``job_id``: that batch job), or ``interrupted``
    for one its sweep stopped (Ctrl-C, the driver told to end) before it ended. With ``driver``, only
    while the run is still that sweep's (not taken over by another); False if it was not."""
    with Session(writer(engine)) as session, session.begin():
        run = session.get(Run, run_id)
        if run is None or (driver is not None and (run.driver != driver or not run.latest)):
            return False
        run.status, run.error, run.finished_at = status, error[-4000:], utcnow()
        if job_id:
            run.job_id = str(job_id)
        return True


def prediction_errors(engine: Engine, fit_id: int) -> list[dict[str, Any]]:
    """The runs a model fit predicted that have since finished: nodes, ranks, predicted and
    measured seconds and the error ((predicted - measured) / measured), each run's latest
    attempt."""
    stmt = (select(Run.id, Run.nodes, Run.world_size, Run.algorithm, Run.predicted_seconds, Run.wall_seconds)
            .where(Run.predicted_by_fit == fit_id, Run.latest.is_(True), Run.status == "done",
                   Run.wall_seconds.is_not(None), Run.predicted_seconds.is_not(None)).order_by(Run.nodes, Run.id))
    with engine.connect() as conn:
        return [{"run_id": i, "nodes": n, "ranks": r, "algorithm": a, "predicted_seconds": p, "measured_seconds": m,
                 "error": (p - m) / m if m else None} for i, n, r, a, p, m in conn.execute(stmt)]


def set_run_dir(engine: Engine, run_id: int, run_dir: str) -> None:
    with Session(writer(engine)) as session, session.begin():
        session.execute(update(Run).where(Run.id == run_id).values(run_dir=run_dir))


# the states ``status`` always shows, in order, then any other a database holds
_USUAL_STATES = ("pending", "running", "done", "failed")
_STATE_ORDER = ("pending", "running", "done", "partial", "failed", "timeout", "lost", "interrupted")


def status_table(engine: Engine, study: str | None = None) -> tuple[list[str], list[list[Any]]]:
    """Runs per study and state (of each run's latest attempt) and the earlier attempts kept
    beside them (reruns, retries): columns and rows, counted in SQL. ``scalestudy status``
    prints it without importing pandas (half of its start-up); ``query.status_counts`` is
    the same as a DataFrame."""
    stmt = (select(Study.name, Run.status, Run.latest, func.count(Run.id)).join(Study, Run.study_id == Study.id)
            .group_by(Study.name, Run.status, Run.latest))
    if study:
        stmt = stmt.where(Study.name == study)
    with Session(engine) as session:
        counted = session.execute(stmt).all()
    per_study: dict[str, dict[str, int]] = {}
    earlier: dict[str, int] = {}
    for name, status, latest, n in counted:
        if latest:
            per_study.setdefault(name, {})[status] = per_study.setdefault(name, {}).get(status, 0) + n
        else:
            earlier[name] = earlier.get(name, 0) + n
    present = {s for states in per_study.values() for s in states}
    states = [s for s in _STATE_ORDER if s in _USUAL_STATES or s in present] + \
        sorted(s for s in present if s not in _STATE_ORDER)
    columns = ["study", *states, "total", "earlier_attempts"]
    rows = [[name, *(per_study[name].get(s, 0) for s in states), sum(per_study[name].values()), earlier.get(name, 0)]
            for name in sorted(per_study)]
    return columns, rows
