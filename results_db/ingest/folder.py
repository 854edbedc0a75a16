"""Ingest a finished run's metrics files: batched, one transaction, idempotent.

The files are the contract with the workload (``workloads/run_folder.py``): one JSON
object per line with ``type`` and ``schema``. An unknown schema version is refused
with a clear error rather than guessed at.
"""

from __future__ import annotations

import json
import logging

try:  # orjson parses the metrics lines several times faster; json is the fallback
    from orjson import JSONDecodeError as _DecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    from json import JSONDecodeError as _DecodeError
    from json import loads as _loads
from pathlib import Path
from typing import Any, Callable

import math
import sys

from sqlalchemy import Engine, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from workloads.cpu_grant import host_cpus as cpus_of_host
from workloads.run_folder import (METRICS_DIR, RESULT_FILE, STEP_FIELDS, SUPPORTED_METRICS_SCHEMAS, rank_events_file,
                                  result_file)

from results_db.analysis.binding import audit as audit_binding
from results_db.store import event_files
from results_db.store.connect import writer
from results_db.store.failpoints import failpoint
from results_db.store.schema import Eval, Event, RankSummary, Round, Run, StepStat, utcnow
from . import event_sink
from .rank_files import IngestError, RankFileReader
from .sinks import RowSink
from .slurm_energy import StepEnergy, step_energy



def _integrity_errors() -> tuple[type[BaseException], ...]:
    """A record whose NOT NULL field is missing fails in the row sinks, which write through the
    driver (sqlite3's executemany, psycopg's COPY), not through SQLAlchemy. psycopg's error is
    taken only where psycopg is loaded (a PostgreSQL database): none can be raised otherwise,
    and importing it costs a SQLite sweep 60 ms."""
    import sqlite3

    errors: list[type[BaseException]] = [IntegrityError, sqlite3.IntegrityError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.IntegrityError)
    return tuple(errors)

_ROUND_FIELDS = ("round", "initiator", "fresh", "stale", "null", "synchronous", "t0", "latency")
_EVAL_FIELDS = ("epoch", "wall", "top1", "loss", "samples_seen")


_EVENT_COLUMNS = ("run_id", "rank", "step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival")
_DERIVE_PHASES = event_files.DERIVE_PHASES  # what step_stats reads
_DERIVE_ROWS = 2_000_000   # events per window of steps (of every phase): memory stays bounded on long, wide runs


def _derive_step_stats(session: Session, run_id: int, sink: RowSink | event_sink.ColumnSink | None = None) -> None:
    """Per-step stats from the run's events: folded rank by rank as they were parsed where they
    went to the run's event file (a ``ColumnSink``), else read from the events table a window of
    steps at a time (plus the step before each window, which the update delay needs). pandas is
    imported here, for timeline runs only: a sweep's driver starts faster without it."""
    if isinstance(sink, event_sink.ColumnSink):
        _insert_step_stats(session, run_id, sink.step_stats())
        return
    import pandas as pd

    names = ["rank", "step", "tensor", "phase", "t0", "t1", "arrival"]
    cols = [getattr(Event, n) for n in names]
    lo, hi = session.execute(select(func.min(Event.step), func.max(Event.step))
                             .where(Event.run_id == run_id)).one()

    def window(first: int, last: int) -> pd.DataFrame:
        rows = session.execute(select(*cols).where(Event.run_id == run_id, Event.phase.in_(_DERIVE_PHASES),
                                                   Event.step >= first, Event.step <= last)).all()
        return pd.DataFrame([tuple(r) for r in rows], columns=names)  # tuples: see query.frame_of
    if lo is not None:
        _derive_windows(session, run_id, window, lo, hi, sink)


