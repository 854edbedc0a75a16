"""Render result DataFrames for the terminal (rich) or for other programs (CSV, JSON)."""

from __future__ import annotations

import sys
from typing import Sequence

import pandas as pd
from rich.console import Console
from rich.table import Table

from results_db import query

from .sweep_table import RESULTS, SUMMARY_FIELDS, SWEEP_COLUMNS, cell, rows_table  # noqa: F401 - SWEEP_COLUMNS re-exported

SUMMARY_COLUMNS = ("run_id", "study", "status", *SUMMARY_FIELDS, "global_batch_size", *RESULTS)
FORMATS = ("table", "csv", "json", "parquet")


def _cell(value) -> str:
    return "-" if value is not None and not isinstance(value, (list, dict)) and pd.isna(value) else cell(value)


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
    elif len(frame) > RICH_ROWS:
        sys.stdout.write(_plain(frame, title))
    else:
        # Piped output keeps whole rows rather than rich's 80-column default.
        Console(width=None if sys.stdout.isatty() else 250).print(_table(frame, title))


# rich lays a table out cell by cell: ~8 ms a row of 15 columns, 3.5 s for 456 runs; longer
# tables are printed as aligned plain text (the same cells), ~100x faster
RICH_ROWS = 100


def _plain(frame: pd.DataFrame, title: str | None) -> str:
    cells = [[str(c) for c in frame.columns]] + [[" ".join(_cell(v).split("\n")) for v in row]
                                                 for row in frame.itertuples(index=False)]
    right = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    widths = [max(len(r[i]) for r in cells) for i in range(len(frame.columns))]
    lines = ["  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(row, widths, right)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return (f"{title} ({len(frame)} rows)\n" if title else "") + "\n".join(lines) + "\n"


def _table(frame: pd.DataFrame, title: str | None) -> Table:
    return rows_table(list(frame.columns), [[_cell(v) for v in row] for row in frame.itertuples(index=False)],
                      title, [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns])


def with_json_keys(engine, frame: pd.DataFrame, study=None, where=None, run_ids=None,
                   attempts: str = "latest") -> pd.DataFrame:
    """``frame`` (from ``query.runs``) with a column per free parameter and reported metric these runs have."""
    extra = query.runs(engine, study=study, where=where, run_ids=run_ids, columns=["run_id", "params", "metrics"],
                       attempts=attempts)
    extra = query.expand_json(query.expand_json(extra, "params"), "metrics").drop(columns=["params", "metrics"])
    keys = [c for c in extra.columns if c != "run_id" and extra[c].notna().any() and c not in frame.columns]
    if not keys or "run_id" not in frame.columns:
        return frame
    return frame.merge(extra[["run_id", *keys]], on="run_id", how="left")


def print_runs_table(engine, where=None, run_ids: Sequence[int] | None = None, study: str | None = None,
                     columns: Sequence[str] = SUMMARY_COLUMNS, title: str = "runs") -> None:
    frame = query.runs(engine, study=study, where=where, run_ids=run_ids, columns=columns)
    render(with_json_keys(engine, frame, study, where, run_ids), "table", title=title)


from results_db.columns import FAILED_STATES  # noqa: E402 - one definition (not results_db.report: matplotlib)


def print_failed_runs(engine, study: str | None = None) -> None:
    """Each failed, timed-out or partial run: its configuration, its reason, where its log is."""
    from pathlib import Path

    # filtered in SQL first: a study of 100,000 runs has a handful that failed
    frame = query.runs(engine, study=study, where=[f"status!={s}" for s in ("done", "pending", "running")],
                       columns=["run_id", "study", "status", "nodes", "workers_per_node", "algorithm", "error", "run_dir"])
    frame = frame[frame["status"].isin(FAILED_STATES)]
    if frame.empty:
        print("no failed, timed-out or partial runs" + (f" in study {study!r}" if study else ""))
        return
    console = Console(width=None if sys.stdout.isatty() else 250, highlight=False, soft_wrap=True)
    for row in frame.itertuples(index=False):
        log = Path(row.run_dir) / "workload.log" if row.run_dir else None
        console.print(f"[bold]run {row.run_id}[/bold] ({row.study}, nodes={row.nodes}, workers_per_node="
                      f"{row.workers_per_node}, {row.algorithm}): [red]{row.status}[/red]: {row.error or '(no reason stored)'}")
        if log is not None:
            console.print(f"    log: {log}" + ("" if log.exists() else " (not on this host)"))
