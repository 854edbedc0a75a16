"""From a ``SiteConfig`` to a Parsl ``Config``: which Parsl executor and provider a site gets.

Sites with a scheduler use ``MPIExecutor``, so each run gets ``$PARSL_MPI_PREFIX``
sized from its own resource specification. A sweep gets one executor per batch job
size it needs (``allocation``): with ``per_size``, one per node count (blocks of exactly
that many nodes, started on demand), so one sweep can mix node counts without holding a
large allocation for small runs; with ``packed``, one executor whose single block holds
every run, MPIExecutor giving each run nodes of its own inside it.

The local site (this host, no scheduler) needs no Parsl: see ``run_pools``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Iterable

from parsl.config import Config
from parsl.executors import MPIExecutor
from parsl.executors.high_throughput.executor import DEFAULT_LAUNCH_CMD
from parsl.executors.high_throughput.mpi_prefix_composer import compose_all
from parsl.launchers import SimpleLauncher
from parsl.providers import PBSProProvider, SlurmProvider

from .launch_flags import aprun_node_list, binding_flags, failure_flags, launch_flags  # noqa: F401 - re-exported
from .providers import CobaltProvider
from .mpi_env import batch_environment, env_bin_dir
from .allocation import batch_jobs
from .queues import charged_node_hours, site_for_nodes
from .sites import SiteConfig


# Parsl's own log goes to its run folder (runinfo/), not through Hydra's console handlers.
logging.getLogger("parsl").propagate = False
log = logging.getLogger(__name__)


def worker_pool_launch_cmd() -> str:
    """Parsl's launch command with its worker pool started through ``orchestrator.worker_pool``
    by this environment's own python3 (by path: a site's ``module load python`` may put another
    first on the batch job's PATH)."""
    import shlex

    python = shlex.quote(os.path.join(env_bin_dir(), "python3"))
    cmd = DEFAULT_LAUNCH_CMD.replace("process_worker_pool.py", f"{python} -m orchestrator.worker_pool", 1)
    assert cmd != DEFAULT_LAUNCH_CMD
    return cmd


def _put_env_on_path() -> None:
    """Parsl starts ``interchange.py`` by name: find it even from an unactivated venv."""
    bin_dir = env_bin_dir()
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{path}"


def executor_label(site: SiteConfig, nodes: int) -> str:
    """The executor of a ``nodes``-node batch job (``allocation.job_nodes_of_run`` gives a run's):
    one per size on a scheduler; one for everything on this host."""
    if site.provider == "local":
        return site.name
    return f"{site.name}-{nodes}n" + ("-packed" if site.allocation == "packed" else "")


def worker_init(site: SiteConfig, run_dir: Path) -> str:
    return "\n".join(batch_environment(site))


def make_provider(site: SiteConfig, nodes: int, init: str):
    directives = list(site.scheduler_options)
    if site.provider == "local":
        raise ValueError("the local site runs its MPI jobs from the driver's threads: no provider")
    if site.provider == "slurm":
        # --no-requeue: a job killed with its node fails the task (Parsl retries) instead of hanging in requeue
        options = "\n".join(f"#SBATCH {d}" for d in ["--no-requeue", *directives])
        qos = site.slurm_queue == "qos"
        return SlurmProvider(partition=None if qos else (site.partition or None), qos=site.partition if qos else None,
                             account=site.account or None,
                             nodes_per_block=nodes, init_blocks=0, min_blocks=0, max_blocks=1,
                             walltime=site.walltime, scheduler_options=options, worker_init=init,
                             launcher=SimpleLauncher(), exclusive=True, cmd_timeout=30)
    if site.provider == "pbspro":
        options = "\n".join(f"#PBS {d}" for d in directives)
        return PBSProProvider(account=site.account or None, queue=site.partition or None, scheduler_options=options,
                              select_options=site.select_options,
                              worker_init=init, nodes_per_block=nodes, cpus_per_node=site.cores_per_node,
                              init_blocks=0, min_blocks=0, max_blocks=1, walltime=site.walltime,
                              launcher=SimpleLauncher(), cmd_timeout=60)
    if site.provider == "cobalt":
        options = "\n".join(f"#COBALT {d}" for d in directives)
        return CobaltProvider(account=site.account or None, queue=site.partition or None, scheduler_options=options,
                              worker_init=init, nodes_per_block=nodes, init_blocks=0, min_blocks=0, max_blocks=1,
                              walltime=site.walltime, launcher=SimpleLauncher())
    raise ValueError(f"provider {site.provider!r}")  # the site loader refuses others


def interchange_launcher(run_dir: Path) -> str:
    """An executable that starts Parsl's interchange through ``orchestrator.interchange`` with
    this environment's Python (MPIExecutor takes one program path, no arguments)."""
    path = run_dir / "interchange-launcher"
    path.write_text(f"#!{sys.executable}\nfrom orchestrator.interchange import main\nmain()\n")
    path.chmod(0o755)
    return str(path)


