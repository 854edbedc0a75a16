"""A run's timeline events as columnar (Parquet) files beside the database.

Why: a 256-rank, 1,000-step timeline holds some 16 million events (45 million for ResNet-50).
As rows of the ``events`` table they take minutes to insert and gigabytes to keep; as Parquet
(strings dictionary-encoded, one row group per few thousand events of one rank, in step order)
they are written as fast as the ranks' JSON lines are parsed, and read back by column and by
step range, the row groups' step statistics skipping the rest. The measures derived from them
(``step_stats``) are folded as the events are parsed and stay in SQL.

Layout: a run's events are a folder, ``<database id>/run-N.parquet/``, of part files of at most
``GROUPS_PER_PART`` row groups each, written two at a time by threads of their own (a part is
encoded and compressed whole, so ingestion holds one part filling and two being written: small
parts keep its memory flat however long the run, and two writers keep pace with the ranks'
binary streams, which need no parse). A file of that name (one part) is a run an earlier
scalestudy ingested; it reads the same. Names come as the writer gave them: plain strings (JSON
lines), or dictionary-coded (a binary stream), which ``read`` returns as strings.

Names: the database's id (``database_id``: a random UUID made once, in its ``settings`` table)
comes first, so that two databases sharing one folder (``$SCALESTUDY_EVENTS_DIR``) never share a
name (run N of each was ``run-N.parquet``, and one's timeline replaced the other's), a re-ingestion
of run N replaces or removes only its own database's file, and ``run_files`` lists exactly a set of
runs' files (what a copy of those runs must carry). Runs ingested before the id keep the names they
recorded (``run-N.parquet``) and read as before.

Where: ``$SCALESTUDY_EVENTS_DIR`` when set; else, for a SQLite database file, the folder beside it
(``results.db`` -> ``results.db.events/``). Without either (PostgreSQL without the variable, an
in-memory SQLite) the events go to the ``events`` table as before. ``runs.events_file`` names the
run's file relative to that folder, so a database copied with its folder keeps its timelines; a
run whose file is gone is said so, in one line, by whatever reads it.

``query.events`` and the figures read both kinds of run alike (``read`` here, the table there).
Ingestion writes them through ``event_sink.ColumnSink``.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Sequence

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from .columns import QueryError

EVENTS_DIR_ENV = "SCALESTUDY_EVENTS_DIR"
# the events table's columns less ``id`` and ``run_id`` (a file holds one run)
COLUMNS = ("rank", "step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival")
ROW_GROUP = 5000   # events per row group: fine enough for step-range reads, coarse enough to write fast
GROUPS_PER_PART = 20   # row groups per part file (10^5 events): ingestion holds a part filling and two being written
_GROUPS_PER_READ = 16   # row groups read and filtered at once: memory holds at most this many unfiltered


class EventFileError(QueryError):
    """A run's event file cannot be found, read or written: a QueryError, so that every command
    that reads results says it in one line."""


def events_dir(engine: Engine) -> Path | None:
    """The folder this database's event files go in, or None: the events table."""
    configured = os.environ.get(EVENTS_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return beside_file(engine)


def beside_file(engine: Engine) -> Path | None:
    """``FILE.events`` beside a SQLite database file (None for any other database): where its event
    files are when no ``$SCALESTUDY_EVENTS_DIR`` names a folder, and where an artifact carries them."""
    url = make_url(str(engine.url))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
            or url.query.get("uri") or url.database.startswith("file:"):
        return None
    db = Path(url.database).expanduser().resolve()
    return db.with_name(db.name + ".events")


DATABASE_ID = "database_id"   # the ``settings`` row that names this database's event files
_ID_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,64}")   # one folder name, nothing that leaves the events folder


