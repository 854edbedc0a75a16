"""Every data path and progress mode, under a device whose copies complete late at random
(tests/fake_device/late_device.py, seeded per rank and per round), against MPI.Allreduce on
the same data. Several fused groups per cycle: the case in which ranks whose copies finish at
different moments could issue their groups' collectives in different orders. Exits non-zero
on any mismatch; prints what the stand-in delayed.

    mpiexec -n N python check_collective_order.py [SEEDS]
"""

import random
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fake_device"))
import late_device  # noqa: E402

from workloads.comm import BackgroundAllreduce, FusedAllreduce  # noqa: E402
from workloads.comm.background import PROGRESS_MODES  # noqa: E402
from workloads.comm.data_path import DATA_PATH_NAMES, open_data_path  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
STEPS = 4
# groups of different sizes: a mismatched order is then wrong sums or an MPI error, not luck
shapes = [(300,), (64, 3, 3), (1,), (128, 16), (10,), (5, 7, 2), (1000,), (32, 9), (77,), (3, 100), (2,),
          (250,)]
nbytes = [int(np.prod(s)) * 4 for s in shapes]
names = [f"t{i}" for i in range(len(shapes))]
failures = []
groups_per_step = []


def local_tensors(seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [torch.randn(s, generator=g) for s in shapes]


def reference(tensors):
    flat = np.concatenate([t.numpy().ravel() for t in tensors])
    out = np.empty_like(flat)
    comm.Allreduce(flat, out, op=MPI.SUM)
    return out / size


def as_flat(tensors):
    return np.concatenate([t.numpy().ravel() for t in tensors])


for seed in range(seeds):
    late_device.install(seed)
    for path_name in DATA_PATH_NAMES:
        for progress in PROGRESS_MODES:
            for threshold, in_one_buffer in ((0, True), (2048, True), (2048, False)):
                what = (f"seed {seed} data_path={path_name} progress={progress} threshold={threshold} "
                        f"{'flat buffer' if in_one_buffer else 'separate tensors'}")
                if rank == 0:
                    print("checking", what, file=sys.stderr, flush=True)
                path = open_data_path(path_name, comm.Dup(), torch.device("cpu"))
                flat = offsets = None
                if in_one_buffer:
                    flat = torch.zeros(sum(nbytes) // 4)
                    offsets = list(np.cumsum([0] + [n // 4 for n in nbytes[:-1]]))
                engine = BackgroundAllreduce(names, nbytes, comm, fusion_threshold_bytes=threshold,
                                             cycle_time_s=0.0003, timeline=True, progress=progress,
                                             flat=flat, offsets=offsets, data_path=path)
                for step in range(STEPS):
                    values = local_tensors(100 * seed + step)
                    if flat is not None:
                        tensors = [flat[o:o + n // 4].view(s) for o, n, s in zip(offsets, nbytes, shapes)]
                        for t, v in zip(tensors, values):
                            t.copy_(v)
                    else:
                        tensors = values
                    expected = reference(tensors)
                    engine.begin_step(step)
                    rng = random.Random(hash((seed, step, rank)))
                    for i in rng.sample(range(len(shapes)), len(shapes)):
                        late_device.time.sleep(rng.random() * 0.001)   # backprop between gradients
                        engine.ready(i, tensors[i])
                    try:
                        engine.wait()
                    except Exception as exc:  # an MPI error from mismatched collectives
                        failures.append(f"{what} step {step}: {exc}")
                        break
                    got = as_flat(tensors)
                    if not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
                        bad = np.flatnonzero(~np.isclose(got, expected, rtol=1e-5, atol=1e-5))
                        failures.append(f"{what} step {step}: {len(bad)} of {got.size} values differ from "
                                        f"MPI.Allreduce/size, first {got[bad[:3]].tolist()} where "
                                        f"{expected[bad[:3]].tolist()} were due")
                    groups_per_step.append(sum(e["phase"] == "allreduce" and e["step"] == step
                                               for e in engine.events))
                engine.events = []
                engine.close()
                path.close()
                path.comm.Free()
        # a packed group through the path while other transfers are in flight
        path = open_data_path(path_name, comm.Dup(), torch.device("cpu"))
        first = torch.randn(500, generator=torch.Generator().manual_seed(seed + rank))
        expected_first = reference([first]) * size
        pending = path.start(first)
        packed = local_tensors(7 + seed)
        expected_packed = reference(packed) * size
        FusedAllreduce(comm, average=False, data_path=path)(packed, blocking=True)
        pending.wait()
        close = dict(rtol=1e-5, atol=1e-5)   # gloo sums in another order than MPI
        if not (np.allclose(first.numpy(), expected_first, **close)
                and np.allclose(as_flat(packed), expected_packed, **close)):
            failures.append(f"seed {seed} data_path={path_name}: a packed group behind a pending transfer "
                            "differs from MPI.Allreduce")
        path.close()
        path.comm.Free()

made = comm.gather(dict(late_device.LateDevice.made), root=0)
multi = comm.allreduce(sum(g > 1 for g in groups_per_step), op=MPI.SUM)
all_failures = comm.gather(failures, root=0)
if rank == 0:
    flat_failures = [f"rank {r}: {f}" for r, fs in enumerate(all_failures) for f in fs]
    print("\n".join(flat_failures[:20]) if flat_failures else f"OK {size} ranks")
    late_copies = sum(m["late_copies"] for m in made)
    late_reads = sum(m["late_reads"] for m in made)
    print(f"stand-in: {late_copies} late copies, {late_reads} polls that found a copy not done; "
          f"{multi} steps with several fused groups")
    if late_copies == 0 or late_reads == 0 or multi == 0:
        print("the stand-in delayed nothing or no step had several groups: this check checked nothing")
        sys.exit(1)
    sys.exit(1 if flat_failures else 0)
