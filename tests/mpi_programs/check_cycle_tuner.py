"""Every rank measures its own trial steps; all must adopt one cycle time, the argmin of the
ranks' summed medians (computed here independently from the gathered samples)."""

import statistics
import sys

from mpi4py import MPI

from workloads.comm.cycle_tuner import CycleTimeTuner

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
tuner = CycleTimeTuner(0.005, total_steps=100)
k = len(tuner.candidates)
# Rank 0 finds candidate 0 fastest by far, the others candidate 2 by a little: summed, candidate
# 2 wins. So does none of the wrong reductions: rank 0's own choice is 0, MIN's 0, MAX's 1.
TIMES = {0: (0.090, 0.100, 0.103)}
OTHERS = (0.120, 0.100, 0.095)
for step in range(tuner.first_step, tuner.last_trial + 1):
    c = (step - tuner.first_step) % k
    tuner.observe(step, TIMES.get(rank, OTHERS)[c] + 1e-4 * rank)
assert tuner.due(tuner.last_trial + 1) and not tuner.due(tuner.last_trial)
chosen = tuner.decide(comm)
samples = comm.allgather({c: list(v) for c, v in tuner.samples.items()})
totals = [sum(statistics.median(s[c]) for s in samples) for c in tuner.candidates]
expected = tuner.candidates[totals.index(min(totals))]
assert expected == tuner.candidates[2], (totals, "the data no longer tells the reductions apart")
everyone = comm.allgather(chosen)
if any(c != expected for c in everyone):
    print(f"rank {rank}: chose {everyone}, expected {expected}", flush=True)
    sys.exit(1)
if rank == 0:
    print(f"OK {size} ranks chose {chosen}", flush=True)
