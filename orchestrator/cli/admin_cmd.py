"""``scalestudy sites``, ``ingest`` and ``db``: the site files, late ingestion, the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .common import OneLineParser, add_db_option, fail


def sites(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy sites", description="List the known sites; with --check, "
                                     "check on this (login) node the environment a site's runs would get.")
    parser.add_argument("--check", metavar="SITE", help="site name or site file: report the Python, the libmpi "
                        "mpi4py loads and the MPI launcher its batch jobs would use; exit 1 on a problem")
    args = parser.parse_args(argv)
    from ..errors import ConfigError
    from ..site.config import known_sites, load_site

    if args.check:
        from ..mpi.env import findings, probe_site, render_check

        try:
            site = load_site(args.check)
        except ConfigError as exc:
            return fail(str(exc))
        probe = probe_site(site)
        found = findings(site, probe)
        print(render_check(site, probe, found))
        return 1 if any(f.level == "error" for f in found) else 0
    for name in known_sites():
        site = load_site(name)
        gpus = f"gpus:{site.accelerators_per_node}" if site.accelerators_per_node else "cpu"
        print(f"{name:14s} {site.provider:8s} {site.mpi_launcher:8s} mpi:{site.mpi:7s} {gpus:7s} {site.description}")
    return 0


def ingest(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy ingest",
        description="Ingest finished runs the database is missing (e.g. after it was unreachable during a sweep): "
                    "run folders, a study's multirun folder, or with no path every known run not yet ingested.")
    parser.add_argument("paths", nargs="*", type=Path, help="run folders, or folders holding them")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db import connect
    from results_db.store.connect import resolve_db_url, safe_url

    from .ingest_folders import ingest_folders, not_ingested, run_folders

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        return fail(f"ingest: no such folder {missing[0]!r}")
    url = resolve_db_url(args.db)
    engine = connect(url)
    folders = list(run_folders(args.paths)) if args.paths else not_ingested(engine)
    print(f"ingesting into {safe_url(url)}: {len(folders)} run folder(s)")
    report = ingest_folders(engine, folders)
    print(f"{len(report.ingested)} ingested, {len(report.already)} already in the database, "
          f"{len(report.unfinished)} not finished, {len(report.failed)} failed")
    return 1 if report.failed else 0


def db(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy db", description="Results database schema (Alembic).")
    parser.add_argument("action", choices=("upgrade", "current"))
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db import connect
    from results_db.store.migrate import current_revision, head_revision
    from results_db.store.connect import resolve_db_url, safe_url

    url = resolve_db_url(args.db)
    engine = connect(url, upgrade=args.action == "upgrade")
    print(f"{safe_url(url)}: revision {current_revision(engine) or '(none)'} (this scalestudy: {head_revision()})")
    return 0
