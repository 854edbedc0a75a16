"""Writing a run's timeline events into its folder of Parquet parts (``event_files`` says where,
in what layout, and reads them back).

Why a module of its own: ingestion's fast path lives here — blocks of the ranks' JSON lines
parsed by pyarrow's JSON reader, the fused lists' key renamed first, Parquet written in a thread,
and the per-step measures folded as the events pass — while readers need none of it.
"""

from __future__ import annotations

import os
from pathlib import Path

from results_db.store import event_files
from results_db.store.event_files import (DERIVE_PHASES, EVENTS_DIR_ENV, REQUIRED, EventFileError, arrow_schema, part_name,
                          remove_path)

_WRITERS = 2   # part files written at once, each by a thread of its own (Parquet's encoding releases the GIL)
_ZSTD_LEVEL = 1   # zstd's fastest level: measured the same size as its default here, at 2.5x the speed
_JSON_BLOCK = 1 << 19   # bytes per block of the JSON reader: a 4 MiB block of lines parses on both cores here
_FOLD_ROWS = 200_000   # events the measures read, folded at once: ended ranks', or a long rank's complete steps
_LATE_STEPS = 4   # a long rank's last steps seen, kept unfolded: an engine event may be drained a step late


def _json_schema():
    """The fields of an event record as the JSON reader parses them. ``tensors`` as ``tensorL``
    where it is a list (a fused collective's names; see ``_LIST_KEY``)."""
    import pyarrow as pa

    return pa.schema([("step", pa.int32()), ("tensor", pa.string()), ("phase", pa.string()),
                      ("t0", pa.float64()), ("t1", pa.float64()), ("bytes", pa.int64()),
                      ("arrival", pa.float64()), ("tensorL", pa.list_(pa.string()))])


_DERIVE_COLUMNS = ["rank", "step", "tensor", "phase", "t0", "t1", "arrival"]   # what the per-step measures read of DERIVE_PHASES


# a fused collective's ``tensors`` (a list of names) under a key of its own, the same length, so
# that one parse reads it (a negotiation's ``tensors`` is a count, which the events table does not keep)
_LIST_KEY, _LIST_KEY_PARSED = b'"tensors":[', b'"tensorL":['


def rename_list_keys(data):
    """``data`` (bytes-like: whole event lines) with each ``_LIST_KEY`` as ``_LIST_KEY_PARSED``,
    found from the rare ``[`` with numpy (bytes.replace took as long as the JSON parse: a search
    for a pattern that starts with ``"``, the commonest byte of JSON, and a copy of the block).
    Inside a JSON string the quotes would be escaped: only the key matches. In place where
    ``data`` is writable (a bytearray), else a copy, and only where something is renamed."""
    import numpy as np

    raw = np.frombuffer(data, np.uint8)
    head = len(_LIST_KEY) - 1
    at = np.flatnonzero(raw[head:] == _LIST_KEY[-1]) + head   # each "[" past the first key's length
    if not len(at):
        return data
    window = np.lib.stride_tricks.sliding_window_view(raw, head)[at - head]
    hit = at[(window == np.frombuffer(_LIST_KEY[:-1], np.uint8)).all(axis=1)]
    if not len(hit):
        return data
    raw = raw.copy() if not raw.flags.writeable else raw
    changed = next(i for i, (a, b) in enumerate(zip(_LIST_KEY, _LIST_KEY_PARSED)) if a != b)
    raw[hit - head + changed] = _LIST_KEY_PARSED[changed]
    return raw


