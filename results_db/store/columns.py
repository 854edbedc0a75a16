"""The run columns a reader can name, and how a name is checked: importable without pandas.

Derived from the ``runs`` table (whose field columns come from ``workloads.spec.FIELDS``);
``params.NAME`` and ``metrics.NAME`` address keys of the two JSON columns.
"""

from __future__ import annotations

from workloads import did_you_mean
import re

from .schema import runs_table

# the states a run ends in when it did not finish well (status --failed, the report's failures)
FAILED_STATES = ("failed", "timeout", "partial", "lost", "interrupted")

# bookkeeping columns a reader never needs (the whole spec is in ``config`` and the columns)
_HIDDEN = ("id", "study_id", "spec", "driver", "heartbeat", "ingested_at")
RUN_COLUMNS = ("run_id", "study", *(c.name for c in runs_table.columns if c.name not in _HIDDEN))
# JSON columns whose keys are addressed as ``params.NAME`` / ``metrics.NAME``
JSON_FIELDS = ("params", "metrics")


class QueryError(ValueError):
    """A filter or column the database does not have."""


def _unknown(name: str) -> QueryError:
    hint = did_you_mean.hint(name, RUN_COLUMNS)
    return QueryError(f"unknown column {name!r}{hint}; the {len(RUN_COLUMNS)} run columns: scalestudy query "
                      "--list-columns; also params.NAME, metrics.NAME")


def check_column(name: str) -> str:
    """``name`` if a run column or a ``params.``/``metrics.`` key, else a clear error."""
    head, _, key = name.partition(".")
    if key and head in JSON_FIELDS and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return name
    if name not in RUN_COLUMNS:
        raise _unknown(name)
    return name
