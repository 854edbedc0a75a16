"""How sure a comparison is: the interval of a ratio of means, the test on the same scale, the
interval of one configuration's mean or median, and the verdict between two sets of runs.

A study has few repeats per configuration (3-5 is usual on a supercomputer), so each method here
is one whose coverage holds at those counts, and each was checked by simulation for it
(``tests/results_db/test_confidence_coverage.py``; the numbers are in docs/how-to/compare.md):

- **A ratio of means** (speedup, efficiency, B/A): a t-interval on the log of the ratio, its
  standard error by the delta method, ``sqrt(s_x^2/(n_x m_x^2) + s_y^2/(n_y m_y^2))``, with
  Welch-Satterthwaite degrees of freedom (each side keeps its own noise: a larger allocation is
  often noisier). At unequal repeats Welch's degrees of freedom run high when the side with few
  repeats happens to vary little: simulated, its interval covered 92.4-93.7 % at 3 against 10 or 20
  and 93 % at 10 or 5 against 3 three times noisier, so its verdicts were false 6-7.6 % of the
  time. They are lowered (``unequal_df``) by ``UNEQUAL_DF_PENALTY`` x (1 - n_small / n_large) x the
  small side's share of the variance, never below the small side's n - 1 (7: the smallest value that
  kept every case at 40,000 trials at or above 95 %: 3 against 5, 10 and 20 repeats and 5 against 10
  and 20, either side up to 3x noisier). At 200,000 trials, with 11 held-out cases (3 against 4 to
  30, 4 and 6 against 3), it covers 94.9-96.9 % under normal noise, the least at 3 against 20 and
  where Welch's own interval stands at equal repeats (94.9 % at 3 against 3, 94.7 % at 4 against 4,
  one side 3x noisier): false verdicts at most 5.1-5.3 %, as Welch's. Under Student-t(3) 96.0-97.8 %,
  96.7 % at most from ``CAUTIOUS_BELOW`` (5) repeats a side; Welch itself covers 97.3-97.5 % at 3
  against 3 there: heavy tails make any t-interval cautious at few repeats, and no rule for the
  degrees of freedom mends it (docs/how-to/compare.md). Unchanged at equal repeats. The log scale
  keeps the interval positive and asymmetric as a ratio's is. It needs ``MIN_REPEATS`` (3) runs a
  side: at 2 a side its coverage is 97-98 % (the Satterthwaite degrees of freedom are then 1-2 and
  too cautious), so 2 repeats get "too few repeats", not an interval.
  Percentile bootstraps, which this replaced, cover 80 % at 3 repeats (they cannot reach beyond
  the values they resample).
- **The test** of "no change" is the same t statistic (log ratio over its standard error, the same
  degrees of freedom): the interval excludes 1 exactly when p < 1 - level. One scale for both, so a
  throughput and the matching time get the same verdict wherever p is not close to the threshold
  (the mean of times is not the inverse of the mean of rates: near p = 0.05 they can differ).
- **Ties**: a side whose repeats are all equal says nothing of its own noise; it is given the
  other side's relative variance. Both sides all equal: no interval and no verdict ("no
  variation"): never a certain one.
- **One configuration's mean**: Student's t-interval (from 2 runs). **Its median**: the
  distribution-free interval of order statistics (``scipy.stats.quantile_test``), from
  ``MIN_MEDIAN_REPEATS`` (6) runs: with fewer, no pair of order statistics covers 95 %.
- **Effect size**: Hedges' g (the standardised difference, corrected for small samples).
- **Sequential repeats** (``sweep repeats.until=``): a configuration whose repeats were added after
  a first stage of n0 (Stein's two-stage rule) takes its variance from those n0 alone, with n0 - 1
  degrees of freedom (``first_stage``): the number of repeats then depends only on that variance,
  and the interval keeps its coverage, which an interval from every repeat would not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import special   # the t distribution's functions; scipy.stats costs 0.4 s more to import

LEVEL = 0.95          # the intervals' confidence level
ALPHA = 0.05          # the test's level for a verdict (across a comparison: see ``multiplicity``)
MIN_REPEATS = 3       # runs a side for a ratio's interval and test
MIN_MEDIAN_REPEATS = 6  # runs for a median's distribution-free 95 % interval
# unequal repeats: Welch's degrees of freedom less this x (1 - n_small / n_large) (module docstring)
UNEQUAL_DF_PENALTY = 7.0
TOO_FEW = "too few repeats"
NO_VARIATION = "no variation"


# what each method assumes and how it was checked, in the words the report prints (docs/how-to/compare.md
# holds the full table; the figures come from tests/results_db/test_confidence_coverage.py's simulation)
CHECKED = ("The ratio's interval assumes each side's mean is roughly normal; simulated, a nominal 95 % covered "
           "95-97 % at 3-10 repeats under normal and skewed noise, 96-98 % with 1 run in 10 slowed 30 %, and "
           "95-97 % at unequal repeats (3 against up to 30, either side 3x noisier, cases the rule was not fitted "
           "on included; at 3-4 repeats a side, up to 98 % under heavy tails, as Welch's own), "
           "where the percentile bootstrap it replaced covered 81 % at 3. The detectable change is Welch's power as "
           "run (found 80 % of the time at the change it names).")


# below this many repeats a side, heavy-tailed noise makes every t-interval cautious: Welch's own at 3
# against 3 covers 97.3-97.5 % under Student-t(3), the rule at 3 against 4 97.8 %, where normal noise
# with one side 3x noisier needs all of 95 % (tests/results_db/test_confidence_coverage.py)
CAUTIOUS_BELOW = 5


def cautious_words() -> str:
    """What a ratio's interval promises at few repeats, in the words the compare table's header prints."""
    return (f"with {MIN_REPEATS}-{CAUTIOUS_BELOW - 1} repeats on a side, heavy-tailed noise makes them "
            "cautious (up to 98 %), never bold")


def interval_words(level: float = LEVEL) -> str:
    """What every ratio interval printed is, in the words the tables, figures and report use."""
    return f"{level:.0%} t-interval on the log ratio (Welch; from {MIN_REPEATS} repeats a side)"


def _clean(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and v == v], dtype=float)


@dataclass(frozen=True)
class RatioEstimate:
    """mean(numerator) / mean(denominator) with its interval at ``level`` and the test of 1."""
    ratio: float
    low: float
    high: float
    log_se: float         # standard error of log(ratio)
    df: float             # Welch-Satterthwaite degrees of freedom
    p_value: float        # two-sided, of "the ratio is 1"
    reason: str = ""      # why there is no interval: TOO_FEW, NO_VARIATION, or ""

    def upper(self, level: float = LEVEL) -> float:
        """One-sided upper bound at ``level`` (the knee's)."""
        if not self.log_se == self.log_se:
            return math.nan
        return self.ratio * math.exp(special.stdtrit(self.df, level) * self.log_se)


def _side(values: np.ndarray, first_stage: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """(means, relative variances of the means, degrees of freedom) of each row of repeats; the
    variance from the first ``first_stage`` repeats alone where the rule added more after them."""
    n = values.shape[1]
    mean = values.mean(axis=1)
    stage = values[:, :first_stage] if first_stage and n > first_stage >= 2 else values
    var = stage.var(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return mean, var / (n * mean * mean), stage.shape[1] - 1


def unequal_df(welch, va, vb, dfa: int, dfb: int):
    """Welch's degrees of freedom as the test uses them at unequal repeats (module docstring): they
    run high exactly when the side with fewer repeats happens to vary little, so they are lowered by
    ``UNEQUAL_DF_PENALTY`` x how unequal the counts are x that side's share of the variance, and
    never below that side's own (n - 1), the bound a one-side-dominated difference has anyway.
    Shared with ``power``, which must price the test as it is run."""
    if dfa == dfb:
        return welch
    unequal = 1 - (min(dfa, dfb) + 1) / (max(dfa, dfb) + 1)
    small = va if dfa < dfb else vb
    with np.errstate(divide="ignore", invalid="ignore"):
        lowered = welch - UNEQUAL_DF_PENALTY * unequal * small / (va + vb)
    return np.maximum(lowered, min(dfa, dfb))


def log_ratio_test(x: np.ndarray, y: np.ndarray, level: float = LEVEL,
                   first_stage: tuple[int | None, int | None] = (None, None)) -> dict[str, np.ndarray]:
    """The interval and test of mean(x) / mean(y) for each row of ``x`` and ``y`` (trials x
    repeats, at least ``MIN_REPEATS`` columns each): ratio, low, high, se, df, p, and ``tied``
    where neither side varies. Vectorised: the simulation tests run this very code on 10^4 trials."""
    mx, va, dfa = _side(x, first_stage[0])
    my, vb, dfb = _side(y, first_stage[1])
    nx, ny = x.shape[1], y.shape[1]
    tied = (va == 0) & (vb == 0)
    a_tied, b_tied = (va == 0) & ~tied, (vb == 0) & ~tied
    # ties on one side: its noise taken as the other's, relatively (module docstring); the whole
    # variance then rests on the other side's estimate, and so do the degrees of freedom
    va, vb = np.where(a_tied, vb * ny / nx, va), np.where(b_tied, va * nx / ny, vb)
    var = va + vb
    with np.errstate(divide="ignore", invalid="ignore"):
        welch = var * var / (va * va / dfa + vb * vb / dfb)
        welch = unequal_df(welch, va, vb, dfa, dfb)
        df = np.where(a_tied, dfb, np.where(b_tied, dfa, welch))
        se = np.sqrt(var)
        ratio = mx / my
        centre = np.log(ratio)
        half = special.stdtrit(df, 0.5 + level / 2) * se
        p = 2 * special.stdtr(df, -np.abs(centre) / se)
    nan = np.nan
    return {"ratio": ratio, "low": np.where(tied, nan, np.exp(centre - half)),
            "high": np.where(tied, nan, np.exp(centre + half)), "se": np.where(tied, nan, se),
            "df": np.where(tied, nan, df), "p": np.where(tied, nan, p), "tied": tied}


def ratio_estimate(numerator: Sequence[float], denominator: Sequence[float], level: float = LEVEL,
                   first_stage: tuple[int | None, int | None] = (None, None)) -> RatioEstimate:
    """The ratio of the two sides' means, its interval and test (module docstring)."""
    x, y = _clean(numerator), _clean(denominator)
    if len(x) == 0 or len(y) == 0 or x.mean() <= 0 or y.mean() <= 0:
        return RatioEstimate(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, TOO_FEW)
    ratio = float(x.mean() / y.mean())
    if len(x) < MIN_REPEATS or len(y) < MIN_REPEATS:
        return RatioEstimate(ratio, math.nan, math.nan, math.nan, math.nan, math.nan, TOO_FEW)
    r = {k: v[0] for k, v in log_ratio_test(x[None, :], y[None, :], level, first_stage).items()}
    if r["tied"]:
        return RatioEstimate(ratio, math.nan, math.nan, math.nan, math.nan, math.nan, NO_VARIATION)
    return RatioEstimate(ratio, float(r["low"]), float(r["high"]), float(r["se"]), float(r["df"]), float(r["p"]))


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float],
                   level: float = LEVEL) -> tuple[float, float]:
    est = ratio_estimate(numerator, denominator, level)
    return est.low, est.high


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Student's t-interval of the mean; (nan, nan) with fewer than two values."""
    x = _clean(values)
    if len(x) < 2:
        return math.nan, math.nan
    half = special.stdtrit(len(x) - 1, 0.5 + level / 2) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean() - half), float(x.mean() + half)


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """The median's distribution-free interval (order statistics, ``scipy.stats.quantile_test``);
    (nan, nan) with fewer than ``MIN_MEDIAN_REPEATS`` values."""
    x = _clean(values)
    if len(x) < MIN_MEDIAN_REPEATS:
        return math.nan, math.nan
    from scipy import stats

    ci = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(level)
    return float(ci.low), float(ci.high)


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float:
    """(mean(b) - mean(a)) over the pooled standard deviation, times Hedges' small-sample factor
    J = 1 - 3 / (4 (n_a + n_b) - 9) (Hedges 1981), which makes it nearly unbiased."""
    a, b = _clean(a), _clean(b)
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
    p_value: float          # the log-ratio t-test, unadjusted
    effect: float           # Hedges' g
    verdict: str            # "faster"/"better", "slower"/"worse", "no evidence", or why none (TOO_FEW...)
    log_se: float = math.nan
    df: float = math.nan


def words(speed: bool) -> tuple[str, str]:
    return ("faster", "slower") if speed else ("better", "worse")


def verdict(a: Sequence[float], b: Sequence[float], higher_is_better: bool = True, alpha: float = ALPHA,
            speed: bool = True, first_stage: tuple[int | None, int | None] = (None, None)) -> Verdict:
    """B against A: is B's metric different, with what confidence, and which way? ``alpha`` is the
    level this one comparison is held to (a whole comparison's correction sets it: ``multiplicity``).
    ``first_stage``: (A's, B's), as ``ratio_estimate`` takes them, so that a two-set comparison
    gives the interval ``compare`` gives on the same runs."""
    est = ratio_estimate(b, a, first_stage=(first_stage[1], first_stage[0]))
    word = est.reason or "no evidence"
    if not est.reason and est.p_value < alpha:
        up = est.ratio > 1
        good, bad = words(speed)
        word = good if up == higher_is_better else bad
    return Verdict(ratio=est.ratio, low=est.low, high=est.high, p_value=est.p_value, effect=hedges_g(a, b),
                   verdict=word, log_se=est.log_se, df=est.df)
