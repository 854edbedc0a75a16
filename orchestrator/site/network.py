"""A site's interconnect, as ``model predict`` needs it: the ``network:`` block of a site YAML.

    network:
      latency_us: 1.3            # per-message MPI latency, microseconds
      node_bandwidth_gbs: 10.2   # injection bandwidth per node, GB/s (10**9 bytes/s)
      source: "..."              # where the numbers come from (required: a number needs its source)
      stand_ins: [latency_us]    # numbers no document gave: placeholders, said so in every prediction

Only predictions read it (``model_inputs``); nothing is submitted differently. The values in the shipped site
files are quoted from the facilities' and vendors' documents named in their comments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

KEYS = ("latency_us", "node_bandwidth_gbs", "source", "stand_ins")
NUMBERS = KEYS[:2]


@dataclass(frozen=True)
class NetworkSpec:
    latency_us: float
    node_bandwidth_gbs: float
    source: str
    stand_ins: tuple[str, ...] = ()

    def describe(self) -> str:
        """Each number, and whether a document gave it or it stands in for one."""
        return (f"latency {self.latency_us:g} us ({'stand-in, unsourced' if 'latency_us' in self.stand_ins else 'sourced'})"
                f", bandwidth {self.node_bandwidth_gbs:g} GB/s per node "
                f"({'stand-in, unsourced' if 'node_bandwidth_gbs' in self.stand_ins else 'sourced'}); {self.source}")

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
    for key in NUMBERS:
        x = value.get(key)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
            raise ConfigError(f"site.network.{key}", x, "expected a number > 0")
        numbers[key] = float(x)
    source = value.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError("site.network.source", source, "expected where the numbers come from (a document, a benchmark)")
    stand_ins = value.get("stand_ins") or []
    if not isinstance(stand_ins, list) or any(s not in NUMBERS for s in stand_ins):
        raise ConfigError("site.network.stand_ins", stand_ins, f"expected a list of {' and '.join(NUMBERS)}")
    return NetworkSpec(source=source.strip(), stand_ins=tuple(stand_ins), **numbers)
