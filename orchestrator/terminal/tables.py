"""Tables in the terminal: the one a sweep prints when it ends (its runs, straight from SQL into
rich), and the cells and builder ``status`` and ``query`` share.

It needs no pandas (importing it would add a third of a second to every sweep); the
columns are the registry's summary fields, plus each free parameter and reported metric
the runs have.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine, select

from results_db.store.schema import Run
from workloads.spec import FIELDS

# the fields the registry marks for summaries (seed included: repeats are not duplicate rows)
SUMMARY_FIELDS = tuple(f.name for f in FIELDS if f.summary)
RESULTS = ("throughput", "final_top1", "train_seconds")
SWEEP_COLUMNS = ("run_id", "status", *SUMMARY_FIELDS, *RESULTS)


def cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _places(spread: float) -> int | None:
    """Decimal places that show ``spread`` (an interval's width, a standard deviation) to 2
    significant digits: what the value beside it supports (the planner's rule, ``band_digits``)."""
    import math

    if not (isinstance(spread, (int, float)) and math.isfinite(spread) and spread > 0):
        return None
    from perf_model.predict import band_digits

    return band_digits(0.0, float(spread))


def _to(value: float, places: int) -> str:
    return f"{round(value, places):.{max(places, 0)}f}"


def interval_cell(point: Any, low: Any, high: Any) -> str:
    """``1.55 [1.32, 1.87]``: a value with its interval, each to the decimal places the interval's
    width supports (2 significant digits of it: ``0.57 [0.24, 1.35]``, not ``0.5669 [0.2377, 1.352]``)."""
    if low is None or (isinstance(low, float) and low != low):
        return cell(point)
    places = _places(high - low) if isinstance(high, (int, float)) else None
    if places is None or not isinstance(point, (int, float)):
        return f"{cell(point)} [{cell(low)}, {cell(high)}]"
    return f"{_to(point, places)} [{_to(low, places)}, {_to(high, places)}]"


def spread_cell(mean: Any, sd: Any) -> str:
    """``14100 ± 910``: a mean with its standard deviation, the deviation to 2 significant digits
    and the mean to the same place (not ``14095 ± 905.3``)."""
    places = _places(sd) if isinstance(mean, (int, float)) else None
    if places is None:
        return cell(mean) if not (isinstance(sd, float) and sd == sd) else f"{cell(mean)} ± {cell(sd)}"
    return f"{_to(mean, places)} ± {_to(sd, places)}"


def column_cells(values: Sequence[Any]) -> list[str]:
    """A column of floats to one number of decimal places (the largest value's 4 significant
    digits), so that ``0.415`` does not stand beside ``0.4150``; a value that would show no
    significant digit at those places keeps its own 4."""
    import math

    floats = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v) and v != 0]
    if not floats or max(floats) >= 1000:
        return [cell(v) for v in values]
    places = max(3 - math.floor(math.log10(max(floats))), 0)
    out = []
    for v in values:
        if isinstance(v, float) and math.isfinite(v) and (v == 0 or abs(v) >= 10 ** -places):
            out.append(f"{v:.{places}f}")
        else:
            out.append(cell(v))
    return out


def two_sets_shown(table, a: str, b: str, ratio: str, keys: Sequence[str]):
    """A two-set comparison (``regression.compare_sets``: ``compare --against``, ``artifact rerun``)
    as the terminal shows it: the configuration's ``keys``, each side's mean with its repeats, and
    the ratio with its interval."""
    shown = table[list(keys)].copy()
    shown[a] = [f"{cell(m)} ({n})" for m, n in zip(table["a_mean"], table["a_repeats"])]
    shown[b] = [f"{cell(m)} ({n})" for m, n in zip(table["b_mean"], table["b_repeats"])]
    shown[ratio] = [interval_cell(*v) for v in zip(table["change"], table["change_low"], table["change_high"])]
    return shown


