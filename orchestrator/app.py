"""The Hydra application behind ``scalestudy sweep``.

Its task function runs once per job on a Parsl worker: it rebuilds the run spec
from the job's config (validated already on the login node) and starts the MPI job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from .mpi_run import execute_run
from .runspec import build_run_spec


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def sweep_job(cfg: DictConfig) -> dict[str, Any]:
    spec = build_run_spec(cfg)
    return execute_run(spec, Path(HydraConfig.get().runtime.output_dir))
