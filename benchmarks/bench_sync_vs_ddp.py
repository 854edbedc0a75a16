"""Training samples/s of ``sync`` (our fused, overlapped engine) vs ``ddp``, same everything else.

    python benchmarks/bench_sync_vs_ddp.py [--ranks 2] [--model resnet20] [--repeats 5] [--baseline horovod]

Target: sync / ddp >= 0.9 (aim >= 1.0). Prints the ratio of medians last. ``--baseline
horovod`` compares against the real Horovod instead (when built: scripts/install-horovod.sh).
"""

from __future__ import annotations

import argparse

from harness import interleave, measure, median


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--fusion-mb", type=float, default=64)
    ap.add_argument("--cycle-ms", type=float, default=5)
    ap.add_argument("--baseline", choices=("ddp", "horovod"), default="ddp")
    args = ap.parse_args()

    def variant(algorithm: str):
        def run() -> float:
            spec = {"algorithm": algorithm, "model": args.model, "dataset": args.dataset,
                    "batch_size": args.batch_size, "steps_per_epoch": args.steps,
                    "fusion_threshold_mb": args.fusion_mb, "cycle_time_ms": args.cycle_ms}
            return measure(spec, args.ranks)
        return run

    base = args.baseline
    print(f"sync vs {base}: {args.model} on {args.dataset}, {args.ranks} ranks x 1 thread, batch {args.batch_size}/rank, "
          f"{args.steps} steps, fusion {args.fusion_mb} MB, cycle {args.cycle_ms} ms, {args.repeats} interleaved repeats")
    samples = interleave({base: variant(base), "sync": variant("sync")}, args.repeats)
    reference, sync = median(samples[base]), median(samples["sync"])
    print(f"median samples/s: {base} {reference:.1f}, sync {sync:.1f}")
    print(f"ratio sync/{base} = {sync / reference:.3f}")


if __name__ == "__main__":
    main()
