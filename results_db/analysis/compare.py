"""Group-by aggregates over runs, and comparisons against a baseline (speedup, efficiency).

Repeats are runs of one configuration (``configuration.py``, the one definition): they
are averaged (mean ± std).
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd
from sqlalchemy import Engine

from results_db.stats import confidence, power
from results_db.store import metric_facts, query, run_rows
from results_db.store.run_rows import AGGREGATES  # noqa: F401 - re-exported
from .configuration import CONFIG_AXES, config_axes, hashable, values_key


class CompareError(ValueError):
    """A baseline or aggregate the data cannot answer."""


def aggregate(engine: Engine, group_by: Sequence[str], metrics: dict[str, Sequence[str]] | None = None,
              study: str | None = None, where=None, attempts: str = "latest") -> pd.DataFrame:
    """``metrics``: column -> aggregates (count, mean, std, min, max, median, sum); one row per group.
    ``attempts="all"`` pools every attempt at a run (reruns) with its repeats. Grouped in
    ``run_rows.group_rows`` (what ``scalestudy query --group-by`` prints, without pandas)."""
    try:
        table = run_rows.aggregate_rows(engine, group_by, metrics, study=study, where=where, attempts=attempts)
    except run_rows.AggregateError as exc:
        raise CompareError(str(exc)) from None
    return query.frame_of(table)


def parse_baseline(baseline: str) -> tuple[str, object]:
    if "=" not in baseline:
        raise CompareError(f"baseline {baseline!r}: write it as AXIS=VALUE, e.g. algorithm=sync or nodes=1")
    axis, value = (x.strip() for x in baseline.split("=", 1))
    if axis not in CONFIG_AXES and not axis.startswith("params."):
        raise CompareError(f"baseline axis {axis!r} is not a sweep axis; known: "
                           f"{', '.join(a for a in CONFIG_AXES if a != 'params')}, params.NAME")
    for cast in (int, float):
        try:
            return axis, cast(value)
        except ValueError:
            pass
    return axis, value


def compare(engine: Engine, baseline: str, study: str | None = None, metric: str = "throughput",
            where=None, ignore: Sequence[str] = (), better: str | None = None) -> pd.DataFrame:
    """Per configuration: the metric (mean ± std over repeats), the baseline's, speedup and
    efficiency, each with its interval over the repeats (``speedup_low``/``_high``,
    ``efficiency_low``/``_high`` at ``confidence.LEVEL``; NaN with fewer than
    ``confidence.MIN_REPEATS`` a side, ``interval`` then says why), and the smallest change the
    repeats could detect (``detectable``, ``power``).

    Speedup is above 1 when better: this / baseline for a higher-is-better metric, baseline /
    this for a lower-is-better one (``metric_facts``; ``better`` overrides the declaration).
    Efficiency is speedup per unit of resources: speedup x baseline ranks / ranks (equal
    to the speedup when the baseline axis does not change the rank count, e.g. algorithm);
    against a threads_per_node baseline, per thread: x baseline threads / threads.
    ``ignore``: axes that move with the swept ones (``compare_runs``; the CLI and the report pass
    ``html_report.tables.dependent_axes``).
    """
    axis, _ = parse_baseline(baseline)
    runs = query.runs(engine, study=study, where=where)
    if metric.startswith("metrics.") and metric not in runs.columns:
        raise CompareError(f"metric {metric!r}: no run of this selection has it")
    out = compare_runs(runs[runs["status"] == "done"], baseline, metric, ignore=ignore, better=better)
    keys = [a for a in config_axes(out) if a != axis]
    varying = [k for k in keys if out[k].nunique(dropna=False) > 1]
    columns = [*varying, axis, *OUTPUT_COLUMNS(metric)]
    if "energy_joules" in out and out["energy_joules"].notna().any():   # measured by the hosts' counters
        out = out.assign(energy_kj_mean=out["energy_joules"] / 1e3)
        columns.append("energy_kj_mean")
    mixed = lambda col: col.map(str) if col.map(type).nunique() > 1 else col  # noqa: E731 - text and numbers
    out = out[columns].sort_values([*varying, axis], key=mixed).reset_index(drop=True)
    out.attrs.update(compare_attrs(metric, better, runs))
    return out


def OUTPUT_COLUMNS(metric: str) -> list[str]:   # noqa: N802 - a table's layout, named as one
    return ["repeats", f"{metric}_mean", f"{metric}_std", f"baseline_{metric}_mean", "speedup", "speedup_std",
            "speedup_low", "speedup_high", "efficiency", "efficiency_low", "efficiency_high", "interval",
            "detectable", "detectable_low", "detectable_high", "log_se", "df"]


def compare_attrs(metric: str, better: str | None, runs: pd.DataFrame) -> dict:
    fact = metric_facts.measure_of(metric, runs["config"] if "config" in runs else (), better)
    return {"better": fact.better, "unit": fact.unit, "direction_default": fact.default}


def _key(row, columns: Sequence[str]) -> tuple:
    return values_key([row[c] for c in columns])


def _values(runs: pd.DataFrame, columns: Sequence[str], metric: str):
    """(first row of a configuration, its repeats' values of ``metric`` in repeat order) per configuration."""
    if "repeat" in runs.columns:
        runs = runs.sort_values("repeat", kind="stable")
    if not columns:
        yield {}, list(runs[metric].dropna())
        return
    for _, part in runs.groupby(list(columns), dropna=False):
        yield part.iloc[0], list(part[metric].dropna())


def first_stage_of_config(config) -> float:
    """The first stage a run's repeats-on-demand rule recorded in its config (``repeats.first_stage``), or NaN."""
    stage = (config.get("repeats") or {}).get("first_stage") if isinstance(config, dict) else None
    return float(stage) if isinstance(stage, (int, float)) and not isinstance(stage, bool) else math.nan


def first_stage(row) -> int | None:
    """The first stage of a configuration whose repeats were added until its interval was tight
    (``sweep repeats.until=``): its variance comes from those alone (``confidence``)."""
    value = row.get("repeats_first_stage") if hasattr(row, "get") else None
    return int(value) if value is not None and value == value else None


def compare_runs(runs: pd.DataFrame, baseline: str, metric: str = "throughput",
                 ignore: Sequence[str] = (), value: object = None, better: str | None = None) -> pd.DataFrame:
    """``compare`` on runs already read (one row per finished run), keeping every axis column.

    ``ignore``: axes that move with the others (threads_per_node left at one per worker moves
    with workers_per_node), left out of matching a configuration to its baseline; else a
    baseline of workers_per_node=1 would find no partner for 2 workers with 2 threads.
    ``value``: the baseline's value as stored, where it differs from the text's (the report's
    ``check_baseline``: ``params.v=1`` given, "1" stored)."""
    axis, parsed = parse_baseline(baseline)
    value = parsed if value is None else value
    if runs.empty:
        raise CompareError("no finished runs match")
    try:
        fact = metric_facts.measure_of(metric, runs["config"] if "config" in runs else (), better)
    except metric_facts.MetricDirectionError as exc:
        raise CompareError(str(exc)) from None
    if "config" in runs.columns:   # repeats on demand: the first stage's size, as each run's config records it
        runs = runs.assign(repeats_first_stage=[first_stage_of_config(c) for c in runs["config"]])
    runs = hashable(query.expand_json(runs, "params") if "params" in runs.columns else runs)
    if axis not in runs.columns:
        raise CompareError(f"baseline axis {axis!r}: no run of this selection has it")
    if metric in runs.columns and runs[metric].dtype == object:
        runs = runs.assign(**{metric: pd.to_numeric(runs[metric], errors="coerce")})
    if metric not in runs.columns or not pd.api.types.is_numeric_dtype(runs[metric]):
        raise CompareError(f"metric {metric!r} is not a numeric run column")
    keys = [a for a in config_axes(runs) if a != axis]
    match = [k for k in keys if k not in ignore]
    # efficiency divides the speedup by the growth of what the axis adds: ranks, or threads
    # when the baseline is a thread count (threads change no world size)
    runs = runs.assign(_resources=runs["nodes"] * runs["threads_per_node"]
                       if axis == "threads_per_node" and {"nodes", "threads_per_node"} <= set(runs.columns)
                       else runs["world_size"])
    extra = {"energy_joules": ("energy_joules", "mean")} if "energy_joules" in runs.columns else {}
    if "repeats_first_stage" in runs.columns:
        extra["repeats_first_stage"] = ("repeats_first_stage", "max")
    per_config = (runs.groupby([*keys, axis], dropna=False)
                  .agg(repeats=(metric, "count"), mean=(metric, "mean"), std=(metric, "std"),
                       world_size=("world_size", "first"), _resources=("_resources", "first"), **extra)
                  .reset_index())
    base = per_config[per_config[axis] == value][[*match, "mean", "_resources"]]
    if base.empty:
        raise CompareError(f"no finished runs with {axis}={value!r} to compare against")
    base = base.rename(columns={"mean": "baseline_mean", "_resources": "_baseline_resources"})
    out = per_config.merge(base, on=match, how="inner")
    higher = fact.higher_is_better
    # above 1 is better, whichever way the metric points (metric_facts)
    out["speedup"] = out["mean"] / out["baseline_mean"] if higher else out["baseline_mean"] / out["mean"]
    out["speedup_std"] = out["speedup"] * out["std"] / out["mean"]
    out["efficiency"] = out["speedup"] * out["_baseline_resources"] / out["_resources"]
    # intervals over repeats (results_db/stats/confidence.py says what they rest on and how they were checked)
    values = {_key(r, [*keys, axis]): (v, first_stage(r)) for r, v in _values(runs, [*keys, axis], metric)}
    base_values = {_key(r, match): (v, first_stage(r)) for r, v in _values(runs[runs[axis] == value], match, metric)}
    estimates, detectable = [], []
    for _, row in out.iterrows():
        mine, mine_stage = values.get(_key(row, [*keys, axis]), ([], None))
        theirs, their_stage = base_values.get(_key(row, match), ([], None))
        if _same(row[axis], value):   # the baseline itself: 1 by definition, no interval of its own
            estimates.append(None)
            detectable.append((math.nan, math.nan, math.nan))
            continue
        num, den = (mine, theirs) if higher else (theirs, mine)
        stages = (mine_stage, their_stage) if higher else (their_stage, mine_stage)
        estimates.append(confidence.ratio_estimate(num, den, first_stage=stages))
        detectable.append(_detectable(mine, theirs))
    scale = out["_baseline_resources"] / out["_resources"]
    out["speedup_low"] = [e.low if e else math.nan for e in estimates]
    out["speedup_high"] = [e.high if e else math.nan for e in estimates]
    out["efficiency_low"] = out["speedup_low"] * scale
    out["efficiency_high"] = out["speedup_high"] * scale
    out["interval"] = [e.reason if e else "baseline" for e in estimates]
    out["detectable"] = [d[0] for d in detectable]
    out["detectable_low"] = [d[1] for d in detectable]
    out["detectable_high"] = [d[2] for d in detectable]
    out["log_se"] = [e.log_se if e else math.nan for e in estimates]
    out["df"] = [e.df if e else math.nan for e in estimates]
    out = out.drop(columns=["_resources", "_baseline_resources"])
    out.attrs.update(better=fact.better, unit=fact.unit, direction_default=fact.default)
    return out.rename(columns={"mean": f"{metric}_mean", "std": f"{metric}_std",
                               "baseline_mean": f"baseline_{metric}_mean"})


def _same(a, b) -> bool:
    return a == b or (isinstance(a, str) != isinstance(b, str) and str(a) == str(b))


def _detectable(mine: Sequence[float], theirs: Sequence[float]) -> tuple[float, float, float]:
    """The smallest relative change between the two configurations that their repeats would find
    with 80 % power, and the range it may lie in (``power.detectable_of``)."""
    return power.detectable_of(mine, theirs)