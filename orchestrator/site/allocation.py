"""Which batch jobs a sweep asks the scheduler for: one per node count, or one for the whole sweep.

``per_size`` (the default) gives each node count of a sweep a batch job of exactly that
many nodes, started when its first run is submitted: no node waits idle for a run of
another size, but every size waits in the queue again. ``packed`` asks for one batch job
of ``allocation_nodes`` nodes (default: the sweep's largest run) and runs every run of the
sweep inside it, several at a time when they fit (Parsl's MPIExecutor hands each MPI task
nodes of its own from the block's node list): one queue wait, every size measured on the
same nodes, and a job large enough for queues with a minimum size (Theta's ``default``
queue took 128 nodes and more; Polaris' ``prod`` starts at 10: the site files cite them).

Both modes are plain data here, so that validation, the dry run, the queue checks and the
Parsl configuration agree on the same jobs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from ..errors import ConfigError


@dataclass(frozen=True)
class BatchJob:
    """One batch job a sweep asks the scheduler for: its nodes, the node counts of the runs it
    holds, the queue it goes to (chosen once, in ``queues.plan_batch_jobs``) and a note when
    that is not the site's own queue."""
    nodes: int
    holds: tuple[int, ...]
    queue: str = ""
    note: str = ""


def packed_nodes(site, node_counts: Iterable[int]) -> int:
    """Nodes of the one batch job of a packed sweep."""
    counts = list(node_counts)
    return site.allocation_nodes or (max(counts) if counts else 1)


def batch_jobs(site, node_counts: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Batch job size (nodes) -> the node counts of the runs it holds, in this site's allocation mode."""
    counts = tuple(sorted(set(node_counts)))
    if site.allocation == "packed":
        return {packed_nodes(site, counts): counts} if counts else {}
    return {n: (n,) for n in counts}


def check_runs_fit(site, node_counts: Iterable[int]) -> None:
    """A packed sweep whose runs do not all fit its allocation is refused before submission."""
    if site.allocation != "packed":
        return
    size = packed_nodes(site, node_counts)
    too_big = sorted(n for n in set(node_counts) if n > size)
    if too_big:
        raise ConfigError("nodes", too_big[-1], f"larger than the packed allocation of {size} node(s) "
                          f"(allocation_nodes={size}): raise allocation_nodes or use allocation=per_size")


def with_allocation(site, allocation: str):
    """The same site in the other mode (the dry run compares both)."""
    return dataclasses.replace(site, allocation=allocation)
