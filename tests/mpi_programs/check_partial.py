"""Checks eager-SGD's partial allreduce (solo, majority) under random arrival skew.

    mpiexec -n N python check_partial.py MODE

Integer-valued gradients make every sum exact, so "nothing lost" is checked with ==.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from workloads.comm.partial import PartialAllreduce, binomial_children, majority_initiator

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]
rounds, numel = 40, 1000
failures = []

# binomial trees reach every rank exactly once from any root, for this size
for root in range(size):
    seen, frontier = {root}, [root]
    while frontier:
        nxt = [c for r in frontier for c in binomial_children(r, root, size)]
        if any(c in seen for c in nxt):
            failures.append(f"tree rooted at {root} reaches a rank twice")
        seen.update(nxt)
        frontier = nxt
    if seen != set(range(size)):
        failures.append(f"tree rooted at {root} misses ranks {set(range(size)) - seen}")

engine = PartialAllreduce(numel, comm, mode, seed=11)
rng = np.random.default_rng(100 + rank)
computed = np.zeros(numel, dtype=np.float64)
reduced = np.zeros(numel, dtype=np.float64)
counts = {"fresh": 0, "stale": 0, "null": 0}
for t in range(rounds):
    time.sleep(rng.exponential(0.004) * (3 if rank == t % size else 1))  # random skew, a rotating straggler
    grad = rng.integers(-5, 6, size=numel).astype(np.float32)
    computed += grad
    last = t == rounds - 1
    res = engine.round(grad, t, synchronous=last or t % 10 == 9)
    reduced += res.total
    for k in counts:
        counts[k] += getattr(res, k)
    if res.fresh + res.null > size or res.fresh + res.stale + res.null < size:
        failures.append(f"round {t}: counts fresh={res.fresh} stale={res.stale} null={res.null} for {size} ranks")
    if res.synchronous and res.fresh != size:
        failures.append(f"synchronous round {t} had {res.fresh} fresh contributions")
    if mode == "majority" and not res.synchronous and res.initiator != majority_initiator(11, t, size):
        failures.append(f"round {t} activated by {res.initiator}, drawn initiator {majority_initiator(11, t, size)}")
    # every rank got the same total
    if not np.array_equal(comm.bcast(res.total, root=0), res.total):
        failures.append(f"round {t}: ranks disagree on the reduced sum")
engine.close()

# nothing lost: all gradients computed anywhere == all sums reduced (each rank sees every round's sum)
everything = np.empty_like(computed)
comm.Allreduce(computed, everything, op=MPI.SUM)
if not np.array_equal(everything, reduced):
    failures.append(f"reduced sum differs from computed sum by {np.abs(everything - reduced).max()}")

# the round equals MPI.Allreduce when everyone is in time: one synchronous-free round,
# every rank staging before anyone can fire (majority: initiator sleeps; solo: barrier + in-time check)
engine = PartialAllreduce(numel, comm, mode, seed=11)
grad = np.random.default_rng(rank).standard_normal(numel).astype(np.float32)
expected = np.empty_like(grad)
comm.Allreduce(grad, expected, op=MPI.SUM)
if mode == "majority":
    if rank == majority_initiator(11, 0, size):
        time.sleep(0.3)
    res = engine.round(grad, 0)
    if res.fresh != size or not np.allclose(res.total, expected, rtol=1e-5, atol=1e-5):
        failures.append(f"all-in-time majority round: fresh={res.fresh}, max diff {np.abs(res.total - expected).max()}")
else:
    res = engine.round(grad, 0)
    if res.local not in ("fresh", "null"):
        failures.append(f"first round contribution {res.local!r}")
    contributed = grad if res.local == "fresh" else np.zeros_like(grad)  # what this rank put in
    independent = np.empty_like(grad)
    comm.Allreduce(contributed, independent, op=MPI.SUM)
    if not np.allclose(res.total, independent, rtol=1e-5, atol=1e-5):
        failures.append("solo round differs from MPI.Allreduce of the contributions")
engine.close()

summary = comm.gather((failures, counts), root=0)
if rank == 0:
    lines = [f"rank {r}: {f}" for r, (fs, _) in enumerate(summary) for f in fs]
    print("\n".join(lines) if lines else f"OK {mode} {size} ranks {summary[0][1]}")
    sys.exit(1 if lines else 0)
