"""How small a change the repeats can see: the power of the log-ratio t-test
(``confidence.ratio_estimate``), the smallest change it detects with 80 % power, and the repeats a
change of a given size needs.

The power is that of the test as it is run, Welch's with degrees of freedom estimated from the
repeats: the log ratio D is normal around log(1 + change) with the true standard error, and the
test rejects where |D| > t(df^) se^, se^ and df^ from the two sides' sample variances, which are
chi-square distributed and independent of D. The power is that probability averaged over the two
variances (a quadrature over their quantiles). The noncentral t of the pooled test, which
textbooks and ``statsmodels`` use, overstates it at 3 repeats (0.80 promised, 0.71 found: Welch's
degrees of freedom are often fewer than the pooled test's); it is what this gives for many repeats.

The noise (each side's coefficient of variation) is the repeats' own estimate: with 3 repeats it is
itself uncertain by about half, and so is the detectable change. It answers "could these repeats
have seen a 5 % change?", not "is there one". Checked against simulated repeats in
``tests/test_confidence_coverage.py``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from .confidence import ALPHA

POWER = 0.80
_GRID = 160   # quantiles of each side's variance: the quadrature's points (160 x 160; ~2 ms)


def _grid(df: int) -> np.ndarray:
    """A side's sample variance over its true one (chi-square / df) at its quantiles' midpoints."""
    q = (np.arange(_GRID) + 0.5) / _GRID
    return stats.chi2.ppf(q, df) / df


def power(change: float, cv_a: float, cv_b: float, n_a: int, n_b: int, alpha: float = ALPHA) -> float:
    """The chance the two-sided test at ``alpha`` finds a true relative change ``change``
    (0.10: 10 % higher) between sides of these noise levels and repeat counts."""
    if n_a < 2 or n_b < 2 or not (cv_a == cv_a and cv_b == cv_b):
        return math.nan
    true_a, true_b = cv_a * cv_a / n_a, cv_b * cv_b / n_b
    se = math.sqrt(true_a + true_b)
    if se == 0:
        return 1.0 if change else alpha
    va = true_a * _grid(n_a - 1)[:, None]
    vb = true_b * _grid(n_b - 1)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    df = np.where(np.isfinite(df), df, n_a + n_b - 2)   # one side without noise: the other's
    crit = stats.t.ppf(1 - alpha / 2, df) * np.sqrt(va + vb)
    shift = abs(math.log1p(change))
    found = stats.norm.cdf((shift - crit) / se) + stats.norm.cdf((-shift - crit) / se)
    return float(found.mean())


def detectable_change(cv_a: float, cv_b: float, n_a: int, n_b: int, alpha: float = ALPHA,
                      target: float = POWER) -> float:
    """The smallest relative gain (0.08: +8 %) the test finds with probability ``target``; NaN
    without two repeats a side or any noise estimate."""
    if n_a < 2 or n_b < 2 or not (cv_a == cv_a and cv_b == cv_b):
        return math.nan
    if cv_a == 0 and cv_b == 0:
        return math.nan
    hi = 1.0
    while power(hi, cv_a, cv_b, n_a, n_b, alpha) < target:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(optimize.brentq(lambda c: power(c, cv_a, cv_b, n_a, n_b, alpha) - target, 0.0, hi, xtol=1e-6))


def repeats_needed(change: float, cv: float, alpha: float = ALPHA, target: float = POWER, most: int = 1000) -> int:
    """Repeats a side for the test to find ``change`` with probability ``target`` where both sides
    have noise ``cv``; ``most + 1`` if even ``most`` do not."""
    for n in range(2, most + 1):
        if power(change, cv, cv, n, n, alpha) >= target:
            return n
    return most + 1
