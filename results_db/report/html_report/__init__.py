"""A study as one self-contained HTML folder: ``build_report`` (``scalestudy report``).

- ``tables.py``: what was swept, one row per configuration, the failures;
- ``provenance.py``: commits, versions, MPI library, sites, batch jobs, the database (masked);
- ``page.py`` and ``report.html.j2``: the page, every value escaped;
- ``build.py``: checks the choices, draws the figures (``results_db.report.figures``), writes the folder.

The names are loaded on first use (PEP 562): ``compare`` reads ``tables`` without the drawing.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = {"FIGURE_FORMATS": "build", "Report": "build", "build_report": "build", "ReportError": "tables"}

__all__ = sorted(_FROM)


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
