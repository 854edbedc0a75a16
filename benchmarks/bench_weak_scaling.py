"""2-rank weak-scaling efficiency of ``sync``, ``ddp`` and ``horovod`` against what this
machine allows: two independent 1-rank processes training at the same time.

    python benchmarks/bench_weak_scaling.py [--model resnet20] [--batch-size 32] [--steps 100] [--repeats 5]
        [--variants sync,autotuned,one-cycle,hooks,ddp,horovod]

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
whose cores all compute. "sync, autotuned" is ``sync`` with ``autotune=true``: it tries
5 ms, 1 ms and one cycle per step in steps 1-9 (inside the default warm-up of 10) and keeps
the fastest. "sync, engine thread" runs the engine's cycles on a thread of
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
AUTOTUNED = "sync, autotuned"
# --variants keys -> the names printed (the limit always runs)
VARIANTS = {"sync": "sync", "autotuned": AUTOTUNED, "one-cycle": NO_OVERLAP, "hooks": IN_HOOKS, "ddp": "ddp",
            "horovod": "horovod"}
DEFAULT_VARIANTS = ("sync", "autotuned", "one-cycle", "ddp", "horovod")


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
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"comma-separated, from: {', '.join(VARIANTS)} (the limit always runs)")
    args = ap.parse_args()
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    chosen = [VARIANTS.get(v, v) for v in chosen]
    unknown = [v for v in chosen if v not in VARIANTS.values()]
    if unknown:
        ap.error(f"--variants: unknown {', '.join(map(repr, unknown))}; known: {', '.join(VARIANTS)}")
    epochs, per_epoch = epochs_for(args.dataset, args.batch_size, 2, args.steps + args.warmup)
    spec = {"model": args.model, "dataset": args.dataset, "batch_size": args.batch_size, "epochs": epochs,
            "steps_per_epoch": per_epoch}
    have_horovod = importlib.util.find_spec("horovod") is not None
    algorithms = [v for v in VARIANTS.values() if v in chosen and (v != "horovod" or have_horovod)]
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

    tuned_choices: list = []

    def two_ranks(algorithm: str, name: str | None = None, **extra):
        def run() -> float:
            result = finish_workload(*start_workload({**spec, "algorithm": algorithm, **extra}, 2))
            if extra.get("autotune"):
                tuned_choices.append(result.get("metrics", {}).get("autotune_cycle_time_ms", "?"))
            return keep(name or algorithm, result)
        return run

    print(f"weak scaling, 2 ranks vs 2 independent 1-rank processes: {args.model} on {args.dataset}, batch "
          f"{args.batch_size}/rank, 1 thread/rank, {epochs} epoch(s) x {per_epoch} steps, first {args.warmup} "
          f"excluded, {args.repeats} interleaved repeats ({', '.join(algorithms)}"
          f"{'' if have_horovod else '; Horovod not installed: scripts/install-horovod.sh'})")
    runners = {"sync": two_ranks("sync"), "ddp": two_ranks("ddp"), "horovod": two_ranks("horovod"),
               IN_HOOKS: two_ranks("sync", IN_HOOKS, engine_thread=False),
               NO_OVERLAP: two_ranks("sync", NO_OVERLAP, cycle_time_ms=ONE_CYCLE_MS),
               AUTOTUNED: two_ranks("sync", AUTOTUNED, autotune=True)}
    variants = {"limit": limit, **{a: runners[a] for a in algorithms}}
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
    for ours in [a for a in ("sync", AUTOTUNED) if a in algorithms]:
        for peer in [a for a in algorithms if a != ours and (a in ("ddp", "horovod") or ours == "sync")]:
            paired = [x / y for x, y in zip(samples[ours], samples[peer])]
            ahead = sum(r > 1 for r in paired)
            print(f"{ours} / {peer} paired by round = {median(paired):.3f} (per-round {spread(paired)}; "
                  f"{ours} ahead in {ahead} of {len(paired)} rounds)")
    if AUTOTUNED in algorithms:
        print(f"{AUTOTUNED}: cycle chosen per run (ms; None = one per step): {tuned_choices}")
    print("median per-step phases (ms, rank 0):")
    for name, rows in phases.items():
        skew = skews.get(name.replace(" (1 rank)", ""))
        print(f"  {name:19s} " + "  ".join(f"{k} {statistics.median(r[k] for r in rows) * 1e3:7.2f}" for k in PHASES)
              + (f"  skew {median(skew) * 1e3:6.2f}" if skew else ""))


if __name__ == "__main__":
    main()
