"""Reading one rank's metrics file (``metrics/rank-N.jsonl``): its records, and its event lines
handed over unparsed, a block at a time.

Why a block and not a line: a 256-rank, 1,000-step timeline of ResNet-50 is some 45 million
lines. Looked at one by one in Python (read, test the prefix, append) they cost more than the
JSON reader's whole parse; found with numpy over a block of bytes, the event lines go to the
reader as the block's bytes less its few other lines (a step record in every ~175).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

try:  # orjson parses the metrics lines several times faster; json is the fallback
    from orjson import JSONDecodeError as _DecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    from json import JSONDecodeError as _DecodeError
    from json import loads as _loads

from workloads.run_folder import SUPPORTED_METRICS_SCHEMAS

if TYPE_CHECKING:
    import numpy as np

BLOCK = 1 << 22   # bytes read at a time (then to the end of the line)
_EVENT_MARK = b'{"type":"event"'


class IngestError(ValueError):
    """The metrics of a run cannot be read as the contract says."""


def split_lines(data: bytes, prefixes: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lines of ``data``: their starts, their ends (past the newline) and which of them
    begin with one of ``prefixes`` and end with a newline. (numpy is imported here: a sweep's
    driver, which ingests runs without timelines, starts faster without it.)"""
    import numpy as np

    raw = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(raw == ord("\n")) + 1
    if len(data) and data[-1:] != b"\n":
        ends = np.append(ends, len(data))
    starts = np.zeros_like(ends)
    starts[1:] = ends[:-1]
    matched = np.zeros(len(ends), bool)
    if not len(ends):
        return starts, ends, matched
    terminated = raw[ends - 1] == ord("\n")
    for prefix in prefixes:
        size = len(prefix)
        candidates = np.flatnonzero(terminated & (ends - starts > size) & ~matched)
        if len(candidates):
            heads = np.lib.stride_tricks.sliding_window_view(raw, size)[starts[candidates]]
            matched[candidates[(heads == np.frombuffer(prefix, np.uint8)).all(axis=1)]] = True
    return starts, ends, matched


