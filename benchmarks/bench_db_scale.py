"""`scalestudy status` and `scalestudy query` on a results database of 100,000 runs.

    python benchmarks/bench_db_scale.py [--runs 100000] [--repeats 5] [--keep DB_FILE] [--before DIR]

The database is made with scalestudy's own code, as sweeps make it: ``register_runs``
(batches of 2,000 planned runs, as a sweep registers its jobs) and ``ingest_run`` of a
finished run's folder for every run (a run_start, 5 steps and a run_end record per run, a
result.json), over a grid of node counts (1-1024), workers per node, batch sizes and
algorithms, all in one study (the worst case for ``status --study``). Each command is
then timed from outside as a user runs it (a new process: Python start-up and imports
included), ``--repeats`` times, median and min-max. Goal: under 1 s each. ``--before DIR``
(a checkout of an earlier commit: ``git worktree add DIR COMMIT``) runs every command from it
too, alternating with this tree, and prints the per-round ratio after/before.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import REPO, cli_lines, interleave, seconds, summary, time_cli, trees

sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "tests"))

from synthetic_runs import template_run  # noqa: E402 - the run folder every database benchmark ingests

STUDY = "scale"
COMMANDS = {
    "status": ["status"],
    "status --study": ["status", "--study", STUDY],
    "status --failed": ["status", "--study", STUDY, "--failed"],
    "query --where (64 nodes, sync, batch 32)": ["query", "--study", STUDY, "--where", "nodes=64",
                                                 "--where", "algorithm=sync", "--where", "batch_size=32"],
    "query --group-by nodes": ["query", "--study", STUDY, "--group-by", "nodes"],
}


def build(url: str, runs: int, scratch: Path) -> float:
    from orchestrator.sweep.runspec import run_key
    from results_db import connect
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    engine = connect(url)
    grid = itertools.product([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], [1, 2, 4, 8], [16, 32, 64, 128],
                             ["sync", "ddp", "eager_solo", "eager_majority", "async_ps"])
    cells = list(grid)
    folder = scratch / "run"
    t0 = time.perf_counter()
    made = 0
    while made < runs:
        planned = []
        for i in range(made, min(runs, made + 2000)):
            nodes, wpn, bs, algorithm = cells[i % len(cells)]
            spec = RunSpec(study=STUDY, nodes=nodes, workers_per_node=wpn, threads_per_node=wpn, batch_size=bs,
                           algorithm=algorithm, params={"repeat": i // len(cells)})
            planned.append(PlannedRun(run_key(spec), spec.to_dict(), str(folder)))
        decisions = register_runs(engine, STUDY, planned, driver="bench:0")
        for d, p in zip(decisions, planned):
            template_run(folder, f"nid{d.run_id % 4096:05d}", 100.0 + d.run_id % 997)
            ingest_run(engine, d.run_id, folder)
        made += len(planned)
        rate = made / (time.perf_counter() - t0)
        print(f"  {made}/{runs} runs registered and ingested ({rate:.0f} runs/s)", flush=True)
    return time.perf_counter() - t0


def in_process(url: str, repeats: int) -> None:
    """The database work of each command, timed inside one process (imports done): what grows
    with the number of runs, apart from the interpreter and library start-up above."""
    from results_db import connect
    from results_db.store import query, run_rows

    engine = connect(url, upgrade=False)
    # what each command runs since the reading commands print plain rows (no pandas)
    work = {
        "status counts": lambda: query.status_counts(engine),
        "status --study: the last 20 runs": lambda: run_rows.run_rows(
            engine, study=STUDY, run_ids=run_rows.recent_run_ids(engine, STUDY, 20)),
        "query --where (64 nodes, sync, batch 32)": lambda: run_rows.run_rows(
            engine, study=STUDY, where=["nodes=64", "algorithm=sync", "batch_size=32"]),
        "query --group-by nodes (count, mean, std)": lambda: run_rows.aggregate_rows(
            engine, ["nodes"], {"throughput": ["count", "mean", "std"]}, study=STUDY),
        "every run as rows (query --format csv)": lambda: run_rows.run_rows(engine, study=STUDY),
        "every run into a DataFrame (query.runs)": lambda: query.runs(engine, study=STUDY),
    }
    rows = {name: len(fn()) for name, fn in work.items()}   # warmed up once; how many rows each gives
    times = interleave({name: (lambda fn=fn: seconds(fn)) for name, fn in work.items()}, repeats, report=False)
    print(f"\nthe same database work inside one process, median of {repeats} (min-max):")
    for name in work:
        print(f"  {name:48s} {summary(times[name], 3, ' s')}, {rows[name]} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", default=None, help="build (or reuse) the database at this file and keep it")
    ap.add_argument("--before", default=None,
                    help="a checkout of an earlier commit (git worktree add DIR COMMIT): each command also runs "
                         "from it, alternating with this tree, and the per-round ratio after/before is printed")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-db-scale-"))
    db = Path(args.keep).absolute() if args.keep else scratch / "scale.db"
    url = f"sqlite:///{db}"
    if not db.exists():
        print(f"building a database of {args.runs} runs with register_runs + ingest_run ...", flush=True)
        took = build(url, args.runs, scratch)
        print(f"built in {took:.0f} s ({args.runs / took:.0f} runs/s)")
    print(f"database: {db.stat().st_size / 2**20:.0f} MiB")
    times = time_cli(COMMANDS, trees(args.before), args.repeats, scratch, SCALESTUDY_DB_URL=url)
    print(f"\nwall time of each command as a user runs it (new process), median of {args.repeats} (min-max):")
    for line in cli_lines(COMMANDS, times, limit_s=1.0, width=42):
        print(line)
    bare = {what: (lambda code=code: seconds(lambda: subprocess.run([sys.executable, "-c", code], check=True)))
            for what, code in (("python -c pass", "pass"),
                               ("python -c 'import sqlalchemy, rich'", "import sqlalchemy, rich"),
                               ("python -c 'import pandas, sqlalchemy'", "import pandas, sqlalchemy"))}
    for what, xs in interleave(bare, args.repeats, report=False).items():
        print(f"  ({what} alone: {summary(xs, 2, ' s')})")
    in_process(url, args.repeats)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
