"""Render result DataFrames for the terminal (rich) or for other programs (CSV, JSON)."""

from __future__ import annotations

import sys
from typing import Sequence

import pandas as pd
from rich.console import Console
from rich.table import Table

from results_db import query

SUMMARY_COLUMNS = ("run_id", "study", "status", "nodes", "workers_per_node", "threads_per_node", "batch_size",
                   "global_batch_size", "algorithm", "model", "throughput", "final_top1", "train_seconds")
SWEEP_COLUMNS = ("run_id", "status", "nodes", "workers_per_node", "threads_per_node", "batch_size", "algorithm",
                 "throughput", "final_top1", "train_seconds")
FORMATS = ("table", "csv", "json", "parquet")


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def render(frame: pd.DataFrame, fmt: str = "table", title: str | None = None, out: str | None = None) -> None:
    """Print ``frame`` (or write it to ``out``); Parquet is binary and always needs ``out``."""
    if out:
        if fmt == "parquet":
            frame.to_parquet(out, index=False)
        elif fmt == "csv":
            frame.to_csv(out, index=False)
        elif fmt == "json":
            frame.to_json(out, orient="records", date_format="iso")
        else:
            with open(out, "w") as fh:
                Console(file=fh, width=250).print(_table(frame, title))
        return
    if fmt == "parquet":
        raise ValueError("--format parquet writes a binary file: give --out FILE.parquet")
    if fmt == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        sys.stdout.write(frame.to_json(orient="records", date_format="iso") + "\n")
    else:
        # Piped output keeps whole rows rather than rich's 80-column default.
        Console(width=None if sys.stdout.isatty() else 250).print(_table(frame, title))


def _table(frame: pd.DataFrame, title: str | None) -> Table:
    table = Table(title=title, show_lines=False)
    for col in frame.columns:
        table.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(frame[col]) else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def print_runs_table(engine, where=None, run_ids: Sequence[int] | None = None, study: str | None = None,
                     columns: Sequence[str] = SUMMARY_COLUMNS, title: str = "runs") -> None:
    frame = query.runs(engine, study=study, where=where, run_ids=run_ids, columns=columns)
    render(frame, "table", title=title)
