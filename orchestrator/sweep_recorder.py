"""scalestudy's sweep observer: validation, run state and ingestion around the launcher.

Before anything is submitted it validates every job (one bad value stops the whole
sweep), checks the sweep targets one site and one study, and records each run as
pending under this driver — or skips it when the same run_key is already done or is
being driven by another live sweep. While jobs run it keeps their heartbeat fresh
and marks them running as their spec files appear; as each ends it ingests the
metrics (this process is the database's only writer) or records the failure.
With ``dry_run`` it prints what would be submitted and records nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from results_db import connect
from results_db.failpoints import failpoint
from results_db.ingest import IngestError, ingest_run
from results_db.runs import (HEARTBEAT_STALE_SECONDS, PlannedRun, claim, heartbeat, mark_failed, mark_running,
                             new_attempt, register_runs)
from results_db.store import safe_url
from workloads.spec import RunSpec

from .errors import ConfigError
from .launcher import SweepJob
from .mpi_run import JOB_FILE, LOG_FILE, SPEC_FILE, STARTED_FILE
from .progress import SweepProgress
from .provenance import provenance
from .retry_policy import INGEST, NODE_LOST, STATUS, NodeLost, RetryPolicy, SETUP_FAILURE, classify
from .runspec import build_run_spec, run_key
from .mpi_env import check_system_mpi
from .sites import SiteConfig, load_site, walltime_seconds, with_overrides

HEARTBEAT_EVERY = 5.0
LOST_CHECK_EVERY = 5.0    # how often the scheduler is asked whether runs' batch jobs still exist
LOST_GRACE = 5.0          # a run whose batch job has ended is lost if its result has not come by then
# what a retried run's folder keeps in place; the rest of an attempt moves to attempt-<its run id>/
_KEPT_IN_PLACE = (".hydra", SPEC_FILE, "scalestudy.log")
INGEST_RETRIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)   # about a minute for a database server to come back


def default_run_timeout(site: SiteConfig) -> float | None:
    """A run may use its batch job's walltime, less a margin for starting and for ingestion.
    On the local site there is no batch job and no walltime: no limit unless run_timeout says."""
    if site.provider == "local":
        return None
    seconds = walltime_seconds(site.walltime)
    return float(max(60, seconds - max(60, seconds // 20)))


def run_label(spec: RunSpec) -> str:
    """A run in the progress lines: its size, what it trains (or runs), its free parameters."""
    size = f"nodes={spec.nodes} workers_per_node={spec.workers_per_node} threads_per_node={spec.threads_per_node}"
    if spec.workload_kind == "command":
        what = f"command={Path(spec.command[0]).name}"
    else:
        what = f"batch_size={spec.batch_size} algorithm={spec.algorithm}" + \
            ("" if spec.model in ("small_cnn",) else f" model={spec.model}")
    params = "".join(f" params.{k}={v}" for k, v in spec.params.items())
    return f"{size} {what}{params}"


def _headline(result: dict) -> str:
    """A finished run in a few words: throughput, accuracy, the metrics a command reported."""
    parts = []
    if result.get("throughput") is not None:
        parts.append(f"{result['throughput']:.4g} samples/s")
    if result.get("final_top1") is not None:
        parts.append(f"top-1 {result['final_top1']:.3f}")
    parts.extend(f"{k} {v:.4g}" for k, v in (result.get("metrics") or {}).items() if isinstance(v, (int, float)))
    return ", ".join(parts) or "done"


def _batch_job(run_dir: Path) -> str | None:
    """The scheduler's id of the batch job a started run is in (None on the local site)."""
    try:
        record = json.loads((run_dir / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    return str(record["job_id"]) if record.get("running") and record.get("job_id") else None


def _node_failure(run_dir: Path) -> str:
    """What the launcher said about a failed node, if it did. srun's own line names the node
    ("srun: error: Node failure on n2"); the surviving nodes' slurmstepd lines ("STEP 1.0 ON n1
    CANCELLED ... DUE TO NODE FAILURE") name only themselves. The two come from different
    processes, so either may be written first: the line that names the failed node is put first
    whatever the order, and each distinct line is kept once."""
    try:
        lines = (run_dir / LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = list(dict.fromkeys(line.strip() for line in lines if "node failure" in line.lower()))
    said.sort(key=lambda line: _NAMES_FAILED_NODE.search(line) is None)  # stable: log order otherwise
    return "".join(f"; {line}" for line in said[:3])


_NAMES_FAILED_NODE = re.compile(r"node failure on \S+", re.IGNORECASE)


def _archive_attempt(run_dir: Path, run_id: int) -> Path:
    """Move what an ended attempt wrote in its run folder to ``attempt-<run id>/`` inside it, so
    that the next attempt starts clean and nothing of this one is overwritten."""
    target = run_dir / f"attempt-{run_id}"
    target.mkdir(exist_ok=True)
    for entry in run_dir.iterdir():
        if entry.name in _KEPT_IN_PLACE or entry.name.startswith("attempt-"):
            continue
        entry.rename(target / entry.name)
    return target


def sweep_site(config: DictConfig) -> SiteConfig:
    site = load_site(OmegaConf.select(config, "site"))
    return with_overrides(site, account=OmegaConf.select(config, "account"), queue=OmegaConf.select(config, "queue"),
                          walltime=OmegaConf.select(config, "walltime"),
                          allocation=OmegaConf.select(config, "allocation"),
                          allocation_nodes=OmegaConf.select(config, "allocation_nodes"))


class SweepRecorder:
    absorbs_failures = True   # failed runs are recorded here; the CLI's exit status reports them
    records_results = True    # every ended run is in the database: the launcher drops its configs
    last_outcome: dict | None = None  # {"study", "submitted", "failed"} of the last sweep this process ran

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.engine = None
        self.site: SiteConfig | None = None
        self.driver = f"{socket.gethostname()}:{os.getpid()}"
        self.specs: dict[int, RunSpec] = {}
        self.run_ids: dict[int, int] = {}      # job idx -> run id
        self.labels: dict[int, str] = {}
        self.started: set[int] = set()
        self.submitted: set[int] = set()
        self.ended: set[int] = set()
        # started and not ended, kept as they change: counting it from the two sets at every poll
        # made a sweep's polls quadratic in its runs (13.7 ms a run at 2,000 runs, 7.8 at 500)
        self.in_flight: set[int] = set()
        self.progress: SweepProgress | None = None
        self.failed: set[int] = set()
        self.not_ingested: set[int] = set()
        self.jobs_dir: Path | None = None
        self.db_down = False
        self._last_beat = 0.0
        self.retry_policy = RetryPolicy()
        self.retried: dict[int, dict[str, int]] = {}   # job idx -> kind of failure -> retries so far
        self._last_lost_check = 0.0
        self._ended_seen: dict[int, float] = {}          # job idx -> when its batch job was first seen ended
        self.prediction = None                            # planner.SweepPrediction, from the study's model fit
        self.walltime_request: str | None = None          # predicted walltime, when the user gave none

    # -- before anything is submitted ---------------------------------------------------

    def _validate(self, jobs: Sequence[SweepJob]) -> list[RunSpec]:
        site_name = OmegaConf.select(self.config, "site")
        self.site = site = sweep_site(self.config)
        specs = []
        for job in jobs:
            job_site = OmegaConf.select(job.config, "site")
            if job_site != site_name:
                raise ConfigError("site", job_site, f"one sweep runs on one site ({site_name}); sweep other sites in separate commands")
            spec = build_run_spec(job.config, site)
            if spec.threads_per_node > site.max_threads_per_node and not site.oversubscribe:
                raise ConfigError("threads_per_node", spec.threads_per_node,
                                  f"site {site.name} nodes have {site.max_threads_per_node} hardware threads")
            specs.append(spec)
        self._predict(jobs, specs)
        site = self.site   # with the predicted walltime, if any: each run's default limit follows from it
        specs = [dataclasses.replace(s, run_timeout=default_run_timeout(site)) if s.run_timeout is None else s
                 for s in specs]
        from .allocation import batch_jobs, check_runs_fit
        from .queues import choose_queue

        check_runs_fit(site, [s.nodes for s in specs])
        if site.allocation != "packed":   # a packed job is sized by the runs that launch (_check_queues)
            for n in batch_jobs(site, [s.nodes for s in specs]):
                choose_queue(site, n)   # a batch job no queue takes is refused before anything is registered
        try:
            check_system_mpi(site)
        except ConfigError as exc:
            if not OmegaConf.select(self.config, "dry_run"):
                raise
            self.console.print(f"[yellow]warning (a real sweep would stop here): {exc}[/yellow]")
        studies = {s.study for s in specs}
        if len(studies) > 1:
            raise ConfigError("study_name", sorted(studies), "one sweep records one study")
        retries = OmegaConf.select(self.config, "retries")
        self.retry_policy = RetryPolicy.from_config(
            OmegaConf.to_container(retries) if isinstance(retries, DictConfig) else retries)
        return specs

    def _predict(self, jobs: Sequence[SweepJob], specs: Sequence[RunSpec]) -> None:
        """Predicted run times from the study's model fit, if it has one; the walltime request
        they imply replaces the site's when the user gave none (``walltime_request``, which the
        launcher applies to the batch jobs it submits)."""
        from .planner import predict_sweep

        self.prediction = predict_sweep(OmegaConf.select(self.config, "db_url"), self.site,
                                        [(j.idx, s) for j, s in zip(jobs, specs)])
        given = OmegaConf.select(self.config, "walltime")
        if self.prediction.walltime and given is None:
            self.walltime_request = self.prediction.walltime
            self.site = dataclasses.replace(self.site, walltime=self.prediction.walltime)
        elif self.prediction.walltime:
            self.prediction.note = (f"predicted run times from {self.prediction.source}; walltime {given} as given "
                                    f"(the prediction would ask for {self.prediction.walltime})")
        if self.prediction.note and not OmegaConf.select(self.config, "dry_run"):
            self.console.print(f"[dim]{self.prediction.note}[/dim]")

    def before_submit(self, jobs: Sequence[SweepJob]) -> list[bool]:
        specs = self._validate(jobs)
        self.jobs_dir = jobs[0].output_dir.parent if jobs else None
        for job, spec in zip(jobs, specs):
            self.specs[job.idx] = spec
            self.labels[job.idx] = run_label(spec)
        if OmegaConf.select(self.config, "dry_run"):
            self._print_dry_run(jobs, specs)
            return [False] * len(jobs)
        if self.site.queues or self.site.allocation == "packed":   # before registering: refused, nothing written
            done, _ = self._already_done(specs)
            self._check_queues([s for s in specs if run_key(s) not in done])
        self.engine = connect(OmegaConf.select(self.config, "db_url"))
        rerun = bool(OmegaConf.select(self.config, "rerun"))
        planned = [PlannedRun(run_key(s), s.to_dict(), str(j.output_dir), provenance(j.config))
                   for s, j in zip(specs, jobs)]
        decisions = register_runs(self.engine, specs[0].study, planned, rerun=rerun, driver=self.driver)
        self._cancel_stopped_sweeps_jobs(decisions)
        submit = []
        for job, decision in zip(jobs, decisions):
            self.run_ids[job.idx] = decision.run_id
            if decision.submit and self._recovered(job, decision):
                submit.append(False)
                continue
            submit.append(decision.submit)
            if decision.submit:
                self.submitted.add(job.idx)
                self._move_earlier_attempt(job, decision.run_id)
                job.output_dir.mkdir(parents=True, exist_ok=True)
                self.specs[job.idx].save(job.output_dir / SPEC_FILE)  # the task executes this spec as planned
            elif decision.reason == "done":
                self.console.print(f"[dim]skip #{job.idx} {self.labels[job.idx]}: already done "
                                   f"(run_key {decision.run_key}; --rerun forces)[/dim]")
            else:
                wait = max(0.0, HEARTBEAT_STALE_SECONDS - (decision.heartbeat_age or 0.0))
                self.console.print(f"[yellow]skip #{job.idx} {self.labels[job.idx]}: in progress under sweep "
                                   f"{decision.driver} (run_key {decision.run_key}; if that sweep has stopped, this "
                                   f"command takes its runs over in {wait:.0f} s)[/yellow]")
        self.console.print(f"study [bold]{specs[0].study}[/bold]: {len(jobs)} runs, {sum(submit)} to launch on "
                           f"site {self.site.name}; results in {safe_url(str(self.engine.url))}")
        self.progress = SweepProgress(self.console, total=sum(submit))
        failpoint("registered")   # the reliability suite: killed with runs recorded, none submitted
        return submit

    def _check_queues(self, launching: Sequence[RunSpec], out: Console | None = None) -> None:
        """The queues' per-user job limits against the batch jobs this sweep would hold at once;
        prints where runs go to another queue than the site's own."""
        from .queues import check_job_limits

        for note in check_job_limits(self.site, {s.nodes for s in launching}):
            (out or self.console).print(f"[cyan]{note}[/cyan]")

    def _cancel_stopped_sweeps_jobs(self, decisions) -> None:
        """The batch jobs of a stopped sweep whose runs this one takes over: cancelled now, so that
        they do not hold nodes until their walltime (and their runs do not finish twice)."""
        jobs = sorted({d.taken_over_job for d in decisions if d.submit and d.taken_over_job})
        if not jobs or self.site.provider == "local":
            return   # (before importing Parsl: 1 s a local sweep need not pay)
        from .parsl_config import cancel_batch_jobs

        cancelled = cancel_batch_jobs(self.site, jobs)
        if cancelled:
            self.console.print(f"[yellow]cancelled batch job(s) {', '.join(cancelled)} of a sweep that stopped; "
                               f"their runs start again here[/yellow]")

    def _move_earlier_attempt(self, job: SweepJob, run_id: int) -> None:
        """A sweep folder used again (a fixed ``hydra.sweep.dir``, a --rerun into it): the ended
        attempt recorded there moves to ``attempt-<its run id>/`` instead of being overwritten."""
        from results_db.runs import earlier_attempts_in, set_run_dir

        folder = job.output_dir
        if not folder.is_dir() or not any(p.name not in _KEPT_IN_PLACE and not p.name.startswith("attempt-")
                                          for p in folder.iterdir()):
            return
        earlier = earlier_attempts_in(self.engine, str(folder), exclude=run_id)
        if earlier:
            set_run_dir(self.engine, earlier[0], str(_archive_attempt(folder, earlier[0])))

    def _recovered(self, job: SweepJob, decision) -> bool:
        """A run taken over from a sweep that stopped: if it had finished in that sweep's
        folder, its results are ingested from there instead of running it again."""
        old = Path(decision.taken_over_from) if decision.taken_over_from else None
        if old is None:
            return False
        spec = self.specs[job.idx]
        if not (old / "result.json").is_file() and spec.workload_kind == "command":
            # a command's result is written by the driver once the job ends; if every rank's
            # program ended (the wrapper recorded it), that summary can be made from here
            from workloads.command import ended_by_themselves, summarize
            from workloads.metrics import write_result

            if ended_by_themselves(old, spec.world_size):   # not killed with their stopped sweep
                write_result(old, summarize(spec, old, 0, None, launcher_log=old / "workload.log"))
        if not (old / "result.json").is_file():
            return False
        try:
            ingest_run(self.engine, decision.run_id, old)
        except (IngestError, OSError, ValueError):
            return False
        from results_db.runs import set_run_dir

        set_run_dir(self.engine, decision.run_id, str(old))
        self.console.print(f"[cyan]recovered #{job.idx} {self.labels[job.idx]}: it had finished under a sweep "
                           f"that stopped; ingested from {old}[/cyan]")
        return True

    def before_launch(self, job: SweepJob) -> bool:
        """Re-checked right before the run is submitted: still ours? (If another sweep took it
        over while it waited behind a cap, it is not run here too.)"""
        ours: list[bool] = []
        if not self._db("claiming a run", lambda: ours.append(claim(self.engine, self.run_ids[job.idx], self.driver))):
            return True   # the database is unreachable: as far as this sweep knows, the run is its own
        if ours[0]:
            return True
        self.submitted.discard(job.idx)
        self.console.print(f"[yellow]skip #{job.idx} {self.labels[job.idx]}: another sweep has taken it over[/yellow]")
        if self.progress is not None:
            self.progress.total -= 1
        return False

    def launcher_options(self, job: SweepJob) -> str:
        from .launch_flags import launch_flags

        spec = self.specs[job.idx]
        return launch_flags(self.site, spec.threads_per_worker, spec.workers_per_node)

    def planned_task(self, job: SweepJob):
        """On the local site, the run as planned (``execute_planned`` of its folder, whose spec.json
        ``before_submit`` wrote), instead of Hydra's ``run_job`` around ``sweep_job``, which would do
        the same after copying the job's config four times. Not where the job asks Hydra for
        anything the planned run would not do: a working directory, environment variables,
        callbacks or ``.hydra/`` copies of the config of its own. (Hydra's per-job log file,
        ``scalestudy.log``, empty for these runs, is not written.)"""
        from functools import partial

        from .mpi_run import execute_planned

        if self.site is None or self.site.provider != "local" or not (job.output_dir / SPEC_FILE).is_file():
            return None
        if any(OmegaConf.select(job.config, key) for key in ("hydra.job.chdir", "hydra.job.env_set", "hydra.callbacks",
                                                             "hydra.output_subdir")):
            return None
        return partial(execute_planned, job.output_dir)

    def _print_dry_run(self, jobs: Sequence[SweepJob], specs: Sequence[RunSpec]) -> None:
        import shlex

        from .allocation import batch_jobs, with_allocation
        from .mpi_run import program
        from .parsl_config import launch_flags, node_hours, preview_batch_script, preview_launch_prefix
        from .queues import check_job_limits
        from .sites import ALLOCATIONS

        site = self.site
        out = Console(highlight=False, soft_wrap=True)
        done, note = self._already_done(specs)
        launching = [(j, s) for j, s in zip(jobs, specs) if run_key(s) not in done]
        out.print(f"[bold]dry run[/bold]: {len(jobs)} runs of study {specs[0].study} on site {site.name} "
                  f"({site.provider}, {site.mpi_launcher}), {len(launching)} would launch{note}; nothing is submitted")
        for job, spec in zip(jobs, specs):
            if run_key(spec) in done:
                out.print(f"skip #{job.idx} {self.labels[job.idx]}: already done (--rerun forces)")
        self._check_queues([s for _, s in launching], out)
        counts = [s.nodes for _, s in launching]
        modes = {}   # allocation mode -> (batch jobs, node-hours charged at most), or the reason it cannot be
        with tempfile.TemporaryDirectory(prefix="scalestudy-dry-run-") as scratch:
            for mode in ((site.allocation, *(m for m in ALLOCATIONS if m != site.allocation))
                         if site.provider != "local" and counts else ()):
                mode_site = with_allocation(site, mode)
                try:
                    check_job_limits(mode_site, counts)
                except ConfigError as exc:
                    modes[mode] = str(exc)
                    continue
                jobs_of_mode = batch_jobs(mode_site, counts)
                total = sum(node_hours(mode_site, n)[1] for n in jobs_of_mode)
                modes[mode] = (len(jobs_of_mode), total)
                out.print(f"\n[bold]allocation: {mode}[/bold]" + (" (this sweep's)" if mode == site.allocation else
                          f" (with allocation={mode})") + f": {len(jobs_of_mode)} batch job(s), "
                          f"{total:.2f} node-hours charged at most")
                for nodes, holds in jobs_of_mode.items():
                    script, submit_cmd = preview_batch_script(mode_site, nodes, Path(scratch))
                    charged, hours = node_hours(mode_site, nodes)
                    what = f"{nodes}-node runs" if holds == (nodes,) else \
                        f"every run ({', '.join(map(str, holds))} node(s)) in {nodes} nodes"
                    out.print(f"\n[bold]batch job for {what}[/bold] — submitted with: {submit_cmd}")
                    out.print(f"charged at most: {charged} node(s) x {site.walltime} = {hours:.2f} node-hours"
                              + (f" (the queue's minimum charge is {charged} nodes)" if charged > nodes else ""))
                    out.print(script.rstrip())
            if site.provider == "local":
                out.print("\n" + preview_batch_script(site, 1, Path(scratch))[0])
        out.print("")
        for job, spec in launching:
            options = " ".join(x for x in (site.launcher_options, launch_flags(site, spec.threads_per_worker,
                                                                                    spec.workers_per_node)) if x)
            prefix = preview_launch_prefix(site, spec.nodes, spec.workers_per_node, options)
            out.print(f"#{job.idx} {self.labels[job.idx]}\n    launch: {prefix} "
                      f"{shlex.join(program(spec, job.output_dir / SPEC_FILE))}")
            predicted = self.prediction.seconds.get(job.idx) if self.prediction else None
            if predicted is not None:
                out.print(f"    predicted: {predicted / 60:.1f} min")
        if self.prediction and self.prediction.note:
            out.print(f"\n{self.prediction.note}")
        if site.provider == "local":
            return
        out.print("\n[bold]allocation[/bold]   batch jobs   node-hours charged at most")
        for mode, value in modes.items():
            mine = " (this sweep's)" if mode == site.allocation else ""
            out.print(f"{mode:12s} " + (f"{value[0]:10d}   {value[1]:.2f}{mine}" if isinstance(value, tuple) else
                                        f"not possible: {value}"))
        if not isinstance(modes.get(site.allocation), tuple):
            return
        total = modes[site.allocation][1]
        if site.allocation == "packed":
            out.print(f"\nnode-hours charged at most: {total:.2f} — one batch job for the whole sweep, charged for the "
                      f"time it holds its nodes, up to its walltime {site.walltime}, its runs {site.max_concurrent_runs} "
                      f"at a time at most (max_concurrent_runs) when their nodes fit; runs that outlast that walltime "
                      f"get another batch job")
        else:
            out.print(f"\nnode-hours charged at most: {total:.2f} — one batch job per node count, each charged for "
                      f"the time it holds its nodes (its runs one after another), up to its walltime {site.walltime}; "
                      f"node counts whose runs outlast that walltime get another batch job")

    def _already_done(self, specs: Sequence[RunSpec]) -> tuple[set[str], str]:
        """run_keys a real sweep would skip as done, read without writing anything (no database
        file is created, no schema migrated); and a note when the database could not say."""
        from results_db.store import missing_sqlite_file, resolve_db_url

        if OmegaConf.select(self.config, "rerun"):
            return set(), ""
        url = OmegaConf.select(self.config, "db_url")
        if missing_sqlite_file(url) is not None:
            return set(), ""
        try:
            from results_db.migrate import is_current
            from results_db.runs import done_run_keys

            engine = connect(resolve_db_url(url), upgrade=False)
            try:
                if not is_current(engine):
                    return set(), " (the database's schema is older: runs already done not checked)"
                return done_run_keys(engine, specs[0].study, [run_key(s) for s in specs]), ""
            finally:
                engine.dispose()
        except Exception as exc:  # noqa: BLE001 - a dry run still shows what it would submit
            return set(), f" (database not reachable, runs already done not checked: {type(exc).__name__})"

    # -- while jobs run ------------------------------------------------------------------

    # -- the database may go away for a while (a server restart): runs go on, their results
    #    stay in their folders, and what could not be written is retried or left to `ingest`

    def _db(self, what: str, fn, *args, retries: tuple[float, ...] = (), **kwargs) -> bool:
        """Call a database write; True if it happened. On a lost connection, retry after
        each delay in ``retries``, then give up with one line (once per outage)."""
        from sqlalchemy.exc import DBAPIError

        for delay in (*retries, None):
            try:
                fn(*args, **kwargs)
                if self.db_down:
                    self.console.print("[green]database reachable again[/green]")
                    self.db_down = False
                return True
            except DBAPIError as exc:
                if not (exc.connection_invalidated or isinstance(exc.orig, (OSError,)) or
                        type(exc).__name__ in ("OperationalError", "InterfaceError")):
                    raise
                if not self.db_down:
                    self.console.print(f"[yellow]database unreachable ({what}): runs go on, their results stay in "
                                       f"their folders[/yellow]")
                    self.db_down = True
                if delay is None:
                    return False
                time.sleep(delay)
        return False

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        newly = [j for j in running if j.idx not in self.started and (j.output_dir / STARTED_FILE).exists()]
        if newly:
            job_ids = {self.run_ids[j.idx]: _batch_job(j.output_dir) for j in newly}
            self._db("marking runs started", mark_running, self.engine, [self.run_ids[j.idx] for j in newly],
                     {k: v for k, v in job_ids.items() if v})
            for job in newly:
                self.started.add(job.idx)
                self.in_flight.add(job.idx)
                self.progress.started(f"#{job.idx} {self.labels[job.idx]}")
        now = time.monotonic()
        if now - self._last_beat > HEARTBEAT_EVERY:
            # every run this sweep holds, in flight or waiting behind a cap: a waiting run that
            # went stale would be taken over by another sweep and then run twice
            owned = [self.run_ids[i] for i in sorted(self.submitted - self.ended)]
            self._db("heartbeat", heartbeat, self.engine, owned, self.driver)
            self._last_beat = now
        self.progress.refresh(running=len(self.in_flight))

    def lost_jobs(self, running: Sequence[SweepJob], ended_batch_jobs) -> dict[int, BaseException]:
        """Runs whose batch job has ended under them (a node failed, the allocation was cancelled):
        their worker went with it, so no result will come. Asks the scheduler every few seconds,
        and calls a run lost only if it still has not ended ``LOST_GRACE`` seconds later."""
        now = time.monotonic()
        if now - self._last_lost_check < LOST_CHECK_EVERY:
            return {}
        self._last_lost_check = now
        job_ids = {job.idx: jid for job in running if (jid := _batch_job(job.output_dir))}
        if not job_ids:
            return {}
        ended = ended_batch_jobs(sorted(set(job_ids.values())))
        lost: dict[int, BaseException] = {}
        for job in running:
            jid = job_ids.get(job.idx)
            if jid not in ended:
                self._ended_seen.pop(job.idx, None)
                continue
            first = self._ended_seen.setdefault(job.idx, now)
            if now - first >= LOST_GRACE:
                self._ended_seen.pop(job.idx, None)
                lost[job.idx] = NodeLost(f"lost: its batch job {jid} ended under it (the scheduler reports "
                                         f"{ended[jid]}){_node_failure(job.output_dir)}", job_id=jid,
                                         state=ended[jid])
        return lost

    def on_job_end(self, job: SweepJob, result: JobReturn) -> bool:
        """Ingest or record the attempt that ended; True if the policy retries the run."""
        self.ended.add(job.idx)
        self.in_flight.discard(job.idx)
        run_id = self.run_ids[job.idx]
        label = f"#{job.idx} {self.labels[job.idx]}"
        running = len(self.in_flight)
        if result.status == JobStatus.COMPLETED:
            value = result.return_value
            try:
                if not self._db("ingesting", ingest_run, self.engine, run_id, job.output_dir,
                                job_id=value.get("job_id"), retries=INGEST_RETRIES):
                    self.not_ingested.add(job.idx)
                    self.progress.failed(label, f"finished, but not ingested: the database is unreachable "
                                                f"(results in {job.output_dir})", running)
                    return False
            except (IngestError, OSError, ValueError) as exc:
                mark_failed(self.engine, run_id, f"ingestion failed: {exc}")
                return self._failed(job, label, f"ingestion failed: {exc}", INGEST, running)
            res = value.get("result", {})
            if res.get("status") != "done":
                return self._failed(job, label, str(res.get("error") or "the run reported failure"),
                                    classify(None, job.output_dir), running)
            self.progress.done(label, _headline(res), running)
            return False
        error = result._return_value
        kind = classify(error, job.output_dir)
        if kind == NODE_LOST and (job.output_dir / "result.json").is_file() and self._ingest_after_loss(job, label):
            return False   # the run had finished; only its answer was lost with the batch job
        text = str(error) if kind in STATUS else f"{type(error).__name__}: {error}"
        if not mark_failed(self.engine, run_id, text, status=STATUS.get(kind, "failed"),
                           job_id=getattr(error, "job_id", None), driver=self.driver):
            self.failed.add(job.idx)
            self.progress.failed(label, f"{error} (not recorded or retried here: another sweep has taken the "
                                        f"run over)", running)
            return False
        return self._failed(job, label, str(error), kind, running)

    def _ingest_after_loss(self, job: SweepJob, label: str) -> bool:
        """A run whose batch job ended after the run had written its result: ingested, not retried."""
        try:
            ingest_run(self.engine, self.run_ids[job.idx], job.output_dir)
        except (IngestError, OSError, ValueError):
            return False
        result = json.loads((job.output_dir / "result.json").read_text())
        if result.get("status") != "done":
            self.failed.add(job.idx)
            self.progress.failed(label, str(result.get("error") or "the run reported failure"),
                                 len(self.in_flight))
        else:
            self.progress.done(label, _headline(result) + " (its batch job ended after it finished)",
                               len(self.in_flight))
        return True

    def _failed(self, job: SweepJob, label: str, reason: str, kind: str, running: int) -> bool:
        """A failed attempt: started again if the retry policy allows (a new attempt row; this
        one's files move to ``attempt-N/``), else the run has failed."""
        counts = self.retried.setdefault(job.idx, {})
        if not self.retry_policy.allows(kind, counts.get(kind, 0)):
            self.failed.add(job.idx)
            note = ""
            if kind == SETUP_FAILURE and self.retry_policy.crash:
                note = " (not retried: it failed while being set up, and would again)"
            self.progress.failed(label, reason + note, running)
            return False
        counts[kind] = counts.get(kind, 0) + 1
        old_id = self.run_ids[job.idx]
        try:
            new_id = new_attempt(self.engine, old_id, self.driver, run_dir=str(job.output_dir))
            if new_id is None:
                self.failed.add(job.idx)
                self.progress.failed(label, f"{reason} (not retried here: another sweep has taken the run over)",
                                     running)
                return False
            old_dir = _archive_attempt(job.output_dir, old_id)
            from results_db.runs import set_run_dir

            set_run_dir(self.engine, old_id, str(old_dir))
            self.run_ids[job.idx] = new_id
        except Exception as exc:  # the database went away, the folder cannot be moved: no retry then
            self.failed.add(job.idx)
            self.progress.failed(label, f"{reason} (not retried: {type(exc).__name__}: {exc})", running)
            return False
        self.ended.discard(job.idx)
        self.started.discard(job.idx)
        self.console.print(f"[yellow]retry[/yellow] {label}: {reason} — {kind.replace('_', ' ')} retry "
                           f"{counts[kind]} of {getattr(self.retry_policy, kind)}; the failed attempt is kept "
                           f"(run {old_id}, {old_dir})")
        return True

    def close(self, results: Sequence[JobReturn]) -> None:
        if self.engine is None:
            return
        if self.progress is not None:
            self.progress.stop()
        for idx in sorted(self.submitted - self.ended):  # the sweep stopped early (Ctrl-C, lost workers)
            self._db("recording interrupted runs", mark_failed, self.engine, self.run_ids[idx],
                     "interrupted: the sweep stopped before this run ended")
        SweepRecorder.last_outcome = {"study": OmegaConf.select(self.config, "study_name"),
                                      "submitted": len(self.submitted), "failed": len(self.failed),
                                      "done": len(self.ended - self.failed - self.not_ingested),
                                      "stopped": len(self.submitted - self.ended),
                                      "not_ingested": len(self.not_ingested)}
        from .sweep_table import print_sweep_table

        run_ids = list(self.run_ids.values())
        if run_ids and not SweepRecorder.last_outcome["stopped"]:  # an interrupted sweep says so in one line
            self._db("printing the table", print_sweep_table, self.engine, run_ids,
                     title=f"study {OmegaConf.select(self.config, 'study_name')}: this sweep's runs")
        if self.not_ingested:
            folders = sorted({str(self.jobs_dir)}) if self.jobs_dir else []
            self.console.print(f"[yellow]{len(self.not_ingested)} finished run(s) are not in the database yet; when "
                               f"it is back: scalestudy ingest {' '.join(folders)}[/yellow]")
        self.engine.dispose()

