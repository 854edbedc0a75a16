"""Where a scaling curve's efficiency falls below a threshold, with a stated error rate.

"The knee is at 16 nodes" claims that efficiency is below the threshold there and beyond. Each
size's claim rests on a one-sided upper bound of its efficiency at ``LEVEL`` (the log-ratio
interval's, ``confidence.RatioEstimate.upper``), and the sizes are tested as a fixed sequence
from the largest down (Maurer, Hothorn and Lehmacher 1995): the largest first, each smaller one
only while every larger one was below. The knee is the smallest size so reached. A fixed sequence
holds the chance of any false "below" among the sizes it names at 1 - LEVEL, without dividing
the level among them (which "the first size whose bound is below", read from the small end,
does not: each size it passes is another 5 % chance to stop too early). Checked by simulation
in ``tests/results_db/test_confidence_coverage.py``, against that rule as a control.

Several series (one knee per group of the other axes) are one family: each series' sequence runs
at ``1 - (1 - LEVEL) / k`` for k series (Bonferroni, which holds under any dependence between
them), so that the chance of any wrong knee among all the lines printed is at most 1 - LEVEL, as
the printed line says; with the per-series level, 10 series at the threshold named some wrong
knee in 33 % of trials (issue 61).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import special

from .confidence import LEVEL


def upper_bound(efficiency, log_se, df, level: float = LEVEL):
    """The one-sided upper bound at ``level`` (NaN where there is no interval); arrays too."""
    efficiency, log_se, df = (np.asarray(v, dtype=float) for v in (efficiency, log_se, df))
    with np.errstate(invalid="ignore"):
        out = efficiency * np.exp(special.stdtrit(df, level) * log_se)
    return float(out) if out.ndim == 0 else out


def fixed_sequence(bounds, threshold: float):
    """The index of the smallest size reached from the largest down while each bound is below
    ``threshold`` (``bounds`` in ascending size order; NaN, too few repeats or the baseline,
    stops it); None (-1 for rows of a 2-D array of trials) when the largest is not below."""
    b = np.asarray(bounds, dtype=float)
    rows = np.atleast_2d(b)
    with np.errstate(invalid="ignore"):
        below = rows < threshold
    run = np.cumprod(below[:, ::-1], axis=1)[:, ::-1].astype(bool)   # below here and at every larger size
    reached = run.any(axis=1)
    first = np.where(reached, run.argmax(axis=1), -1)
    if b.ndim == 2:
        return first
    return int(first[0]) if first[0] >= 0 else None


def series_level(series: int, level: float = LEVEL) -> float:
    """Each series' level in a family of ``series`` (Bonferroni: module docstring)."""
    return 1 - (1 - level) / max(series, 1)


def knee(table: pd.DataFrame, axis: str, threshold: float, group_by: Sequence[str] = (),
         level: float = LEVEL) -> pd.DataFrame:
    """Per group, the knee (module docstring): ``knee`` (None when there is none), its
    ``efficiency`` and one-sided ``efficiency_upper`` bound at the series' level, and ``beyond``,
    how many sizes from it up are below. ``table`` is ``compare``'s (``efficiency``, ``log_se``,
    ``df``). ``attrs``: ``family`` (how many series) and ``series_level``; the whole family's
    chance of a wrong knee is at most ``1 - level``."""
    rows = []
    groups = list(table.groupby(list(group_by), dropna=False)) if group_by else [((), table)]
    level_each = series_level(len(groups), level)
    for key, part in groups:
        part = part.sort_values(axis)
        bounds = [upper_bound(e, s, d, level_each) for e, s, d in zip(part["efficiency"], part["log_se"], part["df"])]
        at = fixed_sequence(bounds, threshold)
        key = key if isinstance(key, tuple) else (key,)
        first = part.iloc[at] if at is not None else None
        rows.append({**dict(zip(group_by, key)), "knee": first[axis] if first is not None else None,
                     "efficiency": first["efficiency"] if first is not None else math.nan,
                     "efficiency_upper": bounds[at] if at is not None else math.nan,
                     "beyond": len(part) - at if at is not None else 0})
    out = pd.DataFrame(rows)
    out.attrs.update(family=len(groups), series_level=level_each)
    return out
