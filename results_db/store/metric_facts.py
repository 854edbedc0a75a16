"""Which way each measure is better, and its unit: one declaration, read by every comparison.

A run column that measures something declares it beside itself in ``schema.py``
(``info=measure("lower", "s", speed=True)``); a user's own metric declares it in its workload
config (``workload.metrics.NAME: {pattern: ..., better: lower}``, or ``{better: lower}`` alone for
a value ``report.result()`` gives) or on the command line (``compare --better lower``), and a
declaration always wins. The project's own network benchmark (``workloads.netbench``, the
``network`` study) has its per-size metrics' directions as defaults by name pattern, for its own
runs only, and a comparison that leans on one says so (``Measure.default``). Any other metric with
no declaration is refused by every comparison until it has one, whatever its name: a time read as
a throughput turns a 30 % saving into "a speedup of 0.70".

Speedup and efficiency read the direction so that above 1 is always better: for a higher-is-better
metric, speedup = this / baseline; for a lower-is-better one (a time, an energy), baseline / this.
"""

from __future__ import annotations

from workloads import did_you_mean
import re
from typing import Iterable, Mapping

from .measure import BETTER, Measure
from .schema import runs_table

# netbench's (workloads/netbench.py) per-message-size metrics, stored as metrics.NAME: defaults
# for the runs of netbench itself, never for a user's metric that happens to share a name
NETBENCH_MODULE = "workloads.netbench"
NETBENCH_DEFAULT = "netbench's default for its own runs"
NETBENCH = ((re.compile(r"^(busbw|algbw)_gbps_\d+b$"), Measure("higher", "GB/s", True, NETBENCH_DEFAULT)),
            (re.compile(r"^time_us_\d+b$"), Measure("lower", "us", True, NETBENCH_DEFAULT)),
            (re.compile(r"^latency_us$"), Measure("lower", "us", True, NETBENCH_DEFAULT)))


class MetricDirectionError(ValueError):
    """A metric compared without knowing which way is better."""


def column_measures() -> dict[str, Measure]:
    """Every run column that declares a measure (schema.py)."""
    return {c.name: c.info["measure"] for c in runs_table.columns if "measure" in c.info}


def declared_in_configs(configs: Iterable[object], name: str) -> set[str]:
    """The ``better`` each run's workload config declares for its metric ``name``."""
    found = set()
    for config in configs:
        if not isinstance(config, Mapping):
            continue
        metrics = (config.get("workload") or {}).get("metrics") if isinstance(config.get("workload"), Mapping) else None
        spec = metrics.get(name) if isinstance(metrics, Mapping) else None
        if isinstance(spec, Mapping) and spec.get("better") in BETTER:
            found.add(spec["better"])
    return found


def runs_netbench(config: object) -> bool:
    """Whether a run's config is a run of the project's network benchmark (its command runs
    ``python -m workloads.netbench``)."""
    workload = config.get("workload") if isinstance(config, Mapping) else None
    command = workload.get("command") if isinstance(workload, Mapping) else None
    return isinstance(command, (list, tuple)) and NETBENCH_MODULE in map(str, command)


def measure_of(metric: str, configs: Iterable[object] = (), better: str | None = None) -> Measure:
    """The declared measure of ``metric`` (a run column or ``metrics.NAME``); ``better`` (the
    command line's) wins over a declaration. Refused in one line when nothing declares it."""
    if better is not None:
        if better not in BETTER:
            raise MetricDirectionError(f"--better {better!r}: expected higher or lower")
        known = column_measures().get(metric)
        return Measure(better, known.unit if known else "", known.speed if known else False)
    columns = column_measures()
    if metric in columns:
        return columns[metric]
    if metric.startswith("metrics."):
        name = metric.removeprefix("metrics.")
        configs = list(configs)
        declared = declared_in_configs(configs, name)
        if len(declared) == 1:
            return Measure(declared.pop())
        if len(declared) > 1:
            raise MetricDirectionError(f"metric {metric!r}: its runs declare both higher and lower as better; "
                                       "give --better higher or --better lower")
        if configs and all(runs_netbench(c) for c in configs):
            for pattern, found in NETBENCH:
                if pattern.match(name):
                    return found
        raise MetricDirectionError(
            f"metric {metric!r} declares no direction: add `better: higher` or `better: lower` to "
            f"workload.metrics.{name} in its config, or give --better higher|lower")
    hint = did_you_mean.hint(metric, columns)
    raise MetricDirectionError(f"{metric!r} is not a measure with a direction{hint}; measures: "
                               f"{', '.join(sorted(columns))}, or metrics.NAME")
