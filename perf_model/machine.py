"""The machine a prediction is for, as the model sees it: its hosts and its network.

Plain values the caller builds (from a site YAML, ``orchestrator.site.model_inputs``); the
model package reads no site files. Both the terms that fit a study
(``oversubscription``) and the prediction (``predict``) take them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from workloads.allreduce_traffic import RABENSEIFNER, node_link_bytes


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
    """A site's per-message latency (s) and bandwidth per node (bytes/s each way: what one node's
    link carries, all its NICs together).

    Across nodes an allreduce's bandwidth time is what one node's link must carry over B
    (``workloads.allreduce_traffic.node_link_bytes``, sources there): 2(N-1)/N x S for MPICH's
    reduce-scatter + allgather with the ranks placed node by node, 2(P-1)/P x S for a ring,
    whatever the ranks per node w (the model before issue 51 charged w x 2(P-1)/P x S, as if each
    of a node's w ranks sent its whole buffer across the link). On one node the site file has no
    shared-memory numbers, and its network's stand in: each rank's 2(P-1)/P x S at B, undivided."""
    latency: float
    node_bandwidth: float
    source: str

    def transfer_seconds(self, nbytes: float, nodes: int, workers_per_node: int,
                         algorithm: str = RABENSEIFNER) -> float:
        """The bandwidth part of one allreduce of ``nbytes`` per rank (latency aside)."""
        if nodes > 1:
            return float(node_link_bytes(nbytes, nodes, workers_per_node, algorithm)) / self.node_bandwidth
        ranks = nodes * workers_per_node
        return 2 * (ranks - 1) / ranks * nbytes / self.node_bandwidth if ranks > 1 else 0.0
