"""Train from several specs in turn, in one MPI job (each run in its spec's folder).

    mpiexec -n N python train_specs.py SPEC [SPEC ...]

One start-up (MPI, torch) for every run of a test: what a test comparing runs needs,
at a fraction of the time of one mpiexec per run (~25 s of start-up at 8 ranks here).
"""

import sys
from pathlib import Path

from workloads.spec import RunSpec
from workloads.train import train

for path in map(Path, sys.argv[1:]):
    train(RunSpec.load(path), path.parent)
