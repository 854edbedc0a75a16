"""Reading one rank's binary timeline (``metrics/events-rank-N.arrows``, written by
``workloads.event_log``): its batches, as tables of the event store's columns.

Nothing is parsed: the file is an Arrow IPC stream, so a batch is read as it lies and its names
(dictionary-coded) are decoded by Arrow. Read, not memory-mapped: a map's pages stay in the
process's resident memory until it is closed, a rank's whole file (+25 MiB at 4x the steps, which
the peak memory of ingestion counted); read a batch at a time, the same 256-rank ingestion took
the same time (7.2 against 7.6 s). A stream cut short (a rank killed mid-write) is
read to its last whole batch and said truncated, as a .jsonl cut mid-line is; anything else that
is not such a stream (another file under that name, a damaged batch, other columns) is an
``IngestError`` naming the file, in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from .rank_files import IngestError

CHUNK_ROWS = 1 << 18   # events handed to the sink at a time: a long rank's memory stays bounded

# what pyarrow says of a stream that ends inside a message: the rank stopped mid-write
_CUT = ("Expected to read", "Expected to be able to read", "read length", "Message body length")


class RankEventsReader:
    """Tables of ``CHUNK_ROWS`` events or fewer (the stream's own columns, no rank) of one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.truncated = False
        self.events = 0

    def _batches(self):
        import pyarrow as pa

        from workloads.event_log import stream_schema

        try:
            source = pa.OSFile(str(self.path))
        except OSError as exc:
            raise IngestError(f"{self.path}: cannot be read ({exc})") from None
        try:
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid as exc:
                if source.size() == 0:   # a rank killed before its stream's first bytes: no events
                    self.truncated = True
                    return
                raise IngestError(f"{self.path}: not an Arrow IPC stream of timeline events "
                                  f"({str(exc).splitlines()[0]})") from None
            wanted = stream_schema()
            if not reader.schema.equals(wanted):
                raise IngestError(f"{self.path}: its columns are not the timeline's (found "
                                  f"{', '.join(f'{f.name}: {f.type}' for f in reader.schema)}; expected "
                                  f"{', '.join(f'{f.name}: {f.type}' for f in wanted)})")
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except (pa.ArrowInvalid, OSError) as exc:
                    if any(word in str(exc) for word in _CUT):
                        self.truncated = True   # its whole batches are read; the cut one is not
                        return
                    raise IngestError(f"{self.path}: a damaged batch after {self.events} events "
                                      f"({str(exc).splitlines()[0]})") from None
                self.events += batch.num_rows
                yield batch
        finally:
            source.close()

    def __iter__(self) -> Iterator:
        import pyarrow as pa

        pending, rows = [], 0
        for batch in self._batches():
            pending.append(batch)
            rows += batch.num_rows
            while rows >= CHUNK_ROWS:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, CHUNK_ROWS)
                rest = table.slice(CHUNK_ROWS)
                pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            yield pa.Table.from_batches(pending)


def store_columns(rank: int, table, decoded: bool = False):
    """A table of the stream's columns in the event store's order (``event_files.COLUMNS``): the
    rank added, a missing byte count 0; the names stay dictionary-coded (the Parquet writer takes
    the codes as they are, and ``event_files`` reads them back as strings) unless ``decoded``.
    TypeError names a required field that is null (the caller names the file)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from results_db.store.event_files import REQUIRED, arrow_schema

    for name in REQUIRED:
        if table[name].null_count:
            raise TypeError(f"an event without {name!r}")
    n = table.num_rows
    columns = {"rank": pa.array(np.full(n, rank, dtype=np.int32)), "step": table["step"],
               "tensor": table["tensor"], "phase": table["phase"], "t0": table["t0"], "t1": table["t1"],
               "bytes": pc.fill_null(table["bytes"], 0), "tensors": table["tensors"], "arrival": table["arrival"]}
    out = pa.table(columns)
    return out.cast(arrow_schema()) if decoded else out


def rows_of(rank: int, table, run_id: int) -> list[tuple]:
    """The same events as the events table's rows (a database without an events folder)."""
    t = store_columns(rank, table, decoded=True)
    return list(zip([run_id] * t.num_rows, *(t[c].to_pylist() for c in t.column_names)))
