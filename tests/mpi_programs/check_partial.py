"""Checks eager-SGD's partial allreduce (solo, majority) under random arrival skew.

    mpiexec -n N python check_partial.py MODE [catch_up]

With ``catch_up`` each rank takes every completed round at once and goes on at the round
the others reached (eager-SGD's default): it computes fewer gradients than there are
rounds, and still nothing it computed is lost.

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
catch_up = sys.argv[2:] == ["catch_up"]
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
seen_rounds, totals, gradients, t = [], {}, 0, 0
while t < rounds:
    time.sleep(rng.exponential(0.004) * (3 if rank == t % size else 1))  # random skew, a rotating straggler
    if catch_up and rank == size - 1 and t % 3 == 0:
        time.sleep(0.03)   # a straggler that misses rounds: it must skip them, not compute each
    grad = rng.integers(-5, 6, size=numel).astype(np.float32)
    computed += grad
    gradients += 1
    last = t == rounds - 1
    taken = engine.round(grad, t, synchronous=last or t % 10 == 9, catch_up=catch_up)
    if [r.round for r in taken] != list(range(t, t + len(taken))) or (not catch_up and len(taken) != 1):
        failures.append(f"round {t}: took rounds {[r.round for r in taken]}")
    t = taken[-1].round + 1
    for res in taken:
        seen_rounds.append(res.round)
        totals[res.round] = res.total.copy()
        reduced += res.total
        for k in counts:
            counts[k] += getattr(res, k)
        if res.fresh + res.null > size or res.fresh + res.stale + res.null < size:
            failures.append(f"round {res.round}: counts fresh={res.fresh} stale={res.stale} null={res.null} "
                            f"for {size} ranks")
        if res.synchronous and res.fresh != size:
            failures.append(f"synchronous round {res.round} had {res.fresh} fresh contributions")
        drawn = majority_initiator(11, res.round, size)
        if mode == "majority" and not res.synchronous and res.initiator != drawn:
            failures.append(f"round {res.round} activated by {res.initiator}, drawn initiator {drawn}")
engine.close()

if seen_rounds != list(range(rounds)):
    failures.append(f"took rounds {seen_rounds}, not each of 0..{rounds - 1} once in order")
# every rank got the same total in every round (compared after the loop: a collective inside
# it would hold every rank to the straggler's pace)
if not all(np.array_equal(a, b) for a, b in zip(comm.bcast([totals[r] for r in range(rounds)], root=0),
                                                 [totals[r] for r in range(rounds)])):
    failures.append("ranks disagree on a round's reduced sum")
skipped = comm.gather(rounds - gradients, root=0)
if catch_up and rank == 0 and skipped[size - 1] == 0:
    failures.append("the straggler computed every round: catch-up skipped nothing")
if not catch_up and rank == 0 and any(skipped):
    failures.append(f"lock-step ranks skipped rounds: {skipped}")

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
    [res] = engine.round(grad, 0)
    if res.fresh != size or not np.allclose(res.total, expected, rtol=1e-5, atol=1e-5):
        failures.append(f"all-in-time majority round: fresh={res.fresh}, max diff {np.abs(res.total - expected).max()}")
else:
    [res] = engine.round(grad, 0)
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
    print("\n".join(lines) if lines else f"OK {mode} {size} ranks {summary[0][1]} skipped {skipped}")
    sys.exit(1 if lines else 0)
