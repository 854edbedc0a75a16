"""From a site and its sweep's batch jobs to a Parsl ``Config``.

Sites with a scheduler use ``MPIExecutor``, so each run gets ``$PARSL_MPI_PREFIX``
sized from its own resource specification. A sweep gets one executor per batch job
its admission planned (``site.allocation``): with ``per_size``, one per node count (blocks
of exactly that many nodes, started on demand), so one sweep can mix node counts without
holding a large allocation for small runs; with ``packed``, one executor whose single
block holds every run, MPIExecutor giving each run nodes of its own inside it. Each
executor's provider is its scheduler's (``site.schedulers``), on the queue chosen for its job.

The local site (this host, no scheduler) needs no Parsl: see ``pools.local``.

Only Parsl's public interface: ``Config``, ``MPIExecutor`` and the providers with their
documented options, Parsl's own launch command for the worker pool. It runs on the Parsl
releases ``pyproject.toml`` names, from 2025.7.7 (the first whose worker pool cannot miss the
interchange it probes for: ``orchestrator.sweep.versions``) to the newest CI has run.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from parsl.config import Config
from parsl.executors import MPIExecutor

from ..mpi.env import batch_environment
from ..site.allocation import BatchJob
from ..site.config import SiteConfig
from ..site.queues import job_site


# Parsl's own log goes to its run folder (runinfo/), not through Hydra's console handlers.
logging.getLogger("parsl").propagate = False
log = logging.getLogger(__name__)


def executor_label(site: SiteConfig, nodes: int) -> str:
    """The executor of a ``nodes``-node batch job: one per batch job of the sweep."""
    return f"{site.name}-{nodes}n" + ("-packed" if site.allocation == "packed" else "")


def worker_init(site: SiteConfig, run_dir: Path) -> str:
    """The batch job's set-up: it puts this environment's ``bin`` on PATH, where Parsl's default
    launch command finds its worker pool (``process_worker_pool.py``, whose first line names this
    environment's Python)."""
    return "\n".join(batch_environment(site))


def make_provider(site: SiteConfig, job: BatchJob, worker_init: str):
    """The provider of one batch job: its scheduler's, on the queue chosen for it."""
    return site.scheduler.provider(job_site(site, job), job.nodes, worker_init)


def interchange_launcher(run_dir: Path) -> str:
    """An executable that starts Parsl's interchange through ``orchestrator.pools.interchange`` with
    this environment's Python (``MPIExecutor``'s ``interchange_launch_cmd`` is one program path,
    run without arguments)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "interchange-launcher"
    path.write_text(f"#!{sys.executable}\nfrom orchestrator.pools.interchange import main\nmain()\n")
    path.chmod(0o755)
    return str(path)


def make_executor(site: SiteConfig, job: BatchJob, init: str, run_dir: Path) -> MPIExecutor:
    """The executor of one batch job, through ``MPIExecutor``'s documented options only."""
    return MPIExecutor(label=executor_label(site, job.nodes), provider=make_provider(site, job, init),
                       mpi_launcher=site.mpi_launcher,
                       # as many runs as may share the block; which of them start when is decided by
                       # the driver (parsl_pool: a run reaches the block only when its nodes are free)
                       max_workers_per_block=site.max_concurrent_runs,
                       # the interchange listens where the worker pools can reach it: on loopback where
                       # every node is this host (shared_host: local_slurm's virtual nodes), else on
                       # the address Parsl finds for this host; decided by the hosts, not the file's name
                       address="127.0.0.1" if site.shared_host else None,
                       heartbeat_period=15, heartbeat_threshold=120,
                       # CurveZMQ: only worker pools holding this sweep's keys (a private 0700 folder
                       # under runinfo/) may register. Unencrypted, anyone who can reach the
                       # interchange's port can register as a worker, receive tasks, and have the
                       # interchange unpickle what it sends (MPIExecutor's default is off).
                       encrypted=True,
                       # ends with this driver, even when it is killed (orchestrator/pools/interchange.py)
                       interchange_launch_cmd=interchange_launcher(run_dir))


def build_parsl_config(site: SiteConfig, run_dir: Path, jobs: Iterable[BatchJob]) -> Config:
    """One ``MPIExecutor`` per batch job, each with its block started by Parsl's own scaling
    strategy when its first run is submitted (``strategy_period=1``: within a second). Also
    keeps Parsl's own log out of the terminal: it goes to ``run_dir/runinfo``."""
    if not site.scheduler.batch_jobs:
        raise ValueError("the local site runs without Parsl (orchestrator.pools.LocalRunPool)")
    run_dir.mkdir(parents=True, exist_ok=True)
    init = worker_init(site, run_dir)
    return Config(executors=[make_executor(site, job, init, run_dir) for job in jobs],
                  run_dir=str(run_dir / "runinfo"), strategy_period=1)


_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


# The command that cancels a scheduler's batch jobs by id: what Parsl's providers run in their
# ``cancel``, which acts only on jobs the provider itself submitted (and fails on others); the
# jobs of a stopped driver were submitted by another process's provider.
CANCEL_COMMANDS = {"slurm": "scancel", "pbspro": "qdel", "cobalt": "qdel"}


def cancel_batch_jobs(site: SiteConfig, job_ids: Iterable[str], timeout_s: float = 60) -> list[str]:
    """Cancel these batch jobs with the site's scheduler command (scancel, qdel); the ids it
    cancelled (all of them, or none when the command fails: one has already ended, the
    scheduler refused). Ids come from run folders: only plain scheduler ids reach the command
    line, as arguments of its own (no shell)."""
    ids = [j for j in job_ids if _JOB_ID.match(str(j))]
    command = CANCEL_COMMANDS.get(site.scheduler.name)
    if not ids or not site.scheduler.batch_jobs or command is None:
        return []
    try:
        proc = subprocess.run([command, *ids], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("cancelling %s: %s", ids, exc)
        return []
    if proc.returncode != 0:
        log.debug("cancelling %s: %s exited %s: %s", ids, command, proc.returncode, proc.stderr.strip())
        return []
    return ids
