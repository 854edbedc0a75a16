"""The ``sync`` engine's allreduce of a real model's gradient list, against MPI on the same
bytes (issue 29, item 6: ``bench_allreduce.py`` hands MPI one contiguous tensor, so it
measures MPI against MPI, not the engine).

    python benchmarks/bench_engine_allreduce.py [--model resnet20] [--ranks 2] [--repeats 7] [--iters 50]

The gradients are the model's (``workloads.models.build_model``; resnet20: 65 tensors,
1.09 MB in all). Three ways to average them, interleaved (flat,
engine, per-tensor, flat, ...) for ``--repeats`` rounds of ``--iters`` calls each:

- "engine": ``OverlappedFusedAllreduce``, the engine ``algorithm=sync`` trains with, built on
  the model as a run builds it (default settings: 64 MB fusion buffer, 5 ms cycles, the
  background thread, the flat gradient buffer): per call ``begin_step``, each gradient handed
  over in backprop's order as the hooks do, then ``synchronize`` — the engine's cost once
  backward is done, without the backward it overlaps in training;
- "flat": one ``MPI.Allreduce`` in place on one buffer holding all the gradients, and the
  averaging multiply: the floor for a fusing engine (no negotiation, no copies);
- "per-tensor": one ``MPI.Allreduce`` per gradient tensor: what fusion saves.

Printed: median ms per call of each and the ratios engine / flat and engine / per-tensor
with their spread (min–max of the per-round ratios).
"""

from __future__ import annotations

import argparse
import sys

from harness import interleaved_mpi_times, median, relaunch_under_mpiexec


def worker(args) -> None:
    import torch
    from mpi4py import MPI

    from workloads.algorithms.base import SyncOptions
    from workloads.algorithms.overlapped import OverlappedFusedAllreduce
    from workloads.models import build_model

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    model = build_model(args.model, (3, 32, 32), 10, seed=0)
    x = torch.randn(8, 3, 32, 32)
    engine = OverlappedFusedAllreduce(model, comm, SyncOptions())
    # one real backward: the engine learns backprop's order of the gradients, as in step 0
    engine.begin_step(0)
    model(x).sum().backward()
    engine.synchronize()
    engine.begin_step(1)   # adopts the observed order (a flat buffer laid out in it)
    engine.synchronize()
    grads = [p.grad for _, p in engine._named]     # noqa: SLF001 - the engine's own slot order
    flat = torch.cat([g.reshape(-1) for g in grads])
    tensors = [g.detach().clone() for g in grads]
    nbytes = flat.numel() * 4
    step = [2]

    def via_engine():
        engine.begin_step(step[0])
        step[0] += 1
        for i, g in enumerate(grads):
            engine.engine.ready(i, g)
        engine.synchronize()

    def via_flat():
        comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
        flat.mul_(1.0 / size)

    def per_tensor():
        for t in tensors:
            comm.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)
            t.mul_(1.0 / size)

    def report(r: int, times: dict[str, list[float]]) -> None:
        if rank == 0:
            print(f"  round {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1] * 1e3:.3f} ms" for k, v in times.items()),
                  flush=True)

    variants = {"flat": via_flat, "engine": via_engine, "per-tensor": per_tensor}
    times = interleaved_mpi_times(comm, variants, args.repeats, args.iters, report)
    # the engine averaged what MPI averaged: its result equals flat MPI.Allreduce's on the same data
    engine.begin_step(step[0])
    for g in grads:
        g.copy_(torch.full_like(g, float(rank + 1)))
    for i, g in enumerate(grads):
        engine.engine.ready(i, g)
    engine.synchronize()
    expect = torch.full((1,), float(rank + 1)).numpy()
    comm.Allreduce(MPI.IN_PLACE, expect, op=MPI.SUM)
    assert all(torch.allclose(g, torch.full_like(g, float(expect[0]) / size)) for g in grads), "engine result wrong"
    engine.close()
    if rank == 0:
        med = {k: median(v) for k, v in times.items()}
        print(f"{args.model}: {len(grads)} gradient tensors, {nbytes / 1e6:.2f} MB, {size} ranks, "
              f"{args.repeats} rounds of {args.iters} calls")
        print("  " + " | ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
        for base in ("flat", "per-tensor"):
            per_round = [a / b for a, b in zip(times["engine"], times[base])]
            print(f"  engine / {base}: {med['engine'] / med[base]:.3f} ({min(per_round):.3f}-{max(per_round):.3f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    print(f"engine allreduce of {args.model}'s gradients vs MPI.Allreduce, {args.ranks} ranks, "
          f"{args.repeats} interleaved rounds")
    return relaunch_under_mpiexec(args.ranks, [sys.argv[0], "--model", args.model, "--ranks", str(args.ranks),
                                               "--repeats", str(args.repeats), "--iters", str(args.iters)])


if __name__ == "__main__":
    sys.exit(main())
