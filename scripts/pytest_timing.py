"""A pytest plugin: where a lane's time goes, one JSON line per test appended to the file named by
$SCALESTUDY_TEST_TIMING (nothing is written without it).

pytest's ``--durations`` gives wall time only, and under a CPU-bound suite on 2 cores a test's wall
time is mostly the others' work: the CPU a test spent is what moving it saves. Each line holds the
lane and worker (so a worker's timeline, and the tail after the others finished, can be drawn), the
test's start and wall seconds, and the CPU seconds of the worker process and of the child processes
it waited for (``RUSAGE_CHILDREN``: a subprocess's MPI ranks count once ``mpiexec`` reaped them;
Slurm's jobs run under slurmd and do not). ``python scripts/test_timing_report.py FILE`` sums it.
Written by each worker for its own tests (an append of one short line is atomic); a test run once
more by scripts/pytest_retry.py is marked ``retry`` (the report leaves it out of the lane's time)."""

from __future__ import annotations

import json
import os
import resource
import time

_path: str | None = None
_start: dict[str, tuple[float, float, float]] = {}


def pytest_configure(config) -> None:
    """Under pytest-xdist the controlling process sees its workers' tests too: only they write. A
    process that writes takes the variable out of its environment, so that a test's own pytest run
    (tests/project/test_retry.py plants some) does not write its tests as the suite's."""
    global _path
    controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
    _path = None if controller else os.environ.pop("SCALESTUDY_TEST_TIMING", None)


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid, location) -> None:
    if _path:
        _start[nodeid] = (time.time(), *_cpu())


def pytest_runtest_logfinish(nodeid, location) -> None:
    if not _path or nodeid not in _start:
        return
    begun, own, children = _start.pop(nodeid)
    own_now, children_now = _cpu()
    line = {"test": nodeid, "lane": os.environ.get("SCALESTUDY_TEST_LANE", ""),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "start": round(begun, 3),
            "wall": round(time.time() - begun, 3), "cpu": round(own_now - own, 3),
            "children_cpu": round(children_now - children, 3),
            "retry": bool(os.environ.get("SCALESTUDY_TEST_RETRY"))}
    with open(_path, "a") as out:
        out.write(json.dumps(line) + "\n")
