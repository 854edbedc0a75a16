"""Query results for the terminal (rich) or for other programs (CSV, JSON, Parquet).

Tables arrive as plain rows (``results_db.store.run_rows.Rows``) or as DataFrames (``compare``);
nothing here imports pandas, so ``status`` and ``query`` start in half the time (pandas is
imported only to write Parquet).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from datetime import date, datetime
from typing import Any, Sequence

from rich.console import Console

from results_db.store import run_rows
from results_db.store.columns import FAILED_STATES
from results_db.store.run_rows import Rows, missing
from workloads.run_folder import LOG_FILE

from .tables import RESULTS, SUMMARY_FIELDS, cell, column_cells, rows_table

SUMMARY_COLUMNS = ("run_id", "study", "status", *SUMMARY_FIELDS, "global_batch_size", *RESULTS)
FORMATS = ("table", "csv", "json", "parquet")


def as_rows(data) -> Rows:
    """``Rows`` of a ``Rows`` or a DataFrame (missing values as None)."""
    if isinstance(data, Rows):
        return data
    return Rows([str(c) for c in data.columns],
                [tuple(None if missing(v) else _plain_value(v) for v in row)
                 for row in data.itertuples(index=False)])


def _plain_value(v):
    """numpy scalars and pandas timestamps as Python values (json and csv know those)."""
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    if hasattr(v, "item") and not isinstance(v, (list, dict, tuple, str)):
        return v.item()
    return v


def _cell(value) -> str:
    return "-" if missing(value) else cell(value)


def _numeric(table: Rows) -> list[bool]:
    """Columns whose values present are all numbers (right-aligned)."""
    out = []
    for j in range(len(table.columns)):
        present = [r[j] for r in table.rows if not missing(r[j])]
        out.append(bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present))
    return out


def _json_value(v):
    """A cell as JSON can hold it: NaN and infinities (JSON has neither) as null, also inside the
    params and metrics mappings; times in ISO 8601."""
    if isinstance(v, dict):
        return {k: _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if missing(v) or (isinstance(v, float) and math.isinf(v)):
        return None
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    return v


def _csv_value(v):
    if missing(v):
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    return v


def write_csv(table: Rows, fh) -> None:
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows([_csv_value(v) for v in row] for row in table.rows)


def write_json(table: Rows, fh) -> None:
    """Records, one object per row; missing values as null, times in ISO 8601."""
    # the whole text first: an error must not leave half an array on stdout or in a file
    text = json.dumps([{c: _json_value(v) for c, v in zip(table.columns, row)} for row in table.rows],
                      default=str, allow_nan=False, separators=(",", ":"))   # compact, as pandas wrote it
    fh.write(text)


def render(data, fmt: str = "table", title: str | None = None, out: str | None = None,
           fold: bool = False) -> None:
    """Print ``data`` (``Rows`` or a DataFrame), or write it to ``out``; Parquet is binary and
    always needs ``out``. ``fold``: a summary's table puts the columns with one value in every
    row in its caption (``rows_table``)."""
    if fmt == "parquet":
        if not out:
            raise ValueError("--format parquet writes a binary file: give --out FILE.parquet")
        from results_db.store.query import frame_of

        (frame_of(data) if isinstance(data, Rows) else data).to_parquet(out, index=False)
        return
    table = as_rows(data)
    if out:
        with open(out, "w", newline="") as fh:
            if fmt == "csv":
                write_csv(table, fh)
            elif fmt == "json":
                write_json(table, fh)
            else:
                Console(file=fh, width=250).print(_table(table, title))
        return
    if fmt == "csv":
        write_csv(table, sys.stdout)
    elif fmt == "json":
        write_json(table, sys.stdout)
        sys.stdout.write("\n")
    elif len(table) > RICH_ROWS:
        sys.stdout.write(_plain(table, title))
    else:
        # Piped output keeps whole rows rather than rich's 80-column default.
        Console(width=None if sys.stdout.isatty() else 250).print(_table(table, title, fold))


# rich lays a table out cell by cell: ~8 ms a row of 15 columns, 3.5 s for 456 runs; longer
# tables are printed as aligned plain text (the same cells), ~100x faster
RICH_ROWS = 100


def _plain(table: Rows, title: str | None) -> str:
    cells = [list(table.columns)] + [[" ".join(_cell(v).split("\n")) for v in row] for row in table.rows]
    right = _numeric(table)
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.columns))]
    lines = ["  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(row, widths, right)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return (f"{title} ({len(table)} rows)\n" if title else "") + "\n".join(lines) + "\n"


def _table(table: Rows, title: str | None, fold: bool = False):
    """Each column's floats to one number of decimal places (``column_cells``)."""
    columns = [column_cells([None if missing(v) else v for v in table.column(c)]) for c in table.columns]
    rows = [[columns[j][i] for j in range(len(table.columns))] for i in range(len(table.rows))]
    return rows_table(table.columns, rows, title, _numeric(table), fold_constant=fold)


def print_runs_table(engine, where=None, run_ids: Sequence[int] | None = None, study: str | None = None,
                     columns: Sequence[str] = SUMMARY_COLUMNS, title: str = "runs") -> None:
    """Runs as a table; a command workload's runs show ``-`` for what only our training loop has
    (``run_rows.blank_not_applicable``)."""
    table = run_rows.run_rows(engine, study=study, where=where, run_ids=run_ids, columns=columns)
    table = run_rows.with_run_seed(engine, run_rows.blank_not_applicable(engine, table))
    render(run_rows.with_json_keys(engine, table, study, where, run_ids), "table", title=title,
           fold=list(columns) == list(SUMMARY_COLUMNS))


def print_failed_runs(engine, study: str | None = None) -> None:
    """Each failed, timed-out or partial run: its configuration, its reason, where its log is."""
    from pathlib import Path

    # filtered in SQL first: a study of 100,000 runs has a handful that failed
    table = run_rows.run_rows(engine, study=study, where=[f"status!={s}" for s in ("done", "pending", "running")],
                              columns=["run_id", "study", "status", "nodes", "workers_per_node", "algorithm",
                                       "error", "run_dir"])
    failed: list[dict[str, Any]] = [dict(zip(table.columns, r)) for r in table.rows]
    failed = [r for r in failed if r["status"] in FAILED_STATES]
    if not failed:
        print("no failed, timed-out or partial runs" + (f" in study {study!r}" if study else ""))
        return
    console = Console(width=None if sys.stdout.isatty() else 250, highlight=False, soft_wrap=True)
    for row in failed:
        log = Path(row["run_dir"]) / LOG_FILE if row["run_dir"] else None
        console.print(f"[bold]run {row['run_id']}[/bold] ({row['study']}, nodes={row['nodes']}, workers_per_node="
                      f"{row['workers_per_node']}, {row['algorithm']}): [red]{row['status']}[/red]: "
                      f"{row['error'] or '(no reason stored)'}")
        if log is not None:
            console.print(f"    log: {log}" + ("" if log.exists() else " (not on this host)"))
