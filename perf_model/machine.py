"""The machine a prediction is for, as the model sees it: its hosts and its network.

Plain values the caller builds (from a site YAML, ``orchestrator.site.model_inputs``); the
model package reads no site files. Both the terms that fit a study
(``oversubscription``) and the prediction (``predict``) take them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Host:
    """A site's hosts as far as crowding goes: hardware threads each (``cpus``: what the OS
    schedules ranks on, cores x threads per core), and whether every rank of a run lands on
    the same one (the ``local`` site, whose "nodes" are this machine, or a site file's
    ``shared_host: true``)."""
    cpus: int
    one_host: bool

    def ranks_per_core(self, nodes: int, workers_per_node: int) -> float:
        ranks = nodes * workers_per_node if self.one_host else workers_per_node
        return ranks / max(self.cpus, 1)

    def to_params(self) -> dict[str, float]:
        return {"cpus_per_host": float(self.cpus), "one_host": 1.0 if self.one_host else 0.0}

    @classmethod
    def from_params(cls, params: Mapping[str, float]) -> "Host | None":
        if "cpus_per_host" not in params:
            return None
        return cls(int(params["cpus_per_host"]), bool(params.get("one_host", 0.0)))


@dataclass(frozen=True)
class Network:
    """A site's per-message latency (s) and injection bandwidth per node (bytes/s).

    Across nodes a node's ranks share its bandwidth: with ranks placed node by node, the
    reduce-scatter's first log2(nodes) halving steps pair every rank with one on another
    node, and those steps carry most of the bytes (N/2 + N/4 + ...). On one node the site
    file has no shared-memory numbers, and its network's stand in, undivided."""
    latency: float
    node_bandwidth: float
    source: str

    def per_rank(self, workers_per_node: int, nodes: int) -> tuple[float, float]:
        return self.latency, self.node_bandwidth / (workers_per_node if nodes > 1 else 1)
