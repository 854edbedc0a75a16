"""The network's own limit: allreduce time, algorithm and bus bandwidth over message sizes, as
nccl-tests defines them (its ``doc/PERFORMANCE.md``: time is the mean of an operation over the
timed iterations; algbw = bytes / time; busbw = algbw x 2(n-1)/n for an allreduce of n ranks, the
share of the data each rank's link carries, comparable across rank counts).

Run under the site's launcher like any study (``study=network``, a command workload), so that it
measures inside the same allocations, with the same MPI and launcher flags, as the runs it is a
limit for::

    scalestudy sweep study=network site=polaris nodes=2,4,8 account=PROJECT

``--backend mpi`` times mpi4py's ``Allreduce`` over the site's MPI; ``nccl`` times
``torch.distributed.all_reduce`` on each rank's GPU (NCCL, with the site's network plugin);
``gloo`` the same on CPUs (what the NCCL path is checked with where there is no GPU). Each rank's
time is the slowest rank's (an allreduce ends when its last rank does). Rank 0 reports through
``workloads.report``: per size ``busbw_gbps_<bytes>b``, ``algbw_gbps_<bytes>b`` and
``time_us_<bytes>b``, and ``latency_us`` (the smallest size's time).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Sequence

import numpy as np

DEFAULT_SIZES = tuple(8 * 4 ** k for k in range(12))     # 8 B .. 32 MiB
SECONDS_PER_SIZE = 0.25                                  # timed iterations fill about this long


def bus_factor(ranks: int) -> float:
    """nccl-tests' allreduce bus-bandwidth factor, 2(n-1)/n (0 for one rank: no traffic)."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def time_allreduce(run: Callable[[], None], sync: Callable[[], None], slowest: Callable[[float], float],
                   warmup: int, seconds: float, most: int = 10_000) -> tuple[float, int]:
    """Mean seconds per allreduce over enough iterations to fill ``seconds`` (agreed by all
    ranks: the slowest's estimate), after ``warmup``; the slowest rank's mean."""
    for _ in range(warmup):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    one = slowest(time.perf_counter() - t0)
    iterations = int(min(most, max(3, seconds / max(one, 1e-7))))
    sync()
    t0 = time.perf_counter()
    for _ in range(iterations):
        run()
    sync()
    return slowest((time.perf_counter() - t0) / iterations), iterations


def _mpi_runner(comm, size: int):
    from mpi4py import MPI

    count = max(1, size // 4)
    send, recv = np.ones(count, dtype=np.float32), np.empty(count, dtype=np.float32)
    return (lambda: comm.Allreduce(send, recv, op=MPI.SUM)), comm.Barrier


def _torch_runner(dist, device, size: int):
    import torch

    tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()

    return (lambda: dist.all_reduce(tensor)), sync


def measure(backend: str, sizes: Sequence[int], warmup: int = 3, seconds: float = SECONDS_PER_SIZE) -> list[dict]:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ranks = comm.Get_size()
    slowest = lambda t: comm.allreduce(t, op=MPI.MAX)   # noqa: E731
    dist = device = None
    if backend in ("gloo", "nccl"):
        import torch
        import torch.distributed as dist

        from .comm.data_path import init_process_group

        device = torch.device("cpu")
        if backend == "nccl":
            local = int(comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank())
            device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(device)
        init_process_group(comm, backend)
    rows = []
    try:
        for size in sizes:
            run, sync = _mpi_runner(comm, size) if dist is None else _torch_runner(dist, device, size)
            seconds_per_op, iterations = time_allreduce(run, sync, slowest, warmup, seconds)
            algbw = size / seconds_per_op / 1e9
            rows.append({"bytes": int(size), "time_us": seconds_per_op * 1e6, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * bus_factor(ranks), "iterations": iterations})
    finally:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.netbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mpi", "gloo", "nccl"), default="mpi")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="message sizes in bytes")
    parser.add_argument("--seconds", type=float, default=SECONDS_PER_SIZE, help="timed seconds per size")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 4:
        print(f"netbench: --sizes {args.sizes!r}: sizes of 4 bytes or more (one float32)", file=sys.stderr)
        return 2
    from mpi4py import MPI

    from . import report

    rows = measure(args.backend, sizes, seconds=args.seconds)
    if MPI.COMM_WORLD.Get_rank() == 0:
        ranks = MPI.COMM_WORLD.Get_size()
        print(f"# allreduce over {ranks} rank(s), {args.backend}: size (B), time (us), algbw and busbw (GB/s)")
        for r in rows:
            print(f"{r['bytes']:>12d} {r['time_us']:>12.2f} {r['algbw_gbps']:>10.3f} {r['busbw_gbps']:>10.3f}")
        metrics: dict[str, float] = {"latency_us": rows[0]["time_us"]}
        for r in rows:
            for name in ("busbw_gbps", "algbw_gbps", "time_us"):
                metrics[f"{name}_{r['bytes']}b"] = r[name]
        report.result(**metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
