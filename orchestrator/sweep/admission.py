"""Admitting a sweep: everything decided before anything is recorded or submitted.

Every job is validated (one bad value stops the whole sweep), the sweep must target one
site and one study, the site is loaded once with the sweep's overrides, the study's model
fit predicts the runs' times (and the walltime to ask for, when the user gave none), each
run gets its time limit, and the batch jobs the launching runs need are planned with their
queues. The result is one ``Admitted`` that the recorder registers, the dry run prints and
the launcher carries out: no fact of it is computed twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from workloads.spec import RunSpec

from ..errors import ConfigError
from ..mpi.env import check_system_mpi, check_wheel_mpi
from ..site.allocation import BatchJob, check_runs_fit
from ..site.checks import walltime_seconds
from ..site.config import SiteConfig, load_site, with_overrides
from ..site.queues import plan_batch_jobs
from .observer import SweepJob
from .prediction import SweepPrediction, predict_sweep
from .retry_policy import RetryPolicy
from .runspec import build_run_spec, run_key
from .versions import UntestedRelease, check_tested


@dataclass
class Admitted:
    """A validated sweep: the site (with its predicted walltime, if any), every job's spec, the
    run_keys already done (read when the plan depends on them), and the batch jobs the runs
    to launch need."""
    site: SiteConfig
    specs: list[RunSpec]
    prediction: SweepPrediction
    retry_policy: RetryPolicy
    batch_jobs: list[BatchJob] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    done_note: str = ""          # why the runs already done could not be checked, if they could not
    warnings: list[str] = field(default_factory=list)   # a dry run's: what would stop a real sweep

    @property
    def study(self) -> str:
        return self.specs[0].study

    def launching(self) -> list[RunSpec]:
        """The runs to launch: not done, each once (two jobs can make one run: ``duplicate_jobs``)."""
        keys = {run_key(s): s for s in self.specs if run_key(s) not in self.done}
        return list(keys.values())


# what the shipped site files hold until a user sets their own (site_configs/*.yaml: account:)
PLACEHOLDER_ACCOUNTS = ("YOUR_PROJECT", "PROJECT")


def check_account(site: SiteConfig) -> None:
    """A batch job charged to the site file's placeholder would reach qsub / sbatch and be
    refused there (or queue under nobody's allocation): refused here, before anything is
    submitted (a dry run warns)."""
    if site.scheduler.batch_jobs and site.account in PLACEHOLDER_ACCOUNTS:
        raise ConfigError("account", site.account, f"is site {site.name}'s placeholder: give the allocation your "
                          "facility charges, account=NAME (or set account: in your copy of the site file)")


def sweep_site(config: DictConfig) -> SiteConfig:
    """The sweep's site: its file, with the sweep's own account, queue, walltime and allocation."""
    site = load_site(OmegaConf.select(config, "site"))
    return with_overrides(site, account=OmegaConf.select(config, "account"), queue=OmegaConf.select(config, "queue"),
                          walltime=OmegaConf.select(config, "walltime"),
                          allocation=OmegaConf.select(config, "allocation"),
                          allocation_nodes=OmegaConf.select(config, "allocation_nodes"))


def default_run_timeout(site: SiteConfig) -> float | None:
    """A run may use its batch job's walltime, less a margin for starting and for ingestion.
    Without batch jobs there is no walltime: no limit unless run_timeout says."""
    if not site.scheduler.batch_jobs:
        return None
    seconds = walltime_seconds(site.walltime)
    return float(max(60, seconds - max(60, seconds // 20)))


def _specs(config: DictConfig, jobs: Sequence[SweepJob], site: SiteConfig) -> list[RunSpec]:
    site_name = OmegaConf.select(config, "site")
    specs = []
    for job in jobs:
        job_site = OmegaConf.select(job.config, "site")
        if job_site != site_name:
            raise ConfigError("site", job_site, f"one sweep runs on one site ({site_name}); sweep other sites in "
                              "separate commands")
        spec = build_run_spec(job.config, site)
        if spec.threads_per_node > site.max_threads_per_node and not site.oversubscribe:
            raise ConfigError("threads_per_node", spec.threads_per_node,
                              f"site {site.name} nodes have {site.max_threads_per_node} hardware threads")
        specs.append(spec)
    studies = {s.study for s in specs}
    if len(studies) > 1:
        raise ConfigError("study_name", sorted(studies), "one sweep records one study")
    return specs


def _predicted(config: DictConfig, site: SiteConfig, jobs: Sequence[SweepJob],
               specs: Sequence[RunSpec]) -> tuple[SiteConfig, SweepPrediction]:
    """Predicted run times from the study's model fit, if it has one; the walltime request they
    imply replaces the site's when the user gave none."""
    prediction = predict_sweep(OmegaConf.select(config, "db_url"), site, [(j.idx, s) for j, s in zip(jobs, specs)])
    given = OmegaConf.select(config, "walltime")
    if prediction.walltime and given is None:
        site = dataclasses.replace(site, walltime=prediction.walltime)
    elif prediction.walltime:
        prediction.note = (f"predicted run times from {prediction.source}; walltime {given} as given "
                           f"(the prediction would ask for {prediction.walltime})")
    return site, prediction


def already_done(config: DictConfig, specs: Sequence[RunSpec]) -> tuple[set[str], str]:
    """run_keys a real sweep would skip as done, read without writing anything (no database
    file is created, no schema migrated); and a note when the database could not say."""
    from results_db import connect
    from results_db.store.connect import missing_sqlite_file, resolve_db_url

    if OmegaConf.select(config, "rerun"):
        return set(), ""
    url = OmegaConf.select(config, "db_url")
    if missing_sqlite_file(url) is not None:
        return set(), ""
    try:
        from results_db.store.migrate import is_current
        from results_db.store.runs import done_run_keys

        engine = connect(resolve_db_url(url), upgrade=False)
        try:
            if not is_current(engine):
                return set(), " (the database's schema is older: runs already done not checked)"
            return done_run_keys(engine, specs[0].study, [run_key(s) for s in specs]), ""
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - a dry run still shows what it would submit
        return set(), f" (database not reachable, runs already done not checked: {type(exc).__name__})"


def admit(config: DictConfig, jobs: Sequence[SweepJob], console: Console) -> Admitted:
    """Validate the sweep and plan it; ``ConfigError`` (one line) when it cannot run."""
    site = sweep_site(config)
    specs = _specs(config, jobs, site)
    site, prediction = _predicted(config, site, jobs, specs)
    specs = [dataclasses.replace(s, run_timeout=default_run_timeout(site)) if s.run_timeout is None else s
             for s in specs]
    check_runs_fit(site, [s.nodes for s in specs])
    admitted = Admitted(site=site, specs=specs, prediction=prediction, retry_policy=RetryPolicy())
    # which runs launch matters where a queue table or a packed job sizes the batch jobs by them
    if specs and (site.queues or site.allocation == "packed" or OmegaConf.select(config, "dry_run")):
        admitted.done, admitted.done_note = already_done(config, specs)
    admitted.batch_jobs = plan_batch_jobs(site, [s.nodes for s in admitted.launching()])
    checks = [lambda: check_account(site), lambda: check_system_mpi(site), lambda: check_wheel_mpi(site)]
    if site.scheduler.batch_jobs:   # Parsl runs the sweep: a release it is tested on, first
        checks.insert(0, lambda: check_tested("parsl"))
    for check in checks:
        try:
            check()
        except (ConfigError, UntestedRelease) as exc:
            if not OmegaConf.select(config, "dry_run"):
                raise
            admitted.warnings.append(f"a real sweep would stop here: {exc}")   # the dry run's summary says it
    retries = OmegaConf.select(config, "retries")
    admitted.retry_policy = RetryPolicy.from_config(OmegaConf.to_container(retries) if isinstance(retries, DictConfig)
                                                    else retries)
    return admitted


def duplicate_jobs(jobs: Sequence[SweepJob], specs: Sequence[RunSpec]) -> dict[int, int]:
    """Jobs whose run is an earlier job's (job idx -> that job's idx): a key swept that the run's
    algorithm does not read (``eager_catch_up`` beside sync) makes the same run twice."""
    first: dict[str, int] = {}
    out = {}
    for job, spec in zip(jobs, specs):
        key = run_key(spec)
        if key in first:
            out[job.idx] = first[key]
        else:
            first[key] = job.idx
    return out
