"""Repeats on demand: a sweep adds repeats to each configuration until its interval is as tight as
asked (``repeats.until=0.03``: ±3 %), or ``repeats.most`` repeats, inside the same sweep.

The sweep runs in two phases. The first is the sweep as written, whose ``repeat=0,1,2`` values are
the first stage of Stein's two-stage rule (``results_db.stats.sequential``); once it has ended, each
configuration's first-stage results decide how many repeats it needs in all, and the second phase
runs the missing ones (``repeat=3,4,...``), admitted, recorded and shown like any runs. The number
depends on the first stage alone, so a sweep started again decides the same and runs only what is
missing: resumable like any sweep. Each run's config records ``repeats.first_stage``, which tells
``compare`` to take the configuration's variance from the first stage (the interval then keeps its
coverage, ``tests/results_db/test_confidence_coverage.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf

from workloads.spec import RunSpec

from ..errors import ConfigError

@dataclass(frozen=True)
class RepeatRule:
    until: float
    most: int
    metric: str
    first_stage: int

    def describe(self) -> str:
        return (f"repeats on demand: {self.metric} within ±{100 * self.until:g} % (95 %), first stage "
                f"{self.first_stage}, at most {self.most} repeats a configuration")


def _number(key: str, value: Any, low: float, high: float | None, whole: bool = False) -> float:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and float(value) != int(value))
    if bad or not (low < float(value) and (high is None or float(value) < high)):
        want = f"a whole number > {low:g}" if whole else f"a number between {low:g} and {high:g}"
        raise ConfigError(f"repeats.{key}", value, f"expected {want}")
    return float(value)


def rule_of(config: DictConfig, first_stage: int | None = None) -> RepeatRule | None:
    """The sweep's rule (None: ``repeats.until`` unset), checked: one line naming the key."""
    until = OmegaConf.select(config, "repeats.until")
    if until is None:
        return None
    until = _number("until", until, 0.0, 1.0)
    most = int(_number("most", OmegaConf.select(config, "repeats.most"), 0, None, whole=True))
    metric = OmegaConf.select(config, "repeats.metric")
    from results_db.store.metric_facts import column_measures

    if not isinstance(metric, str) or not (metric in column_measures() or metric.startswith("metrics.")):
        raise ConfigError("repeats.metric", metric, f"expected a measured run column ({', '.join(sorted(column_measures()))}) "
                                                    "or metrics.NAME")
    stage = first_stage if first_stage is not None else OmegaConf.select(config, "repeats.first_stage")
    if stage is None or stage < 2:
        raise ConfigError("repeats.until", until, "needs a first stage of at least 2 repeats: sweep repeat=0,1,2 with it")
    if most < stage:
        raise ConfigError("repeats.most", most, f"expected at least the first stage's {stage} repeats")
    return RepeatRule(until=until, most=most, metric=metric, first_stage=int(stage))


def first_stage(jobs: Sequence[Sequence[str]]) -> int:
    """The first stage's size from the sweep's jobs: its ``repeat=`` values, which must be 0..n0-1
    (the rule adds n0, n0 + 1, ...); 1 where the sweep does not sweep repeat."""
    values = {line.split("=", 1)[1] for job in jobs for line in job if line.split("=", 1)[0].lstrip("+") == "repeat"}
    if not values:
        return 1
    try:
        numbers = sorted(int(v) for v in values)
    except ValueError:
        raise ConfigError("repeat", ",".join(sorted(values)), "expected whole numbers 0,1,2,...") from None
    if numbers != list(range(len(numbers))):
        raise ConfigError("repeat", ",".join(map(str, numbers)),
                          "with repeats.until, the first stage is repeat=0,1,...,n-1 (the rule adds n, n+1, ...)")
    return len(numbers)


def configuration_key(spec: RunSpec) -> str:
    """What a configuration's repeats share: the fields that group stored runs
    (results_db/analysis/configuration.py, the one definition)."""
    from results_db.analysis.configuration import configuration_key as key_of

    return key_of(spec.to_dict())


@dataclass
class Decision:
    """One configuration's outcome of the first stage."""
    overrides: list[str]
    first: list[float]           # the first stage's values, in repeat order
    total: int                   # repeats it needs in all
    reason: str = ""             # why nothing is added where the stage is incomplete


def decide(rule: RepeatRule, jobs: Mapping[int, tuple[list[str], RunSpec]],
           values: Mapping[str, float]) -> list[Decision]:
    """Per configuration of the sweep's first stage: how many repeats in all (``values``: run
    key -> the finished run's metric value)."""
    from results_db.stats.sequential import stein_repeats

    from .runspec import run_key

    groups: dict[str, list[tuple[int, list[str], RunSpec]]] = {}
    for idx, (overrides, spec) in sorted(jobs.items()):
        if spec.repeat < rule.first_stage:
            groups.setdefault(configuration_key(spec), []).append((idx, overrides, spec))
    out = []
    for members in groups.values():
        members.sort(key=lambda m: m[2].repeat)
        first = [values.get(run_key(spec)) for _, _, spec in members]
        overrides = members[0][1]
        if len(members) < rule.first_stage or any(v is None for v in first):
            out.append(Decision(overrides, [], rule.first_stage,
                                f"its first stage has {sum(v is not None for v in first)} of {rule.first_stage} "
                                f"finished runs with {rule.metric}"))
            continue
        out.append(Decision(overrides, [float(v) for v in first], stein_repeats(first, rule.until, rule.most)))
    return out


def follow_up_jobs(decisions: Sequence[Decision], first_stage: int) -> list[list[str]]:
    """The second phase's jobs: each configuration's overrides with ``repeat=`` set to each repeat
    it still needs."""
    jobs = []
    for d in decisions:
        for repeat in range(first_stage, d.total):
            jobs.append([line if line.split("=", 1)[0].lstrip("+") != "repeat" else f"repeat={repeat}"
                         for line in d.overrides])
    return jobs


def summary(rule: RepeatRule, decisions: Sequence[Decision]) -> str:
    """One line after the first stage: what the rule decided."""
    from results_db.stats.sequential import BEYOND_PROMISE, PROMISE_UP_TO, half_width

    more = [d for d in decisions if d.total > rule.first_stage and not d.reason]
    enough = [d for d in decisions if d.total == rule.first_stage and not d.reason]
    capped = [d for d in more if d.total == rule.most and
              half_width(d.first + [sum(d.first) / len(d.first)] * (rule.most - rule.first_stage),
                         rule.first_stage) > rule.until]
    parts = [f"{len(more)} configuration(s) get {sum(d.total - rule.first_stage for d in more)} more repeat(s)",
             f"{len(enough)} reached ±{100 * rule.until:g} % with the first {rule.first_stage}"]
    if capped:
        parts.append(f"{len(capped)} stop at repeats.most={rule.most} short of ±{100 * rule.until:g} %")
    beyond = [d for d in more if d not in capped and d.total > PROMISE_UP_TO]
    if beyond:
        parts.append(f"{len(beyond)} need over {PROMISE_UP_TO} repeats, where the printed interval meets "
                     f"±{100 * rule.until:g} % in {BEYOND_PROMISE} of configurations, not 95 % (docs/how-to/compare.md)")
    skipped = [d for d in decisions if d.reason]
    if skipped:
        parts.append(f"{len(skipped)} get none: {skipped[0].reason}")
    return f"{rule.describe()}: " + "; ".join(parts)
