"""Queue limits as data: which of a site's queues takes a run, and what the facility charges.

Facilities publish a table per machine (ALCF's "Job Scheduling Policy" pages, NERSC's
"Queue Policies"): per queue a node range, a walltime limit (on Theta's ``default``, one
that grows with the node count), per-user job limits and a minimum charge. A site file
copies that table under ``queues:`` with its source, and every sweep is checked against
it before anything is submitted: a run too small for the site's queue goes to the first
queue of the table that takes it (printed), a queue given with ``queue=`` is kept or the
sweep is refused in one line naming the queue and its limits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import ConfigError
from .allocation import BatchJob, batch_jobs, check_runs_fit
from .checks import check_name, check_walltime, walltime_seconds

_INT_KEYS = ("min_nodes", "max_nodes", "max_running", "max_queued", "charged_min_nodes")
_KEYS = (*_INT_KEYS, "max_walltime", "min_walltime", "walltime_by_nodes", "charge_factor", "route", "source")


@dataclass(frozen=True)
class QueueLimits:
    """One queue (PBS/Cobalt) or QOS (Slurm at NERSC) and its published limits."""

    name: str
    min_nodes: int = 1
    max_nodes: int = 0                # 0: the site's max_nodes
    max_walltime: str = ""            # "" : the site's max_walltime
    min_walltime: str = ""
    # Theta's default queue: the longest walltime grows with the node count
    walltime_by_nodes: tuple[tuple[int, str], ...] = ()
    max_running: int = 0              # jobs per user running at once; 0: no limit published
    max_queued: int = 0               # jobs per user in the queue (queued and running); 0: none published
    charged_min_nodes: int = 0        # a job is charged for at least this many nodes
    charge_factor: float = 1.0        # node-hours charged per node-hour used (NERSC QOS factors)
    route: bool = True                # may scalestudy send runs here when the site's queue does not take them
    source: str = ""                  # where the limits come from (page, date checked)

    def walltime_limit(self, nodes: int) -> str:
        limit = self.max_walltime
        for from_nodes, walltime in self.walltime_by_nodes:
            if nodes >= from_nodes:
                limit = walltime
        return limit

    def describe(self) -> str:
        top = f"{self.max_nodes}" if self.max_nodes else "any"
        wall = self.max_walltime or (self.walltime_by_nodes[-1][1] if self.walltime_by_nodes else "")
        return f"{self.name} ({self.min_nodes}-{top} nodes{', up to ' + wall if wall else ''})"

    def refusal(self, nodes: int, walltime: str) -> str | None:
        """Why this queue does not take a ``nodes``-node job of ``walltime``; None if it does."""
        if nodes < self.min_nodes:
            charged = f"; a smaller job is charged as {self.charged_min_nodes}" if self.charged_min_nodes else ""
            return f"queue {self.name} takes at least {self.min_nodes} nodes{charged}"
        if self.max_nodes and nodes > self.max_nodes:
            return f"queue {self.name} takes at most {self.max_nodes} nodes"
        limit = self.walltime_limit(nodes)
        if limit and walltime_seconds(walltime) > walltime_seconds(limit):
            return f"queue {self.name} allows at most {limit} for {nodes} node(s)"
        if self.min_walltime and walltime_seconds(walltime) < walltime_seconds(self.min_walltime):
            return f"queue {self.name} needs a walltime of at least {self.min_walltime}"
        return None


def parse_queues(value: Any) -> tuple[QueueLimits, ...]:
    """``queues:`` of a site file: a mapping queue name -> limits, in routing order."""
    if value in (None, ""):
        return ()
    if not isinstance(value, dict):
        raise ConfigError("site.queues", value, "expected a mapping of queue name -> limits")
    out = []
    for name, limits in value.items():
        field = f"site.queues.{name}"
        check_name(field, name)
        limits = dict(limits or {})
        for key in limits:
            if key not in _KEYS:
                raise ConfigError(f"{field}.{key}", limits[key], f"unknown key; known: {', '.join(_KEYS)}")
        for key in _INT_KEYS:
            v = limits.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ConfigError(f"{field}.{key}", v, "expected an integer >= 0")
        for key in ("max_walltime", "min_walltime"):
            if limits.get(key):
                check_walltime(f"{field}.{key}", limits[key])
        steps = limits.get("walltime_by_nodes") or {}
        if not isinstance(steps, dict):
            raise ConfigError(f"{field}.walltime_by_nodes", steps, "expected a mapping: from N nodes -> HH:MM:SS")
        for n, w in steps.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"{field}.walltime_by_nodes", n, "expected node counts >= 1 as keys")
            check_walltime(f"{field}.walltime_by_nodes.{n}", w)
        limits["walltime_by_nodes"] = tuple(sorted(steps.items()))
        factor = limits.get("charge_factor", 1.0)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 0:
            raise ConfigError(f"{field}.charge_factor", factor, "expected a number >= 0")
        limits["charge_factor"] = float(factor)
        if not isinstance(limits.get("route", True), bool):
            raise ConfigError(f"{field}.route", limits["route"], "expected true or false")
        if not isinstance(limits.get("source", ""), str):
            raise ConfigError(f"{field}.source", limits["source"], "expected a string")
        q = QueueLimits(name=name, **limits)
        if q.max_nodes and q.min_nodes > q.max_nodes:
            raise ConfigError(f"{field}.min_nodes", q.min_nodes, f"above max_nodes {q.max_nodes}")
        out.append(q)
    return tuple(out)


def queue_limits(site, name: str) -> QueueLimits | None:
    return next((q for q in site.queues if q.name == name), None)


def choose_queue(site, nodes: int, subject: str = "") -> tuple[str, str]:
    """The queue a ``nodes``-node batch job of this site goes to, and a note when it is not the
    site's own queue (``subject`` names what goes there); ``ConfigError`` (one line) when no queue takes it."""
    if not site.queues:
        return site.partition, ""
    walltime = site.walltime
    own = queue_limits(site, site.partition) if site.partition else None
    if site.partition and own is None:
        raise ConfigError("queue", site.partition, f"not in site {site.name}'s queue table; known: "
                          f"{', '.join(q.name for q in site.queues)}")
    if own is not None:
        why = own.refusal(nodes, walltime)
        if why is None:
            return own.name, ""
        if site.queue_pinned:
            raise ConfigError("queue", own.name, f"{why}; a {nodes}-node run of {walltime} needs another queue "
                              f"({_takers(site, nodes)})")
    for q in site.queues:
        if q.route and q is not own and q.refusal(nodes, walltime) is None:
            note = f"{subject or f'{nodes}-node runs go'} to queue {q.name}"
            if own is not None:
                note += f" ({own.refusal(nodes, walltime)})"
            return q.name, note
    raise ConfigError("nodes", nodes, f"no queue of site {site.name} takes a {nodes}-node job of {walltime}: "
                      + "; ".join(q.describe() for q in site.queues))


