"""``1 run``, ``2 runs``: a count with its noun, as every message says it (issue 62: "1 runs")."""

from __future__ import annotations


def counted(n, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
