"""eager-SGD's evaluation without a collective (workloads/evaluation.py), on real ranks.

    mpiexec -n N python check_evaluation.py

Every rank holds the same model (seeded); rank r is late by r x 0.3 s at each of 2 epochs. Rank 0
must not wait for the late ranks when it evaluates (its ``epoch`` returns in well under 0.3 s),
and the epochs it writes, once every rank's scores are in, equal the collective evaluation of the
whole test set (``evaluate``), in epoch order, stamped with the latest rank's finish.
"""

import sys
import time

import torch
from mpi4py import MPI

from workloads.data import load_dataset
from workloads.evaluation import ShardedEvaluation, evaluate
from workloads.models import build_model

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
data = load_dataset("digits")
model = build_model("small_cnn", data.input_shape, data.num_classes, seed=5)
device = torch.device("cpu")
written = []
failures = []
gather = ShardedEvaluation(comm, data, device, lambda **rec: written.append(rec))
start = time.perf_counter()
for epoch in range(2):
    time.sleep(0.3 * rank)
    t0 = time.perf_counter()
    gather.epoch(model, epoch, time.perf_counter() - start, {"samples_seen": epoch})
    if rank == 0 and time.perf_counter() - t0 > 0.25:
        failures.append(f"rank 0 waited {time.perf_counter() - t0:.2f} s in its evaluation of epoch {epoch}")
    if rank == 0:
        gather.poll()
last = gather.finish()
top1, loss = evaluate(model, data, comm, device)   # the collective, after
if rank == 0:
    if [w["epoch"] for w in written] != [0, 1]:
        failures.append(f"epochs written {[w['epoch'] for w in written]}")
    for w in written:
        if abs(w["top1"] - top1) > 1e-12 or abs(w["loss"] - loss) > 1e-9:
            failures.append(f"epoch {w['epoch']}: {w['top1']}, {w['loss']} vs the collective's {top1}, {loss}")
    if size > 1 and written[-1]["wall"] < 0.3 * (size - 1):
        failures.append(f"the last epoch's wall {written[-1]['wall']:.2f} s is not the latest rank's")
    if abs(last[0] - top1) > 1e-12:
        failures.append("finish() did not return the last epoch's top-1")
    print("\n".join(failures) if failures else f"OK {size} ranks")
    sys.exit(1 if failures else 0)
