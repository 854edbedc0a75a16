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
from workloads.comm.data_path import Device, HostMirror, open_data_path

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

# 4. the engine's device seam, run on CPU tensors: the same engine through each data path a
#    GPU run takes (torch.distributed: gloo here, NCCL on GPUs; pinned host staging: a second
#    host buffer here, copies made as on a GPU) equals MPI.Allreduce / size
for path_name in ("torch_distributed", "host_staging", "cuda_aware_mpi"):
    path = open_data_path(path_name, comm.Dup(), torch.device("cpu"))
    for threshold in (0, 64 << 20):
        what = f"BackgroundAllreduce(data_path={path_name}, threshold={threshold})"
        nbytes = [int(np.prod(s)) * 4 for s in shapes]
        engine = BackgroundAllreduce(names, nbytes, comm, fusion_threshold_bytes=threshold, cycle_time_s=0.002,
                                     data_path=path)
        for step in range(2):
            tensors = local_tensors(30 + step)
            expected = reference_sum(tensors) / size
            engine.begin_step(step)
            for i in random.Random(step + rank).sample(range(len(shapes)), len(shapes)):
                engine.ready(i, tensors[i])
            engine.wait()
            if not np.allclose(flat(tensors), expected, rtol=1e-6, atol=1e-6):
                failures.append(f"{what} step {step} differs from MPI.Allreduce/size")
        engine.close()
    # a fused pack through the path (tensors not adjacent in one buffer)
    tensors = local_tensors(40)
    expected = reference_sum(tensors)
    FusedAllreduce(comm, average=False, data_path=path)(tensors, blocking=True)
    if not np.allclose(flat(tensors), expected, rtol=1e-6, atol=1e-6):
        failures.append(f"FusedAllreduce(data_path={path_name}) differs from MPI.Allreduce")
    path.close()
    path.comm.Free()

# 5. the host mirror of eager-SGD and the parameter server: a separate buffer (as pinned memory
#    on a GPU) carries the values both ways and counts its copies
device_tensor = torch.arange(6, dtype=torch.float32) + rank
mirror = HostMirror(Device(torch.device("cpu")), device_tensor, separate=True)
host = mirror.to_host()
if host.ctypes.data == device_tensor.numpy().ctypes.data or not np.array_equal(host, device_tensor.numpy()):
    failures.append("HostMirror(separate) did not copy the tensor to a buffer of its own")
comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
mirror.to_device()
if not np.array_equal(device_tensor.numpy(), np.arange(6) * size + sum(range(size))) or mirror.copies != 2:
    failures.append(f"HostMirror round trip: {device_tensor.tolist()}, {mirror.copies} copies")

all_failures = comm.gather(failures, root=0)
if rank == 0:
    flat_failures = [f"rank {r}: {f}" for r, fs in enumerate(all_failures) for f in fs]
    print("\n".join(flat_failures) if flat_failures else f"OK {size} ranks")
    sys.exit(1 if flat_failures else 0)
