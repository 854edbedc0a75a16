"""eager-SGD, synchronous SGD and a parameter server under injected load imbalance, each
against a bound computed from the run's own realised delay schedule.

    python benchmarks/bench_eager.py [--ranks 2] [--delays 0.5,1,2] [--steps 100] [--warmup 10] [--repeats 5]

The paper's injection: each step a shared-seed RNG picks one rank of P (one *worker* for the
parameter server), which sleeps D between forward and backward. D is a multiple of the step
compute time C of ``sync`` without imbalance (``--delays``).

Bounds, per run, from what really happened (each rank's recorded sleep at each step) and
C_alg, the median step time of the *same* algorithm without imbalance (measured here,
interleaved with the rest), over the measured steps s (after ``--warmup``):

- sync: every step waits for the slowest rank: T = sum_s (C_alg + max_r d(s, r));
- eager_solo / eager_majority: a rank waits for no one except at the synchronous rounds
  (every ``sync_every`` steps and the last), so between two of them the slowest rank sets
  the pace: T = sum over segments of max_r sum_{s in segment} (C_alg + d(s, r));
- async_ps: workers never wait for each other: T = max_w sum_s (C_alg + d(s, w)).

measured/bound = T_bound / T_measured. Two bounds are printed. With C_alg (the paper's
model: what the step costs without imbalance) the ratio can exceed 1 by a few per cent on a
shared-memory node: a rank computing while the other sleeps runs faster than two ranks
computing together. The *strict* bound replaces C_alg by each rank's own measured compute
at each step of the same run (data + forward + backward + update: no sleep, no waiting), so
it is <= 1 by construction, up to the clock alignment of the ranks; what it leaves out is
the run's waiting and communication. T_measured runs from the earliest start of the first
measured step to the latest end of the last, over ranks (aligned clocks). Ratios against
sync are in samples/s (the parameter server's server computes no gradient). Default 2 ranks:
every rank has a core of its own on this 2-core machine, so a sleeping rank cannot lend its
core to the others (with 4 ranks on 2 cores it did, and runs "beat" their bounds).
"""

from __future__ import annotations

import argparse
import statistics

from harness import epochs_for, interleave, median, run_steps, spread, step_seconds

ALGORITHMS = ("sync", "eager_solo", "eager_majority", "async_ps")


COMPUTE_KEYS = ("data", "forward", "backward", "update")


def bound_seconds(algorithm: str, steps: dict[int, list[dict]], c: float | None, first: int, last: int,
                  sync_every: int) -> float:
    """The bound of the docstring. ``c``: a fixed step compute time C_alg; ``None``: each
    rank's own measured compute at each step of this run (data + forward + backward +
    update, no sleep, no waiting), which makes the bound strict."""
    ranks = sorted(steps)
    d = {r: {rec["step"]: rec["delay"] for rec in steps[r]} for r in ranks}
    own = {r: {rec["step"]: sum(rec[k] for k in COMPUTE_KEYS) for rec in steps[r]} for r in ranks}

    def work(r: int, s: int) -> float:
        return (own[r][s] if c is None else c) + d[r][s]

    window = range(first, last + 1)
    if algorithm == "sync":
        return sum(max(work(r, s) for r in ranks) for s in window)
    if algorithm == "async_ps":
        return max(sum(work(r, s) for s in window) for r in ranks)
    total, segment = 0.0, []
    for s in window:
        segment.append(s)
        if (sync_every > 0 and (s + 1) % sync_every == 0) or s == last:
            total += max(sum(work(r, x) for x in segment) for r in ranks)
            segment = []
    return total


