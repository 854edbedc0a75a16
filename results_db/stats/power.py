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
``tests/results_db/test_confidence_coverage.py``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import special   # the distributions' functions; scipy.stats and .optimize cost 0.5 s to import

from .confidence import ALPHA, MIN_REPEATS, unequal_df

POWER = 0.80
_GRID = 96   # quantiles of each side's variance: the quadrature's points (96 x 96)


def _grid(df: int) -> np.ndarray:
    """A side's sample variance over its true one (chi-square / df) at its quantiles' midpoints."""
    q = (np.arange(_GRID) + 0.5) / _GRID
    return special.chdtri(df, 1 - q) / df   # the chi-square quantile q


@functools.lru_cache(maxsize=4096)
def _critical(n_a: int, n_b: int, share_a: float, alpha: float) -> np.ndarray:
    """The test's critical |log ratio| over the true standard error, at each point of the
    variances' grid: t(df^) se^ / se. It depends on the counts, on side A's share of the true
    variance (``share_a``, rounded to 0.001 by the callers: one grid serves a whole study) and on
    alpha alone, not on the noise's size."""
    va = share_a * _grid(n_a - 1)[:, None]
    vb = (1 - share_a) * _grid(n_b - 1)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (va + vb) ** 2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    df = np.where(np.isfinite(df), df, n_a + n_b - 2)   # one side without noise: the other's
    # the test as it is run: at unequal repeats its degrees of freedom are lowered (``confidence``)
    df = unequal_df(df, va, vb, n_a - 1, n_b - 1)
    return (special.stdtrit(df, 1 - alpha / 2) * np.sqrt(va + vb)).ravel()


def _setting(cv_a: float, cv_b: float, n_a: int, n_b: int) -> tuple[float, float]:
    """(true standard error of log ratio, side A's share of its variance, rounded)."""
    true_a, true_b = cv_a * cv_a / n_a, cv_b * cv_b / n_b
    se = math.sqrt(true_a + true_b)
    return se, (round(true_a / (true_a + true_b), 3) if se else 0.5)


def _power_z(z: float, critical: np.ndarray) -> float:
    return float((special.ndtr(z - critical) + special.ndtr(-z - critical)).mean())


def power(change: float, cv_a: float, cv_b: float, n_a: int, n_b: int, alpha: float = ALPHA) -> float:
    """The chance the two-sided test at ``alpha`` finds a true relative change ``change``
    (0.10: 10 % higher) between sides of these noise levels and repeat counts."""
    if n_a < 2 or n_b < 2 or not (cv_a == cv_a and cv_b == cv_b):
        return math.nan
    se, share = _setting(cv_a, cv_b, n_a, n_b)
    if se == 0:
        return 1.0 if change else alpha
    return _power_z(abs(math.log1p(change)) / se, _critical(n_a, n_b, share, alpha))


@functools.lru_cache(maxsize=4096)
def _detectable_z(n_a: int, n_b: int, share_a: float, alpha: float, target: float) -> float:
    """The shift, in true standard errors, that the test finds with probability ``target``."""
    critical = _critical(n_a, n_b, share_a, alpha)
    hi = 1.0
    while _power_z(hi, critical) < target:
        hi *= 2
        if hi > 1e6:
            return math.inf
    lo = 0.0
    while hi - lo > 1e-4:   # power grows with the shift: bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _power_z(mid, critical) < target else (lo, mid)
    return (lo + hi) / 2


_SHARES = np.linspace(0.0, 1.0, 21)   # side A's share of the variance where the detectable shift is solved


def detectable_change(cv_a: float, cv_b: float, n_a: int, n_b: int, alpha: float = ALPHA,
                      target: float = POWER) -> float:
    """The smallest relative gain (0.08: +8 %) the test finds with probability ``target``; NaN
    without two repeats a side or any noise estimate. The shift in standard errors is solved at 21
    shares of the variance between the sides and interpolated (within 0.2 % of a direct solve,
    ``tests/results_db/test_confidence.py``): a comparison of hundreds of configurations solves it a few
    dozen times, not once a row."""
    if n_a < 2 or n_b < 2 or not (cv_a == cv_a and cv_b == cv_b) or (cv_a == 0 and cv_b == 0):
        return math.nan
    true_a, true_b = cv_a * cv_a / n_a, cv_b * cv_b / n_b
    se = math.sqrt(true_a + true_b)
    zs = [_detectable_z(n_a, n_b, float(round(share, 3)), alpha, target) for share in _SHARES]
    return float(math.expm1(np.interp(true_a / (true_a + true_b), _SHARES, zs) * se))


RANGE = 0.80   # the detectable change's own range: its 10th-90th percentile over the noise it rests on


def detectable_range(cv_a: float, cv_b: float, n_a: int, n_b: int, alpha: float = ALPHA,
                     target: float = POWER, coverage: float = RANGE) -> tuple[float, float]:
    """What the detectable change may be, given that its noise is itself estimated from the
    repeats: (low, high), the change detectable at the ends of the ``coverage`` interval of the
    true noise (the estimated variance of the log ratio, taken as chi-square with the degrees of
    freedom of the side with fewer repeats: Welch's, estimated, covered 74-82 % of an 80 % range in
    simulation, these 82-93 %). At 3 repeats a side a detectable change of 19 % may be anything
    from ~13 to ~50 %: printed as a point it would say more than the repeats know (issue 61)."""
    point = detectable_change(cv_a, cv_b, n_a, n_b, alpha, target)
    if point != point:
        return math.nan, math.nan
    df = min(n_a, n_b) - 1
    tail = (1 - coverage) / 2
    # true variance = estimate x df / chi2(df): its low end from chi2's upper quantile, and back
    scale_low = math.sqrt(df / special.chdtri(df, tail))
    scale_high = math.sqrt(df / special.chdtri(df, 1 - tail))
    return (detectable_change(cv_a * scale_low, cv_b * scale_low, n_a, n_b, alpha, target),
            detectable_change(cv_a * scale_high, cv_b * scale_high, n_a, n_b, alpha, target))


def detectable_of(a, b, alpha: float = ALPHA) -> tuple[float, float, float]:
    """(detectable change, its range's low, high) from two sides' repeats, their noise estimated from
    them; NaNs below ``MIN_REPEATS`` a side. What compare and the two-set comparison print."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < MIN_REPEATS or len(b) < MIN_REPEATS:
        return math.nan, math.nan, math.nan
    noise = (a.std(ddof=1) / a.mean(), b.std(ddof=1) / b.mean(), len(a), len(b))
    return (detectable_change(*noise, alpha), *detectable_range(*noise, alpha))


def repeats_needed(change: float, cv: float, alpha: float = ALPHA, target: float = POWER, most: int = 1000) -> int:
    """Repeats a side for the test to find ``change`` with probability ``target`` where both sides
    have noise ``cv``; ``most + 1`` if even ``most`` do not."""
    for n in range(2, most + 1):
        if power(change, cv, cv, n, n, alpha) >= target:
            return n
    return most + 1