def build_parsl_config(site: SiteConfig, run_dir: Path, node_counts: Iterable[int]) -> Config:
    """Also keeps Parsl's own log out of the terminal: it goes to ``run_dir/runinfo``."""
    if site.provider == "local":
        raise ValueError("the local site runs without Parsl (orchestrator.run_pools.LocalRunPool)")
    run_dir.mkdir(parents=True, exist_ok=True)
    _put_env_on_path()
    init = worker_init(site, run_dir)
    sizes = {executor_label(site, n): n for n in batch_jobs(site, node_counts)}
    executors = [
        MPIExecutor(label=label, provider=make_provider(site_for_nodes(site, n), n, init),
                    mpi_launcher=site.mpi_launcher, max_workers_per_block=site.max_concurrent_runs,
                    address="127.0.0.1" if site.name.startswith("local") else None,
                    heartbeat_period=15, heartbeat_threshold=120,
                    # Parsl's worker pool with its MPI backlog fixed (orchestrator/worker_pool.py)
                    launch_cmd=worker_pool_launch_cmd(),
                    # CurveZMQ: only worker pools holding this sweep's keys (a private 0700 folder
                    # under runinfo/) may register. Unencrypted, anyone who can reach the
                    # interchange's port can register as a worker, receive tasks, and have the
                    # interchange unpickle what it sends (MPIExecutor's default is off).
                    encrypted=True,
                    # ends with this driver, even when it is killed (orchestrator/interchange.py)
                    interchange_launch_cmd=interchange_launcher(run_dir))
        for label, n in sizes.items()
    ]
    return Config(executors=executors, run_dir=str(run_dir / "runinfo"), strategy_period=1)


_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def cancel_batch_jobs(site: SiteConfig, job_ids: Iterable[str]) -> list[str]:
    """Cancel these batch jobs with the site's own provider (scancel, qdel); the ids it
    cancelled. Ids come from run folders: only plain scheduler ids reach the command line."""
    ids = [j for j in job_ids if _JOB_ID.match(str(j))]
    if not ids or site.provider == "local":
        return []
    from parsl.jobs.states import JobState, JobStatus

    provider = make_provider(site, 1, "")
    for jid in ids:   # a provider cancels the jobs it knows of
        provider.resources[jid] = {"job_id": jid, "status": JobStatus(JobState.RUNNING)}
    try:
        done = provider.cancel(ids)
    except Exception as exc:  # the scheduler refused (already ended): nothing to cancel
        log.debug("cancelling %s: %s", ids, exc)
        return []
    return [j for j, ok in zip(ids, done or []) if ok]


def preview_batch_script(site: SiteConfig, nodes: int, run_dir: Path) -> tuple[str, str]:
    """The batch script and submit command the site's provider would use, without submitting.

    Runs the real provider's ``submit`` with its command runner swapped for one that
    records the command and answers like the scheduler would.
    """
    if site.provider == "local":
        env = "".join(f"\n  {name}={value}" for name, value in site.env)
        return "(no batch script: runs start from this process, one after another, on this host)" + \
            (f"\nenvironment:{env}" if env else ""), "-"
    provider = make_provider(site_for_nodes(site, nodes), nodes, worker_init(site, run_dir))
    seen: list[str] = []
    replies = {"slurm": "Submitted batch job 0", "pbspro": "0.dry-run", "cobalt": "0"}

    def record(cmd: str, timeout: int | None = None):
        seen.append(cmd)
        return 0, replies[site.provider], ""

    provider.execute_wait = record
    with tempfile.TemporaryDirectory() as tmp:
        provider.script_dir = tmp
        provider.submit("process_worker_pool.py ...  # Parsl's worker pool; addresses are filled in at submission",
                        1, job_name=f"parsl.{executor_label(site, nodes)}.block-0")
        script = next(p for p in Path(tmp).iterdir() if not p.name.endswith((".stdout", ".stderr")))
        return script.read_text(), seen[0] if seen else "-"


def preview_launch_prefix(site: SiteConfig, nodes: int, ranks_per_node: int, launcher_options: str) -> str:
    """``$PARSL_MPI_PREFIX`` for a run, composed by Parsl itself on placeholder node names (Theta's
    ``nid`` form for aprun), as the run will use it."""
    import shlex

    hosts = [f"nid{i:05d}" if site.mpi_launcher == "aprun" else f"node{i}" for i in range(nodes)]
    return shlex.join(aprun_node_list(shlex.split(launch_prefix(site, nodes, ranks_per_node, launcher_options,
                                                                  hosts))))


def launch_prefix(site: SiteConfig, nodes: int, ranks_per_node: int, launcher_options: str,
                  hosts: list[str]) -> str:
    spec = {"num_nodes": nodes, "ranks_per_node": ranks_per_node, "num_ranks": nodes * ranks_per_node,
            "launcher_options": launcher_options}
    return compose_all(site.mpi_launcher, spec, hosts)["PARSL_MPI_PREFIX"].strip()



def node_hours(site: SiteConfig, nodes: int) -> tuple[int, float]:
    """Nodes and node-hours the facility charges at most for one ``nodes``-node batch job."""
    return charged_node_hours(site_for_nodes(site, nodes), nodes)
