"""``scalestudy``: launch sweeps and read their results.

``sweep`` hands its arguments to the Hydra app (always in multirun mode: a study is
a sweep); the other commands read the results database.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

USAGE = """scalestudy <command> [options]

commands:
  sweep [--rerun] [--dry-run] [--detach] [KEY=VALUE ...]
                                    run a study's sweep (Hydra overrides; see README)
  status [--study S]                runs per study: pending, running, done, failed
  query [--study S] [--where EXPR]  one row per run, as a table, CSV or JSON
  sites                             the site configs this install knows
"""


def _one_line(exc: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line messages, folded to the line a user needs."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, name = exc.missing_cfg_file.rpartition("/")
        known = ", ".join(exc.options or [])
        return f"invalid config: {group}={name!r}: unknown {group}" + (f"; known: {known}" if known else "")
    lines = []
    for line in str(exc).strip().splitlines():
        line = line.strip()
        if not line or line.startswith(("full_key:", "object_type=", "Config search path")):
            break
        lines.append(line)
    return " ".join(lines) or type(exc).__name__


def _sweep(argv: Sequence[str]) -> int:
    """Hydra multirun of the app. Errors come back here (not to Hydra's reporter) so
    that each is one line; set HYDRA_FULL_ERROR=1 for Hydra's full traces instead."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .app import sweep_job
    from .errors import ConfigError, ScalestudyError

    args = list(argv)
    if "--detach" in args:
        return _detach([a for a in args if a != "--detach"])
    full_errors = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    for flag, override in (("--rerun", "rerun=true"), ("--dry-run", "dry_run=true")):
        if flag in args:
            args = [a for a in args if a != flag] + [override]
    hydra_flags = {"-m", "--multirun", "--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion"}
    if not hydra_flags.intersection(args):
        args = ["--multirun", *args]
    sys.argv = ["scalestudy", *args]
    try:
        sweep_job()
    except (ScalestudyError, HydraException, OmegaConfBaseException) as exc:
        if full_errors:
            raise
        if isinstance(exc, ScalestudyError):
            print(f"scalestudy: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigError) else 1
        print(f"scalestudy: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    return 0


def _detach(args: list[str]) -> int:
    """Run the sweep in a background driver that outlives this shell; its state lives in the DB."""
    import subprocess
    import time

    if "--dry-run" in args:
        return _fail("--detach and --dry-run together make no sense: a dry run submits nothing")
    logs = Path(".scalestudy") / "sweeps"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = (logs / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log").absolute()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "sweep", *args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=os.getcwd())
    print(f"sweep detached: driver pid {proc.pid}, log {log_path}")
    print("follow it with `scalestudy status`; running the same sweep again resumes what no live sweep drives")
    return 0


def _db_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="SQLAlchemy URL (default: $SCALESTUDY_DB_URL or ./scalestudy.db)")


def _fail(message: str) -> int:
    print(f"scalestudy: error: {message}", file=sys.stderr)
    return 2


def _status(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy status", description="Runs per study and state.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--runs", action="store_true", help="list every run, not only the counts")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import connect, query

    from .report import print_runs_table, render

    engine = connect(args.db)
    counts = query.status_counts(engine, args.study)
    if counts.empty:
        print("no runs recorded yet" + (f" for study {args.study!r}" if args.study else ""))
        return 0
    render(counts, "table", title="runs per state")
    if args.runs or args.study:
        print_runs_table(engine, study=args.study)
    return 0


def _query(argv: Sequence[str]) -> int:
    from .report import FORMATS

    parser = argparse.ArgumentParser(prog="scalestudy query", description="One row per run.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--where", action="append", default=None,
                        help="filter, e.g. 'nodes>=2, algorithm=sync' (repeatable)")
    parser.add_argument("--columns", default=None, help="comma-separated columns (default: a summary)")
    parser.add_argument("--format", choices=FORMATS, default="table")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import connect, query

    from .report import SUMMARY_COLUMNS, render

    columns = [c.strip() for c in args.columns.split(",")] if args.columns else list(SUMMARY_COLUMNS)
    try:
        frame = query.runs(connect(args.db), study=args.study, where=args.where, columns=columns)
    except query.QueryError as exc:
        return _fail(str(exc))
    render(frame, args.format, title=f"study {args.study}" if args.study else "runs")
    return 0


def _sites(argv: Sequence[str]) -> int:
    argparse.ArgumentParser(prog="scalestudy sites").parse_args(argv)
    from .sites import known_sites, load_site

    for name in known_sites():
        site = load_site(name)
        print(f"{name:14s} {site.provider:8s} {site.mpi_launcher:8s} {site.description}")
    return 0


COMMANDS = {"sweep": _sweep, "status": _status, "query": _query, "sites": _sites}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return _fail(f"unknown command {command!r}; choose from {', '.join(COMMANDS)}")
    from .errors import ScalestudyError

    try:
        return COMMANDS[command](rest)
    except ScalestudyError as exc:
        return _fail(str(exc))


if __name__ == "__main__":
    sys.exit(main())
