"""Train from a spec, then gather every rank's final weights to rank 0 (``.npy``, one row per rank).

Run under mpiexec by the tests; a plain MPI program, like the workload itself.
"""

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from workloads.spec import RunSpec
from workloads.train import train

spec_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
outcome = train(RunSpec.load(spec_path), spec_path.parent)
flat = np.concatenate([outcome.final_params[k].numpy().ravel() for k in sorted(outcome.final_params)])
gathered = MPI.COMM_WORLD.gather(flat, root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    np.save(out_path, np.stack(gathered))