def _derive_windows(session: Session, run_id: int, window, lo: int, hi: int, sink) -> None:
    from .timeline import step_stats

    written = sink.written if sink is not None else session.execute(
        select(func.count()).select_from(Event).where(Event.run_id == run_id)).scalar_one()
    per_step = written / (hi - lo + 1)
    size = max(1, int(_DERIVE_ROWS // max(per_step, 1.0)))
    for start in range(lo, hi + 1, size):
        stop = start + size
        frame = window(start - 1, stop - 1)
        if frame.empty:
            continue
        stats = step_stats(frame)
        _insert_step_stats(session, run_id, stats[stats["step"] >= start])


_STATS_ROWS = 4096   # per-step measures inserted at a time: a dict a step (~1 KB) for 10^5 steps was 100 MiB


def _insert_step_stats(session: Session, run_id: int, stats) -> None:
    for start in range(0, len(stats), _STATS_ROWS):
        records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                   for r in stats.iloc[start:start + _STATS_ROWS].to_dict("records")]
        for r in records:
            r["run_id"] = run_id
            r["step"] = int(r["step"])
            r["collectives"] = int(r["collectives"])
        session.execute(insert(StepStat), records)


log = logging.getLogger(__name__)


def _read_result(run_dir: Path) -> dict[str, Any]:
    """The run's summary, checked against the contract's schema."""
    result_path = result_file(run_dir)
    if not result_path.is_file():
        raise IngestError(f"{run_dir}: no {RESULT_FILE}, the run did not finish")
    try:
        result = json.loads(result_path.read_text(errors="replace"))
    except ValueError as exc:
        raise IngestError(f"{result_path}: not valid JSON ({str(exc).split(':')[0]})") from None
    if not isinstance(result, dict):
        raise IngestError(f"{result_path}: not a JSON object")
    if result.get("schema") not in SUPPORTED_METRICS_SCHEMAS:
        raise IngestError(f"{result_path}: result schema {result.get('schema')!r} is not supported (this scalestudy "
                          f"reads {', '.join(map(str, SUPPORTED_METRICS_SCHEMAS))}); upgrade scalestudy")
    return result


class _RunTotals:
    """What the rank files say about the run as a whole: its hosts, the CPUs each host's ranks
    could use, the library versions, the last evaluation, the files cut off mid-line."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.host_cpus: dict[str, set[int]] = {}   # hostname -> the union of its ranks' affinities
        self.host_ranks: dict[str, int] = {}       # hostname -> ranks that ran there
        self.unrecorded: set[str] = set()          # hostnames with a rank that recorded none
        self.versions: dict[str, Any] | None = None
        self.truncated: list[str] = []
        self.last_eval: dict[str, Any] = {}
        self.gpu_models: list[str] = []
        self.gpus: set[tuple[str, str]] = set()   # (host, GPU uuid or visible index)
        self.peak_memory: list[float] = []
        self.utilization: list[float] = []
        self.energy: dict[str, dict[str, Any]] = {}   # hostname -> its reading (the host's first rank's)
        self.starts: list[dict[str, Any]] = []        # every rank's run_start, for the binding audit

    def add_rank(self, start: dict[str, Any]) -> str:
        """Count a rank's ``run_start``; returns the node it ran on."""
        self.starts.append(start)
        host = start.get("node") or start.get("host", "?")
        if host not in self.hosts:
            self.hosts.append(host)
        self.versions = self.versions or start.get("versions")
        machine = str(start.get("host", "?"))
        self.host_ranks[machine] = self.host_ranks.get(machine, 0) + 1
        if isinstance(start.get("cpus"), list) and machine not in self.unrecorded:
            self.host_cpus.setdefault(machine, set()).update(start["cpus"])
        else:   # a rank that did not say: its host's union would be too small
            self.unrecorded.add(machine)
            self.host_cpus.pop(machine, None)
        gpu = start.get("gpu")
        if isinstance(gpu, dict):
            if gpu.get("name") and gpu["name"] not in self.gpu_models:
                self.gpu_models.append(str(gpu["name"]))
            self.gpus.add((machine, str(gpu.get("uuid") or gpu.get("visible") or start.get("rank"))))
        return host

    def add_end(self, end: dict[str, Any]) -> None:
        """Count a rank's ``run_end``: its GPU's peak memory and utilisation, where it had them."""
        summary = end.get("summary") if isinstance(end.get("summary"), dict) else {}
        if isinstance(summary.get("gpu_peak_memory_bytes"), (int, float)):
            self.peak_memory.append(summary["gpu_peak_memory_bytes"] / 2**20)
        if isinstance(summary.get("gpu_utilization"), (int, float)):
            self.utilization.append(float(summary["gpu_utilization"]))
        reading = summary.get("energy")
        if isinstance(reading, dict) and reading.get("host"):
            # one reading per machine: virtual nodes of one host each read the same counter
            self.energy.setdefault(str(reading["host"]), reading)

    def energy_of_run(self, lookup: Callable[[str], StepEnergy] = step_energy) -> dict[str, Any]:
        """The run's energy columns: joules summed over its hosts, mean watts per host; missing
        (with the reason) where a host had no counter or lost it mid-run. Readings that name a
        Slurm step are looked up in Slurm's accounting (``lookup``), which covers all the
        step's nodes at once."""
        if not self.energy:
            return {}
        # a host that found no counter (source "none") read nothing: its reason, not a source
        bare = {h: r for h, r in self.energy.items() if r.get("source") == "none"}
        readings = [r for h, r in self.energy.items() if h not in bare]
        if not readings:
            host, reading = next(iter(bare.items()))
            return {"energy_note": f"{host}: {reading.get('note') or 'no energy counter'}"}
        if all(r.get("source") == "slurm" for r in readings):
            return self._slurm_energy(readings, lookup)
        out: dict[str, Any] = {"energy_source": ",".join(sorted({str(r.get("source")) for r in readings})),
                               "energy_kind": "measured" if all(r.get("kind") == "measured" for r in readings)
                               else "estimated"}
        unknown = [r for r in readings if not isinstance(r.get("joules"), (int, float))]
        silent = sorted((set(self.host_ranks) - set(self.energy)) | set(bare))
        sources = {str(r.get("source")) for r in readings}
        if len(sources) > 1:    # a node's, its CPUs' and its GPUs' joules are not one quantity
            out["energy_note"] = f"the hosts read different sources ({', '.join(sorted(sources))}): not added together"
        elif unknown:
            out["energy_note"] = f"{unknown[0]['host']}: {unknown[0].get('note') or 'no reading'}"
        elif silent:
            why = next((f": {r['note']}" for r in bare.values() if r.get("note")), "")
            out["energy_note"] = f"no energy counter on {', '.join(silent)} ({len(readings)} of " \
                                 f"{len(self.host_ranks)} hosts read){why}"
        else:
            joules = sum(float(r["joules"]) for r in readings)
            seconds = sum(float(r["seconds"]) for r in readings) / len(readings)
            out["energy_joules"] = joules
            out["energy_watts"] = joules / seconds / len(readings) if seconds > 0 else None
        return out

    def _slurm_energy(self, readings: list[dict[str, Any]], lookup: Callable[[str], StepEnergy]) -> dict[str, Any]:
        out: dict[str, Any] = {"energy_source": "slurm", "energy_kind": "measured"}
        steps = sorted({str(r["slurm_step"]) for r in readings if r.get("slurm_step")})
        if len(steps) != 1:
            out["energy_note"] = f"the ranks named {len(steps)} Slurm steps ({', '.join(steps) or 'none'}), not one"
            return out
        found = lookup(steps[0])
        if found.joules is None:
            out["energy_note"] = found.note
        else:
            nodes = found.nodes or len(self.host_ranks) or 1
            out["energy_joules"] = found.joules
            out["energy_watts"] = found.joules / found.seconds / nodes if found.seconds else None
        return out

    @property
    def fewest_cpus(self) -> int | None:
        """By hostname, not scheduler node: virtual nodes of one machine share its CPUs. The
        fewest any host's ranks could use: the most crowded host where hosts hold equal
        numbers of ranks (workers_per_node), as the model assumes."""
        return min((len(c) for c in self.host_cpus.values()), default=None)

    def host_load(self, threads_per_rank: int) -> float | None:
        """Threads per CPU on the most crowded host: its ranks' threads (as each recorded them, else
        the spec's share) over the CPUs they could run on, capped by their cgroup's CPU quota
        (``workloads.cpu_grant``; by hostname: virtual nodes of one machine share it). None where a
        host's ranks recorded no affinity: nothing is guessed."""
        if not self.host_cpus or self.unrecorded:
            return None
        by_host: dict[str, list[dict[str, Any]]] = {}
        for start in self.starts:
            by_host.setdefault(str(start.get("host", "?")), []).append(start)
        loads = []
        for starts in by_host.values():
            usable = cpus_of_host(starts).usable
            threads = sum(int(s.get("threads") or threads_per_rank) for s in starts)
            if usable > 0:
                loads.append(threads / usable)
        return max(loads, default=None)


def _ingest_rank(session: Session, run_id: int, path: Path, steps: RowSink, events: RowSink | event_sink.ColumnSink,
                 totals: _RunTotals) -> None:
    """One rank file's records into the sinks and tables (the hot loop appends rows directly)."""
    rank = int(path.stem.split("-")[1])
    start: dict[str, Any] = {}
    end: dict[str, Any] = {}
    divert = prepare = None
    if isinstance(events, event_sink.ColumnSink):
        def divert(data: Any, count: int) -> None:
            events.add_block(rank, data, count, renamed=True)
        prepare = event_sink.rename_list_keys
    reader = RankFileReader(path, divert, prepare)
    event_rows, step_rows = events.rows, steps.rows
    for rec in reader:
        kind = rec["type"]
        if kind == "event":
            tensors = rec.get("tensors")
            event_rows.append((run_id, rank, rec["step"], rec.get("tensor", ""), rec["phase"], rec["t0"],
                               rec["t1"], rec.get("bytes", 0),
                               ",".join(tensors) if tensors.__class__ is list else None, rec.get("arrival")))
            if len(event_rows) >= events.batch:
                events.flush()
                event_rows = events.rows
        elif kind == "step":
            step_rows.append((run_id, rank, *map(rec.get, STEP_FIELDS)))
            if len(step_rows) >= steps.batch:
                steps.flush()
                step_rows = steps.rows
        elif kind == "round":
            session.execute(insert(Round), [{"run_id": run_id, **{k: rec.get(k) for k in _ROUND_FIELDS}}])
        elif kind == "eval":
            session.execute(insert(Eval), [{"run_id": run_id, **{k: rec.get(k) for k in _EVAL_FIELDS}}])
            totals.last_eval = rec
        elif kind == "run_start":
            start = rec
        elif kind == "run_end":
            end = rec
    stream = rank_events_file(path.parent.parent, rank)
    if stream.is_file():   # a timeline written as binary columns (workloads.event_log)
        _ingest_rank_stream(run_id, rank, stream, events, totals)
    if isinstance(events, event_sink.ColumnSink):
        events.end_rank()
    if reader.truncated:
        totals.truncated.append(path.name)
    host = totals.add_rank(start)
    totals.add_end(end)
    session.execute(insert(RankSummary), [{
        "run_id": run_id, "rank": rank, "host": host, "status": end.get("status", "unknown"),
        "clock_offset": start.get("clock_offset"), "summary": end.get("summary"),
    }])


def _ingest_rank_stream(run_id: int, rank: int, path: Path, events: RowSink | event_sink.ColumnSink,
                        totals: _RunTotals) -> None:
    """A rank's binary timeline (``rank_events``) into the event sink, a chunk at a time."""
    from .rank_events import RankEventsReader, rows_of

    reader = RankEventsReader(path)
    for table in reader:
        try:
            if isinstance(events, event_sink.ColumnSink):
                events.add_table(rank, table)
            else:
                events.rows.extend(rows_of(rank, table, run_id))
                events.flush()
        except TypeError as exc:
            raise IngestError(f"{path}: {exc}") from None
    if reader.truncated:
        totals.truncated.append(path.name)


TAIL_BYTES = 1 << 16   # a rank file's run_end is its last record, well within this


def _slurm_energy_of(rank_files: list[Path]) -> dict[str, StepEnergy]:
    """Slurm's accounting of the steps the ranks' run_end readings name, asked before the
    write transaction opens (sacct may take seconds: no lock is held meanwhile)."""
    steps: set[str] = set()
    for path in rank_files:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - TAIL_BYTES))
            for raw in reversed(fh.read().splitlines()):
                if b'"run_end"' not in raw:
                    continue
                try:
                    reading = (_loads(raw).get("summary") or {}).get("energy") or {}
                except (_DecodeError, AttributeError):
                    break
                if isinstance(reading, dict) and reading.get("source") == "slurm" and reading.get("slurm_step"):
                    steps.add(str(reading["slurm_step"]))
                break
    return {step: step_energy(step) for step in sorted(steps)}


