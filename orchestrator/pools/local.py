"""Runs on this host, no scheduler: threads of the driver, each starting its run's MPI job.

As many threads as the site's ``max_concurrent_runs``, each starting its MPI job with
``mpiexec`` on a node list of ``localhost`` lines, in the form Parsl composes it. Parsl
would add an interchange, a worker pool and 0.7 s of imports to every sweep, and isolate
nothing (the MPI job is a process of its own either way): see ``benchmarks/bench_overhead.py``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable

from ..site.config import SiteConfig


def local_mpiexec_prefix(nodes: int, ranks_per_node: int, launcher_options: str = "") -> str:
    """What Parsl's ``compose_mpiexec_launch_cmd`` gives for ``nodes`` x ``localhost``
    (``tests/orchestrator/test_sites.py`` checks the two agree)."""
    words = ["mpiexec", "-n", str(nodes * ranks_per_node), "-ppn", str(ranks_per_node), "-hosts",
             ",".join(["localhost"] * nodes), launcher_options]
    return " ".join(words).strip()


class LocalRunPool:
    def __init__(self, site: SiteConfig, run: Callable) -> None:
        self.site, self.run = site, run
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=site.max_concurrent_runs,
                                                          thread_name_prefix="scalestudy-run")

    def submit(self, parts: tuple, num_nodes: int, ranks_per_node: int, launcher_options: str) -> concurrent.futures.Future:
        prefix = local_mpiexec_prefix(num_nodes, ranks_per_node, launcher_options)
        return self.pool.submit(self.run, parts, local_launch=(prefix, dict(self.site.env)))

    def submit_task(self, run: Callable[..., object], num_nodes: int, ranks_per_node: int,
                    launcher_options: str) -> concurrent.futures.Future | None:
        """Run ``run(local_launch=...)`` (a job planned whole, without Hydra's ``run_job``) in a thread."""
        prefix = local_mpiexec_prefix(num_nodes, ranks_per_node, launcher_options)
        return self.pool.submit(run, local_launch=(prefix, dict(self.site.env)))

    def ended_batch_jobs(self, job_ids) -> dict[str, str]:
        """No batch jobs here: none ever ends under a run."""
        return {}

    def release(self, future: concurrent.futures.Future) -> None:
        """No allocation here: nothing is held."""

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> int:
        """The sweep is interrupted: stop the running MPI jobs now, start no more; how many were stopped."""
        from ..mpi.run import stop_running

        self.pool.shutdown(wait=False, cancel_futures=True)
        return stop_running()
