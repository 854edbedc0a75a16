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
  status [--study S] [--failed]     runs per study: pending, running, done, failed (--failed: why, and the log)
  query [--study S] [--where EXPR] [--group-by AXES --agg COL:AGG] [--attempts all]
                                    one row per run (or per group): table, CSV, JSON, Parquet
  compare --baseline AXIS=VALUE     speedup and efficiency per configuration, mean ± std over repeats
  figures --study S [--out DIR]     redraw every figure of a study from the database (PNG + the CSV behind it)
  report --study S [--out DIR] [--baseline AXIS=VALUE]
                                    one self-contained HTML folder: sweep, tables, figures, failures, provenance
  ingest [PATH ...]                 ingest finished runs the database is missing (run folders, or all known)
  sites [--check SITE]              the site configs this install knows; --check: the MPI a site's runs would use
  profile RUN_ID [...] [-o FILE]    finished runs' compute profile, for compute=emulated runs
  model fit --study S               fit the performance model (compute, allreduce, stragglers, overlap) and store it
  model predict --study S [--nodes 8,16,...,1024] [--site SITE]
                                    predicted throughput, efficiency, step breakdown with a band; a figure
  plan study=S site=SITE --budget NODE_HOURS
                                    node counts and repeats that fit a budget and the site's queues; the sweep to run
  db upgrade|current                migrate the results database to this version's schema / show its revision
