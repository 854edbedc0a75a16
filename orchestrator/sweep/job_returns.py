"""The ``JobReturn`` Hydra gets for each job of a sweep, whatever became of it.

A job that ran returns what Hydra's ``run_job`` gave (or a planned task's outcome in the
same form); one the observer skipped returns ``SKIPPED``; one whose task never completed on
a worker (lost, killed, unpicklable) returns FAILED with the exception, as ``run_job`` does.

Only Hydra's public ``JobReturn``: its fields and its ``return_value`` property. Reading a
failed job's ``return_value`` raises its exception and prints a line to stderr (how Hydra's
sweeper reports it); the observer needs the exception without either, so each return made
here is a ``RunReturn``, a ``JobReturn`` that also carries the failure as ``error``.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf

from .observer import SweepJob

SKIPPED = "skipped"
FAILED = "failed"


@dataclass
class RunReturn(JobReturn):
    """Hydra's ``JobReturn`` with a failed job's exception readable as ``error`` (None otherwise)."""

    error: Optional[BaseException] = None


def run_return(ret: JobReturn, error: Optional[BaseException] = None) -> RunReturn:
    """``ret`` (as Hydra's ``run_job`` made it) as a ``RunReturn``; ``error``: its failure."""
    out = RunReturn(overrides=ret.overrides, cfg=ret.cfg, hydra_cfg=ret.hydra_cfg, working_dir=ret.working_dir,
                    task_name=ret.task_name, status=ret.status, error=error)
    out.return_value = ret.return_value if ret.status == JobStatus.COMPLETED else error
    return out


def job_error(ret: JobReturn) -> Optional[BaseException]:
    """A failed job's exception, without raising it or printing anything."""
    return ret.error if isinstance(ret, RunReturn) else None


def subdir_reads_hydra(config: DictConfig) -> bool:
    """Whether resolving the job's ``hydra.sweep.subdir`` may need ``HydraConfig.set_config``
    first (``${hydra:job.override_dirname}``, or a key of the app that reads it). That call
    deep-copies the hydra node (~10 ms a job), so it is skipped only for a subdir that is
    plainly the job's number or id (Hydra's default, scalestudy's)."""
    subdir = str(OmegaConf.to_container(config.hydra.sweep).get("subdir"))
    return subdir not in ("${hydra.job.num}", "${hydra.job.id}")


def decode_payload(payload: bytes) -> tuple:
    """(Hydra's context, the job's config, the task function, Hydra's singletons) from what
    ``pools.parsl_pool`` sends: the sweep's constant parts, pickled once, and this job's config."""
    shared, pickled_config = cloudpickle.loads(payload)
    hydra_context, task_function, singleton_state = cloudpickle.loads(shared)
    return hydra_context, cloudpickle.loads(pickled_config), task_function, singleton_state


def run_hydra_job(payload: bytes | tuple, parsl_resource_specification: Optional[dict] = None,
                  local_launch: Optional[tuple[str, dict]] = None) -> bytes | JobReturn:
    """Runs on a Parsl worker: Hydra's ``run_job`` for one job config.

    Parsl reads ``parsl_resource_specification`` (the MPI allocation) from the call;
    the job sees its effect as ``$PARSL_MPI_PREFIX``. On the local site the job runs in
    one of the driver's threads: ``payload`` is the tuple itself (nothing to pickle) and
    ``local_launch`` carries the run's prefix and environment.
    """
    in_process = isinstance(payload, tuple)
    hydra_context, config, task_function, singleton_state = payload if in_process else decode_payload(payload)
    if local_launch is not None:
        from ..mpi.run import set_thread_launch

        set_thread_launch(*local_launch)
    setup_globals()
    Singleton.set_state(singleton_state)
    if subdir_reads_hydra(config):   # run_job sets it again itself
        HydraConfig.instance().set_config(config)
    old_cwd = os.getcwd()
    origin = OmegaConf.select(config, "hydra.runtime.cwd")
    if origin and os.path.isdir(origin):  # run where the user launched from, as Hydra's basic launcher does
        os.chdir(origin)
    caught: list[BaseException] = []

    def task(cfg: DictConfig) -> Any:   # the task function, its exception kept for the observer
        try:
            return task_function(cfg)
        except Exception as exc:
            caught.append(exc)
            raise

    try:
        ret = run_job(hydra_context=hydra_context, task_function=task, config=config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    finally:
        os.chdir(old_cwd)
    ret = run_return(ret, caught[-1] if caught and ret.status != JobStatus.COMPLETED else None)
    return ret if in_process else cloudpickle.dumps(ret)


def run_planned(task: Callable[[], Any], overrides: list[str], working_dir: str, task_name: str,
                local_launch: tuple[str, dict]) -> JobReturn:
    """Runs in one of the driver's threads: an observer's ``planned_task``, with the outcome in
    a ``JobReturn`` as ``run_job`` gives it (an exception: FAILED, with it as the value)."""
    from ..mpi.run import set_thread_launch

    set_thread_launch(*local_launch)
    ret = RunReturn(overrides=overrides, working_dir=working_dir, task_name=task_name)
    try:
        ret.return_value = task()
        ret.status = JobStatus.COMPLETED
    except Exception as exc:   # as run_job does: the observer classifies it
        ret.return_value = ret.error = exc
        ret.status = JobStatus.FAILED
    return ret


def job_name(job: SweepJob) -> str:
    return str(OmegaConf.select(job.config, "hydra.job.name"))


def ended_return(job: SweepJob, fut: concurrent.futures.Future) -> JobReturn:
    try:
        value = fut.result()
        return value if isinstance(value, JobReturn) else cloudpickle.loads(value)
    except (Exception, concurrent.futures.CancelledError) as exc:
        # the task never ran to completion on a worker (lost, killed, unpicklable, never started)
        return failed_return(job, exc)


def failed_return(job: SweepJob, exc: BaseException) -> RunReturn:
    ret = RunReturn(overrides=job.overrides, cfg=job.config, working_dir=str(job.output_dir),
                    task_name=job_name(job), status=JobStatus.FAILED, error=exc)
    ret.return_value = exc
    return ret


def skipped_return(job: SweepJob) -> RunReturn:
    ret = RunReturn(overrides=job.overrides, cfg=job.config, working_dir=str(job.output_dir),
                    task_name=job_name(job), status=JobStatus.COMPLETED)
    ret.return_value = SKIPPED
    return ret


def absorbed(ret: JobReturn) -> JobReturn:
    """A failed job the observer has recorded: reported as completed with ``FAILED`` as its
    value, so that Hydra's sweeper does not re-raise it after the sweep (the observer's
    application decides the exit status)."""
    if ret.status != JobStatus.FAILED:
        return ret
    out = RunReturn(overrides=ret.overrides, cfg=ret.cfg, hydra_cfg=ret.hydra_cfg, working_dir=ret.working_dir,
                    task_name=ret.task_name, status=JobStatus.COMPLETED, error=job_error(ret))
    out.return_value = FAILED
    return out
