"""Bulk row writers for ingestion: the fastest path each database offers, inside the session's transaction.

SQLite: the driver's ``executemany`` on plain tuples. PostgreSQL (psycopg 3):
``COPY ... FROM STDIN``. Anything else: SQLAlchemy's executemany. Rows are buffered
per table up to ``batch`` and flushed, so memory stays bounded whatever the size of
the run.
"""

from __future__ import annotations

from typing import Sequence

from sqlalchemy import insert
from sqlalchemy.orm import Session

from results_db.store.schema import Base


BATCH = 5000   # rows buffered a table: a step row as a tuple is ~0.7 KB (20,000 held 14 MiB), and
               # executemany or COPY per 5,000 rows costs no more than per 20,000 here


class RowSink:
    def __init__(self, session: Session, table: str, columns: Sequence[str], batch: int | None = None) -> None:
        self.session = session
        self.table = table
        self.columns = tuple(columns)
        self.batch = batch or BATCH
        self.rows: list[tuple] = []
        self.written = 0
        dialect = session.get_bind().dialect.name
        quoted = ", ".join(f'"{c}"' for c in self.columns)
        if dialect == "sqlite":
            self._flush = self._executemany
            self._sql = f'INSERT INTO "{table}" ({quoted}) VALUES ({", ".join("?" * len(self.columns))})'
        elif dialect == "postgresql" and session.get_bind().driver == "psycopg":
            self._flush = self._copy
            self._sql = f'COPY "{table}" ({quoted}) FROM STDIN'
        else:
            self._flush = self._sqlalchemy

    def add(self, row: tuple) -> None:
        rows = self.rows
        rows.append(row)
        if len(rows) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self._flush()
            self.written += len(self.rows)
            self.rows = []

    def _executemany(self) -> None:
        cursor = self.session.connection().connection.driver_connection.cursor()
        cursor.executemany(self._sql, self.rows)
        cursor.close()

    def _copy(self) -> None:
        with self.session.connection().connection.driver_connection.cursor() as cur:
            with cur.copy(self._sql) as copy:
                for row in self.rows:
                    copy.write_row(row)

    def _sqlalchemy(self) -> None:
        table = Base.metadata.tables[self.table]
        self.session.execute(insert(table), [dict(zip(self.columns, row)) for row in self.rows])
