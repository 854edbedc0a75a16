"""scalestudy's sweep observer: run state and ingestion around the launcher.

It admits the sweep (``admission``: validation, prediction, batch jobs and queues), prints
the dry run (``dry_run``) or records each run as pending under this driver — or skips it
when the same run_key is already done or is being driven by another live sweep — and
hands the launcher its ``LaunchPlan``. While jobs run it keeps their heartbeat fresh and
marks them running as their spec files appear; as each ends it ingests the metrics (this
process is the database's only writer) or records the failure, and the retry policy
decides whether the run goes again.
"""

from __future__ import annotations

from workloads.plural import counted

import json
import os
import socket
import time
from functools import partial
from pathlib import Path
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from results_db import connect
from results_db.store.failpoints import failpoint
from results_db.ingest.folder import IngestError, ingest_run
from results_db.store.runs import (HEARTBEAT_STALE_SECONDS, PlannedRun, claim, earlier_attempts_in, heartbeat,
                             mark_failed, mark_running, new_attempt, register_runs, set_run_dir)
from results_db.store.connect import safe_url
from workloads.run_folder import SPEC_FILE, STARTED_FILE, finished, result_file
from workloads.spec import RunSpec

from ..site.config import SiteConfig
from ..site.launchers import launch_flags
from .admission import Admitted, admit, duplicate_jobs
from .attempts import archive_attempt, batch_job_of, holds_an_attempt, node_failure
from .database_outages import DatabaseWrites
from .job_returns import job_error
from .observer import LaunchPlan, SweepJob
from .outcome import SweepOutcome, hand_over
from .preset import PresetUse, preset_use
from .progress import SweepProgress, headline, run_label, varying_keys
from .provenance import provenance
from .retry_policy import INGEST, NODE_LOST, SETUP_FAILURE, STATUS, NodeLost, RetryPolicy, classify
from .runspec import run_key

HEARTBEAT_EVERY = 5.0
LOST_CHECK_EVERY = 5.0    # how often the scheduler is asked whether runs' batch jobs still exist
LOST_GRACE = 5.0          # a run whose batch job has ended is lost if its result has not come by then
INGEST_RETRIES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)   # about a minute for a database server to come back