def percent_cell(value: Any) -> str:
    """``±8.2 %``: a relative change (0.082) as the tables print it."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"±{100 * value:.3g} %"


def detectable_cell(value: Any, low: Any = None, high: Any = None) -> str:
    """``±19.2 % (12–72)``: the detectable change with the range its own noise estimate allows."""
    point = percent_cell(value)
    if point == "-" or low is None or high is None or low != low or high != high:
        return point
    return f"{point} ({100 * low:.2g}–{100 * high:.2g})"


FIELD_ORDER = {f.name: i for i, f in enumerate(FIELDS)}


def registry_order(columns: Sequence[str]) -> list[str]:
    """Axis columns in the registry's order (``workloads.spec.FIELDS``: nodes, workers per node,
    threads per node, batch size, algorithm, ...), the rest (free parameters) after them as they
    came: every comparison table shows its axes in one order."""
    return [c for _, c in sorted(enumerate(columns), key=lambda ic: (FIELD_ORDER.get(ic[1], len(FIELD_ORDER)), ic[0]))]


def compare_display(frame, metric: str):
    """``compare``'s table as a terminal shows it: each value beside its interval (or why it has
    none), so that a comparison fits 80 columns (CSV, JSON and Parquet keep every column apart)."""
    from results_db.analysis.compare import OUTPUT_COLUMNS

    hidden = set(OUTPUT_COLUMNS(metric)) | {"energy_kj_mean"}
    axes = registry_order([c for c in frame.columns if c not in hidden])
    out = frame[axes + ["repeats"]].copy()
    out[metric] = [spread_cell(m, s) if s == s else cell(m)
                   for m, s in zip(frame[f"{metric}_mean"], frame[f"{metric}_std"])]
    why = [w if w else "" for w in frame["interval"]]
    out["speedup"] = [f"{cell(p)} ({w})" if w and w != "baseline" else interval_cell(p, lo, hi)
                      for p, lo, hi, w in zip(frame["speedup"], frame["speedup_low"], frame["speedup_high"], why)]
    out["efficiency"] = [interval_cell(*v) for v in zip(frame["efficiency"], frame["efficiency_low"],
                                                       frame["efficiency_high"])]
    out["detectable"] = [detectable_cell(*v) for v in zip(frame["detectable"], frame["detectable_low"],
                                                          frame["detectable_high"])]
    if "energy_kj_mean" in frame:
        out["energy kJ"] = frame["energy_kj_mean"]
    return out


# headers as a terminal shows them, so that a table of runs fits 80 columns (the names stay
# whole in CSV, JSON and Parquet, and in --columns)
SHORT_HEADERS = {"workers_per_node": "workers/node", "threads_per_node": "threads/node", "batch_size": "batch",
                 "final_top1": "top-1", "train_seconds": "train s", "throughput": "samples/s",
                 "imbalance_delay_ms": "delay ms", "rounds_per_second": "rounds/s",
                 "gradients_per_second": "gradients/s", "world_size": "ranks",
                 "model_flops_per_sample": "FLOPs/sample", "peak_flops": "peak FLOP/s",
                 "seed": "seed used"}   # the run's own (seed + 1000 x repeat): run_rows.with_run_seed


def rows_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None,
               right: Sequence[bool], fold_constant: bool = False) -> Table:
    """A rich table of cells already formatted (``cell``); ``right``: which columns are numbers.
    The one table builder of the sweep's table, ``status`` and ``query``. ``fold_constant``
    (a summary the user did not choose the columns of): a column with one value in every row
    goes into the caption instead. Cells wrap rather than end in an ellipsis."""
    caption = None
    if fold_constant and len(rows) > 1:
        same = [i for i, c in enumerate(columns) if c != "run_id" and len({r[i] for r in rows}) == 1]
        if same:
            caption = "in every row: " + ", ".join(f"{columns[i]}={rows[0][i]}" for i in same)
            keep = [i for i in range(len(columns)) if i not in same]
            columns, right = [columns[i] for i in keep], [right[i] for i in keep]
            rows = [[r[i] for i in keep] for r in rows]
    table = Table(title=title, caption=caption, caption_justify="left")
    for name, r in zip(columns, right):
        table.add_column(SHORT_HEADERS.get(str(name), str(name)), justify="right" if r else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


# a sweep's table shows a command's reported metrics as columns up to this many
SWEEP_METRICS_SHOWN = 4
# a sweep's table, printed where no terminal says how wide (a pipe, a log): at most this wide; cells wrap
SWEEP_TABLE_WIDTH = 120
# a command workload's command in the sweep's table: this many characters, then an ellipsis
COMMAND_SHOWN = 32
# what a command workload's run does not have: our loop's compute mode and its top-1 (a command reports metrics)
NOT_FOR_COMMANDS = ("model", "compute", "final_top1")


def shorten(text: str, width: int = COMMAND_SHOWN) -> str:
    """``text`` in at most ``width`` characters, ending in an ellipsis where it was cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def print_sweep_table(engine: Engine, run_ids: Sequence[int], title: str) -> None:
    """A sweep of commands shows each run's command instead of the built-in loop's algorithm and model."""
    ids = [int(i) for i in run_ids]
    with engine.connect() as conn:
        kinds = {k for (k,) in conn.execute(select(Run.workload_kind).where(Run.id.in_(ids)).distinct())}
        names = [c for c in SWEEP_COLUMNS if c != "run_id"]
        if kinds == {"command"}:
            names = [c if c != "algorithm" else "command" for c in names if c not in NOT_FOR_COMMANDS]
        stmt = (select(Run.id, *(getattr(Run, c) for c in names), Run.params, Run.metrics)
                .where(Run.id.in_(ids)).order_by(Run.id))
        rows = [tuple(shorten(shlex.join(map(str, v))) if isinstance(v, list) else v for v in row[:-2])
                + tuple(row[-2:]) for row in conn.execute(stmt).all()]
    keys = {"params": [], "metrics": []}
    for row in rows:
        for field, values in (("params", row[-2]), ("metrics", row[-1])):
            for key in values or {}:
                if key not in keys[field]:
                    keys[field].append(key)
    hidden = []
    if len(keys["metrics"]) > SWEEP_METRICS_SHOWN:   # a curve of metrics (netbench's sizes) cannot fit a terminal
        hidden, keys["metrics"] = keys["metrics"], []
    numeric = {"run_id", "nodes", "workers_per_node", "threads_per_node", "batch_size", "seed", *RESULTS}
    columns = ["run_id", *names, *(f"params.{k}" for k in keys["params"]), *(f"metrics.{k}" for k in keys["metrics"])]
    cells = []
    for row in rows:
        params, metrics = row[-2] or {}, row[-1] or {}
        cells.append([*(cell(v) for v in row[:-2]), *(cell(params.get(k)) for k in keys["params"]),
                      *(cell(metrics.get(k)) for k in keys["metrics"])])
    if len(cells) == 1:   # one run: a column per field would not fit a terminal; a row per field does
        table = rows_table(["field", "value"], [[SHORT_HEADERS.get(c, c), v] for c, v in zip(columns, cells[0])],
                           title, [False, False])
    else:
        table = rows_table(columns, cells, title, [c in numeric or "." in c for c in columns], fold_constant=True)
    Console(width=None if sys.stdout.isatty() else SWEEP_TABLE_WIDTH).print(table)
    if hidden:
        print(f"({len(hidden)} reported metrics per run, not shown here ({', '.join(hidden[:3])}, ...): "
              f"scalestudy query --columns run_id,metrics.{hidden[0]} --format csv)")


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: seconds, minutes or hours."""
    if seconds < 9.5:   # a short run is not "0 s": two significant digits
        return f"{seconds:.2g} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
