"""What the fine-grain timeline costs a training step: sync's rounds per second with ``timeline=true``
over ``timeline=false``, the two alternated inside each MPI job (issue 63).

    python benchmarks/bench_timeline_overhead.py [--ranks 2 8] [--repeats 5] [--pairs 2]
        [--cases resnet20,resnet50] [--steps 24] [--warmup 6] [--before DIR]

Each round, for each case and rank count, one MPI job runs sync ``2 × --pairs`` times in turn (one
start-up for all: ``tests/mpi_programs/train_specs.py``), after a run not counted, the timeline
off and on in the order
off on on off, off on on off, … (ABBA: a drift in the machine's speed over the job falls on both
alike, and neither is always first). The job's ratio is the geometric mean of its on runs' rates
over that of its off runs. A run's rate is rank 0's rounds per second over the steps after
``--warmup`` (``bench_eager_overhead.rate``: its step records, start-up and evaluation left out).

Why alternated inside a job: a job that ran off then on (this bench before) put order on the
comparison, and at 8 ranks on 2 cores the rank's neighbours move a job's rate by 5–30 %, 5–30
times the 1 % asked; within a job, off and on share the neighbours. ``--ranks 2``: a core each,
as a rank has on a node, the writer thread included (it competes with its own rank's compute).

Cases, as ``bench_eager_overhead``'s:
- ``resnet20``: real compute, CIFAR-shaped generated images, batch 32 a rank (65 gradients, 78
  events a rank and step);
- ``resnet50``: ResNet-50's gradients (161 tensors, 94 MB), compute emulated from the paper's own
  step time (``paper_resnet50_p100``, 641 ms), fewer steps.

``--before DIR`` (a checkout of an earlier commit): that tree's jobs too, interleaved (A B A B).
Printed: per case, rank count and tree, on/off as median (min-max) over rounds, and a 95 %
interval of the mean log-ratio over rounds (Student t, rounds − 1 degrees of freedom). Then the
timeline's own count (``timeline_cost`` in rank 0's ``run_end``): the time the training loop spent
draining, filtering and handing over events, plus the writer thread's CPU time, as a share of the
training time. Both parts are timed where they run, so this share is precise where the ratio
is not; it leaves out the stamps (a dict appended per gradient in a hook, and per collective on
the engine's thread) and what the writer thread's GIL and cache use cost the loop beyond its
CPU time.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
from pathlib import Path

from bench_eager_overhead import CASES, rate, variants_job
from harness import interleave, summary, trees


def abba(pairs: int) -> list[tuple[str, bool]]:
    """The runs of a job in order: (name, timeline on) as off on on off, off on on off, …"""
    order = []
    for i in range(pairs):
        first, second = (False, True) if i % 2 == 0 else (True, False)
        order += [(f"{'on' if first else 'off'}{i}", first), (f"{'on' if second else 'off'}{i}", second)]
    return order


def one_job(tree: Path, case: dict, ranks: int, steps: int, warmup: int, pairs: int, scratch: Path) -> dict:
    """One MPI job of ``tree``'s code running sync ``2 * pairs`` times, the timeline off and on in
    ABBA order, after a run not counted (a job's first run was 15-20 % slower: its caches and
    allocations are new); the geometric mean of the on rates over that of the off rates, and the
    median share of the on runs' training time that their timeline took by its own count."""
    order = abba(pairs)
    runs = variants_job(tree, case, ranks, steps, warmup, scratch,
                        {"warm": {"algorithm": "sync"}, **{name: {"algorithm": "sync", "timeline": on} for name, on in order}},
                        read=rate_and_cost)
    print("    rounds/s in order: " + " ".join(f"{name} {runs[name][0]:.3f}" for name in runs), flush=True)
    on = [math.log(runs[name][0]) for name, flag in order if flag]
    off = [math.log(runs[name][0]) for name, flag in order if not flag]
    costs = [runs[name][1] for name, flag in order if flag and runs[name][1] is not None]
    return {"ratio": math.exp(statistics.fmean(on) - statistics.fmean(off)),
            "cost": statistics.median(costs) if costs else float("nan")}


def rate_and_cost(run_dir: Path, warmup: int) -> tuple[float, float | None]:
    """A run's rate, and the share of rank 0's training time its timeline took by its own count
    (``timeline_cost`` in its ``run_end``: the loop's time handing events over, plus the writer
    thread's CPU time for every event); None where the tree counts none."""
    import json

    cost = None
    for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "run_end":
            spent = (record.get("summary") or {}).get("timeline_cost")
            if spent:
                cost = (spent["loop_seconds"] + spent["writer_cpu_seconds"]) / spent["train_seconds"]
    return rate(run_dir, warmup), cost


def interval(ratios: list[float]) -> str:
    """95 % interval of the mean log-ratio over rounds (each round one job's ratio)."""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return f"{math.exp(mean):.4f} [{math.exp(mean - half):.4f}, {math.exp(mean + half):.4f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=None)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=2, help="off/on pairs a job, even (ABBA blocks)")
    ap.add_argument("--cases", default="resnet20,resnet50")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=6)
    args = ap.parse_args()
    if args.pairs < 2 or args.pairs % 2:
        ap.error(f"--pairs {args.pairs}: an even number, 2 or more (whole ABBA blocks: off on on off)")
    scratch = Path(tempfile.mkdtemp(prefix="bench-timeline-overhead-"))
    sources = trees(args.before)
    plan = [(c, n, t) for c in args.cases.split(",") for n in args.ranks for t in sources]

    def job(case: str, ranks: int, tree: Path):
        steps, warmup = (10, 3) if case == "resnet50" else (args.steps, args.warmup)
        return lambda: one_job(tree, CASES[case], ranks, steps, warmup, args.pairs, scratch)

    try:
        results = interleave({key: job(key[0], key[1], sources[key[2]]) for key in plan}, args.repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\ntimeline on / off, sync's rounds per second, {args.pairs} ABBA pairs a job, {args.repeats} jobs: "
          "median (min-max) over jobs; mean with its 95 % interval")
    for key in plan:
        ratios = [r["ratio"] for r in results[key]]
        print(f"  {key[0]:9s} {key[1]} ranks  {key[2]:6s} {summary(ratios, 4)}; {interval(ratios)}")
    print("\nthe timeline's own count of its time, a share of rank 0's training time (loop + writer thread's "
          "CPU): median (min-max) over jobs")
    for key in plan:
        costs = [100 * r["cost"] for r in results[key]]
        print(f"  {key[0]:9s} {key[1]} ranks  {key[2]:6s} "
              + (summary(costs, 3, " %") if not any(math.isnan(c) for c in costs) else "not counted by this tree"))


if __name__ == "__main__":
    main()
