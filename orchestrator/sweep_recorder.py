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
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from results_db import connect
from results_db.ingest import IngestError, ingest_run
from results_db.runs import (HEARTBEAT_STALE_SECONDS, PlannedRun, claim, heartbeat, mark_failed, mark_running,
                             register_runs)
from results_db.store import safe_url
from workloads.spec import RunSpec

from .errors import ConfigError
from .launcher import SweepJob
from .mpi_run import SPEC_FILE, STARTED_FILE
from .progress import SweepProgress
from .provenance import provenance
from .runspec import build_run_spec, run_key
from .sites import SiteConfig, load_site, walltime_seconds, with_overrides

HEARTBEAT_EVERY = 5.0
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


def sweep_site(config: DictConfig) -> SiteConfig:
    site = load_site(OmegaConf.select(config, "site"))
    return with_overrides(site, account=OmegaConf.select(config, "account"), queue=OmegaConf.select(config, "queue"),
                          walltime=OmegaConf.select(config, "walltime"))


class SweepRecorder:
    absorbs_failures = True   # failed runs are recorded here; the CLI's exit status reports them
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
        self.progress: SweepProgress | None = None
        self.failed: set[int] = set()
        self.not_ingested: set[int] = set()
        self.jobs_dir: Path | None = None
        self.db_down = False
        self._last_beat = 0.0

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
            if spec.run_timeout is None:
                spec = dataclasses.replace(spec, run_timeout=default_run_timeout(site))
            if spec.threads_per_node > site.max_threads_per_node and not site.oversubscribe:
                raise ConfigError("threads_per_node", spec.threads_per_node,
                                  f"site {site.name} nodes have {site.max_threads_per_node} hardware threads")
            specs.append(spec)
        studies = {s.study for s in specs}
        if len(studies) > 1:
            raise ConfigError("study_name", sorted(studies), "one sweep records one study")
        return specs

    def before_submit(self, jobs: Sequence[SweepJob]) -> list[bool]:
        specs = self._validate(jobs)
        self.jobs_dir = jobs[0].output_dir.parent if jobs else None
        for job, spec in zip(jobs, specs):
            self.specs[job.idx] = spec
            self.labels[job.idx] = run_label(spec)
        if OmegaConf.select(self.config, "dry_run"):
            self._print_dry_run(jobs, specs)
            return [False] * len(jobs)
        self.engine = connect(OmegaConf.select(self.config, "db_url"))
        rerun = bool(OmegaConf.select(self.config, "rerun"))
        planned = [PlannedRun(run_key(s), s.to_dict(), str(j.output_dir), provenance(j.config))
                   for s, j in zip(specs, jobs)]
        decisions = register_runs(self.engine, specs[0].study, planned, rerun=rerun, driver=self.driver)
        submit = []
        for job, decision in zip(jobs, decisions):
            self.run_ids[job.idx] = decision.run_id
            if decision.submit and self._recovered(job, decision):
                submit.append(False)
                continue
            submit.append(decision.submit)
            if decision.submit:
                self.submitted.add(job.idx)
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
        return submit

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
        from .parsl_config import launch_flags

        return launch_flags(self.site, self.specs[job.idx].threads_per_worker)

    def _print_dry_run(self, jobs: Sequence[SweepJob], specs: Sequence[RunSpec]) -> None:
        import shlex

        from .mpi_run import program
        from .parsl_config import launch_flags, node_hours, preview_batch_script, preview_launch_prefix

        site = self.site
        out = Console(highlight=False, soft_wrap=True)
        out.print(f"[bold]dry run[/bold]: {len(jobs)} runs of study {specs[0].study} on site {site.name} "
                  f"({site.provider}, {site.mpi_launcher}); nothing is submitted")
        with tempfile.TemporaryDirectory(prefix="scalestudy-dry-run-") as scratch:
            for nodes in sorted({s.nodes for s in specs}):
                script, submit_cmd = preview_batch_script(site, nodes, Path(scratch))
                out.print(f"\n[bold]batch job for {nodes}-node runs[/bold] — submitted with: {submit_cmd}")
                out.print(script.rstrip())
        total = 0.0
        out.print("")
        for job, spec in zip(jobs, specs):
            options = " ".join(x for x in (site.launcher_options, launch_flags(site, spec.threads_per_worker)) if x)
            prefix = preview_launch_prefix(site, spec.nodes, spec.workers_per_node, options)
            hours = node_hours(site, spec.nodes)
            total += hours
            out.print(f"#{job.idx} {self.labels[job.idx]}\n    launch: {prefix} "
                      f"{shlex.join(program(spec, job.output_dir / SPEC_FILE))}\n"
                      f"    node-hours requested: {spec.nodes} x {site.walltime} = {hours:.2f}")
        out.print(f"\ntotal node-hours requested: {total:.2f} (at most; runs of one node count share a batch job)")

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
            self._db("marking runs started", mark_running, self.engine, [self.run_ids[j.idx] for j in newly])
            for job in newly:
                self.started.add(job.idx)
                self.progress.started(f"#{job.idx} {self.labels[job.idx]}")
        now = time.monotonic()
        if now - self._last_beat > HEARTBEAT_EVERY:
            # every run this sweep holds, in flight or waiting behind a cap: a waiting run that
            # went stale would be taken over by another sweep and then run twice
            owned = [self.run_ids[i] for i in sorted(self.submitted - self.ended)]
            self._db("heartbeat", heartbeat, self.engine, owned, self.driver)
            self._last_beat = now
        self.progress.refresh(running=len(self.started - self.ended))

    def on_job_end(self, job: SweepJob, result: JobReturn) -> None:
        self.ended.add(job.idx)
        run_id = self.run_ids[job.idx]
        label = f"#{job.idx} {self.labels[job.idx]}"
        running = len(self.started - self.ended)
        if result.status == JobStatus.COMPLETED:
            value = result.return_value
            try:
                if not self._db("ingesting", ingest_run, self.engine, run_id, job.output_dir,
                                job_id=value.get("job_id"), retries=INGEST_RETRIES):
                    self.not_ingested.add(job.idx)
                    self.progress.failed(label, f"finished, but not ingested: the database is unreachable "
                                                f"(results in {job.output_dir})", running)
                    return
            except (IngestError, OSError, ValueError) as exc:
                self.failed.add(job.idx)
                mark_failed(self.engine, run_id, f"ingestion failed: {exc}")
                self.progress.failed(label, f"ingestion failed: {exc}", running)
                return
            res = value.get("result", {})
            if res.get("status") != "done":
                self.failed.add(job.idx)
                self.progress.failed(label, str(res.get("error") or "the run reported failure"), running)
                return
            self.progress.done(label, _headline(res), running)
        else:
            error = result._return_value
            self.failed.add(job.idx)
            timed_out = type(error).__name__ == "RunTimedOut"
            mark_failed(self.engine, run_id, str(error) if timed_out else f"{type(error).__name__}: {error}",
                        status="timeout" if timed_out else "failed")
            self.progress.failed(label, str(error), running)

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

