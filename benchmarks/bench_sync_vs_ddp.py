"""Training samples/s of ``sync`` (our fused, overlapped engine) vs ``ddp``, same everything else.

    python benchmarks/bench_sync_vs_ddp.py [--ranks 2] [--model resnet20] [--steps 100] [--warmup 10]
                                           [--repeats 5] [--baseline horovod]

Each run trains ``warmup + steps`` steps (over as many epochs as the data set needs: digits
holds 22 steps of 2 x 32 per epoch) and is measured on the ``steps`` after the warm-up only
(first steps: allocator, thread start-up, the engine learning the gradient order), from the
per-step timings of rank 0. Variants alternate (baseline, sync, baseline, ...) for
``--repeats`` rounds. Printed: the steps measured per run, the median samples/s of each with
its min–max, and the ratio of medians with the min–max of the per-round ratios.
Target: sync / ddp >= 0.9 (aim >= 1.0). ``--baseline horovod`` compares against the real
Horovod instead (when built: scripts/install-horovod.sh).
"""

from __future__ import annotations

import argparse

from harness import epochs_for, interleave, measure_steps, median, spread


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=100, help="measured steps per run (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=10, help="steps excluded from the measurement")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fusion-mb", type=float, default=64)
    ap.add_argument("--cycle-ms", type=float, default=5)
    ap.add_argument("--baseline", choices=("ddp", "horovod"), default="ddp")
    args = ap.parse_args()
    epochs, per_epoch = epochs_for(args.dataset, args.batch_size, args.ranks, args.steps + args.warmup)
    counted: list[int] = []

    def variant(algorithm: str):
        def run() -> float:
            spec = {"algorithm": algorithm, "model": args.model, "dataset": args.dataset,
                    "batch_size": args.batch_size, "steps_per_epoch": per_epoch, "epochs": epochs,
                    "fusion_threshold_mb": args.fusion_mb, "cycle_time_ms": args.cycle_ms}
            rate, steps = measure_steps(spec, args.ranks, args.warmup)
            counted.append(steps)
            return rate
        return run

    base = args.baseline
    print(f"sync vs {base}: {args.model} on {args.dataset}, {args.ranks} ranks x 1 thread, batch {args.batch_size}/rank, "
          f"{epochs} epoch(s) x {per_epoch} steps, first {args.warmup} excluded, fusion {args.fusion_mb} MB, "
          f"cycle {args.cycle_ms} ms, {args.repeats} interleaved repeats")
    samples = interleave({base: variant(base), "sync": variant("sync")}, args.repeats)
    reference, sync = median(samples[base]), median(samples["sync"])
    ratios = [s / b for s, b in zip(samples["sync"], samples[base])]
    print(f"steps measured per run: {min(counted)}–{max(counted)} (after {args.warmup} warm-up steps)")
    print(f"median samples/s: {base} {reference:.1f} ({spread(samples[base])}), sync {sync:.1f} ({spread(samples['sync'])})")
    print(f"ratio sync/{base} = {sync / reference:.3f} (per-round {spread(ratios)})")


if __name__ == "__main__":
    main()
