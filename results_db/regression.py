"""Two sets of runs against each other: another software version, another site, another day.

For each configuration both sets ran (matched on every configuration axis, less those the caller
says differ on purpose, such as ``site``), the change of the metric with its interval, Welch's
test, the effect size and a verdict (``confidence.verdict``). A configuration only one set ran is
listed as such, never silently dropped.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from . import confidence
from .compare import CompareError, config_axes, hashable
from .query import expand_json

# metrics where smaller is better (a verdict of "faster" then means smaller): times, energy, power,
# memory and losses, by a word of their names (netbench's latency_us and time_us_* too)
LOWER_IS_BETTER = frozenset({"seconds", "us", "ms", "time", "joules", "kj", "watts", "mb", "memory", "loss",
                             "latency"})


def higher_is_better(metric: str) -> bool:
    return not set(metric.removeprefix("metrics.").lower().split("_")) & LOWER_IS_BETTER


def _key(values) -> tuple:
    """A configuration's values as a dict key, NaN and None one value (as compare._key)."""
    values = values if isinstance(values, tuple) else (values,)
    return tuple(None if (isinstance(v, float) and v != v) else v for v in values)


def treatment_axes(a: pd.DataFrame, b: pd.DataFrame, axes) -> list[str]:
    """Axes that hold one value on each side, a different one: what the two sets differ in on
    purpose (a parameter, a site), left out of matching configurations."""
    out = []
    for x in axes:
        va, vb = a[x].map(lambda v: _key(v)[0]).unique(), b[x].map(lambda v: _key(v)[0]).unique()
        if len(va) == 1 and len(vb) == 1 and va[0] != vb[0]:
            out.append(x)
    return out


def compare_sets(a: pd.DataFrame, b: pd.DataFrame, metric: str = "throughput",
                 ignore: Sequence[str] = ()) -> pd.DataFrame:
    """One row per configuration, matched on every configuration axis less ``ignore`` and the
    axes each side holds one different value of (``treatment_axes``: ``attrs["treatment"]``):
    ``a_mean``, ``b_mean``, ``a_repeats``, ``b_repeats``,
    ``change`` (b / a) with ``change_low`` / ``change_high``, ``p_value``, ``effect`` (Hedges'
    g), ``verdict`` (B against A: faster, slower, no evidence, or only in A / only in B)."""
    frames = []
    for runs in (a, b):
        runs = runs[runs["status"] == "done"] if "status" in runs else runs
        if runs.empty:
            raise CompareError("no finished runs on one side of the comparison")
        runs = hashable(expand_json(runs, "params") if "params" in runs.columns else runs)
        if metric not in runs.columns:
            raise CompareError(f"metric {metric!r}: not a column of these runs")
        frames.append(runs.assign(**{metric: pd.to_numeric(runs[metric], errors="coerce")}))
    a, b = frames
    axes = [x for x in config_axes(pd.concat([a.head(1), b.head(1)])) if x not in ignore
            and x in a.columns and x in b.columns]
    treated = treatment_axes(a, b, axes)
    axes = [x for x in axes if x not in treated]
    varying = [x for x in axes if pd.concat([a[x], b[x]]).nunique(dropna=False) > 1]
    keys = varying or axes[:1]
    higher = higher_is_better(metric)
    groups_a: dict[tuple, list] = {}
    groups_b: dict[tuple, list] = {}
    for frame, groups in ((a, groups_a), (b, groups_b)):
        for k, g in frame.groupby(keys, dropna=False):
            groups.setdefault(_key(k), []).extend(g[metric].dropna().tolist())
    rows = []
    for key in sorted(set(groups_a) | set(groups_b), key=lambda k: tuple(map(str, k))):
        va, vb = groups_a.get(key), groups_b.get(key)
        row = dict(zip(keys, key))
        row.update(a_repeats=len(va or []), b_repeats=len(vb or []),
                   a_mean=pd.Series(va, dtype=float).mean(), b_mean=pd.Series(vb, dtype=float).mean())
        if va and vb:
            v = confidence.verdict(va, vb, higher_is_better=higher)
            row.update(change=v.ratio, change_low=v.low, change_high=v.high, p_value=v.p_value, effect=v.effect,
                       verdict=v.verdict)
        else:
            row.update(change=float("nan"), change_low=float("nan"), change_high=float("nan"),
                       p_value=float("nan"), effect=float("nan"), verdict="only in A" if va else "only in B")
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["treatment"] = treated
    return out
