"""A run's timeline events as one columnar (Parquet) file beside the database.

Why: a 256-rank, 1,000-step timeline holds some 16 million events. As rows of the ``events``
table they take minutes to insert and gigabytes to keep; as Parquet (strings dictionary-encoded,
one row group per few thousand events of one rank, in step order) they are written as fast as the
ranks' JSON lines are parsed, and read back by column and by step range, the row groups' step
statistics skipping the rest. The measures derived from them (``step_stats``) stay in SQL.

Where: ``$SCALESTUDY_EVENTS_DIR`` when set; else, for a SQLite database file, the folder beside it
(``results.db`` -> ``results.db.events/``). Without either (PostgreSQL without the variable, an
in-memory SQLite) the events go to the ``events`` table as before. ``runs.events_file`` names the
run's file relative to that folder, so a database copied with its folder keeps its timelines; a
run whose file is gone is said so, in one line, by whatever reads it.

``query.events`` and the figures read both kinds of run alike (``read`` here, the table there).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from orjson import loads as _loads
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from .columns import QueryError

EVENTS_DIR_ENV = "SCALESTUDY_EVENTS_DIR"
# the events table's columns less ``id`` and ``run_id`` (a file holds one run)
COLUMNS = ("rank", "step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival")
_JSON_BLOCK = 1 << 19   # bytes per block of the JSON reader: a 4 MiB block of lines parses on both cores here
ROW_GROUP = 5000   # events per row group: fine enough for step-range reads, coarse enough to write fast
_GROUPS_PER_READ = 16   # row groups read and filtered at once: memory holds at most this many unfiltered


class EventFileError(QueryError):
    """A run's event file cannot be found, read or written: a QueryError, so that every command
    that reads results says it in one line."""


def events_dir(engine: Engine) -> Path | None:
    """The folder this database's event files go in, or None: the events table."""
    configured = os.environ.get(EVENTS_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    url = make_url(str(engine.url))
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:" \
            or url.query.get("uri") or url.database.startswith("file:"):
        return None
    db = Path(url.database).expanduser().resolve()
    return db.with_name(db.name + ".events")


def file_name(run_id: int) -> str:
    return f"run-{int(run_id)}.parquet"


def path_of(engine: Engine, run_id: int, name: str) -> Path:
    folder = events_dir(engine)
    if folder is None:
        raise EventFileError(f"run {run_id}: its timeline is in {name}, in a folder of event files; this "
                             f"database has none: set {EVENTS_DIR_ENV} to the folder that holds {name}")
    path = folder / name
    if not path.is_file():
        raise EventFileError(f"run {run_id}: its timeline file {path} is missing (moved without the "
                             f"database's events folder? set {EVENTS_DIR_ENV} to where it is)")
    return path


def _schema():
    import pyarrow as pa

    return pa.schema([("rank", pa.int32()), ("step", pa.int32()), ("tensor", pa.string()),
                      ("phase", pa.string()), ("t0", pa.float64()), ("t1", pa.float64()),
                      ("bytes", pa.int64()), ("tensors", pa.string()), ("arrival", pa.float64())])


def _json_schema():
    """The fields of an event record as the JSON reader parses them. Not ``tensors``: a fused
    collective's is a list of names, a negotiation's a count (which the events table does not keep)."""
    import pyarrow as pa

    return pa.schema([("step", pa.int32()), ("tensor", pa.string()), ("phase", pa.string()),
                      ("t0", pa.float64()), ("t1", pa.float64()), ("bytes", pa.int64()),
                      ("arrival", pa.float64())])


REQUIRED = ("step", "phase", "t0", "t1")   # what the events table holds NOT NULL and has no default for


class ColumnSink:
    """Event records into one run's Parquet file.

    Two ways in: the ingestion loop's tuples (``rows``, ``run_id`` first: the same face as
    ``sinks.RowSink``, so the loop does not know which store it fills), and whole event lines
    (``add_lines``), which pyarrow's JSON reader parses in C++, an order of magnitude faster
    than a Python loop. Written to a temporary name; ``commit`` puts the file in place just
    before the run's transaction commits, ``discard`` removes it when ingestion fails."""

    def __init__(self, folder: Path, run_id: int, batch: int = ROW_GROUP) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EventFileError(f"timeline events folder {folder} (${EVENTS_DIR_ENV}, or beside the database): "
                                 f"cannot be made ({exc.strerror or exc})") from None
        self.name = file_name(run_id)
        self.path = folder / self.name
        self.tmp_path = folder / f".{self.name}.{os.getpid()}.tmp"
        _remove_dead_writers(folder, self.name)
        self.batch = batch
        self.rows: list[tuple] = []
        self.written = 0
        self._tables: list = []
        self._pending = 0
        self._writer = None

    def add_lines(self, rank: int, lines: list[bytes]) -> None:
        """Event records, one JSON object a line, of ``rank``. TypeError names a missing or
        mistyped field (the caller finds the line)."""
        import io

        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        data = b"".join(lines)
        parse = pj.ParseOptions(explicit_schema=_json_schema(), unexpected_field_behavior="ignore")
        try:
            try:   # blocks parsed in parallel, on as many cores as pyarrow's pool has
                table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=_JSON_BLOCK),
                                     parse_options=parse)
            except pa.ArrowInvalid as exc:
                if "straddling" not in str(exc):
                    raise
                # a line longer than a block (a fused buffer of thousands of tensors): one block
                table = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(block_size=len(data) + 1),
                                     parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(str(exc).splitlines()[0]) from None
        if table.num_rows != len(lines):
            raise TypeError(f"{len(lines)} lines gave {table.num_rows} records")
        for name in REQUIRED:
            if table[name].null_count:
                raise TypeError(f"an event without {name!r}")
        n = table.num_rows
        fused = [None] * n   # a fused collective's tensors, joined as the table keeps them
        for i, raw in enumerate(lines):
            if b'"tensors":[' in raw:
                names = _loads(raw).get("tensors")
                fused[i] = ",".join(names) if names.__class__ is list else None
        columns = {"rank": pa.array(np.full(n, rank, dtype=np.int32)),
                   "step": table["step"], "tensor": pc.fill_null(table["tensor"], ""), "phase": table["phase"],
                   "t0": table["t0"], "t1": table["t1"], "bytes": pc.fill_null(table["bytes"], 0),
                   "tensors": pa.array(fused, pa.string()), "arrival": table["arrival"]}
        self._add(pa.table(columns, schema=_schema()))

    def flush(self) -> None:
        """The tuples so far, and everything pending, as row groups of the file."""
        if self.rows:
            import pyarrow as pa

            columns = list(zip(*self.rows))[1:]   # less run_id
            try:
                table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, _schema())],
                                             schema=_schema())
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise TypeError(str(exc).splitlines()[0]) from None
            self.rows = []
            self._tables.append(table)
            self._pending += table.num_rows
        self._write()

    def _add(self, table) -> None:
        self._tables.append(table)
        self._pending += table.num_rows
        if self._pending >= self.batch:
            self._write()

    def _write(self) -> None:
        if not self._pending:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(self.tmp_path, _schema(), compression="zstd",
                                            use_dictionary=["tensor", "phase", "tensors"], write_statistics=["step"])
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._writer.write_table(table, row_group_size=self.batch)
        self.written += table.num_rows
        self._tables, self._pending = [], 0

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def commit(self) -> str | None:
        """The file in place; its name, None where no event was written."""
        self.close()
        if not self.written:
            self.discard()
            return None
        os.replace(self.tmp_path, self.path)
        return self.name

    def discard(self) -> None:
        self.close()
        self.tmp_path.unlink(missing_ok=True)


