"""Database writes that survive an outage: runs go on while the database is away.

The database may go away for a while (a server restart): runs go on, their results stay
in their folders, and what could not be written is retried or left to ``scalestudy
ingest``. One line says so, once per outage, and one when it is back.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from rich.console import Console


class DatabaseWrites:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.down = False

    def write(self, what: str, fn: Callable[..., Any], *args, retries: tuple[float, ...] = (), **kwargs) -> bool:
        """Call a database write; True if it happened. On a lost connection, retry after
        each delay in ``retries``, then give up with one line (once per outage)."""
        from sqlalchemy.exc import DBAPIError

        for delay in (*retries, None):
            try:
                fn(*args, **kwargs)
                if self.down:
                    self.console.print("[green]database reachable again[/green]")
                    self.down = False
                return True
            except DBAPIError as exc:
                if not (exc.connection_invalidated or isinstance(exc.orig, (OSError,)) or
                        type(exc).__name__ in ("OperationalError", "InterfaceError")):
                    raise
                if not self.down:
                    self.console.print(f"[yellow]database unreachable ({what}): runs go on, their results stay in "
                                       f"their folders[/yellow]")
                    self.down = True
                if delay is None:
                    return False
                time.sleep(delay)
        return False
