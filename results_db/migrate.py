"""Schema migrations (Alembic): every database is brought to the code's revision on open.

A database made by ``Base.metadata.create_all`` before migrations existed is stamped
as the revision whose tables it has, then upgraded.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> None:
    logging.getLogger("alembic").setLevel(logging.WARNING)  # not "Context impl ..." on every open
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
                tables = set(inspect(conn).get_table_names())
                if "alembic_version" not in tables and "runs" in tables:
                    # created before migrations: stamp what it has, then upgrade the rest
                    command.stamp(cfg, "0002" if "events" in tables else "0001")
                command.upgrade(cfg, revision)
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")
