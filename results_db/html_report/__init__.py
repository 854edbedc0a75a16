"""A study as one self-contained HTML folder: ``build_report`` (``scalestudy report``).

- ``tables.py``: what was swept, one row per configuration, the failures;
- ``provenance.py``: commits, versions, MPI library, sites, batch jobs, the database (masked);
- ``page.py`` and ``report.html.j2``: the page, every value escaped;
- ``build.py``: checks the choices, draws the figures (``results_db.figures``), writes the folder.
"""

from .build import FIGURE_FORMATS, Report, build_report
from .tables import ReportError

__all__ = ["FIGURE_FORMATS", "Report", "ReportError", "build_report"]
