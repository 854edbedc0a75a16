"""A study's figures, drawn from SQL: ``render_study`` and the figure catalog."""

from .catalog import CATALOG, FORMATS, NAMES, FigureResult, catalog_lines, check_choices, render_study
from .data import FigureDataError

__all__ = ["CATALOG", "FORMATS", "NAMES", "FigureDataError", "FigureResult", "catalog_lines", "check_choices", "render_study"]
