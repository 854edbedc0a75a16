"""A run's timeline as Chrome trace-event JSON (``scalestudy timeline``): how long 10^5 and
10^6 events take, against reading the same events from SQL alone (issue 30, item 1: "a large
run writes in seconds").

    python benchmarks/bench_trace_export.py [--events 100000] [--repeats 5] [--before DIR]

A SQLite file with one run of about ``--events`` events over 4 ranks (and its steps) is made
once: by default a timeline of ResNet-50's 161 tensors as the ranks write it, ingested into the
run's event file (``--source table``: allreduce rows in the events table, as measured before); then, interleaved for ``--repeats`` rounds: "read" is ``query.events`` of the run
(the SQL and the DataFrame: the floor any export pays), "export" is
``write_chrome_trace`` to a file (the read, the layout and the JSON). Printed: medians, the
ratio export / read with its spread (min–max of the rounds), and the file's size.

``--before DIR`` (a checkout of an earlier commit: ``git worktree add DIR COMMIT``): each round
also exports the same run with that tree's ``write_chrome_trace``, and this tree's, each in a
process of its own (the export timed inside it, after its imports), A B A B; printed: each
tree's median and the ratio before / after per round.
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
    ap.add_argument("--before", default=None, metavar="DIR")
    ap.add_argument("--source", choices=("file", "table"), default="file",
                    help="file: a timeline of 4 ranks' binary streams, ingested into its event file (default); "
                         "table: --events allreduce rows in the events table (the form of the figures before 2026-12-07)")
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
    if args.source == "table":
        [run_id] = write_study(engine, "trace", configs=((8, 4),))
        rows = [{"run_id": run_id, "rank": k % 4, "step": 1000 + k // 400, "tensor": f"fused-{k % 100}",
                 "phase": "allreduce", "t0": 5000.0 + k * 1e-3, "t1": 5000.0 + k * 1e-3 + 5e-4, "bytes": 4096}
                for k in range(args.events)]
        with engine.begin() as conn:
            conn.execute(insert(Event), rows)
    else:   # a timeline as ranks write it now, ingested into the run's event file: 4 ranks, ResNet-50's 161 tensors
        from results_db.ingest.folder import ingest_run
        from results_db.store.runs import PlannedRun, register_runs
        from synthetic_runs import make_metrics_streams
        from workloads.spec import RunSpec

        run_dir = work / "run"
        make_metrics_streams(run_dir, 4, max(args.events // (4 * 170), 1), 161)
        [d] = register_runs(engine, "trace", [PlannedRun("k", RunSpec.load(run_dir / "spec.json").to_dict(), str(run_dir))])
        ingest_run(engine, d.run_id, run_dir)
        run_id = d.run_id
    total = len(query.events(engine, [run_id]))
    out = work / "trace.json"
    times = interleave({"read": lambda: seconds(lambda: query.events(engine, [run_id])),
                        "export": lambda: seconds(lambda: write_chrome_trace(engine, run_id, out))}, args.repeats)
    if args.before:
        from harness import tree_env, trees

        def in_tree(tree: Path):
            snippet = ("import sys, time; from results_db import connect; "
                       "from results_db.report.chrome_trace import write_chrome_trace; e = connect(sys.argv[1]); "
                       "t = time.perf_counter(); write_chrome_trace(e, int(sys.argv[2]), sys.argv[3]); "
                       "print(time.perf_counter() - t)")
            import subprocess
            proc = subprocess.run([sys.executable, "-c", snippet, f"sqlite:///{work / 'trace.db'}", str(run_id),
                                   str(work / f"trace-{tree.name}.json")], env=tree_env(tree), capture_output=True,
                                  text=True, check=True, cwd=work)   # not a checkout: `-c` puts the cwd first on the path
            return float(proc.stdout.strip().splitlines()[-1])

        sources = trees(args.before)
        tree_times = interleave({name: (lambda path=path: in_tree(path)) for name, path in sources.items()},
                                args.repeats)
        ratios = per_round(tree_times["before"], tree_times["after"])
        print(f"{total} events, export in a process of its own: before {median(tree_times['before']):.2f} s, after "
              f"{median(tree_times['after']):.2f} s (medians of {args.repeats}); before / after {median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    ratios = per_round(times["export"], times["read"])
    print(f"{total} events (4 ranks): read {median(times['read']):.2f} s, export {median(times['export']):.2f} s "
          f"(median of {args.repeats}); export / read {median(times['export']) / median(times['read']):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}); file {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
