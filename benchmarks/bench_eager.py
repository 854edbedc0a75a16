"""eager-SGD vs synchronous SGD under injected load imbalance (4 ranks, 1 of 4 delayed per step).

    python benchmarks/bench_eager.py [--ranks 4] [--repeats 5] [--seeds 3]

1. Measures one step's compute time C (``sync``, no imbalance) and sets the delay
   D = C, so each step one rank drawn by a shared RNG sleeps about one step.
2. Steps/s, interleaved: sync, eager_solo, eager_majority with and without the
   delay. Analytic bounds with k of P ranks delayed by D each step: a synchronous
   step waits for the delayed rank, 1/(C + D); a rank that never waits for others
   still sleeps on k/P of its steps, 1/(C + D k/P) — the bound for eager.
3. Final top-1 at equal epochs (small CNN on digits, same delay scheme), mean over seeds.

Targets: eager_solo >= 0.9 x bound; with no imbalance eager >= 0.95 x sync;
accuracy within 1 percentage point of sync. Ratios printed last.
"""

from __future__ import annotations

import argparse
import statistics

from harness import interleave, measure, median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--accuracy-epochs", type=int, default=8)
    ap.add_argument("--accuracy-lr", type=float, default=0.03)
    ap.add_argument("--accuracy-momentum", type=float, default=0.9)
    ap.add_argument("--accuracy-only", action="store_true", help="skip the steps/s part")
    args = ap.parse_args()
    k, p = 1, args.ranks

    def run(algorithm: str, delay_ms: float) -> float:
        spec = {"algorithm": algorithm, "model": args.model, "dataset": args.dataset, "batch_size": args.batch_size,
                "steps_per_epoch": args.steps, "imbalance_kind": "injected" if delay_ms else "none",
                "imbalance_ranks": k, "imbalance_delay_ms": delay_ms}
        return measure(spec, p, "steps_per_second")

    if args.accuracy_only:
        accuracy(args, k, p)
        return
    base = [run("sync", 0) for _ in range(3)]
    c = 1.0 / median(base)
    d_ms = c * 1000.0
    print(f"step compute C = {c * 1e3:.1f} ms (sync, no imbalance); injected delay D = {d_ms:.1f} ms on {k} of {p} ranks")

    variants = {}
    for algorithm in ("sync", "eager_solo", "eager_majority"):
        for delay in (0.0, d_ms):
            name = f"{algorithm}{'+delay' if delay else ''}"
            variants[name] = (lambda a=algorithm, dl=delay: run(a, dl))
    samples = interleave(variants, args.repeats)
    med = {name: median(v) for name, v in samples.items()}
    bound_sync = 1.0 / (c + d_ms / 1e3)
    bound_eager = 1.0 / (c + d_ms / 1e3 * k / p)
    print("median steps/s:")
    for name, value in med.items():
        bound = (bound_sync if name.startswith("sync") else bound_eager) if name.endswith("+delay") else 1.0 / c
        print(f"  {name:22s} {value:7.2f}   bound {bound:7.2f}   ({value / bound:.2f} of bound)")

    print(f"ratio eager_solo/bound (delay) = {med['eager_solo+delay'] / bound_eager:.3f}")
    print(f"ratio eager_majority/bound (delay) = {med['eager_majority+delay'] / bound_eager:.3f}")
    print(f"ratio eager_solo/sync (delay) = {med['eager_solo+delay'] / med['sync+delay']:.3f}")
    print(f"ratio eager_majority/sync (delay) = {med['eager_majority+delay'] / med['sync+delay']:.3f}")
    print(f"ratio eager_solo/sync (no imbalance) = {med['eager_solo'] / med['sync']:.3f}")
    print(f"ratio eager_majority/sync (no imbalance) = {med['eager_majority'] / med['sync']:.3f}")
    accuracy(args, k, p)


def accuracy(args, k: int, p: int) -> None:
    """Final top-1 at equal epochs under the same delay scheme (small CNN on digits), mean over seeds."""
    print(f"accuracy: small_cnn on digits, {args.accuracy_epochs} epochs, lr {args.accuracy_lr}, "
          f"momentum {args.accuracy_momentum}, "
          f"seeds 0..{args.seeds - 1}, {k} of {p} ranks delayed 15 ms per step")
    top1 = {a: [] for a in ("sync", "eager_solo", "eager_majority")}
    for seed in range(args.seeds):
        for algorithm in top1:
            spec = {"algorithm": algorithm, "batch_size": 16, "epochs": args.accuracy_epochs, "seed": seed,
                    "lr": args.accuracy_lr, "momentum": args.accuracy_momentum, "imbalance_kind": "injected",
                    "imbalance_ranks": k,
                    "imbalance_delay_ms": 15.0}
            top1[algorithm].append(measure(spec, p, "final_top1"))
    mean = {a: statistics.mean(v) for a, v in top1.items()}
    for a, v in top1.items():
        print(f"  {a:15s} top-1 {mean[a]:.4f}  ({', '.join(f'{x:.4f}' for x in v)})")
    print(f"accuracy difference eager_solo - sync = {(mean['eager_solo'] - mean['sync']) * 100:+.2f} pp; "
          f"eager_majority - sync = {(mean['eager_majority'] - mean['sync']) * 100:+.2f} pp")


if __name__ == "__main__":
    main()
