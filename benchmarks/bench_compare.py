"""`scalestudy compare` on a 1,000-run study, as a user runs it: it must stay interactive (goal ≤ 2 s).

    python benchmarks/bench_compare.py [--runs 1000] [--repeats 5] [--before DIR] [--keep DB_FILE]

Two studies of ``--runs`` runs each (200 configurations: node counts 1-128 x workers per node
1-8 x 5 algorithms, 5 repeats each; throughput with 5 % noise, the second study 3 % faster), made
with scalestudy's own ``register_runs`` and ``ingest_run`` as sweeps make them. Timed from outside
as a new process (Python start-up and imports included), interleaved A B A B with ``--before DIR``
(a checkout of an earlier commit: ``git worktree add DIR COMMIT``): ``compare --baseline nodes=1``,
with ``--knee 0.8``, and ``--against`` the other study. Medians, min-max, and the median of the
per-round ratios after/before.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

from harness import REPO, cli_lines, time_cli, trees

sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "tests"))

from synthetic_runs import template_run  # noqa: E402 - the run folder every database benchmark ingests

COMMANDS = {
    "compare --baseline nodes=1": ["compare", "--study", "old", "--baseline", "nodes=1"],
    "compare --baseline nodes=1 --knee 0.8": ["compare", "--study", "old", "--baseline", "nodes=1", "--knee", "0.8"],
    "compare --against": ["compare", "--study", "old", "--against", "new"],
}


def build(url: str, runs: int, scratch: Path) -> None:
    import numpy as np

    from orchestrator.sweep.runspec import run_key
    from results_db import connect
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    engine = connect(url)
    cells = list(itertools.product([1, 2, 4, 8, 16, 32, 64, 128], [1, 2, 4, 8, 16],
                                   ["sync", "ddp", "eager_solo", "eager_majority", "async_ps"]))
    rng = np.random.default_rng(0)
    folder = scratch / "run"
    for study, gain in (("old", 1.0), ("new", 1.03)):
        planned, values = [], []
        for i in range(runs):
            nodes, wpn, algorithm = cells[i % len(cells)]
            spec = RunSpec(study=study, nodes=nodes, workers_per_node=wpn, threads_per_node=wpn, batch_size=32,
                           algorithm=algorithm, repeat=i // len(cells))
            planned.append(PlannedRun(run_key(spec), spec.to_dict(), str(folder)))
            values.append(gain * 100.0 * nodes * wpn * 0.9 ** np.log2(nodes) * (1 + 0.05 * rng.standard_normal()))
        decisions = register_runs(engine, study, planned, driver="bench:0")
        for d, value in zip(decisions, values):
            template_run(folder, f"nid{d.run_id % 4096:05d}", float(value))
            ingest_run(engine, d.run_id, folder)
    engine.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", default=None)
    ap.add_argument("--before", default=None, help="a checkout of an earlier commit, run alternately with this tree")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    db = Path(args.keep).absolute() if args.keep else scratch / "compare.db"
    url = f"sqlite:///{db}"
    if not db.exists():
        print(f"building two studies of {args.runs} runs ...", flush=True)
        build(url, args.runs, scratch)
    times = time_cli(COMMANDS, trees(args.before), args.repeats, scratch, SCALESTUDY_DB_URL=url)
    print(f"\nwall time as a user runs it (new process), median of {args.repeats} (min-max), {args.runs} runs a study:")
    for line in cli_lines(COMMANDS, times, limit_s=2.0, width=40):
        print(line)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
