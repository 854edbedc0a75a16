"""Which node counts and repeats a node-hour budget buys on a site (``scalestudy plan``).

Budgets are planned against each batch job's charge *at most* (the walltime, the queue's
minimum charge and charge factor: ``site.queues.charged_node_hours``): a run slower than
predicted still fits, within the margin. Each size's walltime is its runs' predicted time
with the margin of ``prediction``. A run that outlasts it is retried in another batch job,
beyond the plan: ``sweep --dry-run`` prints the bound that counts retries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..site.checks import walltime_seconds
from ..site.model_inputs import host_of, network_of
from ..site.queues import charged_node_hours, queue_for_walltime, queue_limits
from .prediction import walltime_request

@dataclass
class SizePlan:
    nodes: int
    ranks: int
    run_seconds: float
    throughput: float
    efficiency: float
    walltime: str = ""
    throughput_band: tuple[float, float] | None = None   # the fit's band (perf_model.predict), if it has one
    efficiency_band: tuple[float, float] | None = None
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
        groups: dict[tuple[str, str], list[int]] = {}
        for s in self.chosen:
            groups.setdefault((s.queue, s.walltime), []).append(s.nodes)
        out = []
        for (queue, walltime), nodes in groups.items():
            limits = queue_limits(site, queue) if site is not None and queue else None
            step = limits.max_queued if limits is not None and limits.max_queued else len(nodes)
            out += [(queue, walltime, nodes[i:i + step]) for i in range(0, len(nodes), step)]
        return out


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

    network = network_of(site)
    table = predict(fit, algorithm, list(candidates), workers_per_node, network, host=host_of(site)).set_index("nodes")
    overhead = fit["workloads"][algorithm].get("overhead_seconds", 0.0)
    plan = StudyPlan(algorithm=algorithm, repeats=repeats, budget=budget)
    spent = 0.0
    for n in candidates:
        row = table.loc[n]
        seconds = overhead + steps * float(row["step_seconds"])
        size = SizePlan(nodes=int(n), ranks=int(row["ranks"]), run_seconds=seconds,
                        throughput=float(row["throughput"]), efficiency=float(row["efficiency"]),
                        throughput_band=(float(row["throughput_low"]), float(row["throughput_high"])),
                        efficiency_band=(float(row["efficiency_low"]), float(row["efficiency_high"])))
        size.walltime = walltime_request(repeats * seconds)
        if site.max_walltime and walltime_seconds(size.walltime) > walltime_seconds(site.max_walltime):
            size.refused = f"{repeats} run(s) need {size.walltime}, over the site's max_walltime {site.max_walltime}"
        elif n > site.max_nodes:
            size.refused = f"the site has {site.max_nodes} nodes"
        else:
            job_site, size.queue, size.refused = queue_for_walltime(site, int(n), size.walltime)
            size.walltime = job_site.walltime
            if not size.refused:
                queued = dataclasses.replace(job_site, partition=size.queue) if size.queue else job_site
                size.charged_nodes, size.max_node_hours = charged_node_hours(queued, int(n))
                factor = size.max_node_hours / max(size.charged_nodes * walltime_seconds(size.walltime) / 3600.0, 1e-12)
                size.expected_node_hours = repeats * size.charged_nodes * seconds / 3600.0 * factor
        if not size.refused and spent + size.max_node_hours <= budget and (not plan.sizes or all(
                s.chosen or s.refused for s in plan.sizes)):
            size.chosen = True
            spent += size.max_node_hours
        plan.sizes.append(size)
    return plan