def measured_seconds(steps: dict[int, list[dict]], first: int) -> float:
    starts = [rec["t_start"] for r in steps for rec in steps[r] if rec["step"] == first]
    ends = [rec["t_start"] + step_seconds(rec) for r in steps for rec in steps[r][-1:]]
    return max(ends) - min(starts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=100, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--sync-every", type=int, default=10)
    ap.add_argument("--delays", default="0.5,1,2", help="D as multiples of sync's step time C")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    p = args.ranks
    epochs, per_epoch = epochs_for(args.dataset, args.batch_size, p, args.steps + args.warmup)
    total = epochs * per_epoch
    first, last = args.warmup, total - 1

    def spec(algorithm: str, delay_ms: float, seed: int) -> dict:
        return {"algorithm": algorithm, "model": args.model, "dataset": args.dataset, "batch_size": args.batch_size,
                "epochs": epochs, "steps_per_epoch": per_epoch, "sync_every": args.sync_every, "seed": seed,
                # the bounds below are lock-step's (every rank computes every step); catch-up, the
                # default since 2026-12-04, skips rounds and is measured by bench_eager_catch_up.py
                "eager_catch_up": "lockstep",
                "momentum": 0.0 if algorithm == "async_ps" else 0.9,
                "imbalance_kind": "injected" if delay_ms else "none", "imbalance_ranks": 1,
                "imbalance_delay_ms": delay_ms}

    # 1. C_alg: median step time of each algorithm without imbalance (measured steps only)
    print(f"{p} ranks, {args.model} on {args.dataset}, batch {args.batch_size}/rank, {total} steps per run "
          f"(first {args.warmup} excluded), sync_every {args.sync_every}, {args.repeats} interleaved repeats")
    step_times: dict[str, list[float]] = {a: [] for a in ALGORITHMS}

    def calibrate(algorithm: str):
        def run() -> float:
            _, steps = run_steps(spec(algorithm, 0.0, 0), p)
            times = [step_seconds(rec) for r in steps for rec in steps[r] if rec["step"] >= first]
            step_times[algorithm].append(statistics.median(times))
            return step_times[algorithm][-1] * 1e3
        return run

    interleave({a: calibrate(a) for a in ALGORITHMS}, args.repeats)
    c_alg = {a: median(v) for a, v in step_times.items()}
    c = c_alg["sync"]
    print("step time without imbalance (median, ms): " + ", ".join(f"{a} {v * 1e3:.1f}" for a, v in c_alg.items()))

    for factor in (float(x) for x in args.delays.split(",")):
        d_ms = factor * c * 1e3
        rates: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
        of_bound: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
        of_strict: dict[str, list[float]] = {a: [] for a in ALGORITHMS}
        measured_steps: dict[str, int] = {}

        def variant(algorithm: str):
            def run() -> float:
                _, steps = run_steps(spec(algorithm, d_ms, len(rates[algorithm])), p)
                t = measured_seconds(steps, first)
                bound = bound_seconds(algorithm, steps, c_alg[algorithm], first, last, args.sync_every)
                n = last - first + 1
                measured_steps[algorithm] = n
                workers = len(steps)
                rates[algorithm].append(n * workers * args.batch_size / t)
                of_bound[algorithm].append(bound / t)
                strict = bound_seconds(algorithm, steps, None, first, last, args.sync_every)
                of_strict[algorithm].append(strict / t)
                return rates[algorithm][-1]
            return run

        print(f"\nD = {factor} x C = {d_ms:.1f} ms on 1 of {p} ranks per step (1 of {p - 1} workers for async_ps)")
        interleave({a: variant(a) for a in ALGORITHMS}, args.repeats)
        for a in ALGORITHMS:
            print(f"  {a:15s} samples/s {median(rates[a]):8.1f} ({spread(rates[a])})   measured/bound "
                  f"{median(of_bound[a]):.3f} ({spread(of_bound[a])})   measured/strict bound "
                  f"{median(of_strict[a]):.3f} ({spread(of_strict[a])})   steps measured {measured_steps[a]}")
        for a in ("eager_solo", "eager_majority", "async_ps"):
            per_round = [x / y for x, y in zip(rates[a], rates["sync"])]
            print(f"ratio {a}/sync (D={factor}C) = {median(rates[a]) / median(rates['sync']):.3f} "
                  f"(per-round {spread(per_round)})")


if __name__ == "__main__":
    main()
