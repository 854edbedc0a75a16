"""A query over 1 M step rows: ``results_db.store.query.steps`` vs the raw ``pandas.read_sql``.

    python benchmarks/bench_query.py [--rows 1000000] [--repeats 7]

Both read every step row of one run into a DataFrame from the same SQLite file.
Target: ours / raw <= 1.5 (time). Ratio printed last.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import pandas as pd

from harness import interleave, median, spread


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    from results_db import connect
    from results_db.store import query
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    path = Path(tempfile.mkdtemp(prefix="bench-query-")) / "q.db"
    engine = connect(f"sqlite:///{path}")
    spec = RunSpec(study="b", site="local", nodes=1, workers_per_node=4, threads_per_node=4, batch_size=32)
    [d] = register_runs(engine, "b", [PlannedRun("k", spec.to_dict(), "/nowhere")])
    conn = sqlite3.connect(path)
    rows = ((d.run_id, i % 4, i // 4, 0, 32, 1.7e9 + i, 1e-3, 0.05, 0.1, 0.01, 1e-3, 0.0, 0.5)
            for i in range(args.rows))
    conn.executemany('INSERT INTO steps (run_id, rank, step, epoch, samples, t_start, data, forward, backward, '
                     'comm_wait, "update", delay, loss) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)', rows)
    conn.commit()
    print(f"{args.rows} step rows in {path}")

    def ours() -> float:
        t0 = time.perf_counter()
        frame = query.steps(engine, [d.run_id])
        assert len(frame) == args.rows
        return time.perf_counter() - t0

    def raw() -> float:
        t0 = time.perf_counter()
        frame = pd.read_sql("SELECT * FROM steps WHERE run_id = ?", conn, params=(d.run_id,))
        assert len(frame) == args.rows
        return time.perf_counter() - t0

    samples = interleave({"raw pandas.read_sql": raw, "ours query.steps": ours}, args.repeats)
    r, o = median(samples["raw pandas.read_sql"]), median(samples["ours query.steps"])
    raw_s, ours_s = samples["raw pandas.read_sql"], samples["ours query.steps"]
    print(f"median seconds over {args.repeats} repeats: raw {r:.3f} ({spread(raw_s)}), ours {o:.3f} ({spread(ours_s)})")
    print(f"ratio ours/raw (time) = {o / r:.3f} (per-round {spread([x / y for x, y in zip(ours_s, raw_s)])})")


if __name__ == "__main__":
    main()
