"""A site's interconnect, as ``model predict`` needs it: the ``network:`` block of a site YAML.

    network:
      latency_us: 1.3            # per-message MPI latency, microseconds
      node_bandwidth_gbs: 10.2   # injection bandwidth per node, GB/s (10**9 bytes/s)
      source: "..."              # where the numbers come from (required: a number needs its source)

Only predictions read it (``model_inputs``); nothing is submitted differently. The values in the shipped site
files are quoted from the facilities' and vendors' documents named in their comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

KEYS = ("latency_us", "node_bandwidth_gbs", "source")


@dataclass(frozen=True)
class NetworkSpec:
    latency_us: float
    node_bandwidth_gbs: float
    source: str

    @property
    def latency_seconds(self) -> float:
        return self.latency_us * 1e-6

    @property
    def node_bandwidth_bytes(self) -> float:
        return self.node_bandwidth_gbs * 1e9


def parse_network(value: Any) -> NetworkSpec | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError("site.network", value, f"expected a mapping with {', '.join(KEYS)}")
    for key in value:
        if key not in KEYS:
            raise ConfigError(f"site.network.{key}", value[key], f"unknown key; known: {', '.join(KEYS)}")
    numbers = {}
    for key in KEYS[:2]:
        x = value.get(key)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
            raise ConfigError(f"site.network.{key}", x, "expected a number > 0")
        numbers[key] = float(x)
    source = value.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError("site.network.source", source, "expected where the numbers come from (a document, a benchmark)")
    return NetworkSpec(source=source.strip(), **numbers)
