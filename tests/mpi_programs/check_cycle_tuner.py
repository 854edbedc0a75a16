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
# rank r finds candidate r % k fastest by a little; rank 0 finds candidate 1 slowest by a lot
for step in range(tuner.first_step, tuner.last_trial + 1):
    c = (step - tuner.first_step) % k
    t = 0.100 - (0.004 if c == rank % k else 0.0) + (0.050 if rank == 0 and c == 1 else 0.0) + 1e-4 * rank
    tuner.observe(step, t)
assert tuner.due(tuner.last_trial + 1) and not tuner.due(tuner.last_trial)
chosen = tuner.decide(comm)
samples = comm.allgather({c: list(v) for c, v in tuner.samples.items()})
totals = [sum(statistics.median(s[c]) for s in samples) for c in tuner.candidates]
expected = tuner.candidates[totals.index(min(totals))]
everyone = comm.allgather(chosen)
if any(c != expected for c in everyone):
    print(f"rank {rank}: chose {everyone}, expected {expected}", flush=True)
    sys.exit(1)
if rank == 0:
    print(f"OK {size} ranks chose {chosen}", flush=True)