class ColumnSink:
    """Event records into one run's folder of Parquet parts.

    Two ways in: the ingestion loop's tuples (``rows``, ``run_id`` first: the same face as
    ``sinks.RowSink``, so the loop does not know which store it fills), and blocks of whole event
    lines (``add_block``), which pyarrow's JSON reader parses in C++, an order of magnitude faster
    than a Python loop. The events that the per-step measures read are kept per rank and folded
    into ``stats`` when the rank ends (``end_rank``), or, for a long rank, its steps well behind
    the latest as blocks come (``_fold_rank_head``). Written to a temporary folder; ``commit``
    puts it in place just before the run's transaction commits, ``discard`` removes it when
    ingestion fails. ``database``: the id of the database the run is in (``event_files.database_id``),
    under which its file is named: what the sink replaces or removes is that database's only."""

    def __init__(self, folder: Path, run_id: int, batch: int | None = None, *, database: str) -> None:
        self.name = event_files.file_name(run_id, database)
        self.path = folder / self.name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EventFileError(f"timeline events folder {folder} (${EVENTS_DIR_ENV}, or beside the database): "
                                 f"cannot be made ({exc.strerror or exc})") from None
        self.tmp_path = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        _remove_dead_writers(self.path.parent, self.path.name)
        self.batch = batch or event_files.ROW_GROUP
        self.part_rows = self.batch * event_files.GROUPS_PER_PART
        self.rows: list[tuple] = []
        self._submitted = 0
        self._tables: list = []
        self._pending = 0
        self._pool = None   # the writers' threads, from the first write
        self._writes: list = []   # their writes not yet seen done
        self._parts = 0    # part files begun
        self._derive: list = []   # this rank's events that the measures read, until end_rank
        self._derive_rows = 0
        self._fold_at = _FOLD_ROWS   # a long rank is folded when _derive_rows reaches it
        self._cut = None   # this rank's steps before it are folded (a long rank, folded as it goes)
        self._complete: list = []   # those of ranks that ended, until folded
        self.stats = None   # a timeline.StepStats once a rank had such events (pandas loaded then only)

    @property
    def written(self) -> int:
        """Events taken in so far (written, being written, or pending)."""
        return self._submitted + self._pending + len(self.rows)

    def add_table(self, rank: int, table) -> None:
        """Events of ``rank`` as its binary stream holds them (``rank_events``): nothing to parse,
        the names left dictionary-coded for the Parquet writer."""
        from .rank_events import store_columns

        self._rows_to_table()
        self._add(store_columns(rank, table))
        if self._derive_rows >= self._fold_at:
            self._fold_rank_head()

    def add_lines(self, rank: int, lines: list[bytes]) -> None:
        """Event records, one JSON object a line, of ``rank``."""
        self.add_block(rank, b"".join(lines), len(lines))

    def add_block(self, rank: int, data, count: int, renamed: bool = False) -> None:
        """``count`` event records of ``rank``, one JSON object a line, every line ending in a
        newline (``data`` bytes-like; ``renamed``: already through ``rename_list_keys``, as
        ingestion's read-ahead thread does). TypeError names a missing or mistyped field (the
        caller finds the line)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.json as pj

        parse = pj.ParseOptions(explicit_schema=_json_schema(), unexpected_field_behavior="ignore")
        data = pa.py_buffer(data if renamed else rename_list_keys(data))   # read in place, not copied
        try:
            try:   # blocks parsed in parallel, on as many cores as pyarrow's pool has
                table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(block_size=_JSON_BLOCK),
                                     parse_options=parse)
            except pa.ArrowInvalid as exc:
                if "straddling" not in str(exc):
                    raise
                # a line longer than a block (a fused buffer of thousands of tensors): one block
                table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(block_size=data.size + 1),
                                     parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(str(exc).splitlines()[0]) from None
        if table.num_rows != count:
            raise TypeError(f"{count} lines gave {table.num_rows} records")
        for name in REQUIRED:
            if table[name].null_count:
                raise TypeError(f"an event without {name!r}")
        n = table.num_rows
        columns = {"rank": pa.array(np.full(n, rank, dtype=np.int32)),
                   "step": table["step"], "tensor": pc.fill_null(table["tensor"], ""), "phase": table["phase"],
                   "t0": table["t0"], "t1": table["t1"], "bytes": pc.fill_null(table["bytes"], 0),
                   "tensors": pc.binary_join(table["tensorL"], ","), "arrival": table["arrival"]}
        self._rows_to_table()   # this block's other events (yielded before it), then the block
        self._add(pa.table(columns, schema=arrow_schema()))
        if self._derive_rows >= self._fold_at:
            self._fold_rank_head()

    def flush(self) -> None:
        """The tuples so far into the pending table; a part written once a part's worth waits (the
        rest at ``close``)."""
        self._rows_to_table()
        if self._pending >= self.part_rows:
            self._write()

    def end_rank(self) -> None:
        """A rank's events are all in: its measures can be folded into ``stats`` (see
        ``step_stats``), which happens once ``_FOLD_ROWS`` such events wait (pandas' cost is per
        call: several ranks at a time, memory bounded all the same)."""
        self._rows_to_table()
        self._complete += self._derive
        self._derive, self._derive_rows, self._fold_at, self._cut = [], 0, _FOLD_ROWS, None
        if sum(t.num_rows for t in self._complete) >= _FOLD_ROWS:
            self._fold()

    def _fold(self) -> None:
        if self._complete:
            import pyarrow as pa

            from .timeline import StepStats

            self.stats = self.stats or StepStats()
            self.stats.add(pa.concat_tables(self._complete).to_pandas())
            self._complete = []

    def _fold_rank_head(self) -> None:
        """A long rank's steps well behind the latest it reached, folded now: memory bounded by
        ``_FOLD_ROWS`` however many steps a rank runs (a 10^5-step rank held them all). An engine
        event may be written a step late (``workloads/train.py`` drains them after the step), so
        the last ``_LATE_STEPS`` steps seen stay, and the window is sorted by step first. The
        rank's last update before the cut stays too, so the next update's delay has its
        predecessor (alone in the next fold it adds a step already known and no delay). Called
        only after a block is in (never between a block's events and the others yielded before
        it), so that an event is late only as the writer made it."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.concat_tables(self._derive)
        steps = table["step"].to_numpy()
        if (steps[1:] < steps[:-1]).any():
            order = np.argsort(steps, kind="stable")
            table, steps = table.take(order), steps[order]
        distinct = np.unique(steps)
        if len(distinct) <= _LATE_STEPS:   # a few huge steps: wait for more
            self._fold_at = self._derive_rows + _FOLD_ROWS
            return
        cut = int(distinct[-_LATE_STEPS])
        head_rows = int(np.searchsorted(steps, cut, side="left"))
        head, tail = table.slice(0, head_rows), table.slice(head_rows)
        updates = np.flatnonzero(pc.equal(head["phase"], "update").to_numpy(zero_copy_only=False))
        if updates.size:
            tail = pa.concat_tables([head.slice(int(updates[-1]), 1), tail])
        self._complete.append(head)
        self._fold()
        self._derive, self._derive_rows, self._cut = [tail], tail.num_rows, cut
        self._fold_at = tail.num_rows + _FOLD_ROWS   # not again before _FOLD_ROWS more came

    def _out_of_order(self, step: int, after: int) -> None:
        from .rank_files import IngestError

        raise IngestError(f"a rank's events of step {step} came after its steps before {after} were folded "
                          f"into the per-step measures (a rank's events are folded once it is {_LATE_STEPS} "
                          "steps past them: an event may be written at most that late)")

    def step_stats(self):
        """The run's per-step measures, folded rank by rank as the events came in: the file is
        not read back (whole, or a window at a time) to derive them."""
        from .timeline import StepStats

        self.end_rank()
        self._fold()
        return (self.stats or StepStats()).result()

    def _rows_to_table(self) -> None:
        if not self.rows:
            return
        import pyarrow as pa

        columns = list(zip(*self.rows))[1:]   # less run_id
        try:
            table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema())],
                                         schema=arrow_schema())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TypeError(str(exc).splitlines()[0]) from None
        self.rows = []
        self._add(table, write=False)

    def _add(self, table, write: bool = True) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._tables and not table.schema.equals(self._tables[0].schema):   # coded and plain names
            self._tables = [t.cast(arrow_schema()) for t in self._tables]
            table = table.cast(arrow_schema())
        self._tables.append(table)
        self._pending += table.num_rows
        kept = table.filter(pc.is_in(table["phase"], value_set=pa.array(DERIVE_PHASES)))
        if kept.num_rows:
            kept = kept.cast(arrow_schema())   # the measures group by the names as strings
            if self._cut is not None and pc.min(kept["step"]).as_py() < self._cut:
                self._out_of_order(pc.min(kept["step"]).as_py(), self._cut)
            self._derive.append(kept.select(_DERIVE_COLUMNS))
            self._derive_rows += kept.num_rows
        if write and self._pending >= self.part_rows:
            self._write()

    def _write(self) -> None:
        """What is pending, as whole part files (``GROUPS_PER_PART`` row groups each, the last
        maybe fewer), each to a writer thread of its own: ``_WRITERS`` parts are encoded and
        compressed at once (which releases the GIL), beside the next chunk's read and the
        measures' fold. At most ``_WRITERS`` parts wait, so memory stays bounded; a thread's error
        is raised here, or at ``close``."""
        if not self._pending:
            return
        import pyarrow as pa

        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        self._tables, self._pending = [], 0
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(_WRITERS, thread_name_prefix="event-file-writer")
            self.tmp_path.mkdir(exist_ok=True)
        while table.num_rows:
            piece, table = table.slice(0, self.part_rows), table.slice(self.part_rows)
            self._submitted += piece.num_rows
            self._writes.append(self._pool.submit(self._write_part, piece, self._parts))
            self._parts += 1
            while len(self._writes) > _WRITERS or (self._writes and self._writes[0].done()):
                self._writes.pop(0).result()

    def _write_part(self, table, number: int) -> None:
        import pyarrow.parquet as pq

        with pq.ParquetWriter(self.tmp_path / part_name(number), table.schema, compression="zstd",
                              compression_level=_ZSTD_LEVEL, use_dictionary=["tensor", "phase", "tensors"],
                              write_statistics=["step"]) as writer:
            writer.write_table(table, row_group_size=self.batch)

    def close(self) -> None:
        """Everything pending written, every write done (an error in one raised here)."""
        try:
            self._rows_to_table()
            self._write()
            while self._writes:
                self._writes.pop(0).result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            self._writes = []

    def commit(self) -> str | None:
        """The run's parts in place; the folder's name, None where no event was written. Either way
        what this database's run had under that name before goes (an earlier attempt's, kept by an
        ingestion killed before its transaction committed, whose run ran again): never another
        database's, whose names begin with its own id."""
        self.close()
        if not self._submitted:
            self.discard()
            remove_path(self.path)
            return None
        remove_path(self.path)   # an earlier ingestion's (a run re-run), a folder or a file of one part
        os.replace(self.tmp_path, self.path)
        return self.name

    def discard(self) -> None:
        self._tables, self._pending, self.rows = [], 0, []   # nothing more is written
        try:
            self.close()
        except Exception:  # noqa: BLE001  (the ingestion has failed already: its error is the one told)
            pass
        finally:
            remove_path(self.tmp_path)


def _remove_dead_writers(folder: Path, name: str) -> None:
    """Temporary files of this run left by an ingestion that was killed (its process is gone)."""
    for tmp in folder.glob(f".{name}.*.tmp"):
        try:
            pid = int(tmp.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            remove_path(tmp)
        except (ValueError, PermissionError):
            continue
