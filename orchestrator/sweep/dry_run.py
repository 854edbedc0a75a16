"""``scalestudy sweep --dry-run``: what a sweep would submit, printed, and nothing submitted.

It leads with a summary that fits one screen, the decision before the detail: how many runs
launch (and which are already done or the same run twice), the node-hours the sweep's
allocation mode is charged if its runs fit their walltime and at most, the queues, the batch
jobs, what the study takes from its preset (``preset``), and every warning (what would stop a
real sweep, runs that crowd this host). Then the runs skipped, each run's launch line and
predicted time, each allocation mode's batch jobs with their submit commands and charges,
and the table of both modes' node-hours. The batch scripts (rendered by the site's real
provider, ``pools.preview``) are written to files, in a folder the summary names and each
dry run of the study on that site rewrites (``scripts_folder``); ``--show-scripts`` prints
them too.

"At most" is a bound: a batch job is never charged past its walltime, and a sweep never
holds more batch jobs than it starts attempts (Parsl starts a block only while runs wait
for one), so the worst case is every attempt of every run in a batch job of its own: runs
x (1 + retries.crash + retries.timeout + retries.node_lost) jobs. Beside it the charge when
each batch job's runs fit its walltime and none is retried (one job per node count, or one
in all), which is what a sweep that goes as planned costs.
"""

from __future__ import annotations

from workloads.plural import counted

import shlex
import tempfile
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.markup import escape

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
from .preset import PresetUse
from .runspec import run_key


# where a dry run writes its batch scripts: one folder per study and site, rewritten by each dry run
SCRIPTS_DIR = Path(".scalestudy") / "dry-run"


def scripts_folder(study: str, site: str) -> Path:
    """The folder for this dry run's batch scripts, emptied of an earlier dry run's (under the
    working directory; a temporary folder where that cannot be written)."""
    folder = SCRIPTS_DIR / f"{study}-{site}".replace("/", "_").replace(" ", "_")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            if old.is_file():
                old.unlink()
        return folder
    except OSError:
        return Path(tempfile.mkdtemp(prefix="scalestudy-dry-run-"))


def print_dry_run(admitted: Admitted, jobs: Sequence[SweepJob], labels: dict[int, str], rule=None,
                  preset: PresetUse | None = None, warnings: Sequence[str] = (), show_scripts: bool = False) -> None:
    site, specs = admitted.site, admitted.specs
    out = Console(highlight=False, soft_wrap=True)
    same = duplicate_jobs(jobs, specs)
    done = [j for j, s in zip(jobs, specs) if run_key(s) in admitted.done and j.idx not in same]
    launching = [(j, s) for j, s in zip(jobs, specs) if run_key(s) not in admitted.done and j.idx not in same]
    extra = extra_counts(rule, specs)
    policy = admitted.retry_policy
    attempts = 1 + policy.crash + policy.timeout + policy.node_lost
    counts = [s.nodes for _, s in launching]
    batch = site.scheduler.batch_jobs and bool(counts)
    modes = _plan_modes(site, counts, attempts, extra) if batch else {}
    folder = scripts_folder(admitted.study, site.name) if batch else None
    out.print(f"[bold]dry run[/bold]: {counted(len(jobs), 'run')} of study {admitted.study} on site {site.name} "
              f"({site.provider}, {site.mpi_launcher}), {len(launching)} would launch{admitted.done_note}; "
              "nothing is submitted")
    _print_summary(out, admitted, len(jobs), len(launching), len(done), len(same), modes, folder, preset, warnings,
                   rule, extra)
    for job, spec in zip(jobs, specs):
        if job.idx in same:
            out.print(f"skip #{job.idx} {labels[job.idx]}: the same run as #{same[job.idx]} (it differs only in keys "
                      "its algorithm does not read)")
        elif run_key(spec) in admitted.done:
            out.print(f"skip #{job.idx} {labels[job.idx]}: already done (--rerun forces)")
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
    with tempfile.TemporaryDirectory(prefix="scalestudy-dry-run-") as scratch:
        if batch:
            _print_batch_jobs(out, site, modes, Path(scratch), folder, show_scripts)
        elif show_scripts and not site.scheduler.batch_jobs:
            out.print("\n" + preview_batch_script(site, BatchJob(nodes=1, holds=(1,)), Path(scratch))[0])
    if batch:
        _print_charges(out, site, modes, len(counts) + len(extra), attempts)


