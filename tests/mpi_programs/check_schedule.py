"""Each eager-SGD catch-up against a hand-worked schedule of arrivals, on the real partial allreduce.

    mpiexec -n 2 python check_schedule.py MODE CATCH_UP      (MODE solo; CATCH_UP paper, apply_all, lockstep, latest)

Two ranks, six steps. Round 0 and round 5 (the last) are synchronous. Rank 0 steps every 20 ms;
rank 1 sleeps 0.6 s before its step 1, so rank 0 alone fires rounds 1-4 (solo: the first arrival).
Each gradient is a one-hot vector, the k-th step of rank r at index 2k + r, so a round's reduced
sum says exactly which gradients joined it. The hand-worked schedule:

- round 0: both steps 0; rounds 1-4: rank 0's steps 1-4, rank 1 null;
- rank 1 (late) at its step 1 finds rounds 1-4 done. What it does is the catch-up:
  paper      computes steps 1-5; applies the latest result at each: rounds 0, 4, 4, 4, 4, 5;
             its steps 1-4 join round 5 stale with step 5 fresh;
  apply_all  takes rounds 1-4 at once and applies each, computes step 5 next: applies 0, 1, 2, 3, 4, 5;
             its step 1 joins round 5 stale;
  latest     as apply_all, applies only round 4: 0, 4, 5;
  lockstep   computes steps 1-5, applies rounds one per step: 0, 1, 2, 3, 4, 5; steps 1-4 join round 5.
- every gradient computed anywhere is in exactly one round (nothing lost, nothing counted twice).
Prints OK or each difference, on rank 0.
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from workloads.comm.partial import PartialAllreduce

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode, catch_up = sys.argv[1], sys.argv[2]
assert size == 2
STEPS = 6


def onehot(step: int, r: int) -> np.ndarray:
    g = np.zeros(2 * STEPS, dtype=np.float32)
    g[2 * step + r] = 1.0
    return g


engine = PartialAllreduce(2 * STEPS, comm, mode, seed=3)
applied, computed, sums = [], [], {}
step = 0
while step < STEPS:
    if rank == 1 and step == 1:
        time.sleep(0.6)
    elif rank == 0 and step > 0:
        time.sleep(0.02)
    computed.append(step)
    taken = engine.round(onehot(step, rank), step, synchronous=step in (0, STEPS - 1),
                         catch_up=catch_up in ("apply_all", "latest"), latest=catch_up == "paper")
    for res in taken:
        sums[res.round] = res.total.copy()
    used = taken if catch_up in ("apply_all", "lockstep") else taken[-1:]
    applied += [res.round for res in used]
    step = step + 1 if catch_up in ("paper", "lockstep") else taken[-1].round + 1
    engine.recycle(taken)
log = engine.drain_log()
engine.close()

failures = []
expected_applied = {
    0: [0, 1, 2, 3, 4, 5],
    1: {"paper": [0, 4, 4, 4, 4, 5], "apply_all": [0, 1, 2, 3, 4, 5], "latest": [0, 4, 5],
        "lockstep": [0, 1, 2, 3, 4, 5]}[catch_up],
}[rank]
if applied != expected_applied:
    failures.append(f"rank {rank} applied rounds {applied}, hand-worked {expected_applied}")
late_steps = [1, 2, 3, 4, 5] if catch_up in ("paper", "lockstep") else [1, 5]
expected_computed = list(range(STEPS)) if rank == 0 else [0, *late_steps]
if computed != expected_computed:
    failures.append(f"rank {rank} computed steps {computed}, hand-worked {expected_computed}")
if [r["round"] for r in log] != list(range(STEPS)):
    failures.append(f"rank {rank} logged rounds {[r['round'] for r in log]}")

# which gradients reached which round: every rank sees the same sums, rank 0 holds them all
if rank == 0:
    def contents(vec) -> set[tuple[int, int]]:
        return {(int(i) // 2, int(i) % 2) for i in np.flatnonzero(np.rint(vec))}

    expected = {0: {(0, 0), (0, 1)}, **{k: {(k, 0)} for k in range(1, 5)},
                5: {(5, 0), *((s, 1) for s in late_steps)}}
    for r in range(STEPS):
        if contents(sums[r]) != expected[r] or np.rint(sums[r]).max() > 1:
            failures.append(f"round {r} reduced {sorted(contents(sums[r]))}, hand-worked {sorted(expected[r])}")
    counts = [(x["fresh"], x["stale"], x["null"]) for x in log]
    want = [(2, 0, 0), *[(1, 0, 1)] * 4, (2, 1, 0)]
    if counts != want:
        failures.append(f"fresh/stale/null per round {counts}, hand-worked {want}")
everything = comm.gather(computed, root=0)
failures = [f for fs in comm.gather(failures, root=0) for f in fs] if rank == 0 else comm.gather(failures, root=0)
if rank == 0:
    # nothing lost, nothing counted twice: the union of the rounds' one-hots is every gradient computed
    total = sum(sums[r] for r in range(STEPS))
    want_total = sum(onehot(s, r) for r, steps in enumerate(everything) for s in steps)
    if not np.array_equal(total, want_total):
        failures.append("the rounds' sums differ from the gradients computed")
    print("\n".join(failures) if failures else f"OK {mode} {catch_up}")
    sys.exit(1 if failures else 0)
