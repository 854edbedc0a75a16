"""``scalestudy ingest``: bring into the database whatever finished runs it is still missing.

Run folders are the record of truth: a sweep whose database was unreachable when a run
ended (a PostgreSQL restart, a lost network) leaves the run's results in its folder.
This command finds run folders (a run folder, a study's ``multirun/`` folder, or, with
no path, every run the database knows that finished but was never ingested), records
the runs it does not know, and ingests each finished one exactly once: ingesting again
changes nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Iterator

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from results_db.ingest.folder import IngestError, ingest_run
from results_db.store.runs import PlannedRun, mark_failed, register_runs
from results_db.store.schema import Run, Study
from workloads.run_folder import JOB_FILE, RESULT_FILE, SPEC_FILE, finished
from workloads.spec import RunSpec

from ..sweep.runspec import run_key


@dataclasses.dataclass
class IngestReport:
    ingested: list[str] = dataclasses.field(default_factory=list)
    already: list[str] = dataclasses.field(default_factory=list)
    unfinished: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)


def run_folders(paths: Iterable[Path]) -> Iterator[Path]:
    """Every run folder (one holding ``spec.json``) at or under ``paths``, each once, in order."""
    seen = set()
    for path in paths:
        found = [path] if (path / SPEC_FILE).is_file() else sorted(p.parent for p in path.rglob(SPEC_FILE))
        for folder in found:
            if folder.resolve() not in seen:
                seen.add(folder.resolve())
                yield folder


def not_ingested(engine: Engine) -> list[Path]:
    """Folders of runs the database knows but never ingested, whose result is there now."""
    with Session(engine) as session:
        # the latest attempts whose results never made it in (the database was away, the sweep
        # stopped, the files could not be read by an older scalestudy), whatever their recorded state
        dirs = session.scalars(select(Run.run_dir).where(Run.ingested_at.is_(None), Run.run_dir.is_not(None),
                                                         Run.latest.is_(True))).all()
    return [Path(d) for d in dirs if finished(d)]


def _job_id(folder: Path) -> str | None:
    import json

    try:
        return json.loads((folder / JOB_FILE).read_text()).get("job_id")
    except (OSError, ValueError):
        return None


class _Busy(Exception):
    """The run's latest attempt is pending or running in another folder (a live sweep's)."""


def _find(engine: Engine, study: str, key: str, folder: Path) -> tuple[int, bool] | None:
    """The attempt this folder holds: the one recorded with this folder, else the run's latest
    attempt if that one has ended (a database that lost track of the folder); never an attempt
    still pending or running elsewhere, which its own sweep will ingest."""
    base = select(Run.id, Run.ingested_at, Run.run_dir, Run.status).join(Study, Run.study_id == Study.id) \
        .where(Study.name == study, Run.run_key == key)
    here = folder.resolve()
    with Session(engine) as session:
        rows = session.execute(base.order_by(Run.attempt.desc())).all()
    for row in rows:
        if row.run_dir and Path(row.run_dir).resolve() == here:
            return row.id, row.ingested_at is not None
    latest = next(iter(rows), None)
    if latest is None:
        return None
    if latest.status in ("pending", "running"):
        raise _Busy(f"run {latest.id} is {latest.status} in {latest.run_dir}; its sweep ingests it")
    return latest.id, latest.ingested_at is not None


def ingest_folders(engine: Engine, folders: Iterable[Path], on_line=print) -> IngestReport:
    report = IngestReport()
    for folder in folders:
        label = str(folder)
        try:
            spec = RunSpec.load(folder / SPEC_FILE)
        except (OSError, ValueError) as exc:
            report.failed.append(label)
            on_line(f"  skip    {label}: unreadable spec.json ({exc})")
            continue
        if not finished(folder):
            report.unfinished.append(label)
            on_line(f"  skip    {label}: not finished (no {RESULT_FILE})")
            continue
        key = run_key(spec)
        try:
            found = _find(engine, spec.study, key, folder)
        except _Busy as exc:
            report.unfinished.append(label)
            on_line(f"  skip    {label}: {exc}")
            continue
        if found is None:
            [decision] = register_runs(engine, spec.study, [PlannedRun(key, spec.to_dict(), str(folder.absolute()))],
                                       driver="scalestudy-ingest")
            found = (decision.run_id, False)
        run_id, ingested = found
        if ingested:
            report.already.append(label)
            on_line(f"  ok      {label}: run {run_id} was ingested already")
            continue
        try:
            ingest_run(engine, run_id, folder, job_id=_job_id(folder))
        except (IngestError, OSError, ValueError) as exc:
            report.failed.append(label)
            mark_failed(engine, run_id, f"ingestion failed: {exc}")
            on_line(f"  fail    {label}: {exc}")
            continue
        report.ingested.append(label)
        with Session(engine) as session:
            status, error = session.execute(select(Run.status, Run.error).where(Run.id == run_id)).one()
        if status == "partial":
            on_line(f"  partial {label}: run {run_id} (study {spec.study}): {error}")
        else:
            on_line(f"  ingest  {label}: run {run_id} (study {spec.study})")
    return report
