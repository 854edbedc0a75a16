"""The run folder: every file a run writes and the orchestrator and ``results_db`` read.

This is the whole contract between the ranks and the login node (ARCHITECTURE.md,
"Metrics contract"), so it is spelled once, here, and both sides import it: the
workloads writing (``metrics``, ``report``, ``command``, ``failure``), the orchestrator
launching and watching (``orchestrator.mpi``, ``orchestrator.sweep``), and ingestion
reading (``results_db.ingest.folder``). It needs neither torch nor MPI.

::

    <run_dir>/
      spec.json              the RunSpec, written on the login node before submission
      command.txt            the MPI launch line; its presence means the MPI job started
      job.json               the batch job the run is in; its exit code and wall time
      workload.log           the launcher's and every rank's stdout and stderr
      failure.json           the first rank to fail: what kind of failure (setup, crash)
      metrics/rank-<r>.jsonl one record per line per rank (RECORD_TYPES, schema METRICS_SCHEMA)
      metrics/events-rank-<r>.arrows  a timeline=true rank's events, an Arrow IPC stream
                             (``event_log``); folders written before it hold them as ``event``
                             lines of the rank's .jsonl, which ingestion still reads
      output/rank-<r>.log    a command workload's per-rank output
      result.report.json     what a command reported with ``report.result``
      result.json            the run summary, written last: its presence means the run finished
"""

from __future__ import annotations

from pathlib import Path

SPEC_FILE = "spec.json"
STARTED_FILE = "command.txt"
JOB_FILE = "job.json"
LOG_FILE = "workload.log"
FAILURE_FILE = "failure.json"
METRICS_DIR = "metrics"
OUTPUT_DIR = "output"
REPORTED_RESULT_FILE = "result.report.json"
RESULT_FILE = "result.json"

# the version every metrics record and result.json carry; ingestion refuses any other
METRICS_SCHEMA = 1
SUPPORTED_METRICS_SCHEMAS = (METRICS_SCHEMA,)

RECORD_TYPES = ("run_start", "step", "event", "round", "contribution", "eval", "run_end")
# a step's phases in the order the training loop passes through them (each is seconds in a
# ``step`` record); a step is their sum
STEP_PHASES = ("data", "forward", "delay", "backward", "comm_wait", "update")
# every field of a ``step`` record: ``seconds`` is the step's duration where a command's
# ``report.step`` gives one (the built-in loop's step is the sum of its phases)
STEP_FIELDS = ("step", "epoch", "samples", "t_start", *STEP_PHASES, "loss", "seconds")


def rank_metrics_file(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / METRICS_DIR / f"rank-{rank}.jsonl"


EVENTS_STREAM = "events-rank-{rank}.arrows"


def rank_events_file(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / METRICS_DIR / EVENTS_STREAM.format(rank=rank)


def rank_output_file(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / OUTPUT_DIR / f"rank-{rank}.log"


def result_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / RESULT_FILE


def finished(run_dir: str | Path) -> bool:
    """Whether the run finished (rank 0, or the driver for a command, wrote its summary)."""
    return result_file(run_dir).is_file()
