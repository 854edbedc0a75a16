"""Cost of the fine-grain timeline: ``sync`` training samples/s with timeline on vs off.

    python benchmarks/bench_timeline.py [--ranks 2] [--model resnet20] [--repeats 5]

Target: on is at most 5 % slower (on/off >= 0.95). Ratio of medians printed last.
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
    args = ap.parse_args()

    def variant(timeline: bool):
        def run() -> float:
            spec = {"algorithm": "sync", "model": args.model, "dataset": args.dataset, "timeline": timeline,
                    "batch_size": args.batch_size, "steps_per_epoch": args.steps}
            return measure(spec, args.ranks)
        return run

    print(f"timeline on vs off: sync, {args.model}, {args.ranks} ranks, batch {args.batch_size}/rank, "
          f"{args.steps} steps, {args.repeats} interleaved repeats")
    samples = interleave({"off": variant(False), "on": variant(True)}, args.repeats)
    off, on = median(samples["off"]), median(samples["on"])
    print(f"median samples/s: off {off:.1f}, on {on:.1f} ({(1 - on / off) * 100:+.1f} % slower)")
    print(f"ratio on/off = {on / off:.3f}")


if __name__ == "__main__":
    main()
