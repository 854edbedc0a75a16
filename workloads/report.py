"""Report measurements from your own training script, in scalestudy's metrics format.

::

    from workloads import report

    for step, batch in enumerate(loader):
        t0 = time.perf_counter()
        ...                                   # forward, backward, allreduce, update
        report.step(step=step, samples=len(batch), seconds=time.perf_counter() - t0, loss=loss.item())
    report.eval(epoch=epoch, top1=accuracy, loss=val_loss)
    report.result(throughput=samples_per_second, val_loss=val_loss)

Under ``scalestudy sweep`` (``workload.kind: command``) every call appends one line
to ``<run_dir>/metrics/rank-<r>.jsonl`` — the files the built-in workloads write —
so your runs get per-step tables, accuracy curves and figures too. ``result`` (rank
0's counts) gives the run's headline numbers: ``throughput`` and any other metric.
Outside a scalestudy run (no ``SCALESTUDY_RUN_DIR`` in the environment) every call
does nothing, so the script still runs by hand. Needs neither torch nor MPI.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Optional, TextIO

from .run_folder import METRICS_SCHEMA, REPORTED_RESULT_FILE, STEP_PHASES, rank_metrics_file

RUN_DIR_ENV, RANK_ENV, SIZE_ENV = "SCALESTUDY_RUN_DIR", "SCALESTUDY_RANK", "SCALESTUDY_WORLD_SIZE"

_file: Optional[TextIO] = None
_t0 = time.time()


def run_dir() -> Optional[Path]:
    value = os.environ.get(RUN_DIR_ENV)
    return Path(value) if value else None


def rank() -> int:
    return int(os.environ.get(RANK_ENV, "0"))


def enabled() -> bool:
    """True inside a scalestudy run."""
    return run_dir() is not None


def append_record(path: Path, kind: str, fields: dict[str, Any]) -> None:
    """One record, appended and flushed (used by the launch wrapper around the program)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps({"type": kind, "schema": METRICS_SCHEMA, **fields}, separators=(",", ":")) + "\n")


def _write(kind: str, fields: dict[str, Any], flush: bool = False) -> None:
    global _file
    directory = run_dir()
    if directory is None:
        return
    if _file is None:
        path = rank_metrics_file(directory, rank())
        path.parent.mkdir(parents=True, exist_ok=True)
        _file = open(path, "a", buffering=1 << 16)
        atexit.register(_file.close)
    _file.write(json.dumps({"type": kind, "schema": METRICS_SCHEMA, **fields}, separators=(",", ":")) + "\n")
    if flush:
        _file.flush()


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"report: {name}={value!r} is not a finite number")
    return float(value)


def step(*, step: int, samples: int, seconds: Optional[float] = None, loss: Optional[float] = None, epoch: int = 0,
         **phases: float) -> None:
    """One training step of this rank: the samples this rank processed (its share of the
    global batch, as in the built-in loop) and the step's duration; optionally ``loss``
    and phase times in seconds (``data``, ``forward``, ``backward``, ``comm_wait``,
    ``update``, ``delay``). Without ``seconds`` the step lasted the sum of its phases."""
    if run_dir() is None:
        return
    unknown = sorted(set(phases) - set(STEP_PHASES))
    if unknown:
        raise ValueError(f"report.step: unknown phase {unknown[0]!r}; known: {', '.join(STEP_PHASES)}")
    now = time.time()
    times = {p: _number(p, phases.get(p, 0.0)) for p in STEP_PHASES}
    total = _number("seconds", seconds) if seconds is not None else sum(times.values())
    _write("step", {"step": int(step), "epoch": int(epoch), "samples": int(samples), "t_start": now - total,
                    "seconds": total, "loss": None if loss is None else _number("loss", loss), **times})


def eval(*, epoch: int, top1: Optional[float] = None, loss: Optional[float] = None,  # noqa: A001 - the record's name
         samples_seen: Optional[int] = None) -> None:
    """An evaluation (rank 0's is the one stored): accuracy in [0, 1] and/or loss."""
    if run_dir() is None or rank() != 0:
        return
    _write("eval", {"epoch": int(epoch), "wall": time.time() - _t0,
                    "top1": None if top1 is None else _number("top1", top1),
                    "loss": None if loss is None else _number("loss", loss),
                    "samples_seen": samples_seen}, flush=True)


def result(**metrics: float) -> None:
    """The run's headline numbers, from rank 0: ``throughput`` (samples/s) and any other metric."""
    directory = run_dir()
    if directory is None or rank() != 0:
        return
    values = {name: _number(name, value) for name, value in metrics.items()}
    path = directory / REPORTED_RESULT_FILE   # merged into result.json once the whole job has ended
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schema": METRICS_SCHEMA, **values}, sort_keys=True) + "\n")
    os.replace(tmp, path)
    if _file is not None:
        _file.flush()
