"""Writers for the metrics contract that results_db ingests (the files: ``run_folder``).

One JSON object per line per rank in ``<run_dir>/metrics/rank-<r>.jsonl`` (a timeline's events
in the rank's binary stream beside it: ``event_log``); rank 0
writes ``result.json`` last, atomically, so its presence means the run finished.
Lines are buffered and flushed at epoch boundaries: writing to a parallel file
system on every step would perturb what is being measured.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .run_folder import METRICS_SCHEMA, rank_metrics_file, result_file


def _cpulist(text: str) -> set[int]:
    """``0-3,8,10-11`` as a set of CPU numbers (the kernel's cpulist format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            out.update(range(int(low), int(high or low) + 1))
    return out


def numa_nodes(cpus: list[int] | None, root: Path = Path("/sys/devices/system/node")) -> list[int] | None:
    """The NUMA nodes holding these CPUs (the binding audit compares them with the GPU's);
    None where the kernel does not say."""
    if cpus is None or not root.is_dir():
        return None
    wanted = set(cpus)
    nodes = []
    for node in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            if _cpulist((node / "cpulist").read_text()) & wanted:
                nodes.append(int(node.name[4:]))
        except (OSError, ValueError):
            return None
    return nodes


def cpu_affinity() -> list[int] | None:
    """The CPUs this rank may run on (its affinity as the launcher's binding, a cpuset or
    ``taskset`` left it; a CPU quota such as ``docker --cpus`` does not show here): how many
    ranks share a CPU is what the performance model's crowding term needs
    (``perf_model.oversubscription``), and a site file cannot know a run's pinning."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _finite(fields: dict[str, Any]) -> dict[str, Any]:
    """NaN and infinities become null: JSON has no such numbers, and the strict reader that
    ingests the files refuses them (a diverged loss, an emulated run's unmeasured accuracy)."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in fields.values()):
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in fields.items()}
    return fields


class MetricsWriter:
    """``events``: a ``timeline=true`` rank's events go to its binary stream (``event_log``),
    opened here, before training starts (pyarrow's import is not a step's); without it, an
    event is a line of the .jsonl as before (a test's stand-in writer, an old reader's form)."""

    def __init__(self, run_dir: str | Path, rank: int, events: bool = False) -> None:
        path = rank_metrics_file(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", buffering=1 << 16)
        self._events = None
        if events:
            from .event_log import EventLog

            self._events = EventLog(run_dir, rank)

    def _write(self, kind: str, fields: dict[str, Any]) -> None:
        record = {"type": kind, "schema": METRICS_SCHEMA, **_finite(fields)}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def run_start(self, **fields: Any) -> None:
        self._write("run_start", fields)
        self.flush()

    def step(self, **fields: Any) -> None:
        self._write("step", fields)

    def event(self, **fields: Any) -> None:
        if self._events is not None:
            self._events.add(**fields)
        else:
            self._write("event", fields)

    def events_cost(self) -> dict[str, float] | None:
        """What the binary stream's writer thread cost: its CPU seconds and the events it wrote,
        every event added (it waits for the thread to write them); None without a stream. Called
        once training is over: the wait is not a step's."""
        if self._events is None:
            return None
        self._events.written_all()
        return {"writer_cpu_seconds": self._events.writer_cpu_seconds, "events_written": self._events.written}

    def round(self, **fields: Any) -> None:
        self._write("round", fields)

    def contribution(self, **fields: Any) -> None:
        """What this rank put into an eager-SGD round (every rank writes these; ``round``
        records, written by rank 0, are ingested, these are read by tests and analyses)."""
        self._write("contribution", fields)

    def eval(self, **fields: Any) -> None:
        self._write("eval", fields)
        self.flush()
        if self._events is not None:   # an epoch's end: its events on their way to the disk
            self._events.flush()

    def run_end(self, **fields: Any) -> None:
        self._write("run_end", fields)
        self.flush()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        try:
            if self._events is not None:
                self._events.close()
        finally:
            if not self._file.closed:
                self._file.close()


def write_result(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """Write the run summary atomically: readers never see a half-written file."""
    path = result_file(run_dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema": METRICS_SCHEMA, **_finite(summary)}, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path
