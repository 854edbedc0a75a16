"""A comparison of many configurations holds its error over all of them, not one at a time.

Ten configurations each tested at 5 % with no real change give at least one false verdict 40 %
of the time (1 - 0.95^10). The p-values of one comparison are adjusted together:

- ``holm`` (the default): Holm's step-down (Holm 1979) holds the family-wise error rate, the
  chance of any false verdict in the whole comparison, at ALPHA, under any dependence between
  the tests (the configurations of one study share nothing, but ``compare``'s share a baseline);
- ``bh``: Benjamini-Hochberg (1995) holds the false-discovery rate, the expected share of false
  verdicts among the verdicts given, at ALPHA: more verdicts, each less sure;
- ``none``: each configuration on its own, as before.

Checked against ``statsmodels.stats.multitest.multipletests`` in the tests (not used here).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

METHODS = {"holm": "Holm (family-wise error held at {alpha:g} across the {m} configurations)",
           "bh": "Benjamini-Hochberg (false-discovery rate held at {alpha:g} across the {m} configurations)",
           "none": "none (each configuration at {alpha:g} on its own: with {m} of them, false verdicts add up)"}


def describe(method: str, alpha: float, m: int) -> str:
    return METHODS[method].format(alpha=alpha, m=m)


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"correction {method!r}: expected one of {', '.join(METHODS)}")
    return method


def adjust(p_values: Sequence[float], method: str = "holm") -> np.ndarray:
    """Adjusted p-values (NaN stays NaN and does not count in the family): a verdict where the
    adjusted p is below ALPHA."""
    check_method(method)
    p = np.asarray([math.nan if v is None else v for v in p_values], dtype=float)
    out = np.full(p.shape, math.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0 or method == "none":
        out[ok] = p[ok]
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    ranked = p[order]
    if method == "holm":
        stepped = np.maximum.accumulate((m - np.arange(m)) * ranked)
    else:   # bh
        stepped = np.minimum.accumulate((m / np.arange(m, 0, -1) * ranked[::-1]))[::-1]
    out[order] = np.minimum(stepped, 1.0)
    return out


def family_alpha(method: str, alpha: float, m: int) -> float:
    """The level one configuration must reach before the others are looked at (Holm's first
    step, Bonferroni's alpha / m): what a design should plan for, so that a real change of the
    planned size is found whatever the others do. BH's last step is alpha itself, its first
    alpha / m; planned on the first, as Holm."""
    return alpha if method == "none" or m <= 1 else alpha / m
