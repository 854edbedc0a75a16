"""Where a sweep's runs execute: a table of run pools, one kind per provider.

Every pool takes one Hydra job (the tuple ``_run_hydra_job`` reads) and returns a
``concurrent.futures.Future`` of its ``JobReturn``; the launcher only waits on futures.
The local pool also takes a job planned whole (``submit_task``: no Hydra ``run_job``).

- ``ParslRunPool`` (Slurm, PBS Pro, Cobalt): Parsl's ``MPIExecutor`` on the site's
  provider, one executor per batch job size (per node count, or one for a packed sweep);
  each task gets ``$PARSL_MPI_PREFIX`` for its own nodes.
- ``LocalRunPool`` (this host, no scheduler): threads of the driver, as many as the
  site's ``max_concurrent_runs``, each starting its MPI job with ``mpiexec`` on a node
  list of ``localhost`` lines, in the form Parsl composes it. Parsl would add an
  interchange, a worker pool and 0.7 s of imports to every sweep, and isolate nothing
  (the MPI job is a process of its own either way): see ``benchmarks/bench_overhead.py``.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Callable, Sequence

from .sites import SiteConfig


def local_mpiexec_prefix(nodes: int, ranks_per_node: int, launcher_options: str = "") -> str:
    """What Parsl's ``compose_mpiexec_launch_cmd`` gives for ``nodes`` x ``localhost``
    (``tests/test_sites.py`` checks the two agree)."""
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
                    launcher_options: str) -> concurrent.futures.Future:
        """Run ``run(local_launch=...)`` (a job planned whole, without Hydra's ``run_job``) in a thread."""
        prefix = local_mpiexec_prefix(num_nodes, ranks_per_node, launcher_options)
        return self.pool.submit(run, local_launch=(prefix, dict(self.site.env)))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> int:
        """The sweep is interrupted: stop the running MPI jobs now, start no more; how many were stopped."""
        from .mpi_run import stop_running

        self.pool.shutdown(wait=False, cancel_futures=True)
        return stop_running()


class ParslRunPool:
    def __init__(self, site: SiteConfig, run: Callable, run_dir: Path, node_counts: Sequence[int]) -> None:
        import parsl
        from parsl.app.python import PythonApp

        from .allocation import job_nodes_of_run
        from .parsl_config import build_parsl_config, executor_label

        self.site = site
        self.dfk = parsl.load(build_parsl_config(site, run_dir, node_counts))
        label = {n: executor_label(site, job_nodes_of_run(site, n, node_counts)) for n in set(node_counts)}
        self.apps = {n: PythonApp(run, data_flow_kernel=self.dfk, executors=[label[n]]) for n in set(node_counts)}

    def submit(self, parts: tuple, num_nodes: int, ranks_per_node: int, launcher_options: str) -> concurrent.futures.Future:
        import cloudpickle

        spec = {"num_nodes": num_nodes, "ranks_per_node": ranks_per_node}
        if launcher_options:
            spec["launcher_options"] = launcher_options
        return self.apps[num_nodes](cloudpickle.dumps(parts), parsl_resource_specification=spec)

    def close(self) -> None:
        import parsl

        self.dfk.cleanup()
        parsl.clear()

    def ended_batch_jobs(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Of these scheduler job ids (the batch jobs runs report they are in), those that have
        ended, with the scheduler's state (FAILED for a node failure, CANCELLED, COMPLETED ...).
        Asks the scheduler now, through each executor's own provider."""
        ended: dict[str, str] = {}
        for executor in self.dfk.executors.values():
            provider = getattr(executor, "provider", None)
            known = [j for j in job_ids if provider is not None and j in getattr(provider, "resources", {})]
            if not known:
                continue
            try:
                states = provider.status(known)
            except Exception:  # the scheduler did not answer: ask again at the next poll
                continue
            ended.update({j: s.state.name for j, s in zip(known, states) if s.terminal})
        return ended

    def abort(self) -> int:
        """The sweep is interrupted: Parsl's cleanup cancels its blocks (and their batch jobs)."""
        self.close()
        return 0


def open_run_pool(site: SiteConfig, run: Callable, run_dir: Path, node_counts: Sequence[int]):
    if site.provider == "local":
        return LocalRunPool(site, run)
    return ParslRunPool(site, run, run_dir, node_counts)
