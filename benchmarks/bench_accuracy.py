"""Final test accuracy of sync, eager_solo, eager_majority and async_ps under injected
imbalance, with 95 % confidence intervals over seeds.

    python benchmarks/bench_accuracy.py [--ranks 4] [--seeds 5] [--epochs 4] [--lr 0.02] [--ps-lr 0.1]

Data: ``benchmarks/accuracy_data.py`` (20,000 generated test images: one accuracy is
measured to about ±0.45 pp). Each seed trains every algorithm from the same initialisation
and batch order, with one of P ranks (one of P-1 workers for async_ps) sleeping ``--delay-ms``
per step. Printed per algorithm: mean top-1 ± the 95 % t-interval half-width over seeds;
per eager/PS variant: the mean paired difference from sync (same seed) ± its 95 % interval,
and "within 1 pp of sync" only when that whole interval lies inside ±1 pp.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from harness import measure

# two-sided 95 % Student t quantiles, by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       14: 2.145, 19: 2.093, 29: 2.045}


def t95(dof: int) -> float:
    return T95.get(dof) or T95[max(k for k in T95 if k <= dof)]


def interval(xs: list[float]) -> tuple[float, float]:
    """Mean and 95 % half-width (Student t over the samples)."""
    mean = statistics.mean(xs)
    if len(xs) < 2:
        return mean, float("nan")
    return mean, t95(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--ps-lr", type=float, default=0.1,
                    help="the parameter server's step size: it runs without momentum (stale gradients applied one "
                         "by one), so the same lr would take ~1/(1 - momentum) times smaller effective steps")
    ap.add_argument("--delay-ms", type=float, default=10.0)
    ap.add_argument("--sync-every", type=int, default=10)
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (here, os.environ.get("PYTHONPATH")) if x)
    algorithms = ("sync", "eager_solo", "eager_majority", "async_ps")
    print(f"accuracy: small_cnn on accuracy_data:noisy_images (8,000 train / 20,000 test), {args.ranks} ranks, "
          f"{args.epochs} epochs, batch {args.batch_size}/rank, lr {args.lr}, momentum {args.momentum} "
          f"(async_ps: lr {args.ps_lr}, momentum 0), "
          f"1 rank delayed {args.delay_ms} ms per step, sync_every {args.sync_every}, seeds 0..{args.seeds - 1}")
    top1: dict[str, list[float]] = {a: [] for a in algorithms}
    for seed in range(args.seeds):
        for algorithm in algorithms:
            spec = {"algorithm": algorithm, "model": "small_cnn", "dataset": "accuracy_data:noisy_images",
                    "batch_size": args.batch_size, "epochs": args.epochs, "seed": seed,
                    "lr": args.ps_lr if algorithm == "async_ps" else args.lr,
                    # the parameter server applies stale gradients one by one: momentum 0 (tests/workloads/test_eager.py)
                    "momentum": 0.0 if algorithm == "async_ps" else args.momentum,
                    "sync_every": args.sync_every, "imbalance_kind": "injected", "imbalance_ranks": 1,
                    "imbalance_delay_ms": args.delay_ms}
            top1[algorithm].append(measure(spec, args.ranks, "final_top1"))
        print(f"  seed {seed}: " + ", ".join(f"{a} {top1[a][-1]:.4f}" for a in algorithms), flush=True)
    for a in algorithms:
        mean, half = interval(top1[a])
        print(f"  {a:15s} top-1 {mean * 100:6.2f} ± {half * 100:.2f} pp (95 % CI, n={len(top1[a])})")
    for a in algorithms[1:]:
        mean, half = interval([x - y for x, y in zip(top1[a], top1["sync"])])
        within = "within 1 pp of sync" if abs(mean) + half <= 0.01 else "NOT shown within 1 pp of sync"
        print(f"difference {a} - sync = {mean * 100:+.2f} ± {half * 100:.2f} pp (paired by seed): {within}")


if __name__ == "__main__":
    sys.exit(main())
