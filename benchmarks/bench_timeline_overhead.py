"""What the fine-grain timeline costs a training step: sync's rounds per second with ``timeline=true``
over ``timeline=false``, in this tree and in an earlier one, interleaved (issue 63).

    python benchmarks/bench_timeline_overhead.py --before DIR [--ranks 8] [--repeats 5]
        [--cases resnet20,resnet50] [--steps 24] [--warmup 6]

``--before DIR``: a checkout of an earlier commit (``git worktree add DIR COMMIT``; there the ranks
wrote each event as a JSON line, here into their binary stream, ``workloads.event_log``). Each
round, for each case, one MPI job per tree runs sync with the timeline off, then on (one start-up
for both: ``tests/mpi_programs/train_specs.py``), the trees alternating (A B A B). A run's rate is
rank 0's rounds per second over the steps after ``--warmup`` (``bench_eager_overhead.rate``: its
step records, start-up and evaluation left out). Cases, as ``bench_eager_overhead``'s:

- ``resnet20``: real compute, CIFAR-shaped generated images, batch 32 a rank (65 gradients, 78
  events a rank and step);
- ``resnet50``: ResNet-50's gradients (161 tensors, 94 MB), compute emulated from the paper's own
  step time (``paper_resnet50_p100``, 641 ms), fewer steps.

Printed: per case, each tree's on/off ratio (median over rounds, min-max) and the rates. 8 ranks
on this 2-core machine share its cores: what a step costs the rank that writes its events is
measured with the others' compute competing, as on an oversubscribed node, never less.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from bench_eager_overhead import CASES, variants_job
from harness import interleave, median, summary, trees


def one_job(tree: Path, case: dict, ranks: int, steps: int, warmup: int, scratch: Path) -> dict[str, float]:
    """sync with the timeline off, then on, in one MPI job of ``tree``'s code; their rounds/s."""
    return variants_job(tree, case, ranks, steps, warmup, scratch,
                        {name: {"algorithm": "sync", "timeline": on} for name, on in (("off", False), ("on", True))})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", default="resnet20,resnet50")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=6)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-timeline-overhead-"))
    sources = trees(args.before)
    cases = args.cases.split(",")

    def job(case: str, tree: Path):
        steps, warmup = (10, 3) if case == "resnet50" else (args.steps, args.warmup)
        return lambda: one_job(tree, CASES[case], args.ranks, steps, warmup, scratch)

    results = interleave({(c, t): job(c, path) for c in cases for t, path in sources.items()}, args.repeats)
    print(f"\ntimeline on / off, sync's rounds per second at {args.ranks} ranks: median (min-max) over rounds")
    for case in cases:
        line = f"  {case:9s}"
        for tree in sources:
            runs = results[(case, tree)]
            line += (f"  {tree} {summary([x['on'] / x['off'] for x in runs])} "
                     f"[off {median([x['off'] for x in runs]):.3f}, on {median([x['on'] for x in runs]):.3f} rounds/s]")
        print(line)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
