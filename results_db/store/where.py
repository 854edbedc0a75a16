"""Filters on runs: small expressions (``nodes>=2, algorithm=sync``, ``params.hidden=128``)
parsed into SQLAlchemy conditions on typed columns. No user text is ever pasted into SQL, and a
value that does not fit its column (``nodes>=two``) is an error, not an empty table.
Conditions are joined by commas or ``and``; every one must hold. Importable without pandas.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer

from .columns import JSON_FIELDS, QueryError, check_column
from .schema import Run, Study

_OPS = {
    "=": lambda c, v: c == v, "==": lambda c, v: c == v, "!=": lambda c, v: c != v,
    ">=": lambda c, v: c >= v, "<=": lambda c, v: c <= v, ">": lambda c, v: c > v, "<": lambda c, v: c < v,
}
_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?"
_CLAUSE = re.compile(rf"^\s*({_NAME})\s*(==|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


def column_of(name: str):
    """The SQL column a reader names (``study``, ``run_id`` or a run column)."""
    if name == "study":
        return Study.name
    if name == "run_id":
        return Run.id
    check_column(name)
    return getattr(Run, name)


def _literal(text: str) -> Any:
    """A value whose type the column does not fix (a params. or metrics. key)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _typed(name: str, column, text: str) -> Any:
    raw = text.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1]
    if not raw:
        raise QueryError(f"cannot read filter on {name}: no value given")
    kind = getattr(column, "type", None)
    try:
        if isinstance(kind, Boolean):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return raw.lower() in ("true", "1")
        if isinstance(kind, Integer):
            return int(raw)
        if isinstance(kind, Float):
            return float(raw)
        if isinstance(kind, DateTime):
            return datetime.fromisoformat(raw)
    except ValueError:
        what = {Boolean: "true or false", Integer: "an integer", Float: "a number", DateTime: "an ISO date"}
        expected = next(v for k, v in what.items() if isinstance(kind, k))
        raise QueryError(f"filter on {name}: {raw!r} is not {expected}") from None
    return raw


class JsonFilter:
    """A condition on one key of ``params`` or ``metrics``, applied to the rows SQL returned.

    JSON values carry their own types, which SQL's casts do not respect alike on every
    database (SQLite reads 'adam' as 0.0; PostgreSQL fails the whole query): here a number
    compares only with numbers, a boolean with booleans, text with text, and a run without
    the key matches nothing but ``!=``."""

    def __init__(self, name: str, op: str, text: str) -> None:
        self.name, self.op = name, op
        self.field, _, self.key = name.partition(".")
        self.value = _literal(text.strip().strip("'\""))

    def _kind(self, v: Any) -> str | None:
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "number"
        if isinstance(v, str):
            return "text"
        return None

    def matches(self, values: Any) -> bool:
        present = isinstance(values, dict) and self.key in values
        v = values.get(self.key) if present else None
        if self.op == "!=":
            return not present or self._kind(v) != self._kind(self.value) or v != self.value
        if not present or self._kind(v) is None or self._kind(v) != self._kind(self.value):
            return False
        return bool(_OPS[self.op](v, self.value))


def parse_where(where: str | Sequence[str] | None) -> list:
    """``"nodes>=2, algorithm=sync"`` (or a list of such) → conditions, all of which must hold:
    SQLAlchemy conditions on columns, and ``JsonFilter``s on ``params.``/``metrics.`` keys."""
    if not where:
        return []
    parts: list[str] = []
    for chunk in [where] if isinstance(where, str) else where:
        if re.search(r"\s+or\s+|\|\|", chunk, flags=re.IGNORECASE):
            raise QueryError(f"cannot read filter {chunk.strip()!r}: conditions are joined with ',' or 'and' "
                             "(all must hold); 'or' is not supported — run one query per alternative")
        parts.extend(p for p in re.split(r",|\s+and\s+", chunk, flags=re.IGNORECASE) if p.strip())
    conditions = []
    for part in parts:
        m = _CLAUSE.match(part)
        if not m:
            raise QueryError(f"cannot read filter {part.strip()!r}; write e.g. nodes>=2, algorithm=sync or "
                             "params.hidden=128")
        name, op, raw = m.groups()
        if not raw.strip().strip("'\""):
            raise QueryError(f"cannot read filter {part.strip()!r}: no value given")
        if re.search(r"(==|!=|>=|<=|=|>|<)", raw):
            raise QueryError(f"cannot read filter {part.strip()!r}: one comparison per condition")
        check_column(name)
        if name.partition(".")[0] in JSON_FIELDS and "." in name:
            conditions.append(JsonFilter(name, op, raw))
            continue
        column = column_of(name)
        value = _typed(name, column, raw)
        if isinstance(getattr(column, "type", None), JSON):
            raise QueryError(f"filter on {name}: a JSON column; filter on one of its keys, e.g. {name}.NAME=VALUE")
        conditions.append(_OPS[op](column, value))
    return conditions
