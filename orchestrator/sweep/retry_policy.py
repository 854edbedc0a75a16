"""Which failed runs a sweep starts again, and how often (``retries.crash``, ``.timeout``, ``.node_lost``).

A failure is sorted by what it says about the next attempt:

- ``setup``: the run failed while being set up (a factory or import that raises, a
  command that cannot start; ``workloads/failure.py``). The same config fails the same
  way again: never retried, whatever the counts say.
- ``timeout``: the MPI job passed its ``run_timeout`` and was stopped.
- ``node_lost``: the batch job the run was in ended under it (a node failed, the
  allocation was cancelled or ran out), or Parsl lost the worker running it. Retried
  on a new allocation.
  A batch job that ran out of walltime counts as a ``timeout``; one cancelled by someone
  (``scancel``) as ``cancelled``, never retried: somebody meant it.
- ``crash``: anything else the MPI job did wrong (a rank raised or was killed).
- ``ingest``: the run finished but its results cannot be read (never retried: rerunning
  would hide the damage; ``scalestudy status --failed`` shows it).

Every attempt stays in the database (``runs.attempt``); the retry is the next attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from workloads.failure import SETUP, read_failure

from ..errors import ConfigError, RunFailed
from .schema import RETRY_KEYS

SETUP_FAILURE, TIMEOUT, NODE_LOST, CRASH, INGEST, CANCELLED = SETUP, "timeout", "node_lost", "crash", "ingest", \
    "cancelled"
# the runs.status an attempt ended with, by kind of failure
STATUS = {TIMEOUT: "timeout", NODE_LOST: "lost"}


class NodeLost(RunFailed):
    """The batch job (allocation) a run was in ended while the run was still on it."""

    def __init__(self, message: str, job_id: str | None = None, state: str | None = None) -> None:
        super().__init__(message)
        self.job_id, self.state = job_id, state   # state: Parsl's JobState name of the ended batch job


# Parsl's names for a task whose worker or manager disappeared with its node or batch job
_LOST_WORKER_ERRORS = ("ManagerLost", "WorkerLost")
# Parsl's name for an executor whose blocks cannot be submitted (a bad account, queue): permanent
_CANNOT_SUBMIT_ERRORS = ("BadStateException",)


@dataclass(frozen=True)
class RetryPolicy:
    """How many times a run is retried per kind of failure (defaults: ``schema.RETRY_KEYS``)."""

    crash: int = RETRY_KEYS["crash"][0]
    timeout: int = RETRY_KEYS["timeout"][0]
    node_lost: int = RETRY_KEYS["node_lost"][0]

    @classmethod
    def from_config(cls, retries: Mapping[str, Any] | None) -> "RetryPolicy":
        values = {}
        for name, value in dict(retries or {}).items():
            if name not in cls.__dataclass_fields__:
                raise ConfigError(f"retries.{name}", value, f"unknown kind of failure; known: "
                                  f"{', '.join(cls.__dataclass_fields__)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"retries.{name}", value, "expected an integer >= 0")
            values[name] = value
        return cls(**values)

    def allows(self, kind: str, retried: int) -> bool:
        """Whether a run that has been retried ``retried`` times for ``kind`` gets another attempt."""
        return retried < getattr(self, kind, 0) if kind in (CRASH, TIMEOUT, NODE_LOST) else False


def classify(error: BaseException | None, run_dir: Path) -> str:
    """The kind of failure of an attempt: ``error`` is what its task raised (None when the
    run ended and reported failure itself, e.g. a command's non-zero exit)."""
    failure = read_failure(run_dir)
    if failure is not None and failure.get("kind") == SETUP:
        return SETUP_FAILURE
    if isinstance(error, ConfigError):
        return SETUP_FAILURE
    if error is not None:
        name = type(error).__name__
        if name == "RunTimedOut":
            return TIMEOUT
        if name in _CANNOT_SUBMIT_ERRORS:
            return SETUP_FAILURE
        if isinstance(error, NodeLost):
            return {"TIMEOUT": TIMEOUT, "CANCELLED": CANCELLED}.get(error.state or "", NODE_LOST)
        if name in _LOST_WORKER_ERRORS:
            return NODE_LOST
    return CRASH
