"""A pytest plugin: the node ids of the tests that failed, one a line, appended to the file
named by $SCALESTUDY_FAILED_IDS, for scripts/pytest_retry.py to run once more.

Not pytest's own ``--last-failed``: mixed with explicit node ids (the floor suites name some),
pytest 9 collects only the modules that had a failure and answers "not found" (exit 4) for
every other id, so a retry built on it could never pass (issue 59). Written by the controlling
process only: under pytest-xdist its workers' reports reach it, and a worker (``workerinput``,
xdist's documented mark of one) writes nothing."""

from __future__ import annotations

import os

_path: str | None = None


def pytest_configure(config) -> None:
    global _path
    _path = None if hasattr(config, "workerinput") else os.environ.get("SCALESTUDY_FAILED_IDS")


def pytest_runtest_logreport(report) -> None:
    if _path and report.failed:
        with open(_path, "a") as out:
            out.write(report.nodeid + "\n")
