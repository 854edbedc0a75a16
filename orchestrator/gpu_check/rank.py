"""One rank of a gpu_check case: train from a spec, then gather every rank's final weights and
the model's initial ones to rank 0 (``OUT``, an ``.npz``).

    mpiexec -n N python -m orchestrator.gpu_check.rank SPEC OUT [--corrupt]

``--corrupt`` is gpu_check's negative control: every transfer the run's data path starts has
rank 1's contribution zeroed first, so each sum misses a rank. The ranks still agree with one
another (they all receive the same wrong sum): only a comparison with an independent reference
run shows it, which is what the control proves the check makes.
"""

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from workloads.comm import data_path
from workloads.data import load_dataset
from workloads.models import build_model
from workloads.spec import RunSpec
from workloads.train import train


def main(argv: list[str]) -> None:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    comm = MPI.COMM_WORLD
    if "--corrupt" in argv:
        start = data_path.DataPath.start

        def corrupted_start(self, tensor):
            if comm.Get_rank() == 1:
                tensor.zero_()
            return start(self, tensor)

        data_path.DataPath.start = corrupted_start

    spec = RunSpec.load(spec_path)
    outcome = train(spec, spec_path.parent)
    names = sorted(outcome.final_params)
    final = np.concatenate([outcome.final_params[k].detach().cpu().numpy().ravel() for k in names])
    gathered = comm.gather(final, root=0)
    if comm.Get_rank() == 0:
        data = load_dataset(spec.dataset, spec.dataset_path, params=spec.params, seed=spec.seed)
        model = build_model(spec.model, data.input_shape, data.num_classes, spec.seed, params=spec.params)
        initial = dict(model.named_parameters())
        init = np.concatenate([initial[k].detach().numpy().ravel() for k in names])
        np.savez(out_path, final=np.stack(gathered), init=init)


if __name__ == "__main__":
    main(sys.argv[1:])
