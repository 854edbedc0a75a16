"""Ingestion rows/s of step and event records: ours vs the raw baseline on the same rows.

    python benchmarks/bench_ingest.py [--ranks 4] [--steps 5000] [--events 20] [--repeats 5] [--postgres URL]

Ours: ``results_db.ingest.folder.ingest_run`` on a generated metrics directory (reads and
parses the JSON lines, inserts in batches, one transaction, derives step stats).
SQLite baseline: the same rows, already parsed into tuples, through raw ``sqlite3``
``executemany`` in one transaction. PostgreSQL baseline: ``COPY ... FROM STDIN`` of the
same rows with psycopg. Targets: ours/raw >= 0.5 for both. Ratios printed last.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, interleave, median, spread

sys.path.append(str(REPO / "tests"))
from synthetic_runs import make_metrics_dir  # noqa: E402 - the tests' fixture

STEP_COLS = ("run_id", "rank", "step", "epoch", "samples", "t_start", "data", "forward", "backward", "comm_wait",
             "update", "delay", "loss")
EVENT_COLS = ("run_id", "rank", "step", "tensor", "phase", "t0", "t1", "bytes", "tensors", "arrival")


def parsed_rows(run_dir: Path):
    steps, events = [], []
    for path in sorted((run_dir / "metrics").glob("rank-*.jsonl")):
        rank = int(path.stem.split("-")[1])
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rec.update(run_id=1, rank=rank)
            if rec["type"] == "step":
                steps.append(tuple(rec.get(c) for c in STEP_COLS))
            elif rec["type"] == "event":
                rec["tensors"] = ",".join(rec["tensors"]) if "tensors" in rec else None
                events.append(tuple(rec.get(c) for c in EVENT_COLS))
    return steps, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--events", type=int, default=60, help="gradient-ready events per step and rank")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--postgres", default=None, help="a PostgreSQL URL (its schema is dropped and recreated)")
    ap.add_argument("--memory-gb", type=float, default=0,
                    help="instead: ingest a metrics directory of about this many GB and report peak memory")
    args = ap.parse_args()
    if args.memory_gb:
        memory(args.memory_gb)
        return

    from sqlalchemy import create_engine, text

    from results_db import connect
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    run_dir = work / "run"
    rows = make_metrics_dir(run_dir, args.ranks, args.steps, args.events)
    size_mb = sum(p.stat().st_size for p in (run_dir / "metrics").iterdir()) / 2**20
    steps, events = parsed_rows(run_dir)
    print(f"{rows} step+event records ({len(steps)} steps, {len(events)} events), {size_mb:.0f} MB of JSON lines")
    spec = RunSpec.load(run_dir / "spec.json").to_dict()
    counter = iter(range(10**9))

    def ours(url_for):
        def run() -> float:
            url = url_for()
            engine = connect(url)
            [d] = register_runs(engine, "bench", [PlannedRun(f"k{next(counter)}", spec, str(run_dir))])
            t0 = time.perf_counter()
            ingest_run(engine, d.run_id, run_dir)
            dt = time.perf_counter() - t0
            engine.dispose()
            return rows / dt
        return run

    def sqlite_url():
        return f"sqlite:///{work / f'ours-{next(counter)}.db'}"

    def raw_sqlite() -> float:
        path = work / f"raw-{next(counter)}.db"
        engine = connect(f"sqlite:///{path}")  # the same schema and indexes, and run 1 for the rows
        register_runs(engine, "bench", [PlannedRun("raw", spec, str(run_dir))])
        engine.dispose()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany(f"INSERT INTO steps ({','.join(map(repr, STEP_COLS))}) VALUES ({','.join('?' * len(STEP_COLS))})", steps)
        conn.executemany(f"INSERT INTO events ({','.join(map(repr, EVENT_COLS))}) VALUES ({','.join('?' * len(EVENT_COLS))})", events)
        conn.execute("COMMIT")
        dt = time.perf_counter() - t0
        conn.close()
        return rows / dt

    variants = {"raw sqlite3": raw_sqlite, "ours (sqlite)": ours(sqlite_url)}
    if args.postgres:
        import psycopg

        def pg_url():
            engine = create_engine(args.postgres)
            with engine.begin() as conn:
                conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
            engine.dispose()
            return args.postgres

        def raw_copy() -> float:
            engine = connect(pg_url())
            register_runs(engine, "bench", [PlannedRun("raw", spec, str(run_dir))])
            engine.dispose()
            dsn = args.postgres.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(dsn) as conn:
                t0 = time.perf_counter()
                with conn.cursor() as cur:
                    with cur.copy(f"COPY steps ({','.join(f'{c!r}'.replace(chr(39), chr(34)) for c in STEP_COLS)}) FROM STDIN") as cp:
                        for row in steps:
                            cp.write_row(row)
                    with cur.copy(f"COPY events ({','.join(f'{c!r}'.replace(chr(39), chr(34)) for c in EVENT_COLS)}) FROM STDIN") as cp:
                        for row in events:
                            cp.write_row(row)
                conn.commit()
                dt = time.perf_counter() - t0
            return rows / dt

        variants.update({"raw COPY (postgres)": raw_copy, "ours (postgres)": ours(pg_url)})
    samples = interleave(variants, args.repeats)
    med = {k: median(v) for k, v in samples.items()}
    for name, value in med.items():
        print(f"  {name:22s} {value:12,.0f} rows/s (median; {spread(samples[name])}; {args.repeats} repeats)")

    def ratio(ours_name: str, raw_name: str) -> str:
        per_round = [o / r for o, r in zip(samples[ours_name], samples[raw_name])]
        return f"{med[ours_name] / med[raw_name]:.3f} (per-round {spread(per_round)})"

    print(f"ratio ours/raw sqlite3 executemany = {ratio('ours (sqlite)', 'raw sqlite3')}")
    if args.postgres:
        print(f"ratio ours/raw postgres COPY = {ratio('ours (postgres)', 'raw COPY (postgres)')}")


def memory(gigabytes: float) -> None:
    """Peak RSS while ingesting ~``gigabytes`` of metrics, next to that of a 1/16 directory."""
    import subprocess
    import sys

    program = str(Path(__file__).resolve().parent.parent / "tests" / "db_programs" / "ingest_rss.py")
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-mem-"))
    steps_per_gb = 23_800  # 4 ranks, 60 gradients per step: ~1 GB of JSON lines
    for fraction in (1 / 16, 1.0):
        run_dir = work / f"run-{fraction:g}"
        make_metrics_dir(run_dir, 4, int(steps_per_gb * gigabytes * fraction), 60)
        size = sum(p.stat().st_size for p in (run_dir / "metrics").iterdir()) / 2**30
        out = subprocess.run([sys.executable, program, str(run_dir), f"sqlite:///{work / f'm{fraction:g}.db'}"],
                             capture_output=True, text=True, check=True).stdout.split()
        before, peak, seconds = (float(x) for x in out)
        print(f"{size:6.3f} GB of metrics: peak RSS {peak:.0f} MiB ({peak - before:+.0f} MiB during ingestion), "
              f"{seconds:.0f} s")
        import shutil
        shutil.rmtree(run_dir)


if __name__ == "__main__":
    main()
