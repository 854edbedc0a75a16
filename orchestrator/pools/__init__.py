"""Where a sweep's runs execute: a run pool per kind of site, all with one interface.

Every pool takes one Hydra job (the tuple the launcher's ``run_hydra_job`` reads) and
returns a ``concurrent.futures.Future`` of its ``JobReturn``; the launcher only waits on
futures. ``RunPool`` says what a pool is; ``open_run_pool`` chooses one by the site's
scheduler:

- ``ParslRunPool`` (Slurm, PBS Pro, Cobalt): Parsl's ``MPIExecutor`` on the site's provider
  (``parsl_config``), runs handed to a block only when their nodes are free in it
  (``placement``), its interchange tied to the driver's life (``interchange``), and the
  providers Parsl lacks (``providers``). Parsl through its public interfaces only, on the
  releases ``pyproject.toml`` names (the range CI runs; docs/reference/development.md, "Supported Parsl and Hydra
  releases").
- ``LocalRunPool`` (this host): threads of the driver (``local``).
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

if TYPE_CHECKING:
    from ..site.allocation import BatchJob
    from ..site.config import SiteConfig
    from .local import LocalRunPool, local_mpiexec_prefix


def __getattr__(name: str):
    """The local pool on first use (the interchange's launcher imports this package, and
    needs none of the site config's imports: Hydra, OmegaConf, YAML)."""
    if name in ("LocalRunPool", "local_mpiexec_prefix"):
        from . import local

        return getattr(local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RunPool(Protocol):
    def submit(self, parts: tuple, num_nodes: int, ranks_per_node: int,
               launcher_options: str) -> concurrent.futures.Future:
        """Run one Hydra job (Hydra's ``run_job``) on ``num_nodes`` x ``ranks_per_node`` ranks."""

    def submit_task(self, run: Callable[..., object], num_nodes: int, ranks_per_node: int,
                    launcher_options: str) -> concurrent.futures.Future | None:
        """Run a job planned whole (no Hydra ``run_job``); None where this pool cannot."""

    def ended_batch_jobs(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Which of these batch jobs have ended, with the scheduler's state."""

    def release(self, future: concurrent.futures.Future) -> None:
        """The launcher no longer waits on this run (its batch job ended under it): what it held
        in its allocation is free for the runs that wait."""

    def close(self) -> None:
        """Every run has ended: release what the pool holds."""

    def abort(self) -> int:
        """The sweep is interrupted: stop what runs; how many runs were stopped."""


def open_run_pool(site: SiteConfig, run: Callable, run_dir: Path, jobs: Sequence[BatchJob]) -> RunPool:
    if not site.scheduler.batch_jobs:
        from .local import LocalRunPool

        return LocalRunPool(site, run)
    from .parsl_pool import ParslRunPool   # Parsl: about 1 s of imports a local sweep never pays

    return ParslRunPool(site, run, run_dir, jobs)


__all__ = ["LocalRunPool", "RunPool", "local_mpiexec_prefix", "open_run_pool"]