def _remove_dead_writers(folder: Path, name: str) -> None:
    """Temporary files of this run left by an ingestion that was killed (its process is gone)."""
    for tmp in folder.glob(f".{name}.*.tmp"):
        try:
            pid = int(tmp.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            continue


class EventFile:
    """One run's event file, opened once: its footer (several MiB of metadata per 10^7 events,
    held again by every fresh open, which pyarrow did not give back here) and each row group's
    step range are read once however many windows are read from it."""

    def __init__(self, path: Path) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        self.path = path
        self._file = pq.ParquetFile(path)
        meta = self._file.metadata
        self.rows = int(meta.num_rows)
        index = meta.schema.names.index("step")
        lows, highs = np.empty(meta.num_row_groups, np.int64), np.empty(meta.num_row_groups, np.int64)
        self._exact = True
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max:   # a file another writer made: no pruning
                lows[g], highs[g], self._exact = np.iinfo(np.int64).min, np.iinfo(np.int64).max, False
            else:
                lows[g], highs[g] = stats.min, stats.max
        self._lows, self._highs = lows, highs

    def groups(self, steps: tuple[int, int] | None) -> list[int]:
        """The row groups that may hold steps ``first..last``, by their step statistics."""
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
        import pyarrow as pa
        import pyarrow.compute as pc

        names = list(columns) if columns else list(COLUMNS)
        needed = names + [c for c, used in (("phase", phases), ("step", steps is not None))
                          if used and c not in names]
        wanted = pa.array(list(phases), pa.string()) if phases else None
        parts = []
        groups = self.groups(steps)
        for at in range(0, len(groups), _GROUPS_PER_READ):
            table = self._file.read_row_groups(groups[at:at + _GROUPS_PER_READ], columns=needed, use_threads=False)
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
            return _schema().empty_table().select(names).to_pandas()
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
        self._file.close()


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