class RankFileReader:
    """Records of one rank file, read in blocks of lines.

    Only the file's last line may be cut off (a writer killed mid-line): it is
    skipped and noted in ``truncated``. A bad line anywhere else is an error.

    ``divert``: whole lines that begin with one of ``DIVERT_PREFIXES`` (an event record as
    ``workloads.metrics`` writes it, of a supported schema) are handed over a block at a time,
    unparsed, as the block's bytes less its other lines and their count, instead of being
    yielded (``event_sink.ColumnSink.add_block`` parses them in C++). Should it find one bad,
    the block is read again line by line to name it. ``prepare``: what to do to those bytes
    before they are handed over, in the read-ahead thread (beside the parse of the block before).
    """

    DIVERT_PREFIXES = tuple(b'{"type":"event","schema":%d,' % v for v in SUPPORTED_METRICS_SCHEMAS)

    def __init__(self, path: Path, divert: Callable[[Any, int], None] | None = None,
                 prepare: Callable[[bytes], Any] | None = None) -> None:
        self.path = path
        self.truncated = False
        self.divert = divert
        self.prepare = prepare

    def _blocks(self) -> Iterator[tuple[bytes, bool, Any]]:
        """The file's blocks of whole lines: each with whether it is the last, and, when it holds
        event lines to divert, where its lines are (``split_lines``) and the diverted lines' bytes
        (prepared), else None."""
        with open(self.path, "rb") as fh:
            while True:
                data = fh.read(BLOCK)
                if not data:
                    return
                if data[-1:] != b"\n":
                    data += fh.readline()
                last_block = not fh.peek(1)
                split = None
                if self.divert is not None and _EVENT_MARK in data:
                    import numpy as np

                    starts, ends, diverted = split_lines(data, self.DIVERT_PREFIXES)
                    payload = None   # (none diverted: event lines of another form, read one by one)
                    if diverted.any():
                        payload = self._without(data, starts, ends, np.flatnonzero(~diverted).tolist())
                        payload = self.prepare(payload) if self.prepare else payload
                    split = starts, ends, diverted, payload
                yield data, last_block, split

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # a timeline's blocks are read and split in a thread, a block or two ahead of the parse
        blocks = _ahead(self._blocks()) if self.divert is not None else self._blocks()
        try:
            yield from self._records(blocks)
        finally:
            blocks.close()

    def _records(self, blocks: Iterator[tuple[bytes, bool, Any]]) -> Iterator[dict[str, Any]]:
        lineno = 0
        for data, last_block, split in blocks:
            if split is not None:
                import numpy as np

                starts, ends, diverted, payload = split
                others = np.flatnonzero(~diverted).tolist()
                lines = len(ends)
                numbered = zip(others, (data[start:end] for start, end in
                                        zip(starts[others].tolist(), ends[others].tolist())))
            else:   # no event line (a run without a timeline): no numpy
                block = io.BytesIO(data).readlines()
                lines, others, numbered = len(block), block, enumerate(block)
            for i, raw in numbered:
                try:
                    rec = _loads(raw)
                except _DecodeError as exc:
                    if not raw.strip():
                        continue
                    if last_block and i == lines - 1 and raw[-1:] != b"\n":
                        self.truncated = True   # the block's whole lines are still handed over
                        break
                    raise IngestError(f"{self.path}:{lineno + i + 1}: not valid JSON "
                                      f"({str(exc).split(':')[0]})") from None
                yield self._checked(rec, lineno + i + 1)
            count = lines - len(others)
            if count:
                try:
                    self.divert(payload, count)
                except TypeError as exc:
                    raise IngestError(self._bad_event(io.BytesIO(data).readlines(), lineno, exc)) from None
                except IngestError as exc:   # what the sink found across lines: the file named
                    raise IngestError(f"{self.path}: {exc}") from None
            lineno += lines
            if self.truncated:
                return

    def _checked(self, rec: Any, lineno: int) -> dict[str, Any]:
        if not isinstance(rec, dict):
            raise IngestError(f"{self.path}:{lineno}: not a JSON object")
        if rec.get("schema") not in SUPPORTED_METRICS_SCHEMAS:
            raise IngestError(
                f"{self.path}:{lineno}: metrics schema {rec.get('schema')!r} is not supported "
                f"(this scalestudy reads {', '.join(map(str, SUPPORTED_METRICS_SCHEMAS))}); upgrade scalestudy")
        return rec

    @staticmethod
    def _without(data: bytes, starts: np.ndarray, ends: np.ndarray, others: list[int]) -> bytes | bytearray:
        """``data`` less the lines ``others`` (a few: the step records among the events), as a
        bytearray that ``prepare`` may change in place (no second copy of the block alive). A
        join: faster than a numpy mask (1 against 3 ms a 4 MiB block)."""
        if not others:
            return data
        pieces, at = [], 0
        for start, end in zip(starts[others].tolist(), ends[others].tolist()):
            pieces.append(data[at:start])
            at = end
        pieces.append(data[at:])
        return bytearray().join(pieces)

    def _bad_event(self, block: list[bytes], first_lineno: int, exc: TypeError) -> str:
        """The first diverted line of ``block`` that is not a whole event record, by number."""
        from results_db.store.event_files import REQUIRED

        for j, raw in enumerate(block, start=first_lineno + 1):
            if not raw.startswith(self.DIVERT_PREFIXES):
                continue
            try:
                rec = _loads(raw)
            except _DecodeError as err:
                return f"{self.path}:{j}: not valid JSON ({str(err).split(':')[0]})"
            missing = [k for k in (*REQUIRED, "tensor") if not _event_field_ok(k, rec.get(k))]
            if missing:
                return (f"{self.path}:{j}: a record lacks or mistypes a field the metrics contract needs "
                        f"({', '.join(missing)})")
        return f"{self.path}: an event record the metrics contract cannot read ({exc})"


def _event_field_ok(name: str, value: Any) -> bool:
    if name in ("phase", "tensor"):
        return isinstance(value, str) or (name == "tensor" and value is None)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (name != "step" or value == int(value))


def _ahead(items: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``items`` made in a thread of their own, up to ``depth`` ahead of the consumer (a file's
    read and numpy's scans release the GIL while the consumer's JSON parse runs). An error in
    the thread is raised to the consumer; a consumer that stops early stops the thread."""
    import queue
    import threading

    made: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                made.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as exc:  # noqa: BLE001  (handed to the consumer, which raises it)
            put((end, exc))
        finally:
            items.close()

    thread = threading.Thread(target=run, name="rank-file-reader", daemon=True)
    thread.start()
    try:
        while True:
            item, error = made.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        stop.set()
        thread.join()
