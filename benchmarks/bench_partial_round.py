"""One round of eager-SGD's partial allreduce against the allreduce of the same buffer, on the same
ranks, with every rank on time: what the partial collective costs of its own.

    python benchmarks/bench_partial_round.py --before DIR [--ranks 8] [--numel 23520842] [--repeats 5]

Per tree (this one and ``--before DIR``, a checkout of an earlier commit), one MPI job times, each
round interleaved: ``MPI_Allreduce`` of the buffer (what a synchronous step's reduction costs at
least: sync's engine fuses into buckets of the same total), and a solo round of
``PartialAllreduce`` (every rank stages at once after a barrier: no one is late). The trees alternate
(A B A B). Default: ResNet-50's gradient (23,520,842 values, 94 MB) on 8 ranks. Printed: each
tree's round/allreduce ratio, median over rounds (min-max), and the seconds.
"""

from __future__ import annotations

import argparse
import json
import time

from harness import interleave, median, mpiexec, summary, trees


def worker(numel: int, iters: int) -> None:
    import numpy as np
    from mpi4py import MPI

    from workloads.comm.partial import PartialAllreduce

    comm = MPI.COMM_WORLD
    grad = np.random.default_rng(comm.Get_rank()).standard_normal(numel).astype(np.float32)
    out = np.empty_like(grad)
    engine = PartialAllreduce(numel, comm, "solo", seed=1)
    times = {"allreduce": [], "round": []}
    step = 0
    for i in range(iters + 1):   # the first of each is a warm-up
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(grad, out, op=MPI.SUM)
        comm.Barrier()
        t1 = time.perf_counter()
        taken = engine.round(grad, step)
        if hasattr(engine, "recycle"):
            engine.recycle(taken)
        step += 1
        comm.Barrier()
        t2 = time.perf_counter()
        if i:
            times["allreduce"].append(t1 - t0)
            times["round"].append(t2 - t1)
    engine.close()
    if comm.Get_rank() == 0:
        print(json.dumps({k: median(v) for k, v in times.items()}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=False)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--numel", type=int, default=23_520_842)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args.numel, args.iters)
        return

    def one_job(tree) -> dict[str, float]:
        proc = mpiexec(args.ranks, [__file__, "--worker", "--numel", str(args.numel), "--iters", str(args.iters)],
                       tree=tree)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    got = interleave({name: (lambda path=path: one_job(path)) for name, path in trees(args.before).items()},
                     args.repeats)
    print(f"\n{args.ranks} ranks, {args.numel} float32 ({args.numel * 4 / 1e6:.0f} MB): partial round / allreduce, "
          "median over rounds (min-max)")
    for tree, results in got.items():
        print(f"  {tree}: {summary([x['round'] / x['allreduce'] for x in results])}; round "
              f"{median([x['round'] for x in results]):.3f} s, allreduce {median([x['allreduce'] for x in results]):.3f} s")


if __name__ == "__main__":
    main()
