"""The network's own limit: allreduce time, algorithm and bus bandwidth over message sizes, as
nccl-tests reports them (its ``doc/PERFORMANCE.md``; algbw = bytes / time; busbw = algbw x
2(n-1)/n for an allreduce of n ranks, ``workloads.allreduce_traffic.bus_factor``).

Run under the site's launcher like any study (``study=network``, a command workload), so that it
measures inside the same allocations, with the same MPI and launcher flags, as the runs it is a
limit for::

    scalestudy sweep study=network site=polaris nodes=2,4,8 account=PROJECT

``--backend mpi`` times mpi4py's ``Allreduce`` over the site's MPI; ``nccl`` times
``torch.distributed.all_reduce`` on each rank's GPU (NCCL, with the site's network plugin);
``gloo`` the same on CPUs (what the NCCL path is checked with where there is no GPU).

Time, as nccl-tests takes it (``src/common.cu`` at NCCL_TESTS_VERSION 2.19.6, a0b82b2): each
rank starts its clock after a barrier, runs the timed iterations and stops it when its own last
operation has completed (a stream synchronisation for NCCL; no barrier inside the timing), its
time being that over the iterations (line 772); the ranks' times are then combined by
``--average``, by default their mean (``average = 1``, lines 119-120; the sum over ranks divided
by their number, lines 343-351, called at line 783), as nccl-tests' ``-a 1``. ``--average max``
gives the slowest rank's (nccl-tests' ``-a 3``), about what this tool reported before issue 51
(then with a barrier inside each rank's timing). Differences that remain: one timing per size
(out of place for ``mpi``, in place for ``torch.distributed``; nccl-tests times both), no result
check, and the iterations chosen to fill ``--seconds`` (the slowest rank's estimate, so that
every rank runs as many) where nccl-tests takes ``-n``.

Rank 0 reports through ``workloads.report``: per size ``busbw_gbps_<bytes>b``,
``algbw_gbps_<bytes>b`` and ``time_us_<bytes>b``, and ``latency_us`` (the smallest size's time).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Sequence

import numpy as np

from .allreduce_traffic import bus_factor

DEFAULT_SIZES = tuple(8 * 4 ** k for k in range(12))     # 8 B .. 32 MiB
SECONDS_PER_SIZE = 0.25                                  # timed iterations fill about this long
# nccl-tests' -a, how the ranks' times are combined (src/common.cu line 119: 0=RANK0, 1=AVG,
# 2=MIN, 3=MAX; 1 by default, line 120)
AVERAGES = ("rank0", "mean", "min", "max")


def over_ranks(times: Sequence[float], average: str = "mean") -> float:
    """The ranks' own times (in rank order) combined as nccl-tests' ``-a`` combines them:
    rank 0's, their mean (the default), the fastest's or the slowest's."""
    if average == "rank0":
        return float(times[0])
    combine = {"mean": np.mean, "min": np.min, "max": np.max}[average]
    return float(combine(np.asarray(times, dtype=float)))


def time_allreduce(run: Callable[[], None], sync: Callable[[], None], complete: Callable[[], None],
                   gather: Callable[[float], Sequence[float]], warmup: int, seconds: float,
                   average: str = "mean", most: int = 10_000) -> tuple[float, int]:
    """Seconds per allreduce, as nccl-tests times them: after ``warmup`` and a barrier
    (``sync``), each rank's own clock over the timed iterations up to its own completion
    (``complete``: no barrier inside the timing), divided by the iterations; the ranks' times
    (``gather``: every rank's, in rank order) combined by ``average`` (``over_ranks``). The
    iterations fill about ``seconds`` by the slowest rank's estimate, so that all run as many."""
    for _ in range(warmup):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    complete()
    one = max(gather(time.perf_counter() - t0))
    iterations = int(min(most, max(3, seconds / max(one, 1e-7))))
    sync()
    t0 = time.perf_counter()
    for _ in range(iterations):
        run()
    complete()
    own = (time.perf_counter() - t0) / iterations
    return over_ranks(gather(own), average), iterations


def _mpi_runner(comm, size: int):
    from mpi4py import MPI

    count = max(1, size // 4)
    send, recv = np.ones(count, dtype=np.float32), np.empty(count, dtype=np.float32)
    # a blocking Allreduce has completed on this rank when it returns
    return (lambda: comm.Allreduce(send, recv, op=MPI.SUM)), comm.Barrier, (lambda: None)


def _torch_runner(dist, device, size: int):
    import torch

    tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)

    def complete() -> None:   # NCCL's all_reduce returns once queued on the stream; gloo's once done
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def sync() -> None:
        complete()
        dist.barrier()

    return (lambda: dist.all_reduce(tensor)), sync, complete


def measure(backend: str, sizes: Sequence[int], warmup: int = 3, seconds: float = SECONDS_PER_SIZE,
            average: str = "mean") -> list[dict]:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    ranks = comm.Get_size()
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
            run, sync, complete = _mpi_runner(comm, size) if dist is None else _torch_runner(dist, device, size)
            seconds_per_op, iterations = time_allreduce(run, sync, complete, comm.allgather, warmup, seconds, average)
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
    parser.add_argument("--average", choices=AVERAGES, default="mean",
                        help="how the ranks' times are combined, as nccl-tests' -a: rank0, mean (its default), "
                             "min, max (the slowest rank's)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 4:
        print(f"netbench: --sizes {args.sizes!r}: sizes of 4 bytes or more (one float32)", file=sys.stderr)
        return 2
    from mpi4py import MPI

    from . import report

    rows = measure(args.backend, sizes, seconds=args.seconds, average=args.average)
    if MPI.COMM_WORLD.Get_rank() == 0:
        ranks = MPI.COMM_WORLD.Get_size()
        print(f"# allreduce over {ranks} rank(s), {args.backend}: size (B), time (us: each rank's mean over the "
              f"iterations, {args.average} over ranks), algbw and busbw = algbw x 2(n-1)/n (GB/s)")
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
