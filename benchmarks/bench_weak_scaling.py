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
whose cores all compute. "sync, engine thread" runs the engine's cycles on a thread of
their own (``engine_thread=true``, Horovod's design, the default); "sync, cycles in hooks"
(``engine_thread=false``) runs them on the training thread, from the gradient hooks.

Where the rest goes. Any synchronous algorithm waits each step for the slower rank;
two independent processes do not. "skew" is the mean over steps of max(compute) -
mean(compute) of the two ranks (compute = forward + backward, ms): for a 2-rank run
from its two ranks' records of the same step; for the limit from its two processes'
steps paired by index (independent noise, the same machine). "synchronized limit" is the
limit's throughput had its two processes waited for each other every step (each step
lasting the longer of the two): the most a synchronous algorithm can reach here with
free communication. Efficiency against it leaves the engine's and the allreduce's cost.
Goal: sync >= 0.9 of the limit and ahead of ddp and Horovod.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

from harness import (epochs_for, finish_workload, interleave, measured_rate, median, spread, start_workload,
                     step_seconds)

PHASES = ("forward", "backward", "comm_wait", "update")
# sync with a cycle longer than a step: one negotiation and one fused allreduce once backward
# is done, so nothing runs beside backprop; what sync loses against it is what overlap costs
ONE_CYCLE_MS = 10_000.0
NO_OVERLAP = "sync, 1 cycle/step"


IN_HOOKS = "sync, cycles in hooks"


def steps_of(run_dir: str, rank: int, warmup: int) -> list[dict]:
    path = Path(run_dir) / "metrics" / f"rank-{rank}.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines() if '"type":"step"' in l][warmup:]


def phases_of(result: dict, warmup: int) -> dict[str, float]:
    steps = steps_of(result["run_dir"], 0, warmup)
    return {k: statistics.median(s[k] for s in steps) for k in PHASES}


def skew_of(a: list[dict], b: list[dict]) -> float:
    """Mean over steps of max - mean of the two ranks' compute (forward + backward), s."""
    pairs = [(x["forward"] + x["backward"], y["forward"] + y["backward"]) for x, y in zip(a, b)]
    return statistics.mean(max(p) - sum(p) / 2 for p in pairs)


def synchronized_rate(a: list[dict], b: list[dict], batch: int) -> float:
    """Two independent processes' samples/s had each step lasted the longer of the two."""
    pairs = list(zip(a, b))
    return len(pairs) * 2 * batch / sum(max(step_seconds(x), step_seconds(y)) for x, y in pairs)


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
    skews: dict[str, list[float]] = {}
    synchronized: list[float] = []

    def keep(name: str, result: dict, ranks: int = 2) -> float:
        phases.setdefault(name, []).append(phases_of(result, args.warmup))
        if ranks == 2:
            skews.setdefault(name, []).append(skew_of(*(steps_of(result["run_dir"], r, args.warmup) for r in (0, 1))))
        return measured_rate(result, args.warmup)[0]

    def limit() -> float:
        runs = [finish_workload(*run) for run in [start_workload({**spec, "algorithm": "sync"}, 1) for _ in range(2)]]
        a, b = (steps_of(r["run_dir"], 0, args.warmup) for r in runs)
        skews.setdefault("limit", []).append(skew_of(a, b))
        synchronized.append(synchronized_rate(a, b, args.batch_size))
        return sum(keep("limit (1 rank)", r, ranks=1) for r in runs)

    def two_ranks(algorithm: str, name: str | None = None, **extra):
        return lambda: keep(name or algorithm,
                            finish_workload(*start_workload({**spec, "algorithm": algorithm, **extra}, 2)))

    print(f"weak scaling, 2 ranks vs 2 independent 1-rank processes: {args.model} on {args.dataset}, batch "
          f"{args.batch_size}/rank, 1 thread/rank, {epochs} epoch(s) x {per_epoch} steps, first {args.warmup} "
          f"excluded, {args.repeats} interleaved repeats ({', '.join(algorithms)}"
          f"{'' if 'horovod' in algorithms else '; Horovod not installed: scripts/install-horovod.sh'})")
    variants = {"limit": limit, **{a: two_ranks(a) for a in algorithms}}
    variants[IN_HOOKS] = two_ranks("sync", IN_HOOKS, engine_thread=False)
    variants[NO_OVERLAP] = two_ranks("sync", NO_OVERLAP, cycle_time_ms=ONE_CYCLE_MS)
    algorithms[1:1] = [IN_HOOKS, NO_OVERLAP]
    samples = interleave(variants, args.repeats)
    lim = median(samples["limit"])
    print(f"limit: {lim:.1f} samples/s ({spread(samples['limit'])})")
    sync_ratios = [x / y for x, y in zip(synchronized, samples["limit"])]
    print(f"synchronized limit: {median(synchronized):.1f} samples/s ({spread(synchronized)}), "
          f"{median(sync_ratios):.3f} of the limit (per-round {spread(sync_ratios)})")
    for a in algorithms:
        ratios = [x / y for x, y in zip(samples[a], samples["limit"])]
        of_synchronized = [x / y for x, y in zip(samples[a], synchronized)]
        print(f"efficiency {a} = {median(samples[a]) / lim:.3f} (per-round {spread(ratios)}); "
              f"{median(samples[a]):.1f} samples/s ({spread(samples[a])}); "
              f"of the synchronized limit {median(of_synchronized):.3f} (per-round {spread(of_synchronized)})")
    # the VM's speed drifts between rounds more than the variants differ: compare sync with
    # each peer within a round (they ran minutes apart), not medians taken over all rounds
    for peer in [a for a in algorithms if a != "sync"]:
        paired = [x / y for x, y in zip(samples["sync"], samples[peer])]
        ahead = sum(r > 1 for r in paired)
        print(f"sync / {peer} paired by round = {median(paired):.3f} (per-round {spread(paired)}; "
              f"sync ahead in {ahead} of {len(paired)} rounds)")
    print("median per-step phases (ms, rank 0):")
    for name, rows in phases.items():
        skew = skews.get(name.replace(" (1 rank)", ""))
        print(f"  {name:19s} " + "  ".join(f"{k} {statistics.median(r[k] for r in rows) * 1e3:7.2f}" for k in PHASES)
              + (f"  skew {median(skew) * 1e3:6.2f}" if skew else ""))


if __name__ == "__main__":
    main()
