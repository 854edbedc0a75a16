"""A run's timeline as Chrome trace-event JSON (``scalestudy timeline``): how long 10^5 and
10^6 events take, against reading the same events from SQL alone (issue 30, item 1: "a large
run writes in seconds").

    python benchmarks/bench_trace_export.py [--events 100000] [--repeats 5]

A SQLite file with one run of ``--events`` allreduce events over 4 ranks (and its steps) is
made once; then, interleaved for ``--repeats`` rounds: "read" is ``query.events`` of the run
(the SQL and the DataFrame: the floor any export pays), "export" is
``write_chrome_trace`` to a file (the read, the layout and the JSON). Printed: medians, the
ratio export / read with its spread (min–max of the rounds), and the file's size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness import interleave, median, per_round, seconds

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))
    from sqlalchemy import insert

    from perf_synthetic import write_study
    from results_db import connect
    from results_db.store import query
    from results_db.report.chrome_trace import write_chrome_trace
    from results_db.store.schema import Event

    work = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    engine = connect(f"sqlite:///{work / 'trace.db'}")
    [run_id] = write_study(engine, "trace", configs=((8, 4),))
    rows = [{"run_id": run_id, "rank": k % 4, "step": 1000 + k // 400, "tensor": f"fused-{k % 100}",
             "phase": "allreduce", "t0": 5000.0 + k * 1e-3, "t1": 5000.0 + k * 1e-3 + 5e-4, "bytes": 4096}
            for k in range(args.events)]
    with engine.begin() as conn:
        conn.execute(insert(Event), rows)
    total = len(query.events(engine, [run_id]))
    out = work / "trace.json"
    times = interleave({"read": lambda: seconds(lambda: query.events(engine, [run_id])),
                        "export": lambda: seconds(lambda: write_chrome_trace(engine, run_id, out))}, args.repeats)
    ratios = per_round(times["export"], times["read"])
    print(f"{total} events (4 ranks): read {median(times['read']):.2f} s, export {median(times['export']):.2f} s "
          f"(median of {args.repeats}); export / read {median(times['export']) / median(times['read']):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}); file {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
