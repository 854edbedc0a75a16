"""The engine's allreduce data path vs raw ``mpi4py`` ``MPI.Allreduce``, 1 KB to 100 MB.

    python benchmarks/bench_allreduce.py [--ranks 2] [--repeats 7]

What the ``sync`` engine really does with a fused group (``workloads.comm.BackgroundAllreduce``
through ``FusedAllreduce`` with the engine's ``poll_seconds``): one ``MPI_Iallreduce`` in
place, then either

- "poll": ``Test`` / sleep with back-off (the engine's wait while backprop still runs, so
  that the waiting thread leaves the core to it), or
- "wait": ``MPI_Wait`` (the engine's wait once backward is done),

followed by the averaging multiply. "raw" is the blocking ``MPI.Allreduce`` in place plus the
same multiply. Variants are interleaved (raw, poll, wait, raw, ...) for ``--repeats`` rounds;
each round times ``iters`` calls (50 MB per round, 20 to 2,000 calls; 3 from 25 MB).
Printed per size: the median time per call of each, and the ratios with their spread
(min–max of the per-round ratios). Targets: wait/raw ≤ 1.10 at every size (the engine's
data path costs what MPI costs); poll/raw is reported (its sleeps add latency by design).
"""

from __future__ import annotations

import argparse
import sys

from harness import interleaved_mpi_times, median, relaunch_under_mpiexec

SIZES = (1 << 10, 64 << 10, 1 << 20, 25 << 20, 100 << 20)


def _label(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def worker(args) -> None:
    import torch
    from mpi4py import MPI

    from workloads.comm import FusedAllreduce
    from workloads.comm.background import _POLL_SECONDS

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    engine = FusedAllreduce(comm, average=True, poll_seconds=_POLL_SECONDS)
    worst = 0.0
    for nbytes in SIZES:
        x = torch.randn(nbytes // 4)
        iters = min(2000, max(20, (50 << 20) // nbytes)) if nbytes < (25 << 20) else 3

        def raw():
            comm.Allreduce(MPI.IN_PLACE, x.numpy(), op=MPI.SUM)
            x.mul_(1.0 / comm.Get_size())

        variants = {"raw": raw, "poll": lambda: engine([x], blocking=False), "wait": lambda: engine([x], blocking=True)}
        # one untimed call each first (buffers, connections), then the rounds, A B C A B C ...
        times = interleaved_mpi_times(comm, variants, args.repeats, iters)
        if rank == 0:
            med = {k: median(v) for k, v in times.items()}
            line = f"{_label(nbytes):>6} x {comm.Get_size()} ranks, {args.repeats} rounds of {iters}: raw {med['raw'] * 1e3:9.3f} ms"
            for name in ("wait", "poll"):
                per_round = [a / b for a, b in zip(times[name], times["raw"])]
                ratio = med[name] / med["raw"]
                line += f" | {name} {med[name] * 1e3:9.3f} ms, /raw {ratio:.3f} ({min(per_round):.3f}-{max(per_round):.3f})"
                if name == "wait":
                    worst = max(worst, ratio)
            print(line, flush=True)
    if rank == 0:
        print(f"ratio wait/raw (worst over {', '.join(_label(s) for s in SIZES)}) = {worst:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    print(f"allreduce: the engine's Iallreduce (poll / MPI_Wait) vs raw MPI.Allreduce, {args.ranks} ranks, "
          f"{args.repeats} interleaved rounds")
    return relaunch_under_mpiexec(args.ranks, [sys.argv[0], "--ranks", str(args.ranks), "--repeats", str(args.repeats)])


if __name__ == "__main__":
    sys.exit(main())
