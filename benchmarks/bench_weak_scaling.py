"""2-rank weak-scaling efficiency of ``sync``, ``ddp`` and ``horovod`` against what this
machine allows: two independent 1-rank processes training at the same time.

    python benchmarks/bench_weak_scaling.py [--model resnet20] [--batch-size 32] [--steps 100] [--repeats 5]

"limit": two 1-rank runs started together (same model, batch, one thread each, no
communication: ``sync`` on one rank does no reduction and starts no engine thread), their
samples/s summed; this is the most two ranks can do here, communication aside, including
what the two processes cost each other (memory bandwidth, caches). Each 2-rank variant trains
the same per-rank batch; efficiency = its samples/s over the limit's. Variants alternate
(limit, sync, ddp[, horovod], limit, ...) for ``--repeats`` rounds; every run is measured on
``--steps`` steps after ``--warmup`` (per-step times of rank 0). Printed: medians with min–max,
efficiency with the min–max of the per-round ratios, and the median per-step phases (forward,
backward, comm_wait, update, ms) of each variant, which say where the difference goes.
"sync, 1 cycle/step" is ``sync`` with ``cycle_time_ms`` longer than a step: it reduces
only once backward is done, so comparing it with ``sync`` prices the overlap on a node
whose cores all compute.
Goal: sync >= 0.9 of the limit and ahead of ddp and Horovod.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

from harness import epochs_for, finish_workload, interleave, measured_rate, median, spread, start_workload

PHASES = ("forward", "backward", "comm_wait", "update")
# sync with a cycle longer than a step: one negotiation and one fused allreduce once backward
# is done, so nothing runs beside backprop; what sync loses against it is what overlap costs
ONE_CYCLE_MS = 10_000.0
NO_OVERLAP = "sync, 1 cycle/step"


def phases_of(result: dict, warmup: int) -> dict[str, float]:
    path = Path(result["run_dir"]) / "metrics" / "rank-0.jsonl"
    steps = [json.loads(l) for l in path.read_text().splitlines() if '"type":"step"' in l][warmup:]
    return {k: statistics.median(s[k] for s in steps) for k in PHASES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    epochs, per_epoch = epochs_for(args.dataset, args.batch_size, 2, args.steps + args.warmup)
    spec = {"model": args.model, "dataset": args.dataset, "batch_size": args.batch_size, "epochs": epochs,
            "steps_per_epoch": per_epoch}
    algorithms = ["sync", "ddp"] + (["horovod"] if importlib.util.find_spec("horovod") else [])
    phases: dict[str, list[dict[str, float]]] = {}

    def keep(name: str, result: dict) -> float:
        phases.setdefault(name, []).append(phases_of(result, args.warmup))
        return measured_rate(result, args.warmup)[0]

    def limit() -> float:
        runs = [start_workload({**spec, "algorithm": "sync"}, 1) for _ in range(2)]
        return sum(keep("limit (1 rank)", finish_workload(*run)) for run in runs)

    def two_ranks(algorithm: str, **extra):
        name = NO_OVERLAP if extra else algorithm
        return lambda: keep(name, finish_workload(*start_workload({**spec, "algorithm": algorithm, **extra}, 2)))

    print(f"weak scaling, 2 ranks vs 2 independent 1-rank processes: {args.model} on {args.dataset}, batch "
          f"{args.batch_size}/rank, 1 thread/rank, {epochs} epoch(s) x {per_epoch} steps, first {args.warmup} "
          f"excluded, {args.repeats} interleaved repeats ({', '.join(algorithms)}"
          f"{'' if 'horovod' in algorithms else '; Horovod not installed: scripts/install-horovod.sh'})")
    variants = {"limit": limit, **{a: two_ranks(a) for a in algorithms}}
    variants[NO_OVERLAP] = two_ranks("sync", cycle_time_ms=ONE_CYCLE_MS)
    algorithms.insert(1, NO_OVERLAP)
    samples = interleave(variants, args.repeats)
    lim = median(samples["limit"])
    print(f"limit: {lim:.1f} samples/s ({spread(samples['limit'])})")
    for a in algorithms:
        ratios = [x / y for x, y in zip(samples[a], samples["limit"])]
        print(f"efficiency {a} = {median(samples[a]) / lim:.3f} (per-round {spread(ratios)}); "
              f"{median(samples[a]):.1f} samples/s ({spread(samples[a])})")
    # the VM's speed drifts between rounds more than the variants differ: compare sync with
    # each peer within a round (they ran minutes apart), not medians taken over all rounds
    for peer in [a for a in algorithms if a not in ("sync", NO_OVERLAP)]:
        paired = [x / y for x, y in zip(samples["sync"], samples[peer])]
        ahead = sum(r > 1 for r in paired)
        print(f"sync / {peer} paired by round = {median(paired):.3f} (per-round {spread(paired)}; "
              f"sync ahead in {ahead} of {len(paired)} rounds)")
    print("median per-step phases (ms, rank 0):")
    for name, rows in phases.items():
        print(f"  {name:15s} " + "  ".join(f"{k} {statistics.median(r[k] for r in rows) * 1e3:7.2f}" for k in PHASES))


if __name__ == "__main__":
    main()