def _print_summary(out: Console, admitted: Admitted, jobs: int, launching: int, done: int, same: int, modes: dict,
                   folder: Path | None, preset: PresetUse | None, warnings: Sequence[str], rule, extra) -> None:
    """The decision on one screen: runs, node-hours, queues, batch jobs, the preset, warnings."""
    site = admitted.site

    def line(label: str, text: str, style: str = "") -> None:
        text = escape(text)
        out.print(f"  {label:<11} " + (f"[{style}]{text}[/{style}]" if style else text))

    line("runs", f"{launching} to launch of the {jobs} in the sweep ({done} already done, {same} the same run as "
                 "another job)")
    if rule is not None:
        line("repeats", f"{rule.describe()}: after these, up to {len(extra)} more run(s) "
                        f"({rule.most - rule.first_stage} a configuration), decided by the first stage's results; "
                        "the node-hours 'at most' count them")
    mine = modes.get(site.allocation)
    if not site.scheduler.batch_jobs:
        line("node-hours", f"none charged: site {site.name} has no scheduler; runs start from this process on this "
                           "host, one after another")
    elif not modes:
        line("node-hours", "none: no run to launch")
    elif isinstance(mine, tuple):
        others = "; ".join(f"allocation={m}: {v[1]:.2f} / {v[2]:.2f}" if isinstance(v, tuple) else
                           f"allocation={m}: not possible" for m, v in modes.items() if m != site.allocation)
        line("node-hours", f"{mine[1]:.2f} if each batch job's runs fit its walltime, {mine[2]:.2f} at most (every "
                           f"attempt of every run in a batch job of its own); allocation={site.allocation}"
             + (f" ({others})" if others else ""))
    if site.scheduler.batch_jobs and admitted.batch_jobs:
        queues: dict[str, list[str]] = {}
        for job in admitted.batch_jobs:
            queues.setdefault(job.queue or site.queue or "the scheduler's default",
                              []).extend(str(n) for n in job.holds)
        line("queue", "; ".join(f"{q} ({', '.join(n)}-node runs)" for q, n in queues.items()))
        for job in admitted.batch_jobs:
            if job.note:
                line("", job.note, "cyan")
        packed = site.allocation == "packed"
        line("batch jobs", f"{len(admitted.batch_jobs)} " + ("(the whole sweep in one)" if packed else
                                                            "(one per node count)")
             + f", walltime {site.walltime} each" + (f", account {site.account}" if site.account else ""))
    if admitted.prediction.note:
        line("walltime", admitted.prediction.note)
    if preset is not None:
        for i, text in enumerate(preset.lines(admitted.study)):
            line("preset" if i == 0 else "", text)
    for text in warnings:
        line("warning", text, "yellow")
    if folder is not None:
        line("scripts", f"the batch scripts are in {folder}/ (--show-scripts prints them here too)")
    out.print("")


def extra_counts(rule, specs) -> list[int]:
    """Node counts of the runs repeats on demand may add at most (``repeats.most`` a configuration)."""
    if rule is None:
        return []
    from .repeats_on_demand import configuration_key

    firsts = {configuration_key(s): s.nodes for s in specs if s.repeat < rule.first_stage}
    return [nodes for nodes in firsts.values() for _ in range(rule.most - rule.first_stage)]


def _plan_modes(site: SiteConfig, counts: list[int], attempts: int, extra: Sequence[int] = ()) -> dict:
    """Each allocation mode (this sweep's first): mode -> (its batch jobs, node-hours if the runs
    fit their jobs, node-hours at most), or the reason the mode cannot take the sweep.
    ``extra``: runs repeats on demand may add, counted in "at most" only."""
    modes: dict[str, tuple[list[BatchJob], float, float] | str] = {}
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
        modes[mode] = (jobs, planned, bound)
    return modes


def _print_batch_jobs(out: Console, site: SiteConfig, modes: dict, scratch: Path, folder: Path | None,
                      show_scripts: bool) -> None:
    """Each allocation mode's batch jobs: submit command (naming the script's file) and charge;
    the script itself with ``show_scripts``."""
    for mode, value in modes.items():
        if not isinstance(value, tuple):
            continue
        jobs, planned, bound = value
        mode_site = with_allocation(site, mode)
        out.print(f"\n[bold]allocation: {mode}[/bold]" + (" (this sweep's)" if mode == site.allocation else
                  f" (with allocation={mode})") + f": {len(jobs)} batch job(s), {planned:.2f} node-hours if each "
                  f"job's runs fit its walltime, {bound:.2f} at most")
        for job in jobs:
            script, submit_cmd = preview_batch_script(mode_site, job, scratch, script_dir=folder)
            charged, hours = node_hours(mode_site, job)
            what = f"{job.nodes}-node runs" if job.holds == (job.nodes,) else \
                f"every run ({', '.join(map(str, job.holds))} node(s)) in {job.nodes} nodes"
            out.print(f"batch job for {what} — submitted with: {submit_cmd}")
            out.print(f"    charged at most: {charged} node(s) x {site.walltime} = {hours:.2f} node-hours per batch job"
                      + (f" (the queue's minimum charge is {charged} nodes)" if charged > job.nodes else ""))
            if show_scripts:
                out.print(script.rstrip() + "\n")


def _table_value(value) -> tuple[int, float, float] | str:
    return (len(value[0]), value[1], value[2]) if isinstance(value, tuple) else value


def _print_charges(out: Console, site: SiteConfig, modes: dict, runs: int, attempts: int) -> None:
    modes = {mode: _table_value(value) for mode, value in modes.items()}
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
