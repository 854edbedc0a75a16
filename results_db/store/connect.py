"""Where the database is and how to open it.

SQLite in WAL mode is the embedded default (a file in the working directory), so a
sweep's writes do not block a ``scalestudy status`` reading at the same time; any
SQLAlchemy URL (e.g. ``postgresql+psycopg://…``) selects another server.
"""

from __future__ import annotations

import atexit
import os
import weakref
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


DB_URL_ENV = "SCALESTUDY_DB_URL"
DEFAULT_DB_FILE = "scalestudy.db"
_held: list[str] = []


@contextmanager
def db_url_held():
    """While it lasts, the database URL (``$SCALESTUDY_DB_URL``) is in this process's memory and
    not in its environment. A sweep driver runs inside it: everything it starts (MPI launchers,
    ranks, ``sbatch``, which exports the submitting environment into the batch job, Parsl's
    interchange) inherits the environment, and the URL may hold a password; only the driver
    writes to the database. The environment is as it was afterwards."""
    url = os.environ.pop(DB_URL_ENV, None)
    _held[:] = [url] if url else []
    try:
        yield
    finally:
        _held.clear()
        if url is not None:
            os.environ[DB_URL_ENV] = url


def resolve_db_url(url: str | None = None) -> str:
    """Explicit URL, else the one held (``db_url_held``), else $SCALESTUDY_DB_URL, else
    ``scalestudy.db`` in the working directory."""
    if url:
        return str(url)
    if _held:
        return _held[0]
    if os.environ.get(DB_URL_ENV):
        return os.environ[DB_URL_ENV]
    return f"sqlite:///{Path.cwd() / DEFAULT_DB_FILE}"


_SECRET_QUERY_KEYS = ("password", "sslpassword", "passfile")


def safe_url(url: str) -> str:
    """The URL as it may appear in messages: never with its password, whether it sits in
    ``user:password@`` or in the query string (libpq's ``?password=``)."""
    try:
        parsed = make_url(url)
        secret = {k: "***" for k in parsed.query if k.lower() in _SECRET_QUERY_KEYS}
        if secret:
            parsed = parsed.update_query_dict(secret)
        return parsed.render_as_string(hide_password=True)
    except Exception:  # not even a URL: show nothing of it
        return "(unparseable database URL)"


def scrub(text: str, url: str | None) -> str:
    """``text`` with the URL's password (if any) masked, wherever it appears."""
    try:
        parsed = make_url(url) if url else None
    except Exception:
        parsed = None
    if parsed is None:
        return text
    secrets = [parsed.password] + [parsed.query[k] for k in parsed.query if k.lower() in _SECRET_QUERY_KEYS]
    for secret in secrets:
        for value in ([secret] if isinstance(secret, str) else list(secret or ())):
            if value:
                text = text.replace(str(value), "***")
    return text


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # pragma: no cover - exercised through connect()
    dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" event below emits BEGIN itself
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _sqlite_begin(conn) -> None:
    """Writers take SQLite's write lock up front (BEGIN IMMEDIATE), so concurrent sweeps queue on
    the busy timeout instead of failing with "database is locked" when a reader upgrades;
    readers keep plain deferred transactions and never wait on a writer (WAL)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("writer") else "BEGIN")


def writer(engine: Engine) -> Engine:
    """The engine to open write transactions with."""
    return engine.execution_options(writer=True)


def missing_sqlite_file(url: str | None = None) -> Path | None:
    """The file a SQLite URL names, when it does not exist yet (reading commands must
    not create an empty database where the user merely mistyped a path)."""
    parsed = make_url(resolve_db_url(url))
    if (parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:"
            or parsed.query.get("uri") or parsed.database.startswith("file:")):
        return None   # another server, an in-memory database, or a SQLite URI that SQLite itself resolves
    path = Path(parsed.database)
    return None if path.exists() else path


# Every engine ``connect`` made that is still alive, closed at exit: ``scalestudy`` ends with
# ``os._exit`` after the exit handlers (orchestrator.cli.run), skipping the teardown that would
# otherwise close their connections: SQLite would leave its -wal and -shm files beside the
# database (the last writes checkpointed only by the next open) and PostgreSQL would log each
# connection as dropped.
_OPEN_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


def sqlite_integrity(path: Path) -> str:
    """SQLite's own check of a database file (``PRAGMA integrity_check``): ``"ok"`` or what it
    found. Raises what SQLAlchemy raises where the file is not a database at all."""
    from sqlalchemy import text

    probe = create_engine(f"sqlite:///{Path(path).absolute()}")
    try:
        with probe.connect() as conn:
            return conn.execute(text("PRAGMA integrity_check")).scalar()
    finally:
        probe.dispose()


@atexit.register
def _dispose_open_engines() -> None:
    for engine in list(_OPEN_ENGINES):
        try:
            engine.dispose()
        except Exception:  # noqa: BLE001 - at exit: a database gone is no reason to fail the exit
            pass


def connect(url: str | None = None, upgrade: bool = True) -> Engine:
    """An engine for the results database, its schema migrated to the code's revision."""
    resolved = resolve_db_url(url)
    new_file = missing_sqlite_file(resolved)
    if new_file is not None and new_file.parent.is_dir():
        # the results are the user's: created readable by the user only (SQLite gives its -wal
        # and -shm files the same mode); share them by moving to PostgreSQL or with chmod
        try:
            os.close(os.open(new_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:   # created meanwhile by another sweep, or not writable: SQLite says so itself
            pass
    engine = create_engine(resolved, future=True, hide_parameters=True)
    _OPEN_ENGINES.add(engine)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    if upgrade:
        from .migrate import is_current
        from .migrate import upgrade as upgrade_schema

        if not is_current(engine):
            upgrade_schema(writer(engine))
    return engine
