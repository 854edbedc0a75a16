"""A full-scale timeline, ingested: the ranks' binary event streams (issue 63) against their JSON
lines, and the run's event file (Parquet) against the ``events`` table.

    python benchmarks/bench_timeline_scale.py [--ranks 64 256] [--steps 1000] [--events 60] [--repeats 5]
        [--stores file table] [--before DIR [--before-streams]]

Per rank count, one metrics folder shaped as the workload writes with ``timeline=true``
(``tests/synthetic_runs.py``: per rank and step four phases, ``--events`` gradient-ready events, a fused
allreduce per 20 of them), its events as each rank's Arrow IPC stream (``make_metrics_streams``), is
ingested into a fresh SQLite database, alternately (A B A B ...):

- file: ``ingest_run`` as it runs by default, the events into ``<db>.events/<database id>/run-N.parquet``;
- table: ``ingest_run(..., events_table=True)``, the events as rows of the ``events`` table
  (what a PostgreSQL database without ``SCALESTUDY_EVENTS_DIR`` does);
- before (``--before DIR``, a checkout of an earlier commit: ``git worktree add DIR COMMIT``): that
  tree's own ingestion (file) of the same run as its ranks wrote it then, JSON lines
  (``make_metrics_dir``: the same events, to the float), through that tree's copy of this script;
  with ``--before-streams``, of the same streams (a tree that reads them).

Each ingestion runs in a process of its own (``--child``), pyarrow and pandas imported first, so
that its peak RSS is what ingestion adds. Measured: ingestion seconds (parse, store, derive
``step_stats``, commit), the peak RSS it added, the bytes kept (database + events folder), and
the seconds to read one two-step window of every rank's events back (``query.events(steps=)``),
the timeline figure's read. Medians (min-max) over the rounds.

The fixture stands in for real ranks: 256 MPI ranks do not run on this 2-core machine, and the
ingestion does not care who wrote the files; they are the workload's own forms
(``workloads.event_log``'s stream; ``workloads.metrics``'s compact JSON before it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _peak_mib() -> float:
    """Peak RSS of this process (VmHWM: ru_maxrss would keep a larger parent's across exec)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(run_dir: str, db: str, mode: str, window: int) -> None:
    import pandas  # noqa: F401  (imported before the baseline RSS: not ingestion's memory)
    import pyarrow.parquet  # noqa: F401

    from results_db import connect
    from results_db.store import query
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    engine = connect(f"sqlite:///{db}")
    [d] = register_runs(engine, "bench", [PlannedRun("k", RunSpec.load(f"{run_dir}/spec.json").to_dict(), run_dir)])
    before = _peak_mib()
    t0 = time.perf_counter()
    ingest_run(engine, d.run_id, run_dir, events_table=(mode == "table"))
    ingest = time.perf_counter() - t0
    peak = _peak_mib()
    t0 = time.perf_counter()
    frame = query.events(engine, [d.run_id], steps=(window, window + 1))
    read = time.perf_counter() - t0
    engine.dispose()
    kept = sum(p.stat().st_size for p in Path(db).parent.rglob("*") if p.is_file())
    print(json.dumps({"ingest_s": ingest, "rss_mib": peak - before, "read_s": read, "window_events": len(frame),
                      "kept_mb": kept / 2**20}))


def one(run_dir: Path, mode: str, window: int, tree: Path | None = None) -> dict:
    from harness import REPO, tree_env

    tree = tree or REPO
    home = Path(tempfile.mkdtemp(prefix=f"bench-tl-{mode}-"))
    try:
        out = subprocess.run([sys.executable, str(tree / "benchmarks" / Path(__file__).name), "--child", str(run_dir),
                              str(home / "results.db"), mode, str(window)], capture_output=True, text=True,
                             check=True, env=tree_env(tree)).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--events", type=int, default=60, help="gradient-ready events per step and rank")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--stores", nargs="+", choices=("file", "table"), default=["file", "table"],
                    help="file alone: the absolute figures of a shape too large to ingest as rows 5 times")
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="an earlier tree: its ingestion of the run's JSON lines, interleaved with this one's")
    ap.add_argument("--before-streams", action="store_true",
                    help="the earlier tree ingests the same binary streams (a tree since the streams, 2751719)")
    ap.add_argument("--child", nargs=4, metavar=("RUN_DIR", "DB", "MODE", "WINDOW"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_dir, db, mode, window = args.child
        child(run_dir, db, mode, int(window))
        return

    from harness import REPO, interleave, median

    sys.path.append(str(REPO / "tests"))
    from synthetic_runs import make_metrics_dir, make_metrics_streams

    work = Path(tempfile.mkdtemp(prefix="bench-timeline-scale-"))
    try:
        for ranks in args.ranks:
            run_dir = work / f"run-{ranks}"
            records = make_metrics_streams(run_dir, ranks, args.steps, args.events)
            size = sum(p.stat().st_size for p in (run_dir / "metrics").iterdir()) / 2**30
            print(f"{ranks} ranks x {args.steps} steps: {records:,} step+event records, {size:.2f} GB as the ranks' "
                  "binary streams and step lines", flush=True)
            variants = {mode: (lambda mode=mode: one(run_dir, mode, args.steps // 2)) for mode in args.stores}
            if args.before and args.before_streams:
                variants = {"before": lambda: one(run_dir, "file", args.steps // 2, Path(args.before).absolute()),
                            **variants}
            elif args.before:
                json_dir = work / f"json-{ranks}"
                make_metrics_dir(json_dir, ranks, args.steps, args.events)
                size = sum(p.stat().st_size for p in (json_dir / "metrics").iterdir()) / 2**30
                print(f"  before: the same run as JSON lines, {size:.2f} GB, ingested by {args.before}", flush=True)
                variants = {"before": lambda: one(json_dir, "file", args.steps // 2, Path(args.before).absolute()),
                            **variants}
            samples = interleave(variants, args.repeats)
            for mode, rows in samples.items():
                def stat(key: str) -> str:
                    xs = [row[key] for row in rows]
                    return f"{median(xs):.3g} ({min(xs):.3g}-{max(xs):.3g})"
                print(f"  {mode:6s} ingest {stat('ingest_s')} s, peak RSS +{stat('rss_mib')} MiB, "
                      f"kept {stat('kept_mb')} MB, 2-step window read {stat('read_s')} s "
                      f"({rows[0]['window_events']:,} events)")
            for a, b in (("before", "file"), ("table", "file")):
                if a in samples and b in samples:
                    per_round = [x["ingest_s"] / y["ingest_s"] for y, x in zip(samples[b], samples[a])]
                    print(f"  ingestion {a}/{b} = {median(per_round):.2f} (per-round {min(per_round):.2f}-"
                          f"{max(per_round):.2f})", flush=True)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
