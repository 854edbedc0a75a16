"""scalestudy's sweep observer: validation, run state and ingestion around the launcher.

Before anything is submitted it validates every job (one bad value stops the whole
sweep), checks the sweep targets one site and one study, and records each run as
pending — or skips it when the same run_key is already done. While jobs run it
marks them running as their spec files appear; as each ends it ingests the metrics
(this process is the database's only writer) or records the failure.
"""

from __future__ import annotations

import time
from typing import Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from results_db import connect
from results_db.ingest import IngestError, ingest_run
from results_db.runs import PlannedRun, mark_failed, mark_running, register_runs
from results_db.store import safe_url

from .errors import ConfigError
from .launcher import SweepJob
from .mpi_run import SPEC_FILE
from .runspec import build_run_spec, run_key
from .sites import load_site


class SweepRecorder:
    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.engine = None
        self.run_ids: dict[int, int] = {}      # job idx -> run id
        self.labels: dict[int, str] = {}
        self.started: set[int] = set()
        self.submitted: set[int] = set()
        self.ended: set[int] = set()
        self.counts = {"done": 0, "failed": 0, "skipped": 0}
        self.total = 0
        self.t0 = time.monotonic()

    def before_submit(self, jobs: Sequence[SweepJob]) -> list[bool]:
        site_name = OmegaConf.select(self.config, "site")
        site = load_site(site_name)
        specs = []
        for job in jobs:
            job_site = OmegaConf.select(job.config, "site")
            if job_site != site_name:
                raise ConfigError("site", job_site, f"one sweep runs on one site ({site_name}); sweep other sites in separate commands")
            specs.append(build_run_spec(job.config, site))
        studies = {s.study for s in specs}
        if len(studies) > 1:
            raise ConfigError("study_name", sorted(studies), "one sweep records one study")
        self.engine = connect(OmegaConf.select(self.config, "db_url"))
        rerun = bool(OmegaConf.select(self.config, "rerun"))
        planned = [PlannedRun(run_key(s), s.to_dict(), str(j.output_dir)) for s, j in zip(specs, jobs)]
        decisions = register_runs(self.engine, specs[0].study, planned, rerun=rerun)
        submit = []
        for job, spec, decision in zip(jobs, specs, decisions):
            self.run_ids[job.idx] = decision.run_id
            self.labels[job.idx] = (f"nodes={spec.nodes} workers_per_node={spec.workers_per_node} "
                                    f"threads_per_node={spec.threads_per_node} batch_size={spec.batch_size} "
                                    f"algorithm={spec.algorithm}")
            submit.append(decision.submit)
            if decision.submit:
                self.submitted.add(job.idx)
            if not decision.submit:
                self.counts["skipped"] += 1
                self.console.print(f"[dim]skip #{job.idx} {self.labels[job.idx]}: already done (run_key {decision.run_key}; --rerun forces)[/dim]")
        self.total = len(jobs)
        self.console.print(f"study [bold]{specs[0].study}[/bold]: {len(jobs)} runs, {sum(submit)} to launch on "
                           f"site {site.name}; results in {safe_url(str(self.engine.url))}")
        return submit

    def on_poll(self, running: Sequence[SweepJob]) -> None:
        newly = [j for j in running if j.idx not in self.started and (j.output_dir / SPEC_FILE).exists()]
        if newly:
            mark_running(self.engine, [self.run_ids[j.idx] for j in newly])
            for job in newly:
                self.started.add(job.idx)
                self.console.print(f"[cyan]start[/cyan] #{job.idx} {self.labels[job.idx]}")

    def on_job_end(self, job: SweepJob, result: JobReturn) -> None:
        self.ended.add(job.idx)
        run_id = self.run_ids[job.idx]
        elapsed = time.monotonic() - self.t0
        if result.status == JobStatus.COMPLETED:
            try:
                ingest_run(self.engine, run_id, job.output_dir)
            except (IngestError, OSError, ValueError) as exc:
                mark_failed(self.engine, run_id, f"ingestion failed: {exc}")
                self.counts["failed"] += 1
                self.console.print(f"[red]fail[/red]  #{job.idx} {self.labels[job.idx]}: ingestion failed: {exc}")
                return
            self.counts["done"] += 1
            res = result.return_value.get("result", {})
            self.console.print(
                f"[green]done[/green]  #{job.idx} {self.labels[job.idx]}: {res.get('throughput', float('nan')):.0f} samples/s, "
                f"top-1 {res.get('final_top1', float('nan')):.3f}  [{self._progress(elapsed)}]"
            )
        else:
            error = result._return_value
            mark_failed(self.engine, run_id, f"{type(error).__name__}: {error}")
            self.counts["failed"] += 1
            self.console.print(f"[red]fail[/red]  #{job.idx} {self.labels[job.idx]}: {error}  [{self._progress(elapsed)}]")

    def _progress(self, elapsed: float) -> str:
        finished = self.counts["done"] + self.counts["failed"]
        launched = self.total - self.counts["skipped"]
        left = launched - finished
        eta = f", ~{elapsed / finished * left:.0f} s left" if finished and left else ""
        return f"{finished}/{launched} finished, {self.counts['failed']} failed, {elapsed:.0f} s{eta}"

    def close(self, results: Sequence[JobReturn]) -> None:
        if self.engine is None:
            return
        for idx in sorted(self.submitted - self.ended):  # the sweep stopped early (Ctrl-C, lost workers)
            mark_failed(self.engine, self.run_ids[idx], "interrupted: the sweep stopped before this run ended")
        from .report import SWEEP_COLUMNS, print_runs_table

        run_ids = list(self.run_ids.values())
        if run_ids:
            print_runs_table(self.engine, run_ids=run_ids, columns=SWEEP_COLUMNS,
                             title=f"study {OmegaConf.select(self.config, 'study_name')}: this sweep's runs")
        self.engine.dispose()