class SweepRecorder:
    absorbs_failures = True   # failed runs are recorded here; the CLI's exit status reports them
    records_results = True    # every ended run is in the database: the launcher drops its configs

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.engine = None
        self.db = DatabaseWrites(self.console)
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
        self._last_beat = 0.0
        self.retry_policy = RetryPolicy()
        self.retried: dict[int, dict[str, int]] = {}   # job idx -> kind of failure -> retries so far
        self._last_lost_check = 0.0
        self._ended_seen: dict[int, float] = {}          # job idx -> when its batch job was first seen ended
        self.predicted: dict[int, float] = {}            # job idx -> the run seconds the study's fit predicted
        self.stopped = False                              # the sweep stopped before every run ended

    # -- before anything is submitted ---------------------------------------------------

    def admit(self, jobs: Sequence[SweepJob]) -> LaunchPlan:
        admitted = admit(self.config, jobs, self.console)
        self.site, self.retry_policy = admitted.site, admitted.retry_policy
        self.predicted = {i: s for i, s in admitted.prediction.seconds.items() if s is not None}
        self.jobs_dir = jobs[0].output_dir.parent if jobs else None
        swept = varying_keys(admitted.specs)
        for job, spec in zip(jobs, admitted.specs):
            self.specs[job.idx] = spec
            self.labels[job.idx] = run_label(spec, swept)
        plan = LaunchPlan(site=admitted.site, submit=[False] * len(jobs), batch_jobs=admitted.batch_jobs,
                          launcher_options={j.idx: launch_flags(admitted.site, s.threads_per_worker,
                                                                s.workers_per_node, s.device)
                                            for j, s in zip(jobs, admitted.specs)})
        preset = preset_use(self.config)
        if OmegaConf.select(self.config, "dry_run"):
            from .dry_run import print_dry_run
            from .repeats_on_demand import rule_of

            crowded = oversubscription_note(admitted.site, admitted.specs)
            # the sweeper's rule, as each job's config holds it (repeats.first_stage: set on every job)
            rule = rule_of(jobs[0].config) if jobs and OmegaConf.select(jobs[0].config, "repeats.first_stage") else None
            print_dry_run(admitted, jobs, self.labels, rule, preset=preset,
                          warnings=[*admitted.warnings, *([crowded] if crowded else [])],
                          show_scripts=bool(OmegaConf.select(self.config, "show_scripts")))
            return plan
        # the first line says what the sweep is (and which axes its preset swept); the notes follow,
        # once the runs are recorded: a sweep refused (bad input, no database) is one line
        plan.submit = self._register(jobs, admitted, preset.headline() if preset is not None else "")
        if admitted.prediction.note:
            self.console.print(f"[dim]{admitted.prediction.note}[/dim]")
        for batch_job in admitted.batch_jobs:
            if batch_job.note:
                self.console.print(f"[cyan]{batch_job.note}[/cyan]")
        self._notes(admitted, preset)
        return plan

    def _notes(self, admitted: Admitted, preset: PresetUse | None) -> None:
        """What a sweep says once, before its runs start: what it takes from its preset, and
        runs that crowd this host."""
        if preset is not None:
            for line in preset.lines(admitted.study, grid=False):   # the first line named its axes
                self.console.print(f"[dim]{line}[/dim]")
        crowded = oversubscription_note(admitted.site, admitted.specs)
        if crowded:
            self.console.print(f"note: {crowded}")

    def _register(self, jobs: Sequence[SweepJob], admitted: Admitted, preset_axes: str = "") -> list[bool]:
        """Record the runs (pending, under this driver) and decide which to submit; the sweep's
        first line (``preset_axes``: which axes its preset swept), then each run skipped."""
        self.engine = connect(OmegaConf.select(self.config, "db_url"))
        rerun = bool(OmegaConf.select(self.config, "rerun"))
        seconds, fit = admitted.prediction.seconds, admitted.prediction.fit_id
        same = duplicate_jobs(jobs, admitted.specs)
        kept = [(j, s) for j, s in zip(jobs, admitted.specs) if j.idx not in same]
        planned = [PlannedRun(run_key(s), s.to_dict(), str(j.output_dir), provenance(j.config),
                              (fit, seconds[j.idx]) if fit is not None and seconds.get(j.idx) is not None else None)
                   for j, s in kept]
        decisions = register_runs(self.engine, admitted.study, planned, rerun=rerun, driver=self.driver)
        self._cancel_stopped_sweeps_jobs(decisions)
        by_idx = {j.idx: d for (j, _), d in zip(kept, decisions)}
        submit = []
        skipped: list[str] = []
        for job in jobs:
            if job.idx in same:   # the same run as an earlier job of this sweep: it runs once
                first = same[job.idx]
                self.run_ids[job.idx] = by_idx[first].run_id
                submit.append(False)
                skipped.append(f"[dim]skip #{job.idx} {self.labels[job.idx]}: the same run as #{first} (it differs "
                               f"only in keys its algorithm does not read)[/dim]")
                continue
            decision = by_idx[job.idx]
            self.run_ids[job.idx] = decision.run_id
            go = decision.submit and not self._recovered(job, decision)
            submit.append(go)
            if go:
                self.submitted.add(job.idx)
                self._move_earlier_attempt(job, decision.run_id)
                job.output_dir.mkdir(parents=True, exist_ok=True)
                self.specs[job.idx].save(job.output_dir / SPEC_FILE)  # the task executes this spec as planned
            elif decision.reason == "done":
                skipped.append(f"[dim]skip #{job.idx} {self.labels[job.idx]}: already done "
                               f"(run_key {decision.run_key}; --rerun forces)[/dim]")
            elif not decision.submit:
                wait = max(0.0, HEARTBEAT_STALE_SECONDS - (decision.heartbeat_age or 0.0))
                skipped.append(f"[yellow]skip #{job.idx} {self.labels[job.idx]}: in progress under sweep "
                               f"{decision.driver} (run_key {decision.run_key}; if that sweep has stopped, this "
                               f"command takes its runs over in {wait:.0f} s)[/yellow]")
        self.console.print(f"study [bold]{admitted.study}[/bold]: {counted(len(jobs), 'run')}{preset_axes}, {sum(submit)} to "
                           f"launch on site {self.site.name}; results in {safe_url(str(self.engine.url))}")
        for line in skipped:
            self.console.print(line)
        self.progress = SweepProgress(self.console, total=sum(submit))
        failpoint("registered")   # the reliability suite: killed with runs recorded, none submitted
        return submit

    def _cancel_stopped_sweeps_jobs(self, decisions) -> None:
        """The batch jobs of a stopped sweep whose runs this one takes over: cancelled now, so that
        they do not hold nodes until their walltime (and their runs do not finish twice)."""
        jobs = sorted({d.taken_over_job for d in decisions if d.submit and d.taken_over_job})
        if not jobs or not self.site.scheduler.batch_jobs:
            return   # (before importing Parsl: 1 s a local sweep need not pay)
        from ..pools.parsl_config import cancel_batch_jobs

        cancelled = cancel_batch_jobs(self.site, jobs)
        if cancelled:
            self.console.print(f"[yellow]cancelled batch job(s) {', '.join(cancelled)} of a sweep that stopped; "
                               f"their runs start again here[/yellow]")

    def _move_earlier_attempt(self, job: SweepJob, run_id: int) -> None:
        """A sweep folder used again (a fixed ``hydra.sweep.dir``, a --rerun into it): the ended
        attempt recorded there moves to ``attempt-<its run id>/`` instead of being overwritten."""
        if not holds_an_attempt(job.output_dir):
            return
        earlier = earlier_attempts_in(self.engine, str(job.output_dir), exclude=run_id)
        if earlier:
            set_run_dir(self.engine, earlier[0], str(archive_attempt(job.output_dir, earlier[0])))

    def _recovered(self, job: SweepJob, decision) -> bool:
        """A run taken over from a sweep that stopped: if it had finished in that sweep's
        folder, its results are ingested from there instead of running it again."""
        old = Path(decision.taken_over_from) if decision.taken_over_from else None
        if old is None:
            return False
        spec = self.specs[job.idx]
        if not finished(old) and spec.workload_kind == "command":
            # a command's result is written by the driver once the job ends; if every rank's
            # program ended (the wrapper recorded it), that summary can be made from here
            from workloads.command import ended_by_themselves, summarize
            from workloads.metrics import write_result
            from workloads.run_folder import LOG_FILE

            if ended_by_themselves(old, spec.world_size):   # not killed with their stopped sweep
                write_result(old, summarize(spec, old, 0, None, launcher_log=old / LOG_FILE))
        if not finished(old):
            return False
        try:
            ingest_run(self.engine, decision.run_id, old)
        except (IngestError, OSError, ValueError):
            return False
        set_run_dir(self.engine, decision.run_id, str(old))
        self.console.print(f"[cyan]recovered #{job.idx} {self.labels[job.idx]}: it had finished under a sweep "
                           f"that stopped; ingested from {old}[/cyan]")
        return True

    def before_launch(self, job: SweepJob) -> bool:
        """Re-checked right before the run is submitted: still ours? (If another sweep took it
        over while it waited behind a cap, it is not run here too.)"""
        ours: list[bool] = []
        if not self.db.write("claiming a run", lambda: ours.append(claim(self.engine, self.run_ids[job.idx],
                                                                         self.driver))):
            return True   # the database is unreachable: as far as this sweep knows, the run is its own
        if ours[0]:
            return True
        self.submitted.discard(job.idx)
        self.console.print(f"[yellow]skip #{job.idx} {self.labels[job.idx]}: another sweep has taken it over[/yellow]")
        if self.progress is not None:
            self.progress.total -= 1
        return False

    def planned_task(self, job: SweepJob):
        """Without batch jobs, the run as planned (``execute_planned`` of its folder, whose
        spec.json ``admit`` wrote), instead of Hydra's ``run_job`` around ``sweep_job``, which
        would do the same after copying the job's config four times. Not where the job asks
        Hydra for anything the planned run would not do: a working directory, environment
        variables, callbacks or ``.hydra/`` copies of the config of its own. (Hydra's per-job
        log file, ``scalestudy.log``, empty for these runs, is not written.)"""
        from ..mpi.run import execute_planned

        if self.site is None or self.site.scheduler.batch_jobs or not (job.output_dir / SPEC_FILE).is_file():
            return None
        if any(OmegaConf.select(job.config, key) for key in ("hydra.job.chdir", "hydra.job.env_set", "hydra.callbacks",
                                                             "hydra.output_subdir")):
            return None
        return partial(execute_planned, job.output_dir)

    # -- while jobs run ------------------------------------------------------------------

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        newly = [j for j in running if j.idx not in self.started and (j.output_dir / STARTED_FILE).exists()]
        if newly:
            job_ids = {self.run_ids[j.idx]: batch_job_of(j.output_dir) for j in newly}
            self.db.write("marking runs started", mark_running, self.engine, [self.run_ids[j.idx] for j in newly],
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
            self.db.write("heartbeat", heartbeat, self.engine, owned, self.driver)
            self._last_beat = now
        self.progress.refresh(running=len(self.in_flight))

    def lost_jobs(self, running: Sequence[SweepJob], ended_batch_jobs) -> dict[int, BaseException]:
        """Runs whose batch job has ended under them (a node failure, the allocation was cancelled):
        their worker went with it, so no result will come. Asks the scheduler every few seconds,
        and calls a run lost only if it still has not ended ``LOST_GRACE`` seconds later."""
        now = time.monotonic()
        if now - self._last_lost_check < LOST_CHECK_EVERY:
            return {}
        self._last_lost_check = now
        job_ids = {job.idx: jid for job in running if (jid := batch_job_of(job.output_dir))}
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
                                         f"{ended[jid]}){node_failure(job.output_dir)}", job_id=jid,
                                         state=ended[jid])
        return lost

    def on_job_end(self, job: SweepJob, result: JobReturn) -> bool:
        """Ingest or record the attempt that ended; True if the policy retries the run."""
        self.ended.add(job.idx)
        self.in_flight.discard(job.idx)
        label = f"#{job.idx} {self.labels[job.idx]}"
        if result.status == JobStatus.COMPLETED:
            return self._completed(job, label, result.return_value)
        error = job_error(result)
        kind = classify(error, job.output_dir)
        if kind == NODE_LOST and finished(job.output_dir) and self._ingest_after_loss(job, label):
            return False   # the run had finished; only its answer was lost with the batch job
        text = str(error) if kind in STATUS else f"{type(error).__name__}: {error}"
        if not mark_failed(self.engine, self.run_ids[job.idx], text, status=STATUS.get(kind, "failed"),
                           job_id=getattr(error, "job_id", None), driver=self.driver):
            self.failed.add(job.idx)
            self.progress.failed(label, f"{error} (not recorded or retried here: another sweep has taken the "
                                        f"run over)", len(self.in_flight))
            return False
        return self._failed(job, label, str(error), kind)

    def _completed(self, job: SweepJob, label: str, value: dict) -> bool:
        """A run whose MPI job ended: its results ingested, then done or failed as it reported."""
        run_id = self.run_ids[job.idx]
        try:
            if not self.db.write("ingesting", ingest_run, self.engine, run_id, job.output_dir,
                                 job_id=value.get("job_id"), retries=INGEST_RETRIES):
                self.not_ingested.add(job.idx)
                self.progress.failed(label, f"finished, but not ingested: the database is unreachable "
                                            f"(results in {job.output_dir})", len(self.in_flight))
                return False
        except (IngestError, OSError, ValueError) as exc:
            mark_failed(self.engine, run_id, f"ingestion failed: {exc}")
            return self._failed(job, label, f"ingestion failed: {exc}", INGEST)
        res = value.get("result", {})
        if res.get("status") != "done":
            return self._failed(job, label, str(res.get("error") or "the run reported failure"),
                                classify(None, job.output_dir))
        self.progress.done(label, headline(res) + self._against_prediction(job.idx, res), len(self.in_flight))
        return False

    def _against_prediction(self, idx: int, result: dict) -> str:
        """A predicted run's measured time against the prediction (stored too: ``model predict``)."""
        predicted, measured = self.predicted.get(idx), result.get("wall_seconds")
        if not predicted or not measured:
            return ""
        return f"; {measured:.0f} s against {predicted:.0f} s predicted ({(predicted - measured) / measured:+.0%})"

    def _ingest_after_loss(self, job: SweepJob, label: str) -> bool:
        """A run whose batch job ended after the run had written its result: ingested, not retried."""
        try:
            ingest_run(self.engine, self.run_ids[job.idx], job.output_dir)
        except (IngestError, OSError, ValueError):
            return False
        result = json.loads(result_file(job.output_dir).read_text())
        if result.get("status") != "done":
            self.failed.add(job.idx)
            self.progress.failed(label, str(result.get("error") or "the run reported failure"),
                                 len(self.in_flight))
        else:
            self.progress.done(label, headline(result) + " (its batch job ended after it finished)",
                               len(self.in_flight))
        return True

    def _failed(self, job: SweepJob, label: str, reason: str, kind: str) -> bool:
        """A failed attempt: started again if the retry policy allows (a new attempt row; this
        one's files move to ``attempt-N/``), else the run has failed."""
        running = len(self.in_flight)
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
            old_dir = archive_attempt(job.output_dir, old_id)
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
            self.db.write("recording interrupted runs", mark_failed, self.engine, self.run_ids[idx],
                          "interrupted: the sweep stopped before this run ended", status="interrupted")
        study = OmegaConf.select(self.config, "study_name")
        outcome = SweepOutcome(study=study, submitted=len(self.submitted), failed=len(self.failed),
                               done=len(self.ended - self.failed - self.not_ingested),
                               stopped=len(self.submitted - self.ended), not_ingested=len(self.not_ingested))
        hand_over(outcome)
        from ..terminal.tables import print_sweep_table

        run_ids = list(self.run_ids.values())
        if run_ids and not outcome.stopped:  # an interrupted sweep says so in one line
            self.db.write("printing the table", print_sweep_table, self.engine, run_ids,
                          title=f"study {study}: this sweep's runs")
        if self.not_ingested:
            folders = sorted({str(self.jobs_dir)}) if self.jobs_dir else []
            self.console.print(f"[yellow]{len(self.not_ingested)} finished run(s) are not in the database yet; when "
                               f"it is back: scalestudy ingest {' '.join(folders)}[/yellow]")
        self.stopped = bool(outcome.stopped)
        self.engine.dispose()

    def measured(self, metric: str) -> dict[int, tuple[RunSpec, float | None]]:
        """Each job of this launch: its spec and its run's value of ``metric`` (None where it did not
        finish; an earlier sweep's run counts); empty after a dry run or an interrupted sweep
        (SweepObserver)."""
        if self.engine is None or self.stopped or not self.specs:
            return {}
        read: dict[int, tuple[RunSpec, float | None]] = {}

        def values() -> None:
            from results_db.store import query

            from .runspec import run_key

            runs = query.runs(self.engine, study=OmegaConf.select(self.config, "study_name"), where="status=done")
            if metric not in runs.columns:
                runs = query.expand_json(runs, "metrics")
            found = {} if metric not in runs.columns else \
                {k: float(v) for k, v in zip(runs["run_key"], runs[metric]) if v is not None and v == v}
            read.update({idx: (spec, found.get(run_key(spec))) for idx, spec in self.specs.items()})

        self.db.write("reading the first stage's results", values)
        return read


def oversubscription_note(site: SiteConfig, specs: Sequence[RunSpec]) -> str:
    """Said once, before anything runs, where every rank of a run shares this host (the local
    site, a cluster of virtual nodes): runs that put more threads on it than it has CPUs time
    the sharing as much as the algorithm (the figures and the report say it again, per page).
    "" where no run does."""
    if site.scheduler.batch_jobs and not site.shared_host:
        return ""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        cpus = os.cpu_count() or 1
    crowded = [s for s in specs if s.world_size * s.threads_per_worker > cpus]
    if not crowded:
        return ""
    most = max(s.world_size * s.threads_per_worker for s in crowded)
    return (f"{len(crowded)} of these {counted(len(specs), 'run')} put up to {most} threads on this host's "
            f"{cpus} CPUs: their ranks share cores, so their times measure the sharing as much as the "
            "algorithm (fine for checking a study, not for its numbers)")
