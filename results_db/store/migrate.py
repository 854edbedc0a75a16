"""Schema migrations (Alembic): every database is brought to the code's revision on open.

A database made by ``Base.metadata.create_all`` before migrations existed is stamped
as the revision whose tables it has, then upgraded.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import Connection, Engine, inspect

# Alembic is imported inside the functions that need it: opening a database that is
# already current (every sweep, every query) should not pay for importing it.

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


# Before any of Alembic is imported (``upgrade`` imports ``alembic.command`` first thing): not its
# "setup plugin ..." lines as it loads, nor "Context impl ..." on every open, which Hydra's job
# logging would print into every first sweep's output.
logging.getLogger("alembic").setLevel(logging.WARNING)


def alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


# The newest revision in migrations/versions/ (tests/results_db/test_migrations.py checks it is Alembic's head):
# a database already there is opened without importing Alembic at all.
HEAD = "0018"


def is_current(engine: Engine) -> bool:
    """True when the database is at ``HEAD`` (one query; no Alembic)."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    except SQLAlchemyError:  # no alembic_version table yet: a new or a pre-migration database
        return False


@contextmanager
def _migrating(engine: Engine) -> Iterator[tuple[Any, Connection]]:
    """Alembic's config bound to one connection, inside one transaction."""
    cfg = alembic_config(engine)
    with engine.connect() as conn:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            # SQLite alters a table by copying it; with foreign keys enforced, dropping the old copy
            # of a referenced table (runs) fails. Alembic's recipe: off for the migration, outside
            # any transaction (the connection is in autocommit mode, see store._sqlite_pragmas).
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                yield cfg, conn
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    with _migrating(engine) as (cfg, conn):
        tables = set(inspect(conn).get_table_names())
        if "alembic_version" not in tables and "runs" in tables:
            # created before migrations: stamp what it has, then upgrade the rest
            command.stamp(cfg, "0002" if "events" in tables else "0001")
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Alembic's downgrade with upgrade's SQLite recipe (no command runs it: the tests walk
    every revision down and up again, so a downgrade a user may need is known to work)."""
    from alembic import command

    with _migrating(engine) as (cfg, _):
        command.downgrade(cfg, revision)
