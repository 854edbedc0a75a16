"""What eager-SGD's partial allreduce costs when no rank is late: eager_solo's rounds per second
over sync's, with no imbalance, in this tree and in an earlier one, interleaved.

    python benchmarks/bench_eager_overhead.py --before DIR [--ranks 2,4,8] [--repeats 5]
        [--cases resnet20,emulated50,resnet50] [--steps 40] [--warmup 10]

``--before DIR``: a checkout of an earlier commit (``git worktree add DIR COMMIT``). Each round,
for each case and rank count, one MPI job per tree runs sync then eager_solo (one start-up for
both: ``tests/mpi_programs/train_specs.py``), the trees alternating (A B A B). A run's rate is
rank 0's rounds per second over the steps after ``--warmup`` (from its step records: start-up
and evaluation left out). Cases:

- ``resnet20``: real compute, CIFAR-shaped generated images, batch 32 a rank;
- ``emulated50``: resnet20's parameters, compute emulated at 50 ms a step (sleeps: the rank's
  core is free for the collectives, as on a node whose GPU computes);
- ``resnet50``: ResNet-50's gradient (23.5 M values, 94 MB), compute emulated from the paper's
  own step time (``paper_resnet50_p100``, 641 ms), at 8 ranks only (a 94 MB allreduce of 8 ranks
  on 2 cores is what a round costs here), fewer steps.

Printed: per case and rank count, each tree's eager/sync ratio (median over rounds, min-max),
and each algorithm's rounds/s; the goal is eager/sync >= 0.97 (and >= 1 per round at ResNet-50's
size, "no slower than sync's allreduce").
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO, interleave, median, mpiexec, summary, trees

CASES = {
    "resnet20": {"model": "resnet20", "dataset": "synthetic_images", "batch_size": 32},
    "emulated50": {"model": "resnet20", "dataset": "synthetic_images", "batch_size": 32, "compute": "emulated"},
    # a shipped profile by its path: the trees' specs are run as written (no sweep resolves names)
    "resnet50": {"model": "resnet50", "dataset": "synthetic_images", "batch_size": 64, "compute": "emulated",
                 "compute_profile": str(REPO / "workloads" / "profiles" / "paper_resnet50_p100.json")},
}


def emulated_profile(folder: Path) -> str:
    from workloads.emulation import ComputeProfile

    path = folder / "fifty_ms.json"
    path.write_text(ComputeProfile((0.0125,), (0.0375,), {}, {"model": "resnet20", "note": "bench: 50 ms"}).to_json())
    return str(path)


def rate(run_dir: Path, warmup: int) -> float:
    """Rank 0's rounds per second from its step records, after ``warmup`` steps: consecutive
    steps of one epoch only (the evaluation between epochs left out)."""
    records = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    steps = sorted((r["step"], r["epoch"], r["t_start"]) for r in records if r.get("type") == "step")
    gaps = [b[2] - a[2] for a, b in zip(steps, steps[1:]) if a[0] >= warmup and a[1] == b[1] and b[0] == a[0] + 1]
    return len(gaps) / sum(gaps)


def variants_job(tree: Path, case: dict, ranks: int, steps: int, warmup: int, scratch: Path,
                 variants: dict[str, dict], read=rate) -> dict[str, Any]:
    """Each variant (name -> the spec's fields it sets over ``case``) in turn, in one MPI job of
    ``tree``'s code (one start-up for all: ``train_specs.py``); what ``read(run folder, warmup)``
    says of each (its rounds per second). ``bench_timeline_overhead`` runs its timeline off and
    on through it."""
    specs = []
    for name, fields in variants.items():
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
        per_epoch = min(steps, 2458 // (case["batch_size"] * ranks)) if case["dataset"] == "synthetic_images" else steps
        spec = {"study": "bench", "site": "local", "nodes": 1, "workers_per_node": ranks, "threads_per_node": ranks,
                "epochs": -(-steps // per_epoch), "steps_per_epoch": per_epoch, **case, **fields}
        (folder / "spec.json").write_text(json.dumps(spec))
        specs.append(folder / "spec.json")
    mpiexec(ranks, [tree / "tests" / "mpi_programs" / "train_specs.py", *specs], tree=tree)
    out = {name: read(spec.parent, warmup) for name, spec in zip(variants, specs)}
    for spec in specs:
        shutil.rmtree(spec.parent, ignore_errors=True)
    return out


def one_job(tree: Path, case: dict, ranks: int, steps: int, warmup: int, scratch: Path) -> dict[str, float]:
    """sync then eager_solo in one MPI job of ``tree``'s code; their rounds per second."""
    return variants_job(tree, case, ranks, steps, warmup, scratch,
                        {alg: {"algorithm": alg} for alg in ("sync", "eager_solo")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", default="resnet20,emulated50,resnet50")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-eager-overhead-"))
    CASES["emulated50"]["compute_profile"] = emulated_profile(scratch)
    sources = trees(args.before)
    plan = [(c, n) for c in args.cases.split(",") for n in (map(int, args.ranks.split(",")) if c != "resnet50" else [8])]

    def job(case: str, ranks: int, tree: Path):
        steps, warmup = (12, 3) if case == "resnet50" else (args.steps, args.warmup)
        return lambda: one_job(tree, CASES[case], ranks, steps, warmup, scratch)

    results = interleave({(c, n, t): job(c, n, path) for c, n in plan for t, path in sources.items()}, args.repeats)
    print("\neager_solo / sync, rounds per second without imbalance: median (min-max) over rounds")
    for case, ranks in plan:
        line = f"  {case:10s} {ranks} ranks:"
        for tree in sources:
            runs = results[(case, ranks, tree)]
            line += (f"  {tree} {summary([x['eager_solo'] / x['sync'] for x in runs])} "
                     f"[sync {median([x['sync'] for x in runs]):.2f}, eager {median([x['eager_solo'] for x in runs]):.2f}]")
        print(line)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
