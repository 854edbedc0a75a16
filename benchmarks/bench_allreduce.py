"""Our allreduce vs raw ``mpi4py`` ``Allreduce`` on the same buffers: 1, 25 and 100 MB.

    python benchmarks/bench_allreduce.py [--ranks 4] [--repeats 7] [--iters 5]

"ours" is ``FusedAllreduce``, the engine's data path: a gradient (or a fused group of
adjacent gradients in the flat buffer) reduced in place and averaged. "packed" is the
same bytes as 8 separate tensors, packed into the fusion buffer and unpacked again,
for information. Target: ours / raw <= 1.10 at every size. Ratio printed last.
"""

from __future__ import annotations

import argparse
import sys
import time

from harness import median, relaunch_under_mpiexec


def worker(args) -> None:
    import torch
    from mpi4py import MPI

    from workloads.comm import FusedAllreduce

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ours = FusedAllreduce(comm, average=True)
    worst = 0.0
    for mb in (1, 25, 100):
        n = mb * 1024 * 1024 // 4
        x = torch.randn(n)
        pieces = list(torch.randn(n).chunk(8))

        def raw():
            comm.Allreduce(MPI.IN_PLACE, x.numpy(), op=MPI.SUM)
            x.mul_(1.0 / comm.Get_size())  # the same averaging ours does

        variants = {"raw": raw, "ours": lambda: ours([x]), "packed": lambda: ours(pieces)}
        times = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, fn in variants.items():
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    fn()
                comm.Barrier()
                times[name].append((time.perf_counter() - t0) / args.iters)
        if rank == 0:
            med = {k: median(v) for k, v in times.items()}
            ratio = med["ours"] / med["raw"]
            worst = max(worst, ratio)
            print(f"{mb:4d} MB x {comm.Get_size()} ranks: raw {med['raw'] * 1e3:8.2f} ms, ours {med['ours'] * 1e3:8.2f} ms "
                  f"(ratio {ratio:.3f}), packed {med['packed'] * 1e3:8.2f} ms (ratio {med['packed'] / med['raw']:.3f})",
                  flush=True)
    if rank == 0:
        print(f"ratio ours/raw (worst of 1, 25, 100 MB) = {worst:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    print(f"allreduce: ours vs raw MPI.Allreduce, {args.ranks} ranks, {args.repeats} interleaved repeats of {args.iters}")
    return relaunch_under_mpiexec(args.ranks, [sys.argv[0], "--ranks", str(args.ranks), "--repeats",
                                               str(args.repeats), "--iters", str(args.iters)])


if __name__ == "__main__":
    sys.exit(main())
