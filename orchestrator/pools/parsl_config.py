"""From a site and its sweep's batch jobs to a Parsl ``Config``.

Sites with a scheduler use ``MPIExecutor``, so each run gets ``$PARSL_MPI_PREFIX``
sized from its own resource specification. A sweep gets one executor per batch job
its admission planned (``site.allocation``): with ``per_size``, one per node count (blocks
of exactly that many nodes, started on demand), so one sweep can mix node counts without
holding a large allocation for small runs; with ``packed``, one executor whose single
block holds every run, MPIExecutor giving each run nodes of its own inside it. Each
executor's provider is its scheduler's (``site.schedulers``), on the queue chosen for its job.

The local site (this host, no scheduler) needs no Parsl: see ``pools.local``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from parsl.config import Config
from parsl.executors.high_throughput.executor import DEFAULT_LAUNCH_CMD

from ..mpi.env import batch_environment, env_bin_dir
from ..site.allocation import BatchJob
from ..site.config import SiteConfig
from ..site.queues import job_site
from .early_block import EarlyBlockMPIExecutor


# Parsl's own log goes to its run folder (runinfo/), not through Hydra's console handlers.
logging.getLogger("parsl").propagate = False
log = logging.getLogger(__name__)


def worker_pool_launch_cmd(preload: Sequence[str] = ()) -> str:
    """Parsl's launch command with its worker pool started through ``orchestrator.pools.worker_pool``
    by this environment's own python3 (by path: a site's ``module load python`` may put another
    first on the batch job's PATH). ``preload``: modules of the tasks to come (the task
    function's), imported by the pool's fork server before the first task arrives."""
    import shlex

    bad = [m for m in preload if not all(part.isidentifier() for part in m.split("."))]
    if bad:
        raise ValueError(f"worker pool preload: {bad[0]!r} is not a module name")
    python = shlex.quote(os.path.join(env_bin_dir(), "python3"))
    extra = "".join(f" --preload={shlex.quote(m)}" for m in preload)
    cmd = DEFAULT_LAUNCH_CMD.replace("process_worker_pool.py", f"{python} -m orchestrator.pools.worker_pool{extra}", 1)
    assert cmd != DEFAULT_LAUNCH_CMD
    return cmd


def _put_env_on_path() -> None:
    """Parsl starts ``interchange.py`` by name: find it even from an unactivated venv."""
    bin_dir = env_bin_dir()
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"


def executor_label(site: SiteConfig, nodes: int) -> str:
    """The executor of a ``nodes``-node batch job: one per batch job of the sweep."""
    return f"{site.name}-{nodes}n" + ("-packed" if site.allocation == "packed" else "")


def worker_init(site: SiteConfig, run_dir: Path) -> str:
    return "\n".join(batch_environment(site))


def make_provider(site: SiteConfig, job: BatchJob, worker_init: str):
    """The provider of one batch job: its scheduler's, on the queue chosen for it."""
    return site.scheduler.provider(job_site(site, job), job.nodes, worker_init)


def interchange_launcher(run_dir: Path) -> str:
    """An executable that starts Parsl's interchange through ``orchestrator.pools.interchange`` with
    this environment's Python (MPIExecutor takes one program path, no arguments)."""
    path = run_dir / "interchange-launcher"
    path.write_text(f"#!{sys.executable}\nfrom orchestrator.pools.interchange import main\nmain()\n")
    path.chmod(0o755)
    return str(path)


def build_parsl_config(site: SiteConfig, run_dir: Path, jobs: Iterable[BatchJob],
                       first_nodes: int | None = None, preload: Sequence[str] = ()) -> Config:
    """Also keeps Parsl's own log out of the terminal: it goes to ``run_dir/runinfo``. The batch
    job holding the first run (of ``first_nodes`` nodes) is submitted as Parsl starts
    (``early_block``); its worker pool imports ``preload`` ahead of the first task."""
    if not site.scheduler.batch_jobs:
        raise ValueError("the local site runs without Parsl (orchestrator.pools.LocalRunPool)")
    run_dir.mkdir(parents=True, exist_ok=True)
    _put_env_on_path()
    init = worker_init(site, run_dir)
    jobs = list(jobs)
    early = next((job for job in jobs if first_nodes in job.holds), None)
    executors = [
        EarlyBlockMPIExecutor(label=executor_label(site, job.nodes), provider=make_provider(site, job, init),
                    early_block=job is early,   # the first run's batch job: submitted as Parsl starts
                    mpi_launcher=site.mpi_launcher, max_workers_per_block=site.max_concurrent_runs,
                    # the interchange listens where the worker pools can reach it: on loopback where
                    # every node is this host (shared_host: local_slurm's virtual nodes), else on
                    # the address Parsl finds for this host; decided by the hosts, not the file's name
                    address="127.0.0.1" if site.shared_host else None,
                    heartbeat_period=15, heartbeat_threshold=120,
                    # Parsl's worker pool with its MPI backlog fixed (orchestrator/pools/worker_pool.py)
                    launch_cmd=worker_pool_launch_cmd(preload),
                    # CurveZMQ: only worker pools holding this sweep's keys (a private 0700 folder
                    # under runinfo/) may register. Unencrypted, anyone who can reach the
                    # interchange's port can register as a worker, receive tasks, and have the
                    # interchange unpickle what it sends (MPIExecutor's default is off).
                    encrypted=True,
                    # ends with this driver, even when it is killed (orchestrator/pools/interchange.py)
                    interchange_launch_cmd=interchange_launcher(run_dir))
        for job in jobs
    ]
    return Config(executors=executors, run_dir=str(run_dir / "runinfo"), strategy_period=1)


_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def cancel_batch_jobs(site: SiteConfig, job_ids: Iterable[str]) -> list[str]:
    """Cancel these batch jobs with the site's own provider (scancel, qdel); the ids it
    cancelled. Ids come from run folders: only plain scheduler ids reach the command line."""
    ids = [j for j in job_ids if _JOB_ID.match(str(j))]
    if not ids or not site.scheduler.batch_jobs:
        return []
    from parsl.jobs.states import JobState, JobStatus

    provider = site.scheduler.provider(site, 1, "")
    for jid in ids:   # a provider cancels the jobs it knows of
        provider.resources[jid] = {"job_id": jid, "status": JobStatus(JobState.RUNNING)}
    try:
        done = provider.cancel(ids)
    except Exception as exc:  # the scheduler refused (already ended): nothing to cancel
        log.debug("cancelling %s: %s", ids, exc)
        return []
    return [j for j, ok in zip(ids, done or []) if ok]
