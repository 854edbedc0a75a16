"""``hydra/launcher=parsl``: every Hydra job of a sweep becomes one task of a run pool.

Each task is sized from its own job config (``num_nodes`` and ``ranks_per_node``,
which scalestudy's config interpolates from ``nodes`` and ``workers_per_node``), so
one sweep can mix node counts. On a site with a scheduler the task runs Hydra's
``run_job`` on a Parsl worker with ``$PARSL_MPI_PREFIX`` set for exactly that
allocation; on the local site it runs in a thread of this process with the same
prefix, composed for ``localhost`` nodes (``run_pools``) — or, where the observer planned
the job whole (``planned_task``), that task runs in the thread without Hydra's ``run_job``.

The launcher itself knows nothing about studies or databases: an optional observer
(a class named in the launcher config) is told about the sweep before anything is
submitted, while it runs and as each job ends. scalestudy's observer validates,
records state and ingests results there; any other Hydra app can use the launcher
without one.
"""

from __future__ import annotations

import collections
import dataclasses
import concurrent.futures
import functools
import gc
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from .phases import phase

log = logging.getLogger(__name__)

SKIPPED = "skipped"
FAILED = "failed"


@dataclass
class SweepJob:
    """One Hydra job of a sweep, as the launcher and its observer see it."""

    idx: int
    overrides: list[str]
    config: DictConfig
    output_dir: Path
    num_nodes: int = 1
    ranks_per_node: int = 1
    launcher_options: str = ""


class SweepObserver(Protocol):
    def before_submit(self, jobs: Sequence[SweepJob]) -> Sequence[bool]:
        """Validate and record the sweep; return which jobs to run. Raising stops the sweep."""

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        """Called about every ``poll_seconds`` while jobs run."""

    def on_job_end(self, job: SweepJob, result: JobReturn) -> Optional[bool]:
        """Called in this process as each job ends, in completion order. True: run the job again
        (a retry; the observer has recorded the attempt that ended)."""

    def close(self, results: Sequence[JobReturn]) -> None:
        """Called once all jobs ended (or the sweep was interrupted)."""

    # Optional: ``before_launch(job) -> bool``, asked right before each job is submitted
    # (False: skip it, e.g. another sweep has taken the run over while it waited).
    # Optional: ``records_results = True`` when the observer stores what it needs from each
    # ended job: the JobReturns the launcher hands back to Hydra then carry no configs.
    # Optional: ``absorbs_failures = True`` when the observer records failed jobs itself;
    # the launcher then returns them as completed (value ``FAILED``) instead of letting
    # Hydra's sweeper raise the first one after the sweep.

    # Optional: ``planned_task(job) -> callable | None``: the job's whole work as a call of no
    # arguments, where the observer planned it completely (its run's spec is in the job's folder)
    # and nothing of Hydra's job set-up matters to it. A pool that runs jobs in this process (the
    # local site) then calls it instead of Hydra's ``run_job``, which deep-copies the job's config
    # four times and reconfigures logging (~40 ms of the driver's CPU a run: bench_sweep_scale).

    # Optional: ``launcher_options(job) -> str``, extra MPI launcher flags for one job
    # (e.g. the binding flags its threads per rank call for).

    # Optional: ``lost_jobs(running, ended_batch_jobs) -> {job idx: exception}``, asked at each
    # poll on sites with a scheduler: jobs whose batch job has ended under them (a node failed).
    # ``ended_batch_jobs(ids)`` asks the scheduler which of these batch job ids have ended. A lost
    # job's task is abandoned (its worker is gone) and it ends as failed with that exception.


def _run_hydra_job(payload: bytes | tuple, parsl_resource_specification: Optional[dict] = None,
                   local_launch: Optional[tuple[str, dict]] = None) -> bytes | JobReturn:
    """Runs on a Parsl worker: Hydra's ``run_job`` for one job config.

    Parsl reads ``parsl_resource_specification`` (the MPI allocation) from the call;
    the job sees its effect as ``$PARSL_MPI_PREFIX``. On the local site the job runs in
    one of the driver's threads: ``payload`` is the tuple itself (nothing to pickle) and
    ``local_launch`` carries the run's prefix and environment.
    """
    in_process = isinstance(payload, tuple)
    hydra_context, config, task_function, singleton_state = payload if in_process else cloudpickle.loads(payload)
    if local_launch is not None:
        from .mpi_run import set_thread_launch

        set_thread_launch(*local_launch)
    setup_globals()
    Singleton.set_state(singleton_state)
    if _subdir_reads_hydra(config):   # run_job sets it again itself
        HydraConfig.instance().set_config(config)
    old_cwd = os.getcwd()
    origin = OmegaConf.select(config, "hydra.runtime.cwd")
    if origin and os.path.isdir(origin):  # run where the user launched from, as Hydra's basic launcher does
        os.chdir(origin)
    try:
        ret = run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    finally:
        os.chdir(old_cwd)
    return ret if in_process else cloudpickle.dumps(ret)


