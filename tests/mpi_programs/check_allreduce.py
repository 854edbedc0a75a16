"""Checks our allreduce paths against MPI.Allreduce on the same data; exits non-zero on mismatch.

    mpiexec -n N python check_allreduce.py
"""

import random
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from workloads.comm import BackgroundAllreduce, FusedAllreduce
from workloads.comm.background import PROGRESS_MODES

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
shapes = [(3,), (64, 3, 3, 3), (1,), (128, 64), (10,), (5, 7, 2), (1000,), (32, 32, 3, 3)]
failures = []


def local_tensors(seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [torch.randn(s, generator=g) for s in shapes]


def reference_sum(tensors):
    flat = np.concatenate([t.numpy().ravel() for t in tensors])
    out = np.empty_like(flat)
    comm.Allreduce(flat, out, op=MPI.SUM)
    return out


def flat(tensors):
    return np.concatenate([t.numpy().ravel() for t in tensors])


# 1. FusedAllreduce (pack, Allreduce, unpack) == MPI.Allreduce of the concatenation, both waiting modes
for poll in (None, 20e-6):
    tensors = local_tensors(1)
    expected = reference_sum(tensors)
    FusedAllreduce(comm, average=False, poll_seconds=poll)(tensors)
    if not np.array_equal(flat(tensors), expected):
        failures.append(f"FusedAllreduce(poll={poll}) differs from MPI.Allreduce by {np.abs(flat(tensors) - expected).max()}")

# 2. one large contiguous tensor, reduced in place
big = torch.randn(1 << 20, generator=torch.Generator().manual_seed(rank))
expected = reference_sum([big])
FusedAllreduce(comm, average=False)([big])
if not np.array_equal(big.numpy(), expected):
    failures.append("single-tensor in-place path differs from MPI.Allreduce")

# 3. the engine, with its cycles on the training thread (hooks) and on a thread of their
#    own: tensors handed over in a different random order on each rank, with random
#    delays, fused under several thresholds, averaged; equals MPI.Allreduce / size
names = [f"t{i}" for i in range(len(shapes))]
for progress in PROGRESS_MODES:
    for threshold in (0, 4096, 64 << 20):
        what = f"BackgroundAllreduce(progress={progress}, threshold={threshold})"
        nbytes = [int(np.prod(s)) * 4 for s in shapes]
        engine = BackgroundAllreduce(names, nbytes, comm, fusion_threshold_bytes=threshold, cycle_time_s=0.002,
                                     timeline=True, progress=progress)
        for step in range(3):
            tensors = local_tensors(10 + step)
            expected = reference_sum(tensors) / size
            engine.begin_step(step)
            order = list(range(len(shapes)))
            random.Random(step * 100 + rank).shuffle(order)
            for i in order:
                time.sleep(random.Random(i + rank).random() * 0.003)
                engine.ready(i, tensors[i])
            engine.wait()
            if not np.allclose(flat(tensors), expected, rtol=1e-6, atol=1e-6):
                failures.append(f"{what} step {step} differs from MPI.Allreduce/size")
        fused = [e for e in engine.events if e["phase"] == "allreduce"]
        if threshold == 0 and any(len(e["tensors"]) != 1 for e in fused):
            failures.append(f"{what}: fusion_threshold 0 fused tensors together")
        if threshold and any(e["bytes"] > max(threshold, max(nbytes)) for e in fused):
            failures.append(f"{what}: a fused buffer exceeded the threshold")
        if threshold and len(fused) >= 3 * len(shapes):
            failures.append(f"{what}: {len(fused)} collectives for {3 * len(shapes)} tensors: nothing fused")
        # every rank performed the same collectives, in the same order
        signature = [(e["step"], e["tensor"], tuple(e["tensors"])) for e in fused]
        if comm.allgather(signature) != [signature] * size:
            failures.append(f"{what}: ranks disagree on the fused collectives")
        engine.close()

all_failures = comm.gather(failures, root=0)
if rank == 0:
    flat_failures = [f"rank {r}: {f}" for r, fs in enumerate(all_failures) for f in fs]
    print("\n".join(flat_failures) if flat_failures else f"OK {size} ranks")
    sys.exit(1 if flat_failures else 0)
