"""Ingest a finished run's metrics files: batched, one transaction, idempotent.

The files are the contract with the workload (``workloads/metrics.py``): one JSON
object per line with ``type`` and ``schema``. An unknown schema version is refused
with a clear error rather than guessed at.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterator

import math

import pandas as pd
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from .schema import Eval, Event, RankSummary, Round, Run, Step, StepStat, utcnow
from .timeline import step_stats

SUPPORTED_SCHEMAS = (1,)
BATCH_ROWS = 5000
_STEP_FIELDS = ("step", "epoch", "samples", "t_start", "data", "forward", "backward", "comm_wait", "update", "delay",
                "loss")
_ROUND_FIELDS = ("round", "initiator", "fresh", "stale", "null", "synchronous", "t0", "latency")
_EVAL_FIELDS = ("epoch", "wall", "top1", "loss", "samples_seen")


def _event_row(run_id: int, rank: int, rec: dict[str, Any]) -> dict[str, Any]:
    tensors = rec.get("tensors")
    return {
        "run_id": run_id, "rank": rank, "step": rec["step"], "tensor": str(rec.get("tensor", "")),
        "phase": rec["phase"], "t0": rec["t0"], "t1": rec["t1"], "bytes": rec.get("bytes", 0),
        "tensors": ",".join(tensors) if isinstance(tensors, list) else None, "arrival": rec.get("arrival"),
    }


def _derive_step_stats(session: Session, run_id: int) -> None:
    cols = [Event.rank, Event.step, Event.tensor, Event.phase, Event.t0, Event.t1, Event.arrival]
    rows = session.execute(select(*cols).where(Event.run_id == run_id)).all()
    if not rows:
        return
    stats = step_stats(pd.DataFrame(rows, columns=[c.key for c in cols]))
    records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
               for r in stats.to_dict("records")]
    for r in records:
        r["run_id"] = run_id
        r["step"] = int(r["step"])
        r["collectives"] = int(r["collectives"])
    session.execute(insert(StepStat), records)


log = logging.getLogger(__name__)


class IngestError(ValueError):
    """The metrics of a run cannot be read as the contract says."""


class _Reader:
    """Records of one rank file; a cut-off last line (a writer killed mid-line) is skipped and noted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.truncated = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _records(self.path, self)


def _records(path: Path, reader: _Reader) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        pending = None  # hold one line back: only the last may be cut off
        lineno = 0
        for raw in fh:
            if pending is not None:
                yield _parse(path, lineno, pending, last=False)
            lineno += 1
            pending = raw
        if pending is not None:
            try:
                yield _parse(path, lineno, pending, last=True)
            except _CutOff:
                reader.truncated = True


class _CutOff(Exception):
    pass


def _parse(path: Path, lineno: int, raw: bytes, last: bool) -> dict[str, Any]:
    if not raw.strip():
        return {"type": "blank", "schema": SUPPORTED_SCHEMAS[0]}
    try:
        rec = json.loads(raw)
    except json.JSONDecodeError as exc:
        if last and not raw.endswith(b"\n"):
            raise _CutOff() from None
        raise IngestError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    if rec.get("schema") not in SUPPORTED_SCHEMAS:
        raise IngestError(
            f"{path}:{lineno}: metrics schema {rec.get('schema')!r} is not supported "
            f"(this scalestudy reads {', '.join(map(str, SUPPORTED_SCHEMAS))}); upgrade scalestudy"
        )
    return rec


def ingest_run(engine: Engine, run_id: int, run_dir: str | Path, job_id: str | None = None) -> bool:
    """Load ``run_dir``'s metrics into run ``run_id``; False if it was ingested already.

    ``job_id`` is the scheduler's id of the batch job the run ran in, if any.
    """
    run_dir = Path(run_dir)
    result_path = run_dir / "result.json"
    if not result_path.is_file():
        raise IngestError(f"{run_dir}: no result.json, the run did not finish")
    result = json.loads(result_path.read_text())
    if result.get("schema") not in SUPPORTED_SCHEMAS:
        raise IngestError(f"{result_path}: result schema {result.get('schema')!r} is not supported")
    rank_files = sorted((run_dir / "metrics").glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if not rank_files:
        raise IngestError(f"{run_dir}/metrics: no rank-*.jsonl files")

    with Session(engine) as session, session.begin():
        run = session.get(Run, run_id, with_for_update=engine.dialect.name != "sqlite")
        if run is None:
            raise IngestError(f"run id {run_id} is not in the database")
        if run.ingested_at is not None:
            return False
        hosts: list[str] = []
        versions: dict[str, Any] | None = None
        steps: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        truncated: list[str] = []
        for path in rank_files:
            rank = int(path.stem.split("-")[1])
            start: dict[str, Any] = {}
            end: dict[str, Any] = {}
            reader = _Reader(path)
            for rec in reader:
                kind = rec["type"]
                if kind == "step":
                    steps.append({"run_id": run_id, "rank": rank, **{k: rec.get(k) for k in _STEP_FIELDS}})
                    if len(steps) >= BATCH_ROWS:
                        session.execute(insert(Step), steps)
                        steps = []
                elif kind == "event":
                    events.append(_event_row(run_id, rank, rec))
                    if len(events) >= BATCH_ROWS:
                        session.execute(insert(Event), events)
                        events = []
                elif kind == "round":
                    session.execute(insert(Round), [{"run_id": run_id, **{k: rec.get(k) for k in _ROUND_FIELDS}}])
                elif kind == "eval":
                    session.execute(insert(Eval), [{"run_id": run_id, **{k: rec.get(k) for k in _EVAL_FIELDS}}])
                elif kind == "run_start":
                    start = rec
                elif kind == "run_end":
                    end = rec
            if reader.truncated:
                truncated.append(path.name)
            host = start.get("node") or start.get("host", "?")
            if host not in hosts:
                hosts.append(host)
            versions = versions or start.get("versions")
            session.execute(insert(RankSummary), [{
                "run_id": run_id, "rank": rank, "host": host, "status": end.get("status", "unknown"),
                "clock_offset": start.get("clock_offset"), "summary": end.get("summary"),
            }])
        if steps:
            session.execute(insert(Step), steps)
        if events:
            session.execute(insert(Event), events)
        _derive_step_stats(session, run_id)
        run.hosts = ",".join(hosts)
        if job_id:
            run.job_id = str(job_id)
        run.versions = versions
        for name in ("throughput", "train_seconds", "wall_seconds", "steps", "final_top1", "final_loss"):
            setattr(run, name, result.get(name))
        run.status = "done" if result.get("status") == "done" else "failed"
        if truncated and run.status == "done":
            run.status = "partial"
            run.error = f"metrics cut off mid-line in {', '.join(truncated)}: ingested every whole record"
            log.warning("run %s: %s", run_id, run.error)
        run.finished_at = run.ingested_at = utcnow()
    return True
