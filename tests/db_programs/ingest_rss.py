"""Ingest one run directory into a fresh database and print the process's peak RSS (MiB).

    python ingest_rss.py RUN_DIR DB_URL [--row-group N --groups-per-part N] [--small-buffers] [--fold-rows N]

``--row-group``/``--groups-per-part``: the run's event file in row groups of N events, a part file
per N of them (many small groups: what a long run's file holds, in small). ``--small-buffers``:
every bounded buffer of ingestion made small (the read block and chunk, the events folded at
once, the rows inserted at once, the part files), so that a run of a few thousand steps is
already past all of them: what memory it adds beyond them is what grows with the run's length.
``--fold-rows``: the events folded at once, alone (10**9: a rank's are held to its end, the control).
"""

import argparse
import time

from results_db import connect
from results_db.ingest import event_sink, folder, rank_events, rank_files, sinks
from results_db.ingest.folder import ingest_run
from results_db.store import event_files
from results_db.store.runs import PlannedRun, register_runs
from workloads.spec import RunSpec


def peak_mib() -> float:
    """This process's peak RSS: VmHWM belongs to the address space exec made, where ru_maxrss
    keeps the parent's across exec (a full pytest process's hundreds of MiB hid every growth)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


ap = argparse.ArgumentParser()
ap.add_argument("run_dir")
ap.add_argument("url")
ap.add_argument("--row-group", type=int)
ap.add_argument("--groups-per-part", type=int)
ap.add_argument("--small-buffers", action="store_true")
ap.add_argument("--fold-rows", type=int)
args = ap.parse_args()
if args.small_buffers:
    rank_files.BLOCK, rank_events.CHUNK_ROWS, event_sink._FOLD_ROWS = 1 << 16, 4096, 5000
    sinks.BATCH, folder._STATS_ROWS = 500, 500
    event_files.ROW_GROUP, event_files.GROUPS_PER_PART = 2048, 4
if args.row_group:
    event_files.ROW_GROUP, event_files.GROUPS_PER_PART = args.row_group, args.groups_per_part
if args.fold_rows:
    event_sink._FOLD_ROWS = args.fold_rows
import pandas  # noqa: F401  (imported before the baseline: not ingestion's memory)
import pyarrow.parquet  # noqa: F401

engine = connect(args.url)
[d] = register_runs(engine, "rss", [PlannedRun("k", RunSpec.load(f"{args.run_dir}/spec.json").to_dict(), args.run_dir)])
before = peak_mib()
t0 = time.perf_counter()
ingest_run(engine, d.run_id, args.run_dir)
elapsed = time.perf_counter() - t0
print(f"{before:.1f} {peak_mib():.1f} {elapsed:.2f}")
