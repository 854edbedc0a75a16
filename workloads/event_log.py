"""A rank's timeline events as binary columns: ``metrics/events-rank-<r>.arrows``, an Arrow IPC
stream (``run_folder.rank_events_file``).

Why Arrow IPC and not JSON lines: a 256-rank, 1,000-step timeline of ResNet-50's shape is 44.8 M
events, 7.0 GB as JSON, whose parse was the floor of ingestion (48.6 s). As columns the same
events are typed numbers and dictionary-coded names that ingestion reads without parsing, and
pyarrow is already a dependency. Why a stream and not Parquet or an IPC file: a stream is
readable up to its last complete batch, so a rank killed mid-run loses at most the buffer it had
not handed over; a Parquet file or an IPC file is unreadable without the footer
written at close. Why not fixed-width numpy records: names (tensors, phases, a fused buffer's
members) would need a side table of their own; a stream carries its dictionaries.

Off the training path: ``add`` appends to Python lists (cheaper than the ``json.dumps`` a line it
replaces); every ``BATCH`` events the lists are handed to a writer thread, which builds the batch
(the names dictionary-coded) and writes it, flushed, while the rank trains on. The thread holds
at most ``QUEUED`` batches; past that ``add`` waits (a disk slower than the events, never memory
without bound). ``close`` hands over the rest and waits for the thread.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

from .run_folder import rank_events_file

BATCH = 16384    # events a batch: ~0.8 MB of columns; what a killed rank may lose at most
QUEUED = 4       # batches waiting for the writer thread before add() waits

# the stream's columns, as a rank writes them (the rank is the file's name); ``tensors``: a fused
# collective's members, comma-joined (a negotiation's count of tensors is not kept, as before)
FIELDS = ("step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival")


def stream_schema():
    import pyarrow as pa

    name = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([("step", pa.int32()), ("tensor", name), ("phase", name), ("t0", pa.float64()),
                      ("t1", pa.float64()), ("bytes", pa.int64()), ("tensors", name), ("arrival", pa.float64())])


def batch_of(columns: dict[str, Any]):
    """A record batch of the stream's schema from columns (lists or numpy arrays)."""
    import pyarrow as pa

    schema = stream_schema()
    arrays = []
    for field in schema:
        values = columns[field.name]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class EventLog:
    """One rank's event stream (module docstring). ``add`` takes an event's fields as the
    training loop and the engine make them; unknown keys are ignored, as the JSON reader did."""

    def __init__(self, run_dir: str | Path, rank: int, batch: int = BATCH) -> None:
        import pyarrow as pa

        self.path = rank_events_file(run_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.batch = batch
        self._file = pa.OSFile(str(self.path), "wb")
        self._writer = pa.ipc.new_stream(self._file, stream_schema())
        # the first batch a process builds costs 0.2-0.3 s of CPU (pyarrow loads its compute functions
        # for the names' dictionary coding): paid here, before training, as the import is, and not
        # by the writer thread beside the first steps (there it was 4-8 % of a 24-step run's time)
        batch_of({name: [0] if name == "step" else [None] for name in FIELDS})
        self._cols: tuple[list, ...] = tuple([] for _ in FIELDS)
        self._queue: queue.Queue = queue.Queue(QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="event-log-writer", daemon=True)
        self._thread.start()
        self.written = 0
        self.writer_cpu_seconds = 0.0   # the writer thread's CPU time: what the timeline costs off the loop

    def add(self, step: int, tensor: str | None, phase: str, t0: float, t1: float, bytes: int = 0,
            tensors: Any = None, arrival: float | None = None, **_: Any) -> None:
        c = self._cols
        c[0].append(step)
        c[1].append(tensor if tensor is not None else "")
        c[2].append(phase)
        c[3].append(t0)
        c[4].append(t1)
        c[5].append(bytes or 0)
        c[6].append(",".join(tensors) if tensors.__class__ is list else None)
        c[7].append(arrival)
        if len(c[0]) >= self.batch:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"{self.path}: the event writer failed: {self._error}") from self._error
        if self._cols[0]:
            self._queue.put(self._cols)
            self._cols = tuple([] for _ in FIELDS)

    def _run(self) -> None:
        import time

        while True:
            cols = self._queue.get()
            if cols is None:
                self._queue.task_done()
                return
            try:
                if self._error is None:
                    cpu = time.thread_time()
                    self._writer.write_batch(batch_of(dict(zip(FIELDS, cols))))
                    self._file.flush()   # what is written stays readable if the rank is killed next
                    self.writer_cpu_seconds += time.thread_time() - cpu
                    self.written += len(cols[0])
            except BaseException as exc:  # noqa: BLE001  (raised in the rank at its next hand-over)
                self._error = exc
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Hand over what is buffered (an epoch's end: the events so far reach the disk soon)."""
        self._hand_over()

    def written_all(self) -> None:
        """Hand over what is buffered and wait until the writer thread has written it all (the
        training over: ``writer_cpu_seconds`` then counts every event); after ``close``, nothing."""
        if not self._thread.is_alive():
            return
        self._hand_over()
        self._queue.join()

    def close(self) -> None:
        if self._thread.is_alive():
            self._hand_over()
            self._queue.put(None)
            self._thread.join()
        if not self._file.closed:
            self._writer.close()
            self._file.close()
        if self._error is not None:
            raise RuntimeError(f"{self.path}: the event writer failed: {self._error}") from self._error


def write_stream(path: Path, batches) -> None:
    """Whole batches to a new stream at ``path`` at once (a fixture, a test's stand-in rank)."""
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as fh, pa.ipc.new_stream(fh, stream_schema()) as writer:
        for batch in batches:
            writer.write_batch(batch)


def read_events(run_dir: str | Path, rank: int) -> list[dict[str, Any]]:
    """A rank's events as the dicts it added (a fused collective's ``tensors`` a list again): for
    a test or a look by hand; ingestion reads the stream as columns (``results_db.ingest.rank_events``)."""
    import pyarrow as pa

    with pa.memory_map(str(rank_events_file(run_dir, rank))) as source:
        rows = pa.ipc.open_stream(source).read_all().to_pylist()
    for row in rows:
        row["tensors"] = row["tensors"].split(",") if row["tensors"] is not None else None
    return rows
