"""Where a sweep driver's own time goes: seconds per part of its work (composing, validating,
starting the pool, waiting on runs, ingesting), for `bench_overhead.py` and `bench_sweep_scale.py`.
(Not a training step's phases: those are ``workloads.run_folder.STEP_PHASES``.)

With ``SCALESTUDY_PHASES=FILE`` in the environment the driver appends one JSON line
with its phase times, its own CPU time (all its threads, not its MPI jobs) and its peak
resident memory to FILE when it ends; otherwise recording costs a dictionary update per
phase and writes nothing.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Iterator

ENV = "SCALESTUDY_PHASES"
_T0 = time.perf_counter()
totals: dict[str, float] = {}


@contextmanager
def timed(name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        totals[name] = totals.get(name, 0.0) + time.perf_counter() - t0


def write() -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    # reaped children: Parsl's interchange and the scheduler's commands (sbatch, squeue); on
    # site=local also the runs' own mpiexec and ranks, so read it per site
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"since_import": time.perf_counter() - _T0, **{k: round(v, 4) for k, v in totals.items()},
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
              "children_cpu_s": round(children.ru_utime + children.ru_stime, 3)}
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")
