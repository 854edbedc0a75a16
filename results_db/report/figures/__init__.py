"""A study's figures, drawn from SQL: ``render_study`` and the figure catalog.

The names are loaded on first use (PEP 562): ``compare`` reads ``figures.data`` and
``figures.derived`` and must not pay for matplotlib, which the catalog's drawing imports (0.4 s).
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {"CATALOG": "catalog", "FORMATS": "catalog", "NAMES": "catalog", "FigureResult": "catalog",
         "catalog_lines": "catalog", "check_choices": "catalog", "render_study": "catalog", "FigureDataError": "data"}

__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