def _finish_run(run: Run, result: dict[str, Any], totals: _RunTotals, job_id: str | None,
                accounted: dict[str, StepEnergy] | None = None) -> None:
    """The run's row from its summary and the ranks' totals."""
    run.hosts = ",".join(totals.hosts)
    run.host_cpus = totals.fewest_cpus
    run.binding = audit_binding(totals.starts, device=run.device or "cpu")
    run.host_load = totals.host_load(max(1, (run.threads_per_node or 1) // max(1, run.workers_per_node or 1)))
    if job_id:
        run.job_id = str(job_id)
    run.versions = totals.versions
    for name in ("model_flops_per_sample", "peak_flops", "peak_source", "mfu"):
        setattr(run, name, result.get(name))
    for name in ("throughput", "rounds_per_second", "gradients_per_second", "classes", "train_seconds", "wall_seconds", "steps", "final_top1", "final_loss", "metrics",
                 "exit_code", "output_tail", "data_path_used", "nccl_network", "nccl_plugin"):
        setattr(run, name, result.get(name))
    # GPU facts where the ranks recorded them; missing (null) where they did not, never 0
    run.gpu_model = ", ".join(totals.gpu_models) or None
    run.gpus = len(totals.gpus) or None
    run.gpu_peak_memory_mb = max(totals.peak_memory) if totals.peak_memory else None
    run.gpu_utilization = sum(totals.utilization) / len(totals.utilization) if totals.utilization else None
    accounted = accounted or {}
    for name, value in totals.energy_of_run(lambda step: accounted.get(step) or step_energy(step)).items():
        setattr(run, name, value)
    if result.get("kind") == "command" and totals.last_eval:  # a command that reported evaluations
        run.final_top1 = run.final_top1 if run.final_top1 is not None else totals.last_eval.get("top1")
        run.final_loss = run.final_loss if run.final_loss is not None else totals.last_eval.get("loss")
    run.status = "done" if result.get("status") == "done" else "failed"
    if run.status == "failed":
        run.error = str(result.get("error") or "the run reported failure")[-4000:]
    if totals.truncated and run.status == "done":
        run.status = "partial"
        cut = ", ".join(totals.truncated)   # a .jsonl ends mid-line, a rank's event stream mid-batch
        run.error = f"metrics cut off mid-line in {cut}: ingested every whole record" \
            if all(name.endswith(".jsonl") for name in totals.truncated) else \
            f"metrics cut off mid-record in {cut} (a line, or an event stream's batch): ingested every whole one"
        log.warning("run %s: %s", run.id, run.error)
    run.finished_at = run.ingested_at = utcnow()


def ingest_run(engine: Engine, run_id: int, run_dir: str | Path, job_id: str | None = None,
               events_table: bool = False) -> bool:
    """Load ``run_dir``'s metrics into run ``run_id``; False if it was ingested already.

    ``job_id`` is the scheduler's id of the batch job the run ran in, if any. The timeline's
    events go to the run's event file where the database has an events folder
    (``results_db.store.event_files``), else, or with ``events_table``, to the events table.
    """
    run_dir = Path(run_dir)
    result = _read_result(run_dir)
    rank_files = sorted((run_dir / METRICS_DIR).glob("rank-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if not rank_files and result.get("kind") != "command":  # a command that never started has none
        raise IngestError(f"{run_dir}/{METRICS_DIR}: no rank-*.jsonl files")

    accounted = _slurm_energy_of(rank_files)
    folder = None if events_table else event_files.events_dir(engine)
    database = event_files.database_id(engine) if folder is not None else None   # before the write lock
    with Session(writer(engine)) as session, session.begin():
        run = session.get(Run, run_id, with_for_update=engine.dialect.name != "sqlite")
        if run is None:
            raise IngestError(f"run id {run_id} is not in the database")
        if run.ingested_at is not None:
            return False
        steps = RowSink(session, "steps", ("run_id", "rank", *STEP_FIELDS))
        events = (event_sink.ColumnSink(folder, run_id, database=database) if folder is not None
                  else RowSink(session, "events", _EVENT_COLUMNS))
        totals = _RunTotals()
        path = run_dir
        try:
            try:  # a record missing a field its type needs breaks the contract: one line, not a KeyError
                for path in rank_files:
                    _ingest_rank(session, run_id, path, steps, events, totals)
                steps.flush()
                events.flush()
            except (KeyError, TypeError, *_integrity_errors()) as exc:
                what = exc.orig if isinstance(exc, IntegrityError) else exc
                raise IngestError(f"{path}: a record lacks or mistypes a field the metrics contract needs "
                                  f"({type(what).__name__}: {str(what).splitlines()[0]})") from None
            except IngestError as exc:   # the event sink's, from a flush or a rank's end: the file named
                if str(exc).startswith(str(path)):
                    raise
                raise IngestError(f"{path}: {exc}") from None
            if events.written:
                _derive_step_stats(session, run_id, events)
            if isinstance(events, event_sink.ColumnSink):
                run.events_file = events.commit()   # in place before the transaction commits
        except BaseException:
            if isinstance(events, event_sink.ColumnSink):
                events.discard()
            raise
        _finish_run(run, result, totals, job_id, accounted)
        session.flush()
        failpoint("ingest")   # the reliability suite: killed with every row written but not committed
    return True
