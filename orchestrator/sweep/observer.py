"""What the launcher tells an observer, and what the observer hands back: the launcher's interface.

The launcher is a general Hydra launcher (``hydra/launcher=parsl``): it maps a sweep's jobs
to runs in a pool and their ends to ``JobReturn``s, and knows nothing of studies or
databases. An observer (a class named in the launcher's config) admits the sweep — it
validates the jobs, decides which to run and where, and hands the launcher a finished
``LaunchPlan`` — and is told as runs start, are polled and end. scalestudy's is
``recorder.SweepRecorder``; ``HydraJobsObserver`` is what any other Hydra app gets: every job
runs, on the launcher's own site.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Protocol, Sequence

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from ..site.allocation import BatchJob
from ..site.config import SiteConfig, load_site, with_overrides
from ..site.queues import plan_batch_jobs

if TYPE_CHECKING:
    from workloads.spec import RunSpec


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


@dataclass
class LaunchPlan:
    """The admitted sweep: the site its runs go to (loaded once, with the sweep's overrides and
    any walltime predicted for it), which jobs to submit (in job order), the batch jobs those
    need (each with its queue), and extra MPI launcher flags per job index."""

    site: SiteConfig
    submit: list[bool]
    batch_jobs: list[BatchJob]
    launcher_options: Mapping[int, str] = field(default_factory=dict)


def positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"hydra.launcher.{what}={value!r}: expected an integer >= 1")
    return number


def job_size(job: SweepJob) -> tuple[int, int]:
    """(nodes, ranks per node) of a job, from its own launcher config (``${nodes}``, ...)."""
    return (positive_int(OmegaConf.select(job.config, "hydra.launcher.num_nodes"), "num_nodes"),
            positive_int(OmegaConf.select(job.config, "hydra.launcher.ranks_per_node"), "ranks_per_node"))


class SweepObserver(Protocol):
    # the observer stores what it needs from each ended job: the JobReturns the launcher hands
    # back to Hydra then carry no configs (a sweep of thousands holds none of them)
    records_results: bool
    # the observer records failed jobs itself: the launcher returns them as completed (value
    # FAILED) instead of letting Hydra's sweeper raise the first one after the sweep
    absorbs_failures: bool

    def admit(self, jobs: Sequence[SweepJob]) -> LaunchPlan:
        """Validate and record the sweep; the plan the launcher carries out. Raising stops the
        sweep before anything is submitted."""

    def before_launch(self, job: SweepJob) -> bool:
        """Asked right before a job is submitted: False skips it (another sweep has taken the
        run over while it waited behind a cap)."""

    def planned_task(self, job: SweepJob) -> Optional[Callable[[], Any]]:
        """The job's whole work as a call of no arguments, where the observer planned it
        completely and nothing of Hydra's job set-up matters to it; a pool that runs jobs in
        this process then calls it instead of Hydra's ``run_job``, which deep-copies the job's
        config four times and reconfigures logging (~40 ms of the driver's CPU a run:
        bench_sweep_scale). None: run the job through Hydra."""

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        """Called about every ``poll_seconds`` while jobs run."""

    def lost_jobs(self, running: Sequence[SweepJob],
                  ended_batch_jobs: Callable[[Sequence[str]], dict[str, str]]) -> dict[int, BaseException]:
        """Jobs whose batch job has ended under them (a node failed): job idx -> the exception
        they end with. ``ended_batch_jobs(ids)`` asks the scheduler which have ended. A lost
        job's task is abandoned (its worker is gone)."""

    def on_job_end(self, job: SweepJob, result: JobReturn) -> bool:
        """Called in this process as each job ends, in completion order. True: run the job again
        (a retry; the observer has recorded the attempt that ended)."""

    def close(self, results: Sequence[JobReturn]) -> None:
        """Called once all jobs ended (or the sweep was interrupted)."""

    def measured(self, metric: str) -> dict[int, tuple[RunSpec, float | None]]:
        """After ``close``: each job of this launch, its spec and its run's value of ``metric`` (a
        run column, or a metric the run reported; None where it did not finish, an earlier
        sweep's run counting). Empty after a dry run or an interrupted sweep, and for an app without an
        observer of its own. The sweeper's repeats on demand decide their second phase from it
        (``sweeper.py``, through ``ParslLauncher.measured``)."""


class HydraJobsObserver:
    """Plain Hydra semantics, for an app without an observer of its own: every job runs, on
    the launcher's site, through Hydra's ``run_job``; failures go back to Hydra."""

    records_results = False
    absorbs_failures = False

    def __init__(self, site: str, site_overrides: Mapping[str, Any]) -> None:
        self.site_name, self.site_overrides = site, dict(site_overrides)

    def admit(self, jobs: Sequence[SweepJob]) -> LaunchPlan:
        from .versions import check_tested

        site = with_overrides(load_site(self.site_name), **self.site_overrides)
        if site.scheduler.batch_jobs:
            check_tested("parsl")
        return LaunchPlan(site=site, submit=[True] * len(jobs),
                          batch_jobs=plan_batch_jobs(site, [job_size(j)[0] for j in jobs]))

    def before_launch(self, job: SweepJob) -> bool:
        return True

    def planned_task(self, job: SweepJob) -> None:
        return None

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        pass

    def lost_jobs(self, running, ended_batch_jobs) -> dict[int, BaseException]:
        return {}

    def on_job_end(self, job: SweepJob, result: JobReturn) -> bool:
        return False

    def close(self, results: Sequence[JobReturn]) -> None:
        pass

    def measured(self, metric: str) -> dict[int, tuple[RunSpec, float | None]]:
        return {}   # nothing recorded: a sweep of the user's own app has no repeats on demand