def _run_planned(task: Callable[[], Any], overrides: list[str], working_dir: str, task_name: str,
                 local_launch: tuple[str, dict]) -> JobReturn:
    """Runs in one of the driver's threads: an observer's ``planned_task``, with the outcome in
    a ``JobReturn`` as ``run_job`` gives it (an exception: FAILED, with it as the value)."""
    from .mpi_run import set_thread_launch

    set_thread_launch(*local_launch)
    ret = JobReturn(overrides=overrides, working_dir=working_dir, task_name=task_name)
    try:
        ret.return_value = task()
        ret.status = JobStatus.COMPLETED
    except Exception as exc:   # as run_job does: the observer classifies it
        ret.return_value = exc
        ret.status = JobStatus.FAILED
    return ret


def _subdir_reads_hydra(config: DictConfig) -> bool:
    """Whether resolving the job's ``hydra.sweep.subdir`` may need ``HydraConfig.set_config``
    first (``${hydra:job.override_dirname}``, or a key of the app that reads it). That call
    deep-copies the hydra node (~10 ms a job), so it is skipped only for a subdir that is
    plainly the job's number or id (Hydra's default, scalestudy's)."""
    subdir = str(OmegaConf.to_container(config.hydra.sweep).get("subdir"))
    return subdir not in ("${hydra.job.num}", "${hydra.job.id}")


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


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"hydra.launcher.{what}={value!r}: expected an integer >= 1")
    return number


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

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    # -- planning ---------------------------------------------------------------------

    def _plan(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path) -> list[SweepJob]:
        from .sweep_compose import SweepComposer

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
            if _subdir_reads_hydra(config):
                HydraConfig.instance().set_config(config)
            subdir = str(OmegaConf.select(config, "hydra.sweep.subdir"))
            jobs.append(SweepJob(idx=idx, overrides=list(overrides), config=config, output_dir=sweep_dir / subdir))
        if jobs:
            HydraConfig.instance().set_config(jobs[-1].config)
        return jobs

    def _size(self, job: SweepJob, site, observer) -> None:
        job.num_nodes = _positive_int(OmegaConf.select(job.config, "hydra.launcher.num_nodes"), "num_nodes")
        job.ranks_per_node = _positive_int(OmegaConf.select(job.config, "hydra.launcher.ranks_per_node"), "ranks_per_node")
        extra = observer.launcher_options(job) if observer is not None and hasattr(observer, "launcher_options") else ""
        job.launcher_options = " ".join(x for x in (site.launcher_options, self.launcher_options, extra) if x)

    def _make_observer(self) -> Optional[SweepObserver]:
        if not self.observer_path:
            return None
        return get_class(self.observer_path)(self.config)

    # -- launching --------------------------------------------------------------------

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from .run_pools import open_run_pool
        from .sites import load_site, with_overrides

        setup_globals()
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()

        try:
            with phase("compose_jobs"):
                jobs = self._plan(job_overrides, initial_job_idx, sweep_dir)
            site = with_overrides(load_site(self.site), **self.site_overrides)
            observer = self._make_observer()
            with phase("validate_and_register"):
                submit = list(observer.before_submit(jobs)) if observer else [True] * len(jobs)
            predicted_walltime = getattr(observer, "walltime_request", None)
            if predicted_walltime and not self.site_overrides.get("walltime"):
                site = dataclasses.replace(site, walltime=predicted_walltime)   # from the study's model fit
            for job, go in zip(jobs, submit):
                if go:
                    self._size(job, site, observer)
        except BaseException:
            _remove_if_unused(sweep_dir)  # a refused sweep leaves no folder behind
            raise
        to_run = [j for j, go in zip(jobs, submit) if go]
        results: dict[int, JobReturn] = {j.idx: self._skipped_return(j) for j, go in zip(jobs, submit) if not go}
        if not to_run:
            log.debug("Nothing to launch (%d jobs: done, in progress elsewhere, or a dry run)", len(jobs))
            _remove_if_unused(sweep_dir)
            if observer:
                observer.close([results[j.idx] for j in jobs])
            return [results[j.idx] for j in jobs]

        sweep_dir.mkdir(parents=True, exist_ok=True)
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
            with phase("pool_start"):
                pool = open_run_pool(site, _run_hydra_job, sweep_dir / ".parsl", [j.num_nodes for j in to_run])
        except BaseException:
            gc.unfreeze()
            raise
        aborted = False
        try:
            singleton_state = Singleton.get_state()
            futures: dict[concurrent.futures.Future, SweepJob] = {}
            queued = collections.deque(to_run)
            # The site may cap runs in flight across all its allocations (a queue's
            # per-user job limit; on a test cluster whose nodes share cores, clean timings).
            # On the local site runs go one at a time anyway: feed them singly, so that each is
            # re-checked (``before_launch``) right before it starts rather than queued early.
            cap = site.max_runs_in_flight or (site.max_concurrent_runs if site.provider == "local" else len(to_run))
            pending: set[concurrent.futures.Future] = set()

            def submit_more() -> None:
                while queued and len(pending) < cap:
                    job = queued.popleft()
                    if observer is not None and hasattr(observer, "before_launch") and not observer.before_launch(job):
                        results[job.idx] = self._skipped_return(job)
                        continue
                    task = observer.planned_task(job) if planned_tasks else None
                    if task is not None:
                        fut = pool.submit_task(
                            functools.partial(_run_planned, task, list(job.overrides), str(job.output_dir),
                                              str(OmegaConf.select(job.config, "hydra.job.name"))),
                            job.num_nodes, job.ranks_per_node, job.launcher_options)
                    else:
                        parts = (self.hydra_context, job.config, self.task_function, singleton_state)
                        fut = pool.submit(parts, job.num_nodes, job.ranks_per_node, job.launcher_options)
                    futures[fut] = job
                    pending.add(fut)

            def job_ended(job: SweepJob, ret: JobReturn) -> None:
                results[job.idx] = ret
                if observer:
                    with phase("ingest"):
                        if observer.on_job_end(job, ret):   # a retry: the job goes back in the queue
                            queued.append(job)
                            return
                    if getattr(observer, "records_results", False):
                        # the observer has stored what it needs: the job's config copies (~0.2 MB a
                        # run) and its result need not be held to the end of a sweep of thousands
                        ret.cfg = ret.hydra_cfg = None
                        if ret.status == JobStatus.COMPLETED:
                            ret._return_value = None
                        # nor the job's own composed config (~150 KB), held by the sweep's job
                        # list (freed when the sweep unfreezes the collector); a retry keeps it above
                        job.config = None

            planned_tasks = observer is not None and hasattr(observer, "planned_task") and \
                hasattr(pool, "submit_task")
            watch_lost = observer is not None and hasattr(observer, "lost_jobs") and \
                hasattr(pool, "ended_batch_jobs")
            submit_more()
            while pending:
                with phase("runs"):
                    done, still = concurrent.futures.wait(pending, timeout=self.poll_seconds,
                                                          return_when=concurrent.futures.FIRST_COMPLETED)
                pending.intersection_update(still)
                for fut in done:
                    job = futures.pop(fut)   # ended: nothing of it is held for the rest of the sweep
                    job_ended(job, self._job_return(job, fut))
                if watch_lost and pending:
                    lost = observer.lost_jobs([futures[f] for f in pending], pool.ended_batch_jobs)
                    for fut in [f for f in pending if futures[f].idx in lost]:
                        pending.discard(fut)   # abandoned: its worker went with its batch job
                        job = futures.pop(fut)
                        job_ended(job, self._failed_return(job, lost[job.idx]))
                submit_more()
                if observer and pending:
                    with phase("poll"):
                        observer.on_poll([futures[f] for f in pending])
        except BaseException:
            aborted = True
            pool.abort()   # stop what runs before anything is recorded as interrupted
            if observer:
                observer.close([results[j.idx] for j in jobs if j.idx in results])
                observer = None
            raise
        finally:
            gc.unfreeze()
            if not aborted:
                with phase("pool_stop"):
                    pool.close()
        ordered = [results[j.idx] for j in jobs]
        if observer:
            with phase("report"):
                observer.close(ordered)
            if getattr(observer, "absorbs_failures", False):
                ordered = [self._absorbed(r) for r in ordered]
        return ordered

    @staticmethod
    def _absorbed(ret: JobReturn) -> JobReturn:
        """A failed job the observer has recorded: reported as completed with ``FAILED`` as its
        value, so that Hydra's sweeper does not re-raise it after the sweep (the observer's
        application decides the exit status)."""
        if ret.status != JobStatus.FAILED:
            return ret
        out = JobReturn(overrides=ret.overrides, cfg=ret.cfg, hydra_cfg=ret.hydra_cfg, working_dir=ret.working_dir,
                        task_name=ret.task_name, status=JobStatus.COMPLETED)
        out._return_value = FAILED
        return out

    def _job_return(self, job: SweepJob, fut: concurrent.futures.Future) -> JobReturn:
        try:
            value = fut.result()
            return value if isinstance(value, JobReturn) else cloudpickle.loads(value)
        except Exception as exc:  # the task never ran to completion on a worker (lost, killed, unpicklable)
            return self._failed_return(job, exc)

    @staticmethod
    def _failed_return(job: SweepJob, exc: BaseException) -> JobReturn:
        ret = JobReturn(overrides=job.overrides, cfg=job.config, working_dir=str(job.output_dir),
                        task_name=str(OmegaConf.select(job.config, "hydra.job.name")), status=JobStatus.FAILED)
        ret._return_value = exc
        return ret

    @staticmethod
    def _skipped_return(job: SweepJob) -> JobReturn:
        ret = JobReturn(overrides=job.overrides, cfg=job.config, working_dir=str(job.output_dir),
                        task_name=str(OmegaConf.select(job.config, "hydra.job.name")), status=JobStatus.COMPLETED)
        ret._return_value = SKIPPED
        return ret
