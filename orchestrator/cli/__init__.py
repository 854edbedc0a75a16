"""``scalestudy``: launch sweeps and read their results.

``sweep`` hands its arguments to the Hydra app (always in multirun mode: a study is a
sweep); the other commands read the results database. Each command lives in a module of
its group, imported only when it runs (``status`` must not pay for Hydra or pandas).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import Sequence

from workloads.did_you_mean import hint

from .common import db_url_from, fail

USAGE = """scalestudy <command> [options]       (scalestudy --version: this release and its Parsl, Hydra)

commands:
  sweep [--rerun] [--dry-run] [--detach] [KEY=VALUE ...]
                                    run a study's sweep (Hydra overrides; scalestudy sweep --help)
  status [--study S] [--failed]     runs per study: pending, running, done, failed (--failed: why, and the log)
  query [--study S] [--where EXPR] [--group-by AXES --agg COL:AGG] [--attempts all]
                                    one row per run (or per group): table, CSV, JSON, Parquet
  compare --baseline AXIS=VALUE     speedup and efficiency per configuration, mean ± std over repeats
  figures --study S [--out DIR]     redraw every figure of a study from the database (PNG + the CSV behind it)
  report --study S [--out DIR] [--baseline AXIS=VALUE]
                                    one self-contained HTML folder: sweep, tables, figures, failures, provenance
  timeline RUN_ID [--out FILE]      a run's timeline as Chrome trace-event JSON (Perfetto, chrome://tracing)
  export mlflow --study S --tracking-uri URI
                                    a study's runs as MLflow runs (one experiment per study; again adds nothing twice)
  ingest [PATH ...]                 ingest finished runs the database is missing (run folders, or all known)
  sites [--check SITE]              the site configs this install knows; --check: the MPI a site's runs would use
  profile RUN_ID [...] [-o FILE]    finished runs' compute profile, for compute=emulated runs
  model fit --study S               fit the performance model (compute, allreduce, stragglers, overlap) and store it
  model predict --study S [--nodes 8,16,...,1024] [--site SITE]
                                    predicted throughput, efficiency, step breakdown with a band; a figure
  plan study=S site=SITE account=PROJECT --budget NODE_HOURS
                                    node counts and repeats that fit a budget and the site's queues; the sweep to run
  network SITE                      the site's network as measured (study=network) beside its nominal numbers
  db upgrade|current                migrate the results database to this version's schema / show its revision
  artifact pack|check|rerun|import  a study as one folder a reader can check, re-run and compare (scalestudy artifact)
"""



# command -> "module:function" of this package, imported when the command runs
COMMANDS = {"sweep": "sweep_cmd:sweep", "status": "results_cmd:status", "query": "results_cmd:query",
            "compare": "results_cmd:compare", "figures": "results_cmd:figures", "report": "results_cmd:report",
            "timeline": "timeline_cmd:timeline", "export": "export_cmd:export",
            "ingest": "admin_cmd:ingest", "sites": "admin_cmd:sites", "db": "admin_cmd:db",
            "profile": "model_cmd:profile", "model": "model_cmd:model", "plan": "plan_cmd:plan",
            "network": "network_cmd:network", "artifact": "artifact_cmd:artifact"}


def _command(name: str):
    module, _, function = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


def version_line() -> str:
    """This release and the releases of what it drives, read from the installed packages'
    metadata (nothing imported: the answer is instant)."""
    from importlib import metadata

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return " ".join(f"{name} {installed(name)}" for name in
                    ("scalestudy", "parsl", "hydra-core", "torch", "mpi4py", "sqlalchemy"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(version_line())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}{hint(command, COMMANDS)}; choose from {', '.join(COMMANDS)}")
    try:
        return _command(command)(rest)
    except Exception as exc:
        # imported only now: ..errors imports Hydra (0.2 s), which `status` otherwise never needs
        from sqlalchemy.exc import SQLAlchemyError

        from results_db.store.connect import safe_url, scrub

        from ..errors import ScalestudyError

        if isinstance(exc, ScalestudyError):
            return fail(str(exc))
        if isinstance(exc, SQLAlchemyError):
            url = db_url_from(rest)
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            return fail(f"database {safe_url(url)}: {scrub(first, url)}")
        raise


def _reader_gone() -> None:
    """The reader of stdout went away (``scalestudy query ... | head``): it has what it wanted.
    End as a Unix tool killed by SIGPIPE (128 + 13), without a traceback, the output still
    buffered sent nowhere (Python's own recipe: https://docs.python.org/3/library/signal.html,
    "Note on SIGPIPE")."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(141)


def run() -> None:
    """The ``scalestudy`` command: ``main``, then an exit without the interpreter's teardown.

    A sweep driver ends holding Parsl, ZeroMQ, SQLAlchemy, Hydra and pandas: finalising their
    modules and objects took 0.35-0.5 s on this VM after the sweep's table was printed, a
    tenth of a one-run sweep (benchmarks/RESULTS.md, issue 29). The exit handlers still run
    (logging's flush, multiprocessing's joins, Parsl's, the database engines' ``dispose``), so
    the files and the database are as a normal exit leaves them (the database's writes are
    committed before ``main`` returns); only the freeing of memory the process is about to give
    back is skipped.
    A normal exit where another thread is still alive (it would wait for it), under a tracer or
    profiler (coverage, ``python -m cProfile``: they write their data after the program ends),
    or where the standard streams cannot be flushed (a closed pipe: Python's own message then)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)   # what a normal exit calls (CPython)
    watched = sys.gettrace() is not None or sys.getprofile() is not None   # coverage, cProfile: write at the end
    if threading.active_count() > 1 or run_exit_handlers is None or watched:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    status = _exit_status(code)   # as sys.exit reads it: None is 0, a message is printed and is 1
    run_exit_handlers()   # the database engines' too (results_db.store.connect): no -wal file is left
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        status = 120   # what Python exits with when it cannot flush its streams at exit
    os._exit(status)


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` would give (a message other than an int goes to stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
