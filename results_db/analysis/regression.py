"""Two sets of runs against each other: another software version, another site, another day.

For each configuration both sets ran (matched on every configuration axis, less those the caller
says differ on purpose, such as ``site``), the change of the metric with its interval, the test
on the same scale, the effect size and a verdict (``confidence.verdict``), the verdicts held to
an error over the whole comparison (``multiplicity``: Holm by default). The metric's direction
comes from its declaration (``metric_facts``). A configuration only one set ran is listed as
such, never silently dropped.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from results_db.stats import confidence, multiplicity, power
from results_db.store import metric_facts
from results_db.store.query import expand_json
from .compare import CompareError, first_stage_of_config
from .configuration import config_axes, hashable, values_key


# a two-set comparison's columns after the configuration's keys
COLUMNS = ("a_repeats", "b_repeats", "a_mean", "b_mean", "change", "change_low", "change_high", "p_value", "p_adjusted",
           "effect", "detectable", "detectable_low", "detectable_high", "verdict")


def _key(values) -> tuple:
    return values_key(values if isinstance(values, tuple) else (values,))


def treatment_axes(a: pd.DataFrame, b: pd.DataFrame, axes) -> list[str]:
    """Axes that hold one value on each side, a different one: what the two sets differ in on
    purpose (a parameter, a site), left out of matching configurations."""
    out = []
    for x in axes:
        va, vb = a[x].map(lambda v: _key(v)[0]).unique(), b[x].map(lambda v: _key(v)[0]).unique()
        if len(va) == 1 and len(vb) == 1 and va[0] != vb[0]:
            out.append(x)
    return out


def _stage(runs: pd.DataFrame) -> int | None:
    """A configuration's repeats-on-demand first stage (``compare.first_stage``'s rule)."""
    found = runs["_first_stage"].dropna() if "_first_stage" in runs.columns else ()
    return int(max(found)) if len(found) else None


def compare_sets(a: pd.DataFrame, b: pd.DataFrame, metric: str = "throughput",
                 ignore: Sequence[str] = (), correction: str = "holm", better: str | None = None) -> pd.DataFrame:
    """One row per configuration, matched on every configuration axis less ``ignore`` and the
    axes each side holds one different value of (``treatment_axes``: ``attrs["treatment"]``):
    ``a_mean``, ``b_mean``, ``a_repeats``, ``b_repeats``,
    ``change`` (b / a) with ``change_low`` / ``change_high`` (each configuration's own interval at
    ``confidence.LEVEL``), ``p_value`` (the log-ratio test), ``p_adjusted`` (by ``correction``
    across the configurations both sets ran: ``multiplicity``), ``effect`` (Hedges' g),
    ``detectable`` (the smallest change these repeats find with 80 % power at the level the
    correction asks of one configuration), ``verdict`` (B against A: faster / slower, or better /
    worse for a measure that is not a speed; no evidence; too few repeats; no variation; only
    in A / only in B). ``attrs``: ``treatment``, ``correction`` (its description), ``better``."""
    multiplicity.check_method(correction)
    configs = [c for x in (a, b) if "config" in x for c in x["config"]]
    try:
        fact = metric_facts.measure_of(metric, configs, better)
    except metric_facts.MetricDirectionError as exc:
        raise CompareError(str(exc)) from None
    frames = []
    for runs in (a, b):
        runs = runs[runs["status"] == "done"] if "status" in runs else runs
        if runs.empty:
            raise CompareError("no finished runs on one side of the comparison")
        if "config" in runs.columns:   # read before hashable() turns each config into text
            runs = runs.assign(_first_stage=[first_stage_of_config(c) for c in runs["config"]])
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
    groups_a: dict[tuple, list] = {}
    groups_b: dict[tuple, list] = {}
    stages: dict[tuple, int | None] = {}   # (side, key): a repeats-on-demand first stage, as compare reads it
    for side, frame, groups in (("a", a, groups_a), ("b", b, groups_b)):
        if "repeat" in frame.columns:   # in repeat order: a first stage is the first repeats
            frame = frame.sort_values("repeat", kind="stable")
        for k, g in frame.groupby(keys, dropna=False):
            groups.setdefault(_key(k), []).extend(g[metric].dropna().tolist())
            stages[(side, _key(k))] = _stage(g)
    both = [k for k in groups_a if k in groups_b]
    level = multiplicity.family_alpha(correction, confidence.ALPHA, len(both))
    rows = []
    for key in sorted(set(groups_a) | set(groups_b), key=lambda k: tuple(map(str, k))):
        va, vb = groups_a.get(key), groups_b.get(key)
        row = dict(zip(keys, key))
        row.update(a_repeats=len(va or []), b_repeats=len(vb or []),
                   a_mean=pd.Series(va, dtype=float).mean(), b_mean=pd.Series(vb, dtype=float).mean())
        if va and vb:
            v = confidence.verdict(va, vb, higher_is_better=fact.higher_is_better, speed=fact.speed,
                                   first_stage=(stages.get(("a", key)), stages.get(("b", key))))
            row.update(change=v.ratio, change_low=v.low, change_high=v.high, p_value=v.p_value, effect=v.effect,
                       verdict=v.verdict, **_detectable(va, vb, level))
        else:
            row.update(change=float("nan"), change_low=float("nan"), change_high=float("nan"),
                       p_value=float("nan"), effect=float("nan"), verdict="only in A" if va else "only in B",
                       detectable=float("nan"), detectable_low=float("nan"), detectable_high=float("nan"))
        rows.append(row)
    out = pd.DataFrame(rows)
    out["p_adjusted"] = multiplicity.adjust(out["p_value"], correction)
    good, bad = confidence.words(fact.speed)
    decided = out["verdict"].isin((good, bad, "no evidence"))
    out.loc[decided & ~(out["p_adjusted"] < confidence.ALPHA), "verdict"] = "no evidence"
    out = out[[*keys, *COLUMNS]]
    out.attrs.update(treatment=treated, better=fact.better, direction_default=fact.default, correction=correction,
                     correction_text=multiplicity.describe(correction, confidence.ALPHA, len(both)),
                     family_alpha=level)
    return out


def _detectable(a, b, alpha: float) -> dict[str, float]:
    """The smallest relative change these repeats find with 80 % power at ``alpha``, and the range
    it may lie in (``power.detectable_of``)."""
    point, low, high = power.detectable_of(a, b, alpha)
    return {"detectable": point, "detectable_low": low, "detectable_high": high}


VERDICT_ORDER = ("faster", "better", "slower", "worse", "no evidence", confidence.TOO_FEW, confidence.NO_VARIATION,
                 "only in A", "only in B")


def verdict_counts(table: pd.DataFrame) -> str:
    """``2 faster, 1 no evidence``: the verdicts of a two-set comparison, counted."""
    counts = table["verdict"].value_counts()
    return ", ".join(f"{counts[v]} {v}" for v in VERDICT_ORDER if v in counts)


def legend(table: pd.DataFrame, metric: str) -> str:
    """What a two-set comparison's numbers rest on, in one paragraph (the terminal's and the report's)."""
    better = table.attrs.get("better", "higher")
    default = table.attrs.get("direction_default", "")
    said = f"{better} is better: {default}, --better to say otherwise" if default else f"{better} is better"
    return (f"{metric} ({said}): means (repeats); B/A with its own {confidence.LEVEL:.0%} t-interval on the "
            f"log ratio (Welch; none with fewer than {confidence.MIN_REPEATS} repeats a side); p, the log-ratio "
            f"t-test's; p adj. and the verdicts by {table.attrs.get('correction_text', 'Holm')}; g, Hedges' g; "
            f"detectable, the smallest change these repeats find with 80 % power at the level one configuration "
            f"must reach ({table.attrs.get('family_alpha', confidence.ALPHA):.2g}). Holm's and Benjamini-Hochberg's "
            f"hold under any dependence between configurations; simulated with 20 unchanged configurations at 3 "
            f"repeats, Holm gave any false verdict in 2.3 % of comparisons, no correction in 50 %")