def database_id(engine: Engine) -> str:
    """This database's identity: a random UUID (hex) made once, by migration 0018 (or here, for a
    database whose row is gone), kept in its ``settings`` table: a copy of the database's file keeps
    it, a copy of some of its rows into another database (``study_copy``) does not. Its event files
    are named under it (``file_name``). Read it before opening a write transaction on a SQLite
    database: making a missing row takes a write transaction of its own."""
    from sqlalchemy import insert, select
    from sqlalchemy.exc import IntegrityError

    from .schema import Setting
    from .connect import writer

    stmt = select(Setting.value).where(Setting.name == DATABASE_ID)
    with engine.connect() as conn:
        found = conn.execute(stmt).scalar()
    if found is None:
        try:
            with writer(engine).begin() as conn:
                conn.execute(insert(Setting).values(name=DATABASE_ID, value=uuid.uuid4().hex))
        except IntegrityError:   # made meanwhile by another writer: that one stands
            pass
        with engine.connect() as conn:
            found = conn.execute(stmt).scalar_one()
    if not _ID_SHAPE.fullmatch(str(found)):
        raise EventFileError(f"this database's {DATABASE_ID} ({found!r}, in its settings table) is not a "
                             "folder name (letters, digits, - and _): its event files cannot be named")
    return str(found)


def file_name(run_id: int, database: str) -> str:
    """Run ``run_id``'s events, relative to the events folder: under its database's id, so that no
    other database sharing the folder has that name (``runs.events_file`` records it)."""
    return f"{database}/run-{int(run_id)}.parquet"


def run_files(engine: Engine, run_ids: Sequence[int]) -> dict[str, Path]:
    """Exactly these runs' event files, and no other's: each name as ``runs.events_file`` records it
    (relative to the events folder, so where a copy of these runs' rows must find it under its own
    events folder) -> the file or folder it names now. Runs whose events, if any, are rows of the
    events table have no entry; a run whose file is gone raises EventFileError (a copy without it
    would not read)."""
    from sqlalchemy import select

    from .schema import Run

    ids = [int(i) for i in run_ids]
    stmt = (select(Run.id, Run.events_file).where(Run.id.in_(ids), Run.events_file.is_not(None))
            .order_by(Run.id))
    with engine.connect() as conn:
        recorded = [(int(run_id), str(name)) for run_id, name in conn.execute(stmt)]
    return {name: path_of(engine, run_id, name) for run_id, name in recorded}


def path_of(engine: Engine, run_id: int, name: str) -> Path:
    folder = events_dir(engine)
    if folder is None:
        raise EventFileError(f"run {run_id}: its timeline is in {name}, in a folder of event files; this "
                             f"database has none: set {EVENTS_DIR_ENV} to the folder that holds {name}")
    path = folder / name
    beside = beside_file(engine)
    if not path.exists() and beside is not None and (beside / name).exists():
        return beside / name   # a database that carries its own (an artifact, read with $SCALESTUDY_EVENTS_DIR set)
    if not path.exists():
        raise EventFileError(f"run {run_id}: its timeline file {path} is missing (moved without the "
                             f"database's events folder? set {EVENTS_DIR_ENV} to where it is)")
    return path


def arrow_schema():
    """The columns of a run's event parts, as the writer writes them and an empty read returns them."""
    import pyarrow as pa

    return pa.schema([("rank", pa.int32()), ("step", pa.int32()), ("tensor", pa.string()),
                      ("phase", pa.string()), ("t0", pa.float64()), ("t1", pa.float64()),
                      ("bytes", pa.int64()), ("tensors", pa.string()), ("arrival", pa.float64())])


