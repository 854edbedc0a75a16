"""``scalestudy sweep --dry-run``: what a sweep would submit, printed, and nothing submitted.

For the admitted sweep it prints the runs that would launch and those already done, the
batch script and submit command of every batch job in each allocation mode (rendered by
the site's real provider, ``pools.preview``), each run's launch line and predicted time,
and the node-hours each mode is charged at most.

"At most" is a bound: a batch job is never charged past its walltime, and a sweep never
holds more batch jobs than it starts attempts (Parsl starts a block only while runs wait
for one), so the worst case is every attempt of every run in a batch job of its own: runs
x (1 + retries.crash + retries.timeout + retries.node_lost) jobs. Beside it the charge when
each batch job's runs fit its walltime and none is retried (one job per node count, or one
in all), which is what a sweep that goes as planned costs.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Sequence

from rich.console import Console

from workloads.placement import gpu_rule
from workloads.run_folder import SPEC_FILE

from ..errors import ConfigError
from ..mpi.run import program
from ..pools.preview import node_hours, preview_batch_script, preview_launch_prefix
from ..site.allocation import BatchJob, with_allocation
from ..site.config import ALLOCATIONS, SiteConfig
from ..site.launchers import launch_flags
from ..site.queues import plan_batch_jobs
from .admission import Admitted, duplicate_jobs
from .observer import SweepJob
from .runspec import run_key


def print_dry_run(admitted: Admitted, jobs: Sequence[SweepJob], labels: dict[int, str], rule=None) -> None:
    site, specs = admitted.site, admitted.specs
    out = Console(highlight=False, soft_wrap=True)
    same = duplicate_jobs(jobs, specs)
    launching = [(j, s) for j, s in zip(jobs, specs) if run_key(s) not in admitted.done and j.idx not in same]
    out.print(f"[bold]dry run[/bold]: {len(jobs)} runs of study {admitted.study} on site {site.name} "
              f"({site.provider}, {site.mpi_launcher}), {len(launching)} would launch{admitted.done_note}; "
              "nothing is submitted")
    extra = extra_counts(rule, specs)
    if rule is not None:
        out.print(f"{rule.describe()}: after these, up to {len(extra)} more run(s) ({rule.most - rule.first_stage} "
                  "a configuration), decided by the first stage's results; the node-hours 'at most' below count them")
    for job, spec in zip(jobs, specs):
        if job.idx in same:
            out.print(f"skip #{job.idx} {labels[job.idx]}: the same run as #{same[job.idx]} (it differs only in keys "
                      "its algorithm does not read)")
        elif run_key(spec) in admitted.done:
            out.print(f"skip #{job.idx} {labels[job.idx]}: already done (--rerun forces)")
    for job in admitted.batch_jobs:
        if job.note:
            out.print(f"[cyan]{job.note}[/cyan]")
    counts = [s.nodes for _, s in launching]
    with tempfile.TemporaryDirectory(prefix="scalestudy-dry-run-") as scratch:
        policy = admitted.retry_policy
        attempts = 1 + policy.crash + policy.timeout + policy.node_lost
        modes = _print_batch_jobs(out, site, counts, attempts, Path(scratch), extra) \
            if site.scheduler.batch_jobs and counts else {}
        if not site.scheduler.batch_jobs:
            out.print("\n" + preview_batch_script(site, BatchJob(nodes=1, holds=(1,)), Path(scratch))[0])
    out.print("")
    for job, spec in launching:
        options = " ".join(x for x in (site.launcher_options, launch_flags(site, spec.threads_per_worker,
                                                                            spec.workers_per_node, spec.device)) if x)
        prefix = preview_launch_prefix(site, spec.nodes, spec.workers_per_node, options)
        out.print(f"#{job.idx} {labels[job.idx]}\n    launch: {prefix} "
                  f"{shlex.join(program(spec, job.output_dir / SPEC_FILE))}")
        if spec.device == "cuda":
            out.print(f"    GPUs: one per rank, the k-th rank of a node on GPU "
                      f"{gpu_rule(spec.gpu_binding, spec.gpus_per_node)} (CUDA_VISIBLE_DEVICES, site gpu_binding: "
                      f"{spec.gpu_binding})")
        predicted = admitted.prediction.seconds.get(job.idx)
        if predicted is not None:
            out.print(f"    predicted: {predicted / 60:.1f} min")
    if admitted.prediction.note:
        out.print(f"\n{admitted.prediction.note}")
    if site.scheduler.batch_jobs:
        _print_charges(out, site, modes, len(counts) + len(extra), attempts)


def extra_counts(rule, specs) -> list[int]:
    """Node counts of the runs repeats on demand may add at most (``repeats.most`` a configuration)."""
    if rule is None:
        return []
    from .repeats_on_demand import configuration_key

    firsts = {configuration_key(s): s.nodes for s in specs if s.repeat < rule.first_stage}
    return [nodes for nodes in firsts.values() for _ in range(rule.most - rule.first_stage)]


def _print_batch_jobs(out: Console, site: SiteConfig, counts: list[int], attempts: int, scratch: Path,
                      extra: Sequence[int] = ()) -> dict:
    """Each allocation mode's batch jobs (this sweep's mode first); mode -> (batch jobs,
    node-hours if the runs fit their jobs, node-hours at most), or the reason the mode cannot
    take the sweep. ``extra``: runs repeats on demand may add, counted in "at most" only."""
    modes: dict[str, tuple[int, float, float] | str] = {}
    for mode in (site.allocation, *(m for m in ALLOCATIONS if m != site.allocation)):
        mode_site = with_allocation(site, mode)
        try:
            jobs = plan_batch_jobs(mode_site, counts)
        except ConfigError as exc:
            modes[mode] = str(exc)
            continue
        planned = sum(node_hours(mode_site, job)[1] for job in jobs)
        # every attempt of every run a job holds, each in a batch job like it
        bound = sum(node_hours(mode_site, job)[1] * attempts * sum(1 for n in (*counts, *extra) if n in job.holds)
                    for job in jobs)
        modes[mode] = (len(jobs), planned, bound)
        out.print(f"\n[bold]allocation: {mode}[/bold]" + (" (this sweep's)" if mode == site.allocation else
                  f" (with allocation={mode})") + f": {len(jobs)} batch job(s), {planned:.2f} node-hours if each "
                  f"job's runs fit its walltime, {bound:.2f} at most")
        for job in jobs:
            script, submit_cmd = preview_batch_script(mode_site, job, scratch)
            charged, hours = node_hours(mode_site, job)
            what = f"{job.nodes}-node runs" if job.holds == (job.nodes,) else \
                f"every run ({', '.join(map(str, job.holds))} node(s)) in {job.nodes} nodes"
            out.print(f"\n[bold]batch job for {what}[/bold] — submitted with: {submit_cmd}")
            out.print(f"charged at most: {charged} node(s) x {site.walltime} = {hours:.2f} node-hours per batch job"
                      + (f" (the queue's minimum charge is {charged} nodes)" if charged > job.nodes else ""))
            out.print(script.rstrip())
    return modes


def _print_charges(out: Console, site: SiteConfig, modes: dict, runs: int, attempts: int) -> None:
    out.print("\n[bold]allocation[/bold]   batch jobs   node-hours if runs fit   node-hours at most")
    for mode, value in modes.items():
        mine = " (this sweep's)" if mode == site.allocation else ""
        out.print(f"{mode:12s} " + (f"{value[0]:10d}   {value[1]:20.2f}   {value[2]:18.2f}{mine}"
                                    if isinstance(value, tuple) else f"not possible: {value}"))
    if not isinstance(modes.get(site.allocation), tuple):
        return
    _, planned, bound = modes[site.allocation]
    worst = (f"every attempt of every run in a batch job of its own: {runs} run(s) x up to {attempts} attempt(s) "
             f"(1 + retries.crash, .timeout, .node_lost), each job charged up to its walltime {site.walltime}")
    if site.allocation == "packed":
        out.print(f"\nnode-hours charged at most: {bound:.2f} — {worst}. {planned:.2f} when the sweep goes as "
                  f"planned: one batch job for the whole sweep, its runs {site.max_concurrent_runs} at a time at most "
                  f"(max_concurrent_runs), all within its walltime, none retried")
    else:
        out.print(f"\nnode-hours charged at most: {bound:.2f} — {worst}. {planned:.2f} when the sweep goes as "
                  f"planned: one batch job per node count, its runs one after another within its walltime, none "
                  f"retried")
