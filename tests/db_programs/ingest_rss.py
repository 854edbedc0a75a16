"""Ingest one run directory into a fresh database and print the process's peak RSS (MiB).

    python ingest_rss.py RUN_DIR DB_URL [ROW_GROUP GROUPS_PER_PART]

With the last two, the run's event file is written in row groups of ROW_GROUP events, a part
file per GROUPS_PER_PART of them (many small groups: what a long run's file holds, in small).
"""

import sys
import time

from results_db import connect
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from workloads.spec import RunSpec

from results_db.store import event_files



def peak_mib() -> float:
    """This process's peak RSS: VmHWM belongs to the address space exec made, where ru_maxrss
    keeps the parent's across exec (a full pytest process's hundreds of MiB hid every growth)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


run_dir, url = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    event_files.ROW_GROUP, event_files.GROUPS_PER_PART = int(sys.argv[3]), int(sys.argv[4])
engine = connect(url)
[d] = register_runs(engine, "rss", [PlannedRun("k", RunSpec.load(f"{run_dir}/spec.json").to_dict(), run_dir)])
before = peak_mib()
t0 = time.perf_counter()
ingest_run(engine, d.run_id, run_dir)
elapsed = time.perf_counter() - t0
print(f"{before:.1f} {peak_mib():.1f} {elapsed:.2f}")
