"""Runs in batch jobs: Parsl's ``MPIExecutor`` on the site's provider, one executor per batch job.

One executor per batch job the sweep's admission planned (per node count, or one for a
packed sweep), each on the queue chosen for it; each task gets ``$PARSL_MPI_PREFIX`` for
its own nodes. A run reaches its executor only when its nodes are free in the block
(``placement``: Parsl's worker pool backlog, which loops on a run that does not fit, is never
used). Parsl only through its public interfaces: ``parsl.load``, ``PythonApp``, the
executors' and providers' documented options and methods.
"""

from __future__ import annotations

import concurrent.futures
import logging
from pathlib import Path
from typing import Callable, Sequence

from ..site.allocation import BatchJob
from ..site.config import SiteConfig

log = logging.getLogger(__name__)


class ParslRunPool:
    def __init__(self, site: SiteConfig, run: Callable, run_dir: Path, jobs: Sequence[BatchJob]) -> None:
        import parsl
        from parsl.app.python import PythonApp

        from .parsl_config import build_parsl_config, executor_label
        from .placement import BlockPlacement

        self.site = site
        config = build_parsl_config(site, run_dir, jobs)
        try:
            self.dfk = parsl.load(config)
        except BaseException:
            abandon(config)
            raise
        # per node count of a run: its executor, and that executor's app
        self.labels = {n: executor_label(site, job.nodes) for job in jobs for n in job.holds}
        self.apps = {label: PythonApp(run, data_flow_kernel=self.dfk, executors=[label])
                     for label in set(self.labels.values())}
        self.placement = BlockPlacement({executor_label(site, job.nodes): (job.nodes, site.max_concurrent_runs)
                                         for job in jobs})
        self._shared: tuple[tuple, bytes] | None = None   # the sweep's constant parts, and them pickled

    def submit(self, parts: tuple, num_nodes: int, ranks_per_node: int, launcher_options: str) -> concurrent.futures.Future:
        spec = {"num_nodes": num_nodes, "ranks_per_node": ranks_per_node}
        if launcher_options:
            spec["launcher_options"] = launcher_options
        label = self.labels[num_nodes]
        app, payload = self.apps[label], self._payload(parts)
        return self.placement.submit(label, num_nodes, lambda: app(payload, parsl_resource_specification=spec))

    def _payload(self, parts: tuple) -> bytes:
        """``parts`` pickled for the worker (``job_returns.run_hydra_job``). Of (Hydra's context,
        the job's config, the task function, Hydra's singletons) only the config changes from
        job to job: the rest is pickled once per sweep (about 11 ms of the login node's CPU a
        run, a fifth of what the driver spends on one)."""
        import cloudpickle

        hydra_context, config, task_function, singleton_state = parts
        shared = (hydra_context, task_function, singleton_state)
        if self._shared is None or any(a is not b for a, b in zip(self._shared[0], shared)):
            self._shared = shared, cloudpickle.dumps(shared)
        return cloudpickle.dumps((self._shared[1], cloudpickle.dumps(config)))

    def submit_task(self, run: Callable[..., object], num_nodes: int, ranks_per_node: int,
                    launcher_options: str) -> concurrent.futures.Future | None:
        """A job planned whole runs on a worker through Hydra's ``run_job`` here (``submit``)."""
        return None

    def release(self, future: concurrent.futures.Future) -> None:
        """The launcher gave up on this run (its batch job ended under it): its nodes are free."""
        self.placement.release(future)

    def close(self) -> None:
        import parsl

        self.placement.close()
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
        """The sweep is interrupted: runs waiting for nodes start no more, and Parsl's cleanup
        cancels its blocks (and their batch jobs)."""
        self.close()
        return 0


def abandon(config) -> None:
    """``parsl.load`` failed in one executor's start: Parsl stops none of those started before it.
    Their interchanges stop here (``shutdown``, public); no batch job was submitted yet (Parsl's
    scaling strategy, which submits them, starts after every executor has)."""
    for executor in config.executors:
        try:
            executor.shutdown()
        except Exception:  # noqa: BLE001 - never started, or half: nothing more to stop
            log.debug("executor %s: nothing to shut down", executor.label)
