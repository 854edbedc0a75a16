"""eager-SGD's model averaging after each synchronous round, as it was before 8df4942 (one
``MPI.Allreduce`` per parameter tensor) and as it is (``EagerSGD.average_parameters``: one
flat allreduce), at P ranks on this host.

    python benchmarks/bench_weight_averaging.py [--model resnet20] [--ranks 8,32] [--repeats 8]

Why it is here: validation runs A-C (benchmarks/RESULTS.md) were taken with the old
averaging and run D with the new, and eager-SGD's update phase at 32 emulated ranks fell from
121-135 ms a step for eager_solo and 100-139 ms for eager_majority (A-C) to 24 and 21 ms
(D). This measures the averaging alone, both ways on the same parameters, interleaved (old,
new, old, ...), each after a ``Barrier`` as it follows the synchronous round in training and
up to the ``Barrier`` after it, so the time of one averaging is the slowest rank's
(``harness.interleaved_mpi_times``). Printed per rank count: median ms per averaging of each
(min-max over repeats) and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from harness import interleaved_mpi_times, relaunch_under_mpiexec


def worker(args) -> None:
    import torch
    from mpi4py import MPI

    from workloads.algorithms.base import SyncOptions
    from workloads.algorithms.eager import EagerSGD
    from workloads.models import build_model

    comm = MPI.COMM_WORLD
    model = build_model(args.model, (3, 32, 32), 10, seed=0)
    engine = EagerSGD(model, comm, SyncOptions(), "solo")
    params = list(model.parameters())

    def per_tensor() -> None:      # the averaging before 8df4942, restated
        with torch.no_grad():
            for p in params:
                buf = p.detach().contiguous().clone()
                comm.Allreduce(MPI.IN_PLACE, buf.numpy(), op=MPI.SUM)
                buf.div_(comm.Get_size())
                p.copy_(buf)

    variants = {"per-tensor (before 8df4942)": per_tensor, "flat (now)": engine.average_parameters}
    times = {k: [t * 1e3 for t in v] for k, v in interleaved_mpi_times(comm, variants, args.repeats).items()}
    engine.close()
    if comm.Get_rank() == 0:
        old, new = (statistics.median(v) for v in times.values())
        cells = ", ".join(f"{k} {statistics.median(v):.1f} ms ({min(v):.1f}-{max(v):.1f})" for k, v in times.items())
        print(f"P={comm.Get_size()} ({len(params)} tensors, {sum(p.numel() for p in params) * 4} bytes): {cells}; "
              f"old / new {old / new:.1f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--ranks", default="8,32", help="comma-separated rank counts, each one mpiexec")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    for ranks in (int(r) for r in args.ranks.split(",")):
        argv = [sys.argv[0], "--model", args.model, "--repeats", str(args.repeats)]
        if relaunch_under_mpiexec(ranks, argv) != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
