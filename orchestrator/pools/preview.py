"""What a sweep would submit, rendered without submitting: for ``--dry-run`` and the goldens.

The batch script comes from the site's real Parsl provider (its ``submit`` runs with the
command runner swapped for one that records the command and answers as the scheduler
would), and the launch line from Parsl's own prefix composer, so that what is previewed
is what a real sweep sends.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from ..site.allocation import BatchJob
from ..site.config import SiteConfig
from ..site.queues import charged_node_hours, job_site


def preview_batch_script(site: SiteConfig, job: BatchJob, run_dir: Path,
                         script_dir: Path | None = None) -> tuple[str, str]:
    """The batch script and submit command of ``job``, as the site's provider writes them;
    ``script_dir``: the folder the provider writes the script into, kept (default: a temporary
    one, removed: the submit command then names a file that is gone)."""
    if not site.scheduler.batch_jobs:
        env = "".join(f"\n  {name}={value}" for name, value in site.env)
        return "(no batch script: runs start from this process, one after another, on this host)" + \
            (f"\nenvironment:{env}" if env else ""), "-"
    from .parsl_config import executor_label, make_provider, worker_init

    provider = make_provider(site, job, worker_init(site, run_dir))
    seen: list[str] = []

    def record(cmd: str, timeout: int | None = None):
        seen.append(cmd)
        return 0, site.scheduler.submitted_reply, ""

    provider.execute_wait = record
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(script_dir) if script_dir is not None else Path(tmp)
        before = set(folder.iterdir())
        provider.script_dir = str(folder)
        provider.submit("process_worker_pool.py ...  # Parsl's worker pool; addresses are filled in at submission",
                        1, job_name=f"parsl.{executor_label(site, job.nodes)}.block-0")
        script = next(p for p in folder.iterdir() if p not in before and not p.name.endswith((".stdout", ".stderr")))
        return script.read_text(), seen[0] if seen else "-"


def composed_prefix(site: SiteConfig, nodes: int, ranks_per_node: int, launcher_options: str,
                    hosts: list[str]) -> str:
    """``$PARSL_MPI_PREFIX`` as Parsl composes it for a run on ``hosts``."""
    from parsl.executors.high_throughput.mpi_prefix_composer import compose_all

    spec = {"num_nodes": nodes, "ranks_per_node": ranks_per_node, "num_ranks": nodes * ranks_per_node,
            "launcher_options": launcher_options}
    return compose_all(site.mpi_launcher, spec, hosts)["PARSL_MPI_PREFIX"].strip()


def preview_launch_prefix(site: SiteConfig, nodes: int, ranks_per_node: int, launcher_options: str) -> str:
    """A run's launch prefix, composed by Parsl on placeholder node names in the machine's own
    form (Theta's ``nid``), as the run's launcher takes it."""
    launcher = site.launcher
    hosts = [launcher.placeholder_host(i) for i in range(nodes)]
    words = shlex.split(composed_prefix(site, nodes, ranks_per_node, launcher_options, hosts))
    return shlex.join(launcher.fix_prefix(words))


def node_hours(site: SiteConfig, job: BatchJob) -> tuple[int, float]:
    """Nodes and node-hours the facility charges at most for one batch job, in its queue."""
    return charged_node_hours(job_site(site, job), job.nodes)
