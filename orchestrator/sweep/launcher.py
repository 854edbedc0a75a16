"""``hydra/launcher=parsl``: every Hydra job of a sweep becomes one task of a run pool.

Each task is sized from its own job config (``num_nodes`` and ``ranks_per_node``,
which scalestudy's config interpolates from ``nodes`` and ``workers_per_node``), so
one sweep can mix node counts. On a site with a scheduler the task runs Hydra's
``run_job`` on a Parsl worker with ``$PARSL_MPI_PREFIX`` set for exactly that
allocation; on the local site it runs in a thread of this process with the same
prefix, composed for ``localhost`` nodes (``pools``) — or, where the observer planned
the job whole (``planned_task``), that task runs in the thread without Hydra's ``run_job``.

The launcher itself knows nothing about studies or databases: its observer
(``observer.SweepObserver``, a class named in the launcher config) admits the sweep and
hands back a finished ``LaunchPlan`` (the site, which jobs, the batch jobs and their
queues), and is told while runs go and as each ends. Without one, every job runs on the
launcher's own site (``HydraJobsObserver``), so any Hydra app can use the launcher.

Only Hydra's public Launcher plugin interface (``setup``/``launch``, ``run_job``, ``JobReturn``,
``HydraConfig``, the ``ConfigLoader`` of the ``HydraContext``), on Hydra 1.3.0 to 1.3.8: the
releases CI runs Hydra's own launcher suites on (``orchestrator.sweep.versions``).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from ..driver_timing import timed
from .job_returns import (absorbed, ended_return, failed_return, job_name, run_hydra_job, run_planned,
                          skipped_return, subdir_reads_hydra)
from .observer import HydraJobsObserver, LaunchPlan, SweepJob, SweepObserver, job_size

if TYPE_CHECKING:
    from workloads.spec import RunSpec

log = logging.getLogger(__name__)


def _remove_if_unused(sweep_dir: Path) -> None:
    """Remove a sweep folder that holds nothing but Hydra's ``multirun.yaml`` (a dry run, a
    refused sweep, everything already done), and the empty folders above it up to the
    working directory, so that normal use does not pile up empty ``multirun/`` folders."""
    try:
        if not sweep_dir.is_dir() or any(p.name != "multirun.yaml" for p in sweep_dir.iterdir()):
            return
        (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
        sweep_dir.rmdir()
        stop = Path.cwd().resolve()
        parent = sweep_dir.resolve().parent
        while parent != stop and stop in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    except OSError:
        pass


class _RunQueue:
    """The sweep's jobs through the pool: submitted as the site's cap allows, waited on, retried
    when the observer says so, abandoned when their batch job is lost."""

    def __init__(self, launcher: "ParslLauncher", observer: SweepObserver, plan: LaunchPlan,
                 to_run: Sequence[SweepJob], results: dict[int, JobReturn], pool) -> None:
        self.launcher, self.observer, self.pool, self.results = launcher, observer, pool, results
        self.singleton_state = Singleton.get_state()
        self.futures: dict[concurrent.futures.Future, SweepJob] = {}
        self.pending: set[concurrent.futures.Future] = set()
        self.queued = collections.deque(to_run)
        site = plan.site
        # The site may cap runs in flight across all its allocations (a queue's per-user job
        # limit; on a test cluster whose nodes share cores, clean timings). Without batch jobs
        # runs go one at a time anyway: fed singly, each is re-checked (``before_launch``)
        # right before it starts rather than queued early.
        self.cap = site.max_runs_in_flight or (site.max_concurrent_runs if not site.scheduler.batch_jobs
                                               else len(to_run))

    def _submit(self, job: SweepJob) -> concurrent.futures.Future:
        task = self.observer.planned_task(job)
        fut = None
        if task is not None:
            fut = self.pool.submit_task(functools.partial(run_planned, task, list(job.overrides), str(job.output_dir),
                                                          job_name(job)),
                                        job.num_nodes, job.ranks_per_node, job.launcher_options)
        if fut is None:
            parts = (self.launcher.hydra_context, job.config, self.launcher.task_function, self.singleton_state)
            fut = self.pool.submit(parts, job.num_nodes, job.ranks_per_node, job.launcher_options)
        return fut

    def submit_more(self) -> None:
        while self.queued and len(self.pending) < self.cap:
            job = self.queued.popleft()
            if not self.observer.before_launch(job):
                self.results[job.idx] = skipped_return(job)
                continue
            fut = self._submit(job)
            self.futures[fut] = job
            self.pending.add(fut)

    def job_ended(self, job: SweepJob, ret: JobReturn) -> None:
        self.results[job.idx] = ret
        with timed("ingest"):
            if self.observer.on_job_end(job, ret):   # a retry: the job goes back in the queue
                self.queued.append(job)
                return
        if self.observer.records_results:
            # the observer has stored what it needs: the job's config copies (~0.2 MB a run) and
            # its result need not be held to the end of a sweep of thousands
            ret.cfg = ret.hydra_cfg = None
            if ret.status == JobStatus.COMPLETED:
                ret.return_value = None
            # nor the job's own composed config (~150 KB), held by the sweep's job list (freed
            # when the sweep unfreezes the collector); a retry keeps it above
            job.config = None

    def run(self, poll_seconds: float) -> None:
        self.submit_more()
        while self.pending:
            with timed("runs"):
                done, still = concurrent.futures.wait(self.pending, timeout=poll_seconds,
                                                      return_when=concurrent.futures.FIRST_COMPLETED)
            self.pending.intersection_update(still)
            for fut in done:
                job = self.futures.pop(fut)   # ended: nothing of it is held for the rest of the sweep
                self.job_ended(job, ended_return(job, fut))
            if self.pending:
                lost = self.observer.lost_jobs([self.futures[f] for f in self.pending], self.pool.ended_batch_jobs)
                for fut in [f for f in self.pending if self.futures[f].idx in lost]:
                    self.pending.discard(fut)   # abandoned: its worker went with its batch job
                    self.pool.release(fut)
                    job = self.futures.pop(fut)
                    self.job_ended(job, failed_return(job, lost[job.idx]))
            self.submit_more()
            if self.pending:
                with timed("poll"):
                    self.observer.on_poll([self.futures[f] for f in self.pending])


class ParslLauncher(Launcher):
    def __init__(self, site: str = "local", num_nodes: Any = 1, ranks_per_node: Any = 1,
                 launcher_options: str = "", observer: Optional[str] = None, poll_seconds: float = 0.5,
                 account: Optional[str] = None, queue: Optional[str] = None, walltime: Optional[str] = None,
                 allocation: Optional[str] = None, allocation_nodes: Any = None) -> None:
        self.site = site
        self.site_overrides = {"account": account, "queue": queue, "walltime": walltime,
                               "allocation": allocation, "allocation_nodes": allocation_nodes}
        self.launcher_options = launcher_options
        self.observer_path = observer
        self.poll_seconds = poll_seconds
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None
        self._observer: SweepObserver | None = None   # the last launch's: what its runs measured

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def _compose(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path) -> list[SweepJob]:
        from .compose import SweepComposer

        assert self.hydra_context is not None and self.config is not None
        composer = SweepComposer(self.hydra_context.config_loader, self.config)
        jobs = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            config = composer.compose(list(overrides))
            with open_dict(config):
                config.hydra.job.id = idx
                config.hydra.job.num = idx
                config.hydra.sweep.dir = str(sweep_dir)
            if subdir_reads_hydra(config):
                HydraConfig.instance().set_config(config)
            subdir = str(OmegaConf.select(config, "hydra.sweep.subdir"))
            jobs.append(SweepJob(idx=idx, overrides=list(overrides), config=config, output_dir=sweep_dir / subdir))
        if jobs:
            HydraConfig.instance().set_config(jobs[-1].config)
        return jobs

    def _size(self, jobs: Sequence[SweepJob], plan: LaunchPlan) -> list[SweepJob]:
        """The jobs to run, each sized and given its launcher flags (the site's, the launcher
        config's, the plan's own for it)."""
        to_run = [j for j, go in zip(jobs, plan.submit) if go]
        for job in to_run:
            job.num_nodes, job.ranks_per_node = job_size(job)
            extra = plan.launcher_options.get(job.idx, "")
            job.launcher_options = " ".join(x for x in (plan.site.launcher_options, self.launcher_options, extra) if x)
        return to_run

    def _make_observer(self) -> SweepObserver:
        if not self.observer_path:
            return HydraJobsObserver(self.site, self.site_overrides)
        return get_class(self.observer_path)(self.config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        observer = self._observer = self._make_observer()
        try:
            with timed("compose_jobs"):
                jobs = self._compose(job_overrides, initial_job_idx, sweep_dir)
            with timed("validate_and_register"):
                plan = observer.admit(jobs)
            to_run = self._size(jobs, plan)
        except BaseException:
            _remove_if_unused(sweep_dir)  # a refused sweep leaves no folder behind
            raise
        results = {j.idx: skipped_return(j) for j, go in zip(jobs, plan.submit) if not go}
        if to_run:
            self._run(observer, plan, to_run, results, sweep_dir, jobs)
        else:
            log.debug("Nothing to launch (%d jobs: done, in progress elsewhere, or a dry run)", len(jobs))
            _remove_if_unused(sweep_dir)
        ordered = [results[j.idx] for j in jobs]
        with timed("report"):
            observer.close(ordered)
        return [absorbed(r) for r in ordered] if observer.absorbs_failures else ordered

    def measured(self, metric: str) -> dict[int, tuple[RunSpec, float | None]]:
        """What the last launch's runs measured (``SweepObserver.measured``): job idx -> (spec,
        value of ``metric``), for the sweeper's repeats on demand."""
        return {} if self._observer is None else self._observer.measured(metric)

    def _run(self, observer: SweepObserver, plan: LaunchPlan, to_run: list[SweepJob], results: dict[int, JobReturn],
             sweep_dir: Path, jobs: list[SweepJob]) -> None:
        from ..pools import open_run_pool

        sweep_dir.mkdir(parents=True, exist_ok=True)
        site = plan.site
        log.debug("Launching %d jobs on site %s (%s, %s)", len(to_run), site.name, site.provider, site.mpi_launcher)
        for job in to_run:
            log.debug("\t#%d : %s  [%d node(s) x %d rank(s)]", job.idx, " ".join(filter_overrides(job.overrides)),
                      job.num_nodes, job.ranks_per_node)
        # The planned jobs' configs are millions of objects (~150 KB of OmegaConf nodes a job) that
        # live until their job ends: every full garbage collection walked them all, a cost that
        # grew with the sweep (driver CPU per run 1.20x at 2,000 runs against 500). Frozen (after
        # one collection, so that no garbage is frozen with them), the collector skips them; the
        # configs of ended jobs (reference cycles: OmegaConf nodes point at their parents) are
        # collected once the sweep is over and the objects are unfrozen.
        gc.collect()
        gc.freeze()
        try:
            with timed("pool_start"):
                pool = open_run_pool(site, run_hydra_job, sweep_dir / ".parsl", plan.batch_jobs)
        except BaseException:
            gc.unfreeze()
            raise
        try:
            _RunQueue(self, observer, plan, to_run, results, pool).run(self.poll_seconds)
        except BaseException:
            pool.abort()   # stop what runs before anything is recorded as interrupted
            gc.unfreeze()
            observer.close([results[j.idx] for j in jobs if j.idx in results])
            raise
        gc.unfreeze()
        with timed("pool_stop"):
            pool.close()
