"""What every command shares: one-line errors, the ``--db`` option, opening a database to read."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line naming it (``scalestudy query: unrecognized
    arguments: --studdy``), exit 2, as every other bad input is, not the command's whole usage:
    ``--help`` still prints that."""

    def error(self, message: str):   # argparse's documented hook for a parse error
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="SQLAlchemy URL (default: $SCALESTUDY_DB_URL or ./scalestudy.db)")


class NoDatabase(Exception):
    """A reading command pointed at a SQLite file that does not exist."""


class OlderSchema(Exception):
    """A reading command found a database of an older schema revision (it must not migrate it)."""


def open_for_reading(db: str | None):
    """The results database for a command that only reads it: never creates one, never
    migrates one (DDL against a shared PostgreSQL is not a reader's to run)."""
    from results_db import connect
    from results_db.store.migrate import HEAD, is_current
    from results_db.store.connect import missing_sqlite_file, resolve_db_url, safe_url

    path = missing_sqlite_file(db)
    if path is not None:
        raise NoDatabase(f"no results database at {path} (a sweep creates it; or give --db URL or set "
                          "$SCALESTUDY_DB_URL)")
    engine = connect(db, upgrade=False)
    if not is_current(engine):
        from sqlalchemy import inspect

        if "runs" not in inspect(engine).get_table_names():
            raise NoDatabase(f"{safe_url(resolve_db_url(db))} holds no scalestudy results yet")
        raise OlderSchema(f"the database {safe_url(resolve_db_url(db))} has an older schema than this scalestudy "
                           f"reads (revision {HEAD}); run `scalestudy db upgrade` once (it migrates it in place), "
                           "then read it")
    return engine


def fail(message: str) -> int:
    print(f"scalestudy: error: {message}", file=sys.stderr)
    return 2



def db_url_from(args: Sequence[str]) -> str:
    """The database a command's arguments name (``--db``), else the default one."""
    from results_db.store.connect import resolve_db_url

    for i, arg in enumerate(args):
        if arg == "--db" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return resolve_db_url()
