"""Rank 0 arrives late (it sleeps); each rank prints the CPU seconds it spent waiting for it,
in workloads.comm.arrival.all_arrived or, with ``barrier``, in MPI_Barrier (the control)."""

import json
import resource
import sys
import time

from mpi4py import MPI

from workloads.comm.arrival import all_arrived

comm = MPI.COMM_WORLD
late_s = float(sys.argv[2])
comm.Barrier()
before = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
if comm.rank == 0:
    time.sleep(late_s)
comm.Barrier() if sys.argv[1] == "barrier" else all_arrived(comm)
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(json.dumps({"rank": comm.rank, "cpu": cpu, "wall": time.perf_counter() - start}), flush=True)