REQUIRED = ("step", "phase", "t0", "t1")   # what the events table holds NOT NULL and has no default for
DERIVE_PHASES = ("allreduce", "backward", "update")   # the events the per-step measures read


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def remove_path(path: Path) -> None:
    """A run's events gone: a folder of parts, or the one file of an earlier layout."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class EventFile:
    """One run's events, indexed once: where each row group is (which part file) and its step
    range. A part's footer is read while its groups are, then let go: held open, every part's
    footer would grow with the run as the writer's did (~8 KB a group measured there, some 70 MiB
    for the 9,000 groups of a 256-rank ResNet-50 run). A file (not a folder) is a run that an
    earlier scalestudy ingested: one part."""

    def __init__(self, path: Path) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        self.path = path
        self.parts = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
        if not self.parts:   # emptied by hand, or a copy that left the files behind
            raise EventFileError(f"{path}: a run's events folder without its part files (part-*.parquet)")
        self.rows = 0
        lows, highs, where = [], [], []
        self._exact = True
        for p, part in enumerate(self.parts):
            try:
                with pq.ParquetFile(part) as opened:
                    meta = opened.metadata
            except OSError as exc:
                raise EventFileError(f"{part}: not a readable event file ({str(exc).splitlines()[0]})") from None
            self.rows += int(meta.num_rows)
            index = meta.schema.names.index("step")
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(index).statistics
                if stats is None or not stats.has_min_max:   # a file another writer made: no pruning
                    lows.append(np.iinfo(np.int64).min)
                    highs.append(np.iinfo(np.int64).max)
                    self._exact = False
                else:
                    lows.append(stats.min)
                    highs.append(stats.max)
                where.append((p, g))
            del meta
        self._lows, self._highs = np.array(lows, np.int64), np.array(highs, np.int64)
        self._where = where

    def groups(self, steps: tuple[int, int] | None) -> list[int]:
        """The row groups (numbered across the parts) that may hold steps ``first..last``."""
        import numpy as np

        if steps is None:
            return list(range(len(self._lows)))
        return np.flatnonzero((self._highs >= int(steps[0])) & (self._lows <= int(steps[1]))).tolist()

    def read(self, columns: Sequence[str] | None = None, phases: Sequence[str] | None = None,
             steps: tuple[int, int] | None = None):
        """The events as a DataFrame, only ``columns``, ``phases`` and steps ``first..last``.

        Some row groups at a time, filtered as they are read: memory holds what is kept (and
        ``_GROUPS_PER_READ`` groups), not what is scanned (``pyarrow.parquet.read_table(filters=...)``
        held four times as much here)."""
        import itertools

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        names = list(columns) if columns else list(COLUMNS)
        needed = names + [c for c, used in (("phase", phases), ("step", steps is not None))
                          if used and c not in names]
        wanted = pa.array(list(phases), pa.string()) if phases else None
        parts = []
        located = (self._where[g] for g in self.groups(steps))
        for p, in_part in itertools.groupby(located, key=lambda pg: pg[0]):
            groups = [g for _, g in in_part]
            with pq.ParquetFile(self.parts[p]) as opened:
                for at in range(0, len(groups), _GROUPS_PER_READ):
                    table = opened.read_row_groups(groups[at:at + _GROUPS_PER_READ], columns=needed,
                                                   use_threads=False)
                    keep = None
                    if wanted is not None:
                        keep = pc.is_in(table["phase"], value_set=wanted)
                    if steps is not None:
                        inside = pc.and_(pc.greater_equal(table["step"], int(steps[0])),
                                         pc.less_equal(table["step"], int(steps[1])))
                        keep = inside if keep is None else pc.and_(keep, inside)
                    if keep is not None:
                        table = table.filter(keep)
                    if table.num_rows:
                        parts.append(table.select(names))
        if not parts:
            return arrow_schema().empty_table().select(names).to_pandas()
        # names stored dictionary-coded (a timeline from the ranks' binary streams) read as strings
        plain = pa.schema([arrow_schema().field(n) for n in names])
        parts = [p.cast(plain) if any(pa.types.is_dictionary(f.type) for f in p.schema) else p for p in parts]
        return pa.concat_tables(parts).to_pandas()

    def step_range(self) -> tuple[int | None, int | None]:
        """The first and last step in the file, from its row groups' statistics where it has them."""
        if not len(self._lows):
            return None, None
        if not self._exact:
            frame = self.read(["step"])
            return (int(frame["step"].min()), int(frame["step"].max())) if len(frame) else (None, None)
        return int(self._lows.min()), int(self._highs.max())

    def close(self) -> None:
        """Nothing is held open between reads (kept for the callers' try/finally)."""


def read(path: Path, columns: Sequence[str] | None = None, phases: Sequence[str] | None = None,
         steps: tuple[int, int] | None = None):
    """``EventFile(path).read(...)``, for one read."""
    events = EventFile(path)
    try:
        return events.read(columns, phases, steps)
    finally:
        events.close()


def step_range(path: Path) -> tuple[int | None, int | None]:
    events = EventFile(path)
    try:
        return events.step_range()
    finally:
        events.close()


def row_count(path: Path) -> int:
    events = EventFile(path)
    try:
        return events.rows
    finally:
        events.close()
