"""Train from a spec, then gather every rank's final weights to rank 0 (``.npy``, one row per rank).

Run under mpiexec by the tests; a plain MPI program, like the workload itself.

    python train_and_gather.py SPEC OUT [--late-device SEED]

``--late-device``: the run's device is the stand-in of tests/fake_device/late_device.py (copies
and events that complete late, at random per rank and seed), playing a GPU, so the data paths
a CUDA run takes are allowed on it; the stand-in's counts go to OUT's ``.late.json``.
"""

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

spec_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
late = "--late-device" in sys.argv
if late:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fake_device"))
    import late_device

    from workloads import registry

    late_device.install(int(sys.argv[sys.argv.index("--late-device") + 1]))
    for algorithm in registry.ALGORITHMS:
        registry.ALGORITHM_DATA_PATHS[(algorithm, "cpu")] = (
            registry.ALGORITHM_DATA_PATHS[(algorithm, "cpu")] + registry.ALGORITHM_DATA_PATHS[(algorithm, "cuda")])

from workloads.spec import RunSpec  # noqa: E402
from workloads.train import train  # noqa: E402

outcome = train(RunSpec.load(spec_path), spec_path.parent)
flat = np.concatenate([outcome.final_params[k].numpy().ravel() for k in sorted(outcome.final_params)])
gathered = MPI.COMM_WORLD.gather(flat, root=0)
made = MPI.COMM_WORLD.gather(dict(late_device.LateDevice.made) if late else {}, root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    np.save(out_path, np.stack(gathered))
    if late:
        Path(f"{out_path}.late.json").write_text(json.dumps(made))
