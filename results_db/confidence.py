"""How sure a comparison is: bootstrap intervals over repeats, the knee of a scaling curve, and
the verdict between two sets of runs (another version, site or day).

A study has few repeats per configuration (3–5 is usual on a supercomputer), so every number here
says what it rests on:

- intervals are percentile bootstraps (``scipy.stats.bootstrap``) of a ratio of means, each side
  resampled within itself, at ``LEVEL``; with fewer than two repeats on a side there is no interval
  (NaN), and with 2–3 repeats a percentile bootstrap is narrower than the truth (it cannot see
  beyond the values it has): a verdict also needs the test below;
- the test between two sets is Welch's t-test on the values (unequal variances, no pairing):
  with 3–5 repeats a permutation test cannot reach small p-values (3 vs 3 runs have only 20
  distinct splits), Welch's can, and its false-verdict rate is checked in ``tests/test_confidence.py``;
- the effect size is Hedges' g (the standardised difference, corrected for small samples);
- a verdict ("faster", "slower") needs both: the interval of the ratio excludes 1 and p < ALPHA.
  Anything else is "no evidence" — not "the same".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

LEVEL = 0.95          # the intervals' confidence level
ALPHA = 0.05          # the test's level for a verdict
RESAMPLES = 2000      # bootstrap resamples per interval
SEED = 20261204       # intervals are reproducible: the same runs give the same table


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float], level: float = LEVEL,
                   seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(numerator) / mean(denominator); (nan, nan) with
    fewer than two values on either side, or values that do not vary at all (the interval is
    then the point itself)."""
    x = np.asarray([v for v in numerator if v == v], dtype=float)
    y = np.asarray([v for v in denominator if v == v], dtype=float)
    if len(x) < 2 or len(y) < 2 or y.mean() == 0:
        return math.nan, math.nan
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        point = x.mean() / y.mean()
        return point, point
    result = stats.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis=axis) / b.mean(axis=axis),
                             n_resamples=RESAMPLES, confidence_level=level, method="percentile",
                             vectorized=True, paired=False, random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def mean_interval(values: Sequence[float], level: float = LEVEL, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; (nan, nan) with fewer than two values."""
    x = np.asarray([v for v in values if v == v], dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    if np.ptp(x) == 0:
        return float(x[0]), float(x[0])
    result = stats.bootstrap((x,), lambda a, axis=-1: a.mean(axis=axis), n_resamples=RESAMPLES,
                             confidence_level=level, method="percentile", vectorized=True,
                             random_state=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
    """(mean(b) - mean(a)) over the pooled standard deviation, with Hedges' small-sample factor."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return math.nan
    pooled = math.sqrt(((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2))
    if pooled == 0:
        return math.nan
    return (b.mean() - a.mean()) / pooled * (1 - 3 / (4 * (na + nb) - 9))


@dataclass(frozen=True)
class Verdict:
    ratio: float            # mean(b) / mean(a)
    low: float              # its interval at LEVEL
    high: float
    p_value: float          # Welch's t-test
    effect: float           # Hedges' g
    verdict: str            # "faster", "slower", "no evidence"


def verdict(a: Sequence[float], b: Sequence[float], higher_is_better: bool = True) -> Verdict:
    """B against A: is B's metric different, with what confidence, and which way?"""
    a = [v for v in a if v == v]
    b = [v for v in b if v == v]
    ratio = (np.mean(b) / np.mean(a)) if a and b and np.mean(a) != 0 else math.nan
    low, high = ratio_interval(b, a)
    if len(a) >= 2 and len(b) >= 2 and (np.ptp(a) > 0 or np.ptp(b) > 0):
        p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    elif len(a) >= 2 and len(b) >= 2:   # every repeat the same on each side: different means are certain
        p = 0.0 if np.mean(a) != np.mean(b) else 1.0
    else:
        p = math.nan
    word = "no evidence"
    if p == p and p < ALPHA and low == low:
        up = low > 1
        down = high < 1
        if up or down:
            word = "faster" if up == higher_is_better else "slower"
    return Verdict(ratio=float(ratio), low=low, high=high, p_value=p, effect=hedges_g(a, b), verdict=word)


def knee(table: pd.DataFrame, axis: str, threshold: float, group_by: Sequence[str] = ()) -> pd.DataFrame:
    """Per group, the first value of ``axis`` (ascending) whose efficiency is below ``threshold``
    with the intervals' confidence (its upper bound below it); none when every size's interval
    reaches the threshold. ``table`` is ``compare``'s, with ``efficiency_high``."""
    rows = []
    groups = table.groupby(list(group_by), dropna=False) if group_by else [((), table)]
    for key, part in groups:
        part = part.sort_values(axis)
        below = part[part["efficiency_high"] < threshold]
        first = below.iloc[0] if not below.empty else None
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(group_by, key)), "knee": first[axis] if first is not None else None,
                     "efficiency": first["efficiency"] if first is not None else math.nan,
                     "efficiency_low": first["efficiency_low"] if first is not None else math.nan,
                     "efficiency_high": first["efficiency_high"] if first is not None else math.nan})
    return pd.DataFrame(rows)