def _takers(site, nodes: int) -> str:
    ok = [q.name for q in site.queues if q.refusal(nodes, site.walltime) is None]
    return "it fits " + ", ".join(ok) if ok else "no queue of the site takes it"


def plan_batch_jobs(site, node_counts: Iterable[int]) -> list[BatchJob]:
    """The batch jobs a sweep of runs of these node counts asks for (one per node count, or one
    in all for a packed sweep), each with its queue and a note where runs go to another queue
    than the site's own. ``ConfigError`` when the runs do not fit the packed allocation, no
    queue takes a job, or a queue's per-user job limit would refuse the jobs the sweep holds
    at once."""
    counts = sorted(set(node_counts))
    check_runs_fit(site, counts)
    jobs = []
    by_queue: dict[str, list[int]] = {}
    for n, holds in batch_jobs(site, counts).items():
        name, note = choose_queue(site, n, "" if site.allocation != "packed" else
                                  f"the packed {n}-node batch job (runs of {', '.join(map(str, holds))} node(s)) goes")
        by_queue.setdefault(name, []).append(n)
        jobs.append(BatchJob(nodes=n, holds=holds, queue=name, note=note))
    for name, sizes in by_queue.items():
        q = queue_limits(site, name)
        if q is not None and q.max_queued and len(sizes) > q.max_queued:
            raise ConfigError("nodes", ",".join(map(str, sizes)),
                              f"queue {name} holds at most {q.max_queued} job(s) per user, and this sweep needs "
                              f"one batch job per node count at once: use allocation=packed (one batch job) or "
                              f"sweep these node counts in separate commands")
    return jobs


def job_site(site, job: BatchJob):
    """The site as the batch job ``job`` is submitted to it: in the queue chosen for it."""
    return site if not job.queue or job.queue == site.partition else dataclasses.replace(site, partition=job.queue)


def charged_node_hours(site, nodes: int) -> tuple[int, float]:
    """Nodes charged and node-hours charged, at most, for one ``nodes``-node batch job of the site's
    walltime: the queue's minimum charge and charge factor applied."""
    q = queue_limits(site, site.partition) if site.queues else None
    charged = max(nodes, q.charged_min_nodes if q else 0)
    factor = q.charge_factor if q else 1.0
    return charged, charged * walltime_seconds(site.walltime) / 3600.0 * factor


def queue_for_walltime(site, nodes: int, walltime: str):
    """(the site with that walltime, the queue a ``nodes``-node job of it goes to, why none
    does): where no queue takes ``walltime``, the request is raised to a queue's minimum
    walltime (Theta's default queue takes nothing under 30 minutes)."""
    tries = [walltime] + sorted({q.min_walltime for q in site.queues if q.min_walltime and
                                 walltime_seconds(q.min_walltime) > walltime_seconds(walltime)}, key=walltime_seconds)
    why = ""
    for w in tries:
        job_site = dataclasses.replace(site, walltime=w)
        try:
            queue, _ = choose_queue(job_site, nodes)
            return job_site, queue, ""
        except ConfigError as exc:
            why = why or exc.reason.split(": ", 1)[0]
    return dataclasses.replace(site, walltime=walltime), "", why
