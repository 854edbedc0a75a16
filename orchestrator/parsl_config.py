"""From a ``SiteConfig`` to a Parsl ``Config``: the only place that knows Parsl's classes.

Every site uses ``MPIExecutor``, so every run gets ``$PARSL_MPI_PREFIX`` sized from
its own resource specification and one sweep can mix node counts. On a machine with
no scheduler Parsl finds no node list; a nodefile of ``localhost`` lines exported as
``PBS_NODEFILE`` gives it one, and every virtual node is this host.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

from parsl.config import Config
from parsl.executors import MPIExecutor
from parsl.launchers import SimpleLauncher
from parsl.providers import LocalProvider

from .sites import SiteConfig


def _env_bin_dir() -> str:
    """The environment's bin/ (mpiexec, process_worker_pool.py), even when it is not activated."""
    return str(Path(sys.executable).parent)


def _put_env_on_path() -> None:
    """Parsl starts ``interchange.py`` by name: find it even from an unactivated venv."""
    bin_dir = _env_bin_dir()
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"


def build_parsl_config(site: SiteConfig, run_dir: Path) -> Config:
    """Also keeps Parsl's own log out of the terminal: it goes to ``run_dir/runinfo``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    _put_env_on_path()
    logging.getLogger("parsl").propagate = False
    if site.provider != "local":  # the loader already refused it; keep the two in step
        raise NotImplementedError(f"provider {site.provider!r}")
    nodefile = run_dir / "nodefile"
    nodefile.write_text("localhost\n" * site.max_nodes)
    worker_init = "\n".join(line for line in (
        f"export PBS_NODEFILE={shlex.quote(str(nodefile))}",
        f"export PATH={shlex.quote(_env_bin_dir())}:\"$PATH\"",
        site.worker_init,
    ) if line)
    provider = LocalProvider(
        nodes_per_block=1, init_blocks=1, min_blocks=0, max_blocks=1,
        launcher=SimpleLauncher(), worker_init=worker_init,
    )
    executor = MPIExecutor(
        label=site.name, provider=provider, mpi_launcher=site.mpi_launcher,
        max_workers_per_block=site.max_concurrent_runs, address="127.0.0.1",
        heartbeat_period=5, heartbeat_threshold=30,
    )
    return Config(executors=[executor], run_dir=str(run_dir / "runinfo"), strategy_period=1)
