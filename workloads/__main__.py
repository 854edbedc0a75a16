"""``mpiexec -n N python -m workloads <spec.json> [--run-dir DIR]``"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__)
    parser.add_argument("spec", type=Path, help="run spec (JSON) written by the orchestrator")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="where metrics/ and result.json go (default: the spec's folder)")
    args = parser.parse_args(argv)

    from .spec import RunSpec

    spec = RunSpec.load(args.spec)
    _bind_gpu(spec)   # before MPI and CUDA start: a CUDA-aware MPI may open the GPU in MPI_Init

    from mpi4py import MPI

    from .train import train

    comm = MPI.COMM_WORLD
    try:
        train(spec, args.run_dir or args.spec.parent, comm)
    except Exception as exc:  # one rank failing must not leave the others blocked in a collective
        from .failure import SETUP, SetupError, record_failure

        if isinstance(exc, SetupError):
            message = f"workloads: rank {comm.Get_rank()}: setup failed: {exc}"
            record_failure(args.run_dir or args.spec.parent, comm.Get_rank(), SETUP, message)
        else:
            message = f"workloads: rank {comm.Get_rank()}: {type(exc).__name__}: {exc}"
        print(message, file=sys.stderr, flush=True)
        traceback.print_exc()
        sys.stderr.flush()
        if comm.Get_size() > 1:
            comm.Abort(1)
        return 1
    return 0


def _bind_gpu(spec) -> None:
    from .placement import bind_gpu

    if spec.device == "cuda":
        try:
            bind_gpu(spec.gpu_binding, spec.gpus_per_node, spec.world_size, spec.workers_per_node)
        except RuntimeError:   # started without a launcher's rank variables: left as it is
            pass


if __name__ == "__main__":
    sys.exit(main())
