"""The Hydra application behind ``scalestudy sweep``.

Its task function runs once per job on a Parsl worker. The run's spec was built and
validated on the login node and written into the job's folder before submission
(plan once, execute many); the task only executes it. Run by another Hydra app or by
hand, where nobody planned it, it builds the spec from the job's config itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from workloads.run_folder import SPEC_FILE

from ..mpi.run import execute_planned, execute_run
from . import schema  # noqa: F401 - registers the config schema with Hydra


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def sweep_job(cfg: DictConfig) -> dict[str, Any]:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if (run_dir / SPEC_FILE).is_file():
        return execute_planned(run_dir)
    from .runspec import build_run_spec

    return execute_run(build_run_spec(cfg), run_dir)
