"""Planning runs with the fitted model: what a run will take, what to ask the queue for, and
which node counts and repeats a node-hour budget buys (``scalestudy plan``).

A run's predicted time is its start-up and evaluation overhead (measured on the fitted
study's runs) plus its steps times the predicted step time (``perf_model.predict``). A batch
job's walltime request is that time, times ``MARGIN``, plus ``PAD_SECONDS`` (the queue's
start-up, the job script), rounded up to 5 minutes: a job that outlives its walltime is
killed, one that asks too much waits longer and is charged no more (facilities charge the
time used), so the margin is generous. Budgets are planned against the charge *at most*
(the walltime, the queue's minimum charge and charge factor): a run slower than predicted
still fits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import ConfigError

MARGIN = 1.5
PAD_SECONDS = 300
ROUND_SECONDS = 300


MAX_REQUEST_SECONDS = 999 * 3600   # what HH:MM:SS with up to 3 hour digits holds


def walltime_request(seconds: float) -> str:
    """HH:MM:SS for a job predicted to take ``seconds``: with the margin and pad, rounded up."""
    total = int(math.ceil((seconds * MARGIN + PAD_SECONDS) / ROUND_SECONDS) * ROUND_SECONDS)
    total = min(total, MAX_REQUEST_SECONDS)
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def network_of(site):
    from perf_model.predict import Network

    net = site.network
    return None if net is None else Network(net.latency_seconds, net.node_bandwidth_bytes, net.source)


def host_of(site):
    """The site's hosts as the model's oversubscription term sees them: hardware threads
    each (what the OS schedules ranks on: cores x threads_per_core), and whether every rank
    of a run shares one (the local provider, or ``shared_host: true``: local_slurm)."""
    from perf_model.oversubscription import Host

    return Host(int(site.max_threads_per_node), site.provider == "local" or bool(site.shared_host))


def host_of_site_name(name: str):
    """``host_of`` the site a stored run named, or None where its site YAML is gone."""
    from .errors import ConfigError
    from .sites import load_site

    try:
        return host_of(load_site(name))
    except (ConfigError, OSError, ValueError):
        return None


def predicted_run_seconds(fit: dict[str, Any], algorithm: str, nodes: int, workers_per_node: int, steps: int,
                          network=None, batch_size: int | None = None, threads: int | None = None,
                          host=None) -> float | None:
    """A run's predicted seconds, or None where the fit cannot say (another algorithm, or a
    batch or thread count a one-batch compute term was not measured at)."""
    from perf_model.fit import is_constant_compute
    from perf_model.predict import PredictError, predict

    shapes = fit.get("workloads") or {}
    if algorithm not in shapes or "compute" not in fit["terms"]:
        return None
    shape = shapes[algorithm]
    if is_constant_compute(fit["terms"]["compute"]) and ((batch_size or shape["batch_size"]) != shape["batch_size"] or
                                          (threads or shape["threads_per_worker"]) != shape["threads_per_worker"]):
        return None
    if batch_size or threads:
        fit = {**fit, "workloads": {**shapes, algorithm: {**shape, "batch_size": batch_size or shape["batch_size"],
                                                           "threads_per_worker": threads or shape["threads_per_worker"]}}}
    try:
        [row] = predict(fit, algorithm, [nodes], workers_per_node, network, host=host).to_dict("records")
    except PredictError:
        return None
    return shape.get("overhead_seconds", 0.0) + steps * row["step_seconds"]


@dataclass
class SizePlan:
    nodes: int
    ranks: int
    run_seconds: float
    throughput: float
    efficiency: float
    walltime: str = ""
    queue: str = ""
    charged_nodes: int = 0
    expected_node_hours: float = 0.0     # repeats x charged nodes x predicted hours x charge factor
    max_node_hours: float = 0.0          # charged nodes x walltime x charge factor
    refused: str = ""                    # why no queue takes it
    chosen: bool = False


@dataclass
class StudyPlan:
    algorithm: str
    repeats: int
    budget: float
    sizes: list[SizePlan] = field(default_factory=list)

    @property
    def chosen(self) -> list[SizePlan]:
        return [s for s in self.sizes if s.chosen]

    @property
    def max_node_hours(self) -> float:
        return sum(s.max_node_hours for s in self.chosen)

    @property
    def expected_node_hours(self) -> float:
        return sum(s.expected_node_hours for s in self.chosen)

    def sweep_groups(self, site=None) -> list[tuple[str, str, list[int]]]:
        """(queue, walltime, node counts): one sweep command per queue and walltime (a sweep
        asks one walltime of all its batch jobs, and each size was priced at its own), split
        where the queue holds fewer jobs per user than the sweep has node counts (a sweep
        holds one batch job per node count at once; Polaris' debug-scaling holds one)."""
        from .queues import queue_limits

        groups: dict[tuple[str, str], list[int]] = {}
        for s in self.chosen:
            groups.setdefault((s.queue, s.walltime), []).append(s.nodes)
        out = []
        for (queue, walltime), nodes in groups.items():
            limits = queue_limits(site, queue) if site is not None and queue else None
            step = limits.max_queued if limits is not None and limits.max_queued else len(nodes)
            out += [(queue, walltime, nodes[i:i + step]) for i in range(0, len(nodes), step)]
        return out


def _seconds(walltime: str) -> int:
    from .sites import walltime_seconds

    return walltime_seconds(walltime)


def _queue_for(site, nodes: int, walltime: str, choose_queue):
    """The queue a job of ``walltime`` goes to; when none takes it, the request raised to a
    queue's minimum walltime (Theta's default queue takes nothing under 30 minutes)."""
    tries = [walltime] + sorted({q.min_walltime for q in site.queues if q.min_walltime and
                                 _seconds(q.min_walltime) > _seconds(walltime)}, key=_seconds)
    why = ""
    for w in tries:
        job_site = dataclasses.replace(site, walltime=w)
        try:
            queue, _ = choose_queue(job_site, nodes)
            return job_site, queue, ""
        except ConfigError as exc:
            why = why or exc.reason.split(": ", 1)[0]
    return dataclasses.replace(site, walltime=walltime), "", why


def choose_plan(fit: dict[str, Any], algorithm: str, site, budget: float, repeats: int | None,
                candidates: Sequence[int], workers_per_node: int, steps: int) -> StudyPlan:
    """``plan_study`` at ``repeats``; or, when not given, at each of 5, 4, 3, 2, 1 repeats,
    the plan that spans the most node counts, and among those the most repeats: the widest
    scaling range the budget buys first, then as many repeats as that range affords."""
    if repeats:
        return plan_study(fit, algorithm, site, budget, repeats, candidates, workers_per_node, steps)
    plans = [plan_study(fit, algorithm, site, budget, r, candidates, workers_per_node, steps) for r in AUTO_REPEATS]
    return max(plans, key=lambda p: (len(p.chosen), p.repeats))


AUTO_REPEATS = (5, 4, 3, 2, 1)


def plan_study(fit: dict[str, Any], algorithm: str, site, budget: float, repeats: int, candidates: Sequence[int],
               workers_per_node: int, steps: int) -> StudyPlan:
    """Price every candidate node count on ``site`` (``repeats`` runs in one batch job each,
    as ``allocation=per_size`` runs them), then choose the node counts from the smallest up
    while their charge at most fits ``budget``: a scaling study needs its small sizes to
    anchor the curve, and every doubling costs about twice the one before."""
    from perf_model.predict import predict

    from .queues import charged_node_hours, choose_queue

    network = network_of(site)
    table = predict(fit, algorithm, list(candidates), workers_per_node, network, host=host_of(site)).set_index("nodes")
    overhead = fit["workloads"][algorithm].get("overhead_seconds", 0.0)
    plan = StudyPlan(algorithm=algorithm, repeats=repeats, budget=budget)
    spent = 0.0
    for n in candidates:
        row = table.loc[n]
        seconds = overhead + steps * float(row["step_seconds"])
        size = SizePlan(nodes=int(n), ranks=int(row["ranks"]), run_seconds=seconds,
                        throughput=float(row["throughput"]), efficiency=float(row["efficiency"]))
        size.walltime = walltime_request(repeats * seconds)
        if site.max_walltime and _seconds(size.walltime) > _seconds(site.max_walltime):
            size.refused = f"{repeats} run(s) need {size.walltime}, over the site's max_walltime {site.max_walltime}"
        elif n > site.max_nodes:
            size.refused = f"the site has {site.max_nodes} nodes"
        else:
            job_site, size.queue, size.refused = _queue_for(site, int(n), size.walltime, choose_queue)
            size.walltime = job_site.walltime
            if not size.refused:
                queued = dataclasses.replace(job_site, partition=size.queue) if size.queue else job_site
                size.charged_nodes, size.max_node_hours = charged_node_hours(queued, int(n))
                factor = size.max_node_hours / max(size.charged_nodes * _seconds(size.walltime) / 3600.0, 1e-12)
                size.expected_node_hours = repeats * size.charged_nodes * seconds / 3600.0 * factor
        if not size.refused and spent + size.max_node_hours <= budget and (not plan.sizes or all(
                s.chosen or s.refused for s in plan.sizes)):
            size.chosen = True
            spent += size.max_node_hours
        plan.sizes.append(size)
    return plan


@dataclass
class SweepPrediction:
    """What the study's model fit predicts for a sweep's runs: seconds per run (None where it
    cannot say), the walltime request it implies, and a note for the user."""
    seconds: dict[int, float | None] = field(default_factory=dict)   # job idx -> predicted run seconds
    walltime: str = ""
    note: str = ""
    source: str = ""      # which fit


def _spec_steps(spec) -> int | None:
    """The steps a run will take, where the sweep says (``steps_per_epoch``); else None: a
    full epoch's steps depend on the data set and the global batch, which the fit does not
    know, and a guess here would set a walltime that kills the job."""
    return spec.epochs * spec.steps_per_epoch if spec.steps_per_epoch else None


def predict_sweep(db_url: str | None, site, indexed_specs: Sequence[tuple[int, Any]]) -> SweepPrediction:
    """Predicted run times of a sweep's runs from the newest model fit of their study, read
    without writing (no database file created, no schema migrated); empty when there is no
    fit. ``walltime``: the longest batch job's request (``allocation=per_size``: a job runs
    its node count's runs ``max_concurrent_runs`` at a time), capped at the site's
    max_walltime; empty unless every run has a prediction."""
    from results_db import connect
    from results_db.migrate import is_current
    from results_db.model_fits import latest_model_fit
    from results_db.store import missing_sqlite_file, resolve_db_url

    out = SweepPrediction()
    if not indexed_specs or missing_sqlite_file(db_url) is not None:
        return out
    study = indexed_specs[0][1].study
    try:
        engine = connect(resolve_db_url(db_url), upgrade=False)
        try:
            fit = latest_model_fit(engine, study) if is_current(engine) else None
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 - a prediction is a help, never a reason to refuse a sweep
        return out
    if fit is None or not fit.get("workloads"):
        return out
    network = network_of(site)
    for idx, spec in indexed_specs:
        steps = _spec_steps(spec)
        out.seconds[idx] = None if spec.algorithm not in fit["workloads"] or steps is None else predicted_run_seconds(
            fit, spec.algorithm, spec.nodes, spec.workers_per_node, steps, network, spec.batch_size,
            spec.threads_per_worker, host_of(site))
    known = [s for s in out.seconds.values() if s is not None]
    source = out.source = f"model fit #{fit['id']} of study {study}"
    if len(known) < len(out.seconds):
        out.note = (f"predicted run times from {source}: {len(out.seconds) - len(known)} of {len(out.seconds)} runs "
                    "have none (no steps_per_epoch, or an algorithm, batch or thread count the fit did not measure); "
                    "walltime stays the site's")
        return out
    if site.provider == "local" or site.allocation == "packed":
        out.note = f"predicted run times from {source}"
        return out
    per_size: dict[int, float] = {}   # an n-node batch job runs its n-node runs one after another
    for idx, spec in indexed_specs:
        per_size[spec.nodes] = per_size.get(spec.nodes, 0.0) + out.seconds[idx]
    from .queues import choose_queue

    # each job's request, raised where a queue takes nothing shorter (Theta's default: 30 min)
    requests = [_queue_for(site, n, walltime_request(total), choose_queue)[0].walltime for n, total in per_size.items()]
    wanted = max(requests, key=_seconds)
    capped = ""
    if site.max_walltime and _seconds(wanted) > _seconds(site.max_walltime):
        wanted, capped = site.max_walltime, " (capped at the site's max_walltime: runs that outlast it get " \
                                            "another batch job)"
    refused = [n for n in per_size if _queue_for(site, n, wanted, choose_queue)[2] and
               not _queue_for(site, n, site.walltime, choose_queue)[2]]
    if refused:   # a prediction helps; it never makes a sweep the site's walltime would pass fail
        out.note = (f"predicted run times from {source}; the walltime they ask for, {wanted}, fits no queue for the "
                    f"{', '.join(map(str, sorted(refused)))}-node job(s): walltime stays the site's {site.walltime} "
                    "(split the sweep by node count to ask each its own)")
        return out
    out.walltime = wanted
    out.note = (f"walltime {out.walltime} per batch job from the predicted run times ({source}; the longest job's "
                f"runs x {MARGIN:g} + {PAD_SECONDS // 60} min, at least a queue's minimum){capped}; walltime=HH:MM:SS "
                "overrides it")
    return out