"""


def _one_line(exc: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line messages, folded to the line a user needs."""
    from hydra.errors import MissingConfigException

    from hydra.errors import OverrideParseException

    from .config_schema import explain_unknown_key

    if isinstance(exc, OverrideParseException):
        return (f"invalid override {exc.override!r}: Hydra cannot parse it (quote a value that holds spaces or "
                "; $ ( ) ` characters: key='value')")
    unknown = explain_unknown_key(str(exc))
    if unknown:
        return unknown
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
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .app import sweep_job
    from .errors import ConfigError, ScalestudyError

    args = list(argv)
    if "--help" in args or "-h" in args:
        print(sweep_help(args))
        return 0
    # Run folders, logs, specs and the SQLite file are the user's alone: login nodes are shared
    # (batch jobs set the same umask in their set-up; README, "Files and permissions").
    os.umask(0o077)
    # A database URL may hold a password: keep it out of Hydra's config, which Hydra
    # writes into every run folder (and out of a detached driver's command line); the
    # sweep reads it from the environment instead.
    for arg in [a for a in args if a.startswith("db_url=")]:
        os.environ["SCALESTUDY_DB_URL"] = arg.split("=", 1)[1].strip("'\"")
        args.remove(arg)
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
    from .sweep_recorder import SweepRecorder

    SweepRecorder.last_outcome = None
    from . import phases

    def _terminate(signum, _frame):  # a detached driver is stopped with SIGTERM: clean up as for Ctrl-C
        raise KeyboardInterrupt

    import signal

    signal.signal(signal.SIGTERM, _terminate)
    try:
        with phases.phase("hydra_total"):
            sweep_job()
    except KeyboardInterrupt:
        outcome = SweepRecorder.last_outcome or {}
        print(f"interrupted: {outcome.get('done', 0)} runs done, {outcome.get('stopped', 0)} stopped; rerun the "
              "same command to resume", file=sys.stderr)
        return 130
    except yaml.YAMLError as exc:   # a study or config file that is not YAML
        if full_errors:
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark is not None else "a config file"
        print(f"scalestudy: error: invalid config: {where}: not valid YAML ({getattr(exc, 'problem', None) or exc})",
              file=sys.stderr)
        return 2
    except (ScalestudyError, HydraException, OmegaConfBaseException) as exc:
        if full_errors:
            raise
        if isinstance(exc, ScalestudyError):
            print(f"scalestudy: error: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, ConfigError) else 1
        print(f"scalestudy: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    phases.write()
    outcome = SweepRecorder.last_outcome
    if outcome and outcome.get("not_ingested"):
        print(f"scalestudy: {outcome['not_ingested']} finished runs could not be ingested (database unreachable); "
              "`scalestudy ingest` brings them in", file=sys.stderr)
        return 1
    if outcome and outcome["failed"]:
        print(f"scalestudy: {outcome['failed']} of {outcome['submitted']} runs failed; their reasons: "
              f"scalestudy status --study {outcome['study']} --failed", file=sys.stderr)
        return 1
    return 0


def _config_dirs(args: Sequence[str]) -> list[Path]:
    dirs = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
    return dirs


def sweep_help(args: Sequence[str] = ()) -> str:
    """``scalestudy sweep --help``: our flags, every key with its default, and what exists to choose from."""
    import textwrap

    from workloads.registry import ALGORITHMS, DATASETS, MODELS, registered

    from .config_schema import key_help
    from .sites import known_sites, load_site

    studies = {p.stem: "shipped" for p in (Path(__file__).parent / "conf" / "study").glob("*.yaml")}
    for folder in _config_dirs(args):
        studies.update({p.stem: str(folder) for p in (folder / "study").glob("*.yaml")})
    lines = [
        "usage: scalestudy sweep [--rerun] [--dry-run] [--detach] [--config-dir DIR] [KEY=VALUE ...]",
        "",
        "Runs a study's sweep: every job of the Hydra multirun is one run, submitted through Parsl to the",
        "site's scheduler and MPI launcher; results go to the results database.",
        "",
        "flags:",
        "  --rerun              run again even runs already done (their earlier results are replaced)",
        "  --dry-run            validate, print the batch scripts and launch lines, submit nothing",
        "  --detach             validate here, then drive the sweep from a background process (see its log)",
        "  --config-dir DIR     also read studies from DIR/study/*.yaml (your own studies)",
        "  --cfg job            print the composed config of the first job and exit",
        "",
        "keys (KEY=VALUE, or KEY=V1,V2,... to sweep; +params.NAME=VALUE adds a free parameter):",
    ]
    for key, default, text in key_help():
        shown = "(required)" if default == "???" else repr(default) if isinstance(default, str) else default
        head = f"  {key} [{shown}]"
        lines.append(head)
        lines.extend(textwrap.wrap(text, width=100, initial_indent="      ", subsequent_indent="      "))
    lines += ["", "studies (study=NAME): " + ", ".join(f"{n}" + ("" if w == "shipped" else f" ({w})")
                                                  for n, w in sorted(studies.items()))]
    lines += ["sites (site=NAME, or site=/path/site.yaml):"]
    for name in known_sites():
        site = load_site(name)
        lines.append(f"  {name:12s} {site.provider:7s} {site.mpi_launcher:8s} {site.description}")
    lines += [f"algorithms: {', '.join(ALGORITHMS)}",
              f"models: {', '.join([*MODELS, *registered('model')])}, or model=package.module:factory",
              f"datasets: {', '.join([*DATASETS, *registered('dataset')])}, or dataset=package.module:factory",
              "",
              "examples:",
              "  scalestudy sweep nodes=1,2,4 workers_per_node=1,2 batch_size=32,64",
              "  scalestudy sweep study=eager_sgd site=local_slurm --detach",
              "  scalestudy sweep model=mypkg.nets:make_model +params.hidden=128,256 study_name=mine",
              "  scalestudy sweep --config-dir examples/ddp_gloo/conf study=ddp_gloo nodes=1,2",
              "",
              "Hydra's own help: scalestudy sweep --hydra-help"]
    return "\n".join(lines)


def _detach(args: list[str]) -> int:
    """Run the sweep in a background driver that outlives this shell; its state lives in the DB."""
    import subprocess
    import time

    if "--dry-run" in args:
        return _fail("--detach and --dry-run together make no sense: a dry run submits nothing")
    # Validate in the foreground first: bad input must fail here, in one line, not in a log.
    check = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", *args],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=os.getcwd())
    if check.returncode != 0:
        lines = check.stderr.strip().splitlines()
        print(lines[-1] if lines else f"scalestudy: error: the sweep does not validate (exit {check.returncode})",
              file=sys.stderr)
        return check.returncode
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


class _NoDatabase(Exception):
    """A reading command pointed at a SQLite file that does not exist."""


class _OlderSchema(Exception):
    """A reading command found a database of an older schema revision (it must not migrate it)."""


def _open_for_reading(db: str | None):
    """The results database for a command that only reads it: never creates one, never
    migrates one (DDL against a shared PostgreSQL is not a reader's to run)."""
    from results_db import connect
    from results_db.migrate import HEAD, is_current
    from results_db.store import missing_sqlite_file, resolve_db_url, safe_url

    path = missing_sqlite_file(db)
    if path is not None:
        raise _NoDatabase(f"no results database at {path} (a sweep creates it; or give --db URL or set "
                          "$SCALESTUDY_DB_URL)")
    engine = connect(db, upgrade=False)
    if not is_current(engine):
        from sqlalchemy import inspect

        if "runs" not in inspect(engine).get_table_names():
            raise _NoDatabase(f"{safe_url(resolve_db_url(db))} holds no scalestudy results yet")
        raise _OlderSchema(f"the database {safe_url(resolve_db_url(db))} has an older schema than this scalestudy "
                           f"reads (revision {HEAD}); run `scalestudy db upgrade` once (it migrates it in place), "
                           "then read it")
    return engine


def _fail(message: str) -> int:
    print(f"scalestudy: error: {message}", file=sys.stderr)
    return 2


RECENT_RUNS = 20


def _status(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy status", description="Runs per study and state.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--runs", action="store_true",
                        help="list every run (with --study alone: the last %d registered)" % RECENT_RUNS)
    parser.add_argument("--failed", action="store_true",
                        help="list failed, timed-out and partial runs with their reason and log")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db.runs import status_table

    try:
        engine = _open_for_reading(args.db)
    except _NoDatabase as exc:
        print(f"no runs recorded yet: {exc}")
        return 0
    except _OlderSchema as exc:
        return _fail(str(exc))
    columns, rows = status_table(engine, args.study)   # counted in SQL: no pandas for the overview
    if not rows:
        print("no runs recorded yet" + (f" for study {args.study!r}" if args.study else ""))
        return 0
    _print_counts(columns, rows)
    _print_sweep_drivers(engine, args.study)
    if not (args.failed or args.runs or args.study):
        return 0
    from results_db import run_rows

    from .report import print_failed_runs, print_runs_table

    if args.failed:
        print_failed_runs(engine, study=args.study)
    elif args.runs:
        print_runs_table(engine, study=args.study)
    else:   # a study of thousands of runs: the last few, not a table of all of them
        ids = run_rows.recent_run_ids(engine, args.study, RECENT_RUNS)
        total = sum(row[columns.index("total")] for row in rows)
        print_runs_table(engine, run_ids=ids, study=args.study,
                         title="runs" if total <= len(ids) else f"the last {len(ids)} of {total} runs")
        if total > len(ids):
            print(f"(all {total}: scalestudy status --study {args.study} --runs, or scalestudy query --study "
                  f"{args.study} --format csv --out runs.csv)")
    return 0


def _print_counts(columns: list[str], rows: list[list]) -> None:
    from rich.console import Console

    from .sweep_table import rows_table

    table = rows_table(columns, [[str(v) for v in row] for row in rows], "runs per state",
                       [i > 0 for i in range(len(columns))])
    Console(width=None if sys.stdout.isatty() else 250).print(table)


def _print_sweep_drivers(engine, study: str | None) -> None:
    """Which sweeps (detached or not) hold unfinished runs, and whether each is still alive."""
    from results_db.runs import HEARTBEAT_STALE_SECONDS, sweep_drivers

    for d in sweep_drivers(engine, study):
        age = "no heartbeat" if d.heartbeat_age is None else f"heartbeat {d.heartbeat_age:.0f} s ago"
        held = f"{d.running} running, {d.pending} pending"
        if d.alive:
            print(f"sweep {d.driver} (study {d.study}): alive, {age}; {held}")
        else:
            why = "its process is gone" if d.heartbeat_age is not None and \
                d.heartbeat_age < HEARTBEAT_STALE_SECONDS else age
            print(f"sweep {d.driver} (study {d.study}): stopped ({why}); {held} left unfinished — "
                  "the same sweep command resumes them")


def _query(argv: Sequence[str]) -> int:
    from .report import FORMATS

    parser = argparse.ArgumentParser(prog="scalestudy query", description="One row per run, or per group.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--where", action="append", default=None,
                        help="filter on any column, e.g. 'nodes>=2, algorithm=sync' (repeatable)")
    parser.add_argument("--columns", default=None, help="comma-separated columns (default: a summary)")
    parser.add_argument("--group-by", default=None, help="comma-separated axes to group runs by")
    parser.add_argument("--agg", action="append", default=None,
                        help="COLUMN:AGG[,AGG] with --group-by, e.g. throughput:mean,std (default: throughput:count,mean,std)")
    parser.add_argument("--attempts", choices=("latest", "all"), default="latest",
                        help="latest: each run's newest attempt (default); all: also the earlier ones a rerun "
                             "or a retry kept (column attempt)")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", default=None, help="write to this file (needed for parquet)")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import run_rows
    from results_db.columns import QueryError

    from .report import SUMMARY_COLUMNS, render

    try:   # read as plain rows and printed without pandas (its import alone took 1 s on a login node)
        if args.agg and not args.group_by:
            raise ValueError("--agg needs --group-by (the axes to aggregate over), e.g. --group-by nodes --agg "
                             "throughput:mean,std")
        if args.group_by and args.columns:
            raise ValueError("--columns and --group-by together: a grouped table's columns are the group-by axes "
                             "and the --agg results")
        engine = _open_for_reading(args.db)
        if args.group_by:
            metrics = {}
            for spec in args.agg or ["throughput:count,mean,std"]:
                column, _, aggs = spec.partition(":")
                metrics[column.strip()] = [a.strip() for a in (aggs or "mean").split(",")]
            table = run_rows.aggregate_rows(engine, [c.strip() for c in args.group_by.split(",")], metrics,
                                            study=args.study, where=args.where, attempts=args.attempts)
        else:
            columns = [c.strip() for c in args.columns.split(",")] if args.columns else list(SUMMARY_COLUMNS)
            if args.attempts == "all" and not args.columns:
                columns[1:1] = ["attempt", "latest"]
            table = run_rows.run_rows(engine, study=args.study, where=args.where, columns=columns,
                                      attempts=args.attempts)
            if not args.columns:
                table = run_rows.with_json_keys(engine, table, args.study, args.where, attempts=args.attempts)
        render(table, args.format, title=f"study {args.study}" if args.study else "runs", out=args.out)
    except (QueryError, ValueError, _NoDatabase, _OlderSchema) as exc:
        return _fail(str(exc))
    return 0


def _compare(argv: Sequence[str]) -> int:
    from .report import FORMATS

    parser = argparse.ArgumentParser(prog="scalestudy compare",
                                     description="Speedup and efficiency of each configuration against a baseline.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--baseline", required=True, help="AXIS=VALUE, e.g. algorithm=sync or nodes=1")
    parser.add_argument("--metric", default="throughput", help="a numeric run column (default: throughput)")
    parser.add_argument("--where", action="append", default=None)
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", default=None)
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import compare, query

    from .report import render

    try:
        frame = compare.compare(_open_for_reading(args.db), args.baseline, study=args.study, metric=args.metric,
                                where=args.where)
        render(frame, args.format, title=f"{args.metric} vs {args.baseline}", out=args.out)
    except (query.QueryError, compare.CompareError, ValueError, _NoDatabase, _OlderSchema) as exc:
        return _fail(str(exc))
    return 0


def _figures(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy figures",
                                     description="Redraw a study's figures from the results database.")
    parser.add_argument("--study", help="the study to draw (see `scalestudy status`)")
    parser.add_argument("--out", default=None, help="output folder (default: figures/<study>)")
    parser.add_argument("--format", default="png", help="comma-separated: png, pdf, svg (default: png)")
    parser.add_argument("--only", default=None, help="comma-separated figure names (see --list)")
    parser.add_argument("--where", action="append", default=None, help="draw only runs matching, e.g. 'nodes<=8'")
    parser.add_argument("--run-id", type=int, default=None, help="the run whose timeline to draw (default: the largest)")
    parser.add_argument("--list", action="store_true", help="list the figures and what each needs, then exit")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db.figures import catalog_lines

    if args.list:
        print("\n".join(catalog_lines()))
        return 0
    if not args.study:
        return _fail("figures: give --study NAME (`scalestudy status` lists the studies)")

    from results_db import query
    from results_db.figures import FigureDataError, check_choices, render_study
    from results_db.store import resolve_db_url, safe_url

    out = Path(args.out or Path("figures") / args.study)
    split = lambda text: [part.strip() for part in text.split(",") if part.strip()]  # noqa: E731
    url = resolve_db_url(args.db)

    def report(result) -> None:
        if result.skipped:
            print(f"  skipped {result.name}: {result.skipped}")
        else:
            print(f"  drew    {result.name} ({result.rows} rows): {', '.join(p.name for p in result.files)}")
            for note in result.notes:
                print(f"          note: {note}")

    try:
        formats, only = split(args.format), (split(args.only) if args.only else None)
        check_choices(formats, only)
        engine = _open_for_reading(url)
        print(f"drawing study {args.study!r} from {safe_url(url)} into {out}/")
        results = render_study(engine, args.study, out, formats=formats, only=only, where=args.where,
                               run_id=args.run_id, on_result=report, source=safe_url(url))
    except (FigureDataError, query.QueryError, _NoDatabase, _OlderSchema) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write figures into {out}: {exc.strerror or exc}")
    drawn = sum(1 for r in results if not r.skipped)
    print(f"{drawn} figure(s) drawn, {len(results) - drawn} skipped; manifest: {out / 'manifest.json'}")
    return 0 if drawn else 1


def _report(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy report",
                                     description="Write a study's report: one self-contained folder whose index.html "
                                                 "holds the sweep, a table per configuration, every figure, the "
                                                 "failures and the provenance (opens with no network).")
    parser.add_argument("--study", required=True, help="the study (see `scalestudy status`)")
    parser.add_argument("--out", default=None, help="output folder (default: reports/<study>)")
    parser.add_argument("--baseline", default=None,
                        help="AXIS=VALUE that speedup and efficiency are against, e.g. nodes=1 or algorithm=sync "
                             "(default: the smallest node count, else sync)")
    parser.add_argument("--target", type=float, default=None,
                        help="top-1 accuracy (0-1) for time to accuracy (default: the best every run reached)")
    parser.add_argument("--where", action="append", default=None, help="only runs matching, e.g. 'nodes<=8'")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import query
    from results_db.figures import FigureDataError
    from results_db.report import ReportError, build_report
    from results_db.store import resolve_db_url, safe_url

    out = Path(args.out or Path("reports") / args.study)
    url = resolve_db_url(args.db)
    try:
        engine = _open_for_reading(url)
        print(f"writing the report of study {args.study!r} from {safe_url(url)} into {out}/")
        report = build_report(engine, args.study, out, url, baseline=args.baseline, target=args.target,
                              where=args.where)
    except (ReportError, FigureDataError, query.QueryError, _NoDatabase, _OlderSchema) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write the report into {out}: {exc.strerror or exc}")
    drawn = sum(1 for r in report.figures if not r.skipped)
    print(f"{drawn} figure(s), {len(report.configurations)} configuration row(s), {len(report.failures)} failed "
          f"run(s); open {report.index}")
    return 0


def _sites(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy sites", description="List the known sites; with --check, "
                                     "check on this (login) node the environment a site's runs would get.")
    parser.add_argument("--check", metavar="SITE", help="site name or site file: report the Python, the libmpi "
                        "mpi4py loads and the MPI launcher its batch jobs would use; exit 1 on a problem")
    args = parser.parse_args(argv)
    from .errors import ConfigError
    from .sites import known_sites, load_site

    if args.check:
        from .mpi_env import findings, probe_site, render_check

        try:
            site = load_site(args.check)
        except ConfigError as exc:
            return _fail(str(exc))
        probe = probe_site(site)
        found = findings(site, probe)
        print(render_check(site, probe, found))
        return 1 if any(f.level == "error" for f in found) else 0
    for name in known_sites():
        site = load_site(name)
        print(f"{name:14s} {site.provider:8s} {site.mpi_launcher:8s} mpi:{site.mpi:7s} {site.description}")
    return 0


def _ingest(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scalestudy ingest",
        description="Ingest finished runs the database is missing (e.g. after it was unreachable during a sweep): "
                    "run folders, a study's multirun folder, or with no path every known run not yet ingested.")
    parser.add_argument("paths", nargs="*", type=Path, help="run folders, or folders holding them")
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import connect
    from results_db.store import resolve_db_url, safe_url

    from .ingest_cmd import ingest_folders, not_ingested, run_folders

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        return _fail(f"ingest: no such folder {missing[0]!r}")
    url = resolve_db_url(args.db)
    engine = connect(url)
    folders = list(run_folders(args.paths)) if args.paths else not_ingested(engine)
    print(f"ingesting into {safe_url(url)}: {len(folders)} run folder(s)")
    report = ingest_folders(engine, folders)
    print(f"{len(report.ingested)} ingested, {len(report.already)} already in the database, "
          f"{len(report.unfinished)} not finished, {len(report.failed)} failed")
    return 1 if report.failed else 0


def _db(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="scalestudy db", description="Results database schema (Alembic).")
    parser.add_argument("action", choices=("upgrade", "current"))
    _db_args(parser)
    args = parser.parse_args(argv)

    from results_db import connect
    from results_db.migrate import current_revision, head_revision
    from results_db.store import resolve_db_url, safe_url

    url = resolve_db_url(args.db)
    engine = connect(url, upgrade=args.action == "upgrade")
    print(f"{safe_url(url)}: revision {current_revision(engine) or '(none)'} (this scalestudy: {head_revision()})")
    return 0


def _profile(argv: Sequence[str]) -> int:
    from .model_cmd import profile

    return profile(argv)


def _model(argv: Sequence[str]) -> int:
    from .model_cmd import model

    return model(argv)


def _plan(argv: Sequence[str]) -> int:
    from .plan_cmd import plan

    return plan(argv)


COMMANDS = {"sweep": _sweep, "status": _status, "query": _query, "compare": _compare, "figures": _figures,
            "report": _report, "ingest": _ingest, "sites": _sites, "db": _db,
            "profile": _profile, "model": _model, "plan": _plan}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        return _fail(f"unknown command {command!r}; choose from {', '.join(COMMANDS)}")
    try:
        return COMMANDS[command](rest)
    except Exception as exc:
        # imported only now: .errors imports Hydra (0.2 s), which `status` otherwise never needs
        from sqlalchemy.exc import SQLAlchemyError

        from results_db.store import safe_url, scrub

        from .errors import ScalestudyError

        if isinstance(exc, ScalestudyError):
            return _fail(str(exc))
        if isinstance(exc, SQLAlchemyError):
            url = _db_url_from(rest)
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            return _fail(f"database {safe_url(url)}: {scrub(first, url)}")
        raise


def _db_url_from(args: Sequence[str]) -> str:
    from results_db.store import resolve_db_url

    for i, arg in enumerate(args):
        if arg == "--db" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return resolve_db_url()


if __name__ == "__main__":
    sys.exit(main())
