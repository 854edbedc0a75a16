"""Tensor fusion vs one allreduce per tensor, on ResNet-50's gradient shapes.

    python benchmarks/bench_fusion.py [--ranks 4] [--repeats 5]

161 generated tensors, 25.6 M float32 values, laid out in one flat buffer as the
``sync`` engine lays out gradients, all handed to the background engine at once
(the end of a backward pass); timed until every rank holds the average.
"fused": fusion_threshold 64 MB (Horovod's default); "per-tensor": threshold 0.
Target: per-tensor / fused >= 2. Ratio printed last.
"""

from __future__ import annotations

import argparse
import itertools
import sys

from harness import interleaved_mpi_times, median, relaunch_under_mpiexec


def worker(args) -> None:
    import math

    import numpy as np
    import torch
    from mpi4py import MPI

    from workloads.comm import BackgroundAllreduce
    from workloads.models import resnet50_gradient_shapes

    comm = MPI.COMM_WORLD
    shapes = list(reversed(resnet50_gradient_shapes()))  # the order backprop produces them
    sizes = [math.prod(s) for s in shapes]
    flat = torch.randn(sum(sizes))
    offsets = list(np.cumsum([0] + sizes[:-1]))
    views = [flat[o:o + n].view(s) for o, n, s in zip(offsets, sizes, shapes)]
    names = [f"g{i}" for i in range(len(shapes))]
    nbytes = [n * 4 for n in sizes]

    engines = {
        "fused": BackgroundAllreduce(names, nbytes, comm, 64 * 2**20, args.cycle_ms / 1e3, flat=flat, offsets=offsets),
        "per-tensor": BackgroundAllreduce(names, nbytes, comm, 0, args.cycle_ms / 1e3, flat=flat, offsets=offsets),
    }
    steps = itertools.count()

    def one_step(engine) -> None:
        engine.begin_step(next(steps))
        for i, v in enumerate(views):
            engine.ready(i, v)
        engine.wait()

    # between two barriers: a round's time is the slowest rank's
    times = interleaved_mpi_times(comm, {k: (lambda e=e: one_step(e)) for k, e in engines.items()}, args.repeats)
    for engine in engines.values():
        engine.close()
    if comm.Get_rank() == 0:
        fused, per = median(times["fused"]), median(times["per-tensor"])
        print(f"161 tensors, {sum(sizes) / 1e6:.1f} M values, {comm.Get_size()} ranks: "
              f"fused {fused * 1e3:.1f} ms, per-tensor {per * 1e3:.1f} ms (medians)")
        print(f"ratio per-tensor/fused = {per / fused:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cycle-ms", type=float, default=5.0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    print(f"fusion: ResNet-50 gradient shapes, {args.ranks} ranks, {args.repeats} interleaved repeats")
    return relaunch_under_mpiexec(args.ranks, [sys.argv[0], "--ranks", str(args.ranks), "--repeats",
                                               str(args.repeats), "--cycle-ms", str(args.cycle_ms)])


if __name__ == "__main__":
    sys.exit(main())
