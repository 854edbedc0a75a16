"""What each interval and verdict claims, tested by simulation: repeats drawn from noise whose truth
is known, the module's own vectorised code run on every trial, and for each claim a control that
the test fails (the method this replaced, or the rule one would write first).

Noise, relative to the true value (a run's throughput or time):
- normal: 5 % standard deviation;
- lognormal: log-sd 0.25 (skewed: a few runs much slower);
- outliers: 5 % normal noise, and 1 run in 10 slowed by 30 % (a bad node, a busy file system).
Each case runs 4,000 trials (a coverage of 95 % is then measured to ±0.7 %, two standard errors);
the fast lane (scripts/test.sh --fast) runs 1,000, and widens each bound on a measured rate by the
extra Monte Carlo error that costs (``slack``), never a control's. The figures measured here are in
docs/how-to/compare.md.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy import stats

from results_db.stats import confidence, knee, multiplicity, power, sequential

SCALE = 4 if os.environ.get("SCALESTUDY_FAST_LANE") else 1   # the fast lane: a quarter of the trials
FULL_TRIALS = 4000
TRIALS = FULL_TRIALS // SCALE


def slack(rate: float, full: int = FULL_TRIALS) -> float:
    """How much wider two standard errors of a measured ``rate`` are at ``full // SCALE`` trials than
    at the ``full`` each bound was set for (0 in the whole suite)."""
    return 2 * np.sqrt(rate * (1 - rate) / full) * (np.sqrt(SCALE) - 1)


def noise(kind: str, rng, shape, slower: bool = True) -> np.ndarray:
    """Multiplicative noise around 1 (for a time: a slowed run is 1.3x; ``slower=False`` for a
    rate, 1/1.3x); the outliers' mean is then not 1, which is why both sides of a ratio share it."""
    if kind == "normal":
        return 1 + 0.05 * rng.standard_normal(shape)
    if kind == "lognormal":
        return np.exp(0.25 * rng.standard_normal(shape))
    slowed = np.where(rng.random(shape) < 0.1, 1.3 if slower else 1 / 1.3, 1.0)
    return (1 + 0.05 * rng.standard_normal(shape)) * slowed


def covered(low, high, truth) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


def percentile_bootstrap_ratio(x, y, rng, resamples=1000):
    """The method this replaced (``scipy.stats.bootstrap(method="percentile")``, each side
    resampled within itself), vectorised over trials: the control."""
    t, n = x.shape
    ix = rng.integers(0, n, (t, resamples, n))
    iy = rng.integers(0, y.shape[1], (t, resamples, y.shape[1]))
    r = np.take_along_axis(x[:, None, :].repeat(resamples, 1), ix, 2).mean(2) / \
        np.take_along_axis(y[:, None, :].repeat(resamples, 1), iy, 2).mean(2)
    return np.quantile(r, 0.025, axis=1), np.quantile(r, 0.975, axis=1)


# nominal 95 %: within 93-97 %, except where stated. Outliers make the interval cautious, not bold:
# a slowed run inflates its side's variance more than it moves the mean, so 96-98 % (measured 97.4-97.8
# at 3 and 5 repeats); the upper bound is 98 % there, and the docs say so.
UPPER = {"normal": 0.97, "lognormal": 0.97, "outliers": 0.98}


@pytest.mark.parametrize("kind", ["normal", "lognormal", "outliers"])
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_ratio_interval_covers_what_it_says(kind, n):
    rng = np.random.default_rng(1000 * n + len(kind))
    x = 120 * noise(kind, rng, (TRIALS, n))
    y = 100 * noise(kind, rng, (TRIALS, n))
    r = confidence.log_ratio_test(x, y)
    coverage = covered(r["low"], r["high"], 1.2)
    assert 0.93 - slack(0.95) <= coverage <= UPPER[kind] + slack(0.95), coverage


# unequal repeats (issue 61): (repeats of x, of y, x's noise, y's noise) in units of 5 %
UNEQUAL = [(3, 5, 1, 1), (3, 10, 1, 1), (3, 20, 1, 1), (5, 10, 1, 1), (5, 20, 1, 1), (10, 3, 1, 3), (5, 3, 1, 3),
           (20, 3, 1, 3), (3, 10, 3, 1), (3, 20, 3, 1), (5, 20, 3, 1)]
# cases the penalty (7) was not chosen on: nearer and farther counts, 2x noise, 4 repeats; the rule holds
# there too (measured at 200,000 trials: 94.9-96.9 % under normal noise, 96.0-97.8 % under Student-t(3),
# the most at 3 against 4 equal sides, where Welch's own covers 97.3 %)
HELD_OUT = [(3, 4, 1, 1), (4, 3, 1, 3), (3, 7, 2, 1), (3, 7, 1, 2), (4, 10, 1, 1), (4, 10, 3, 1), (3, 15, 2, 1),
            (6, 3, 1, 2), (3, 30, 1, 1), (3, 30, 3, 1), (6, 30, 1, 1)]
UNEQUAL_TRIALS = 20_000 // SCALE   # a false-verdict rate of 5 % to +-0.3 %: the bound is the claim itself


def _unequal(rng, case, kind: str, truth: float, trials: int):
    nx, ny, sx, sy = case
    draw = (lambda n: rng.standard_normal((trials, n))) if kind == "normal" else \
        (lambda n: rng.standard_t(3, (trials, n)) / np.sqrt(3))   # Student-t(3), its sd 1: heavy tails
    return truth * 100 * (1 + 0.05 * sx * draw(nx)), 100 * (1 + 0.05 * sy * draw(ny))


@pytest.mark.parametrize("kind", ["normal", "heavy"])
@pytest.mark.parametrize("case", UNEQUAL + HELD_OUT,
                         ids=lambda c: f"{c[0]}x{c[2]}-vs-{c[1]}x{c[3]}" + ("-held-out" if c in HELD_OUT else ""))
def test_the_ratio_interval_keeps_its_promise_at_unequal_repeats_and_noise(kind, case):
    """3 against 5, 10, 20 repeats (and 5 against 10, 20), either side up to 3x noisier, and the
    held-out cases: with no true change a false verdict about 5 % of the time at most (5.1 % at 3
    against 20 at 200,000 trials, as Welch's own at equal repeats), so the interval covers about 95 %
    at least, and at most 97 % under normal noise (measured 94.9-96.9 %) and from ``CAUTIOUS_BELOW``
    (5) repeats a side under Student-t(3) (96.5-96.7 %); below that, 98 % (96.0-97.8 %: Welch's own
    at 3 against 3 equal repeats is 97.3-97.5 % there, the t-interval's caution, not the rule's)."""
    rng = np.random.default_rng([*case, len(kind)])   # a stream of its own for every case
    x, y = _unequal(rng, case, kind, 1.2, UNEQUAL_TRIALS)
    r = confidence.log_ratio_test(x, y)
    mc = 2 * np.sqrt(0.05 * 0.95 / UNEQUAL_TRIALS) - 2 * np.sqrt(0.05 * 0.95 / 20_000)   # the fast lane's extra
    coverage = covered(r["low"], r["high"], 1.2)
    cautious = kind == "heavy" and min(case[:2]) < confidence.CAUTIOUS_BELOW   # what the compare header says
    # each bound +-0.003, two standard errors of 20,000 trials: the claim is of the true coverage
    assert 0.947 - mc <= coverage <= (0.98 if cautious else 0.97) + 0.003 + mc, coverage
    x, y = _unequal(rng, case, kind, 1.0, UNEQUAL_TRIALS)
    false = float(np.mean(confidence.log_ratio_test(x, y)["p"] < confidence.ALPHA))
    assert false <= 0.053 + mc, false


def test_at_three_repeats_welchs_own_interval_spans_both_ends_of_the_band():
    """Why the upper bound under heavy tails is 98 % at 3 repeats (issue 61 asked 97 %): Welch's own
    interval at 3 against 3, with no unequal-repeats rule involved, already spans the band's both
    ends. With one side 3x noisier under normal noise it is at 95 % (false verdicts at the 5 %
    promised: a df raised anywhere there breaks it), while with equal sides under Student-t(3) it
    is over 97 %: from 3 runs a side, the samples cannot tell these cases apart (tried: a df raised
    where the two sides' variances look alike brought the second to 96.8 % and the first to 94.1 %,
    under its 95 %). From 5 repeats a side the unequal cases are at most 96.8 % (the test above)."""
    rng = np.random.default_rng(63)
    x, y = _unequal(rng, (3, 3, 1, 3), "normal", 1.2, 40_000)
    r = confidence.log_ratio_test(x, y)
    assert covered(r["low"], r["high"], 1.2) < 0.953
    x, y = _unequal(rng, (3, 3, 1, 1), "heavy", 1.2, 40_000)
    r = confidence.log_ratio_test(x, y)
    assert covered(r["low"], r["high"], 1.2) > 0.971


@pytest.mark.parametrize("case", [(3, 20, 1, 1), (10, 3, 1, 3)], ids=["3-vs-20", "10-vs-3x3"])
def test_welchs_own_degrees_of_freedom_give_false_verdicts_at_unequal_repeats(case, monkeypatch):
    """The control: the rule one would write first, Welch's degrees of freedom as they come (the
    issue's 92.9 % and 7.1 % false verdicts at 10 against 3): it fails the bounds above."""
    monkeypatch.setattr(confidence, "UNEQUAL_DF_PENALTY", 0.0)
    rng = np.random.default_rng(61)
    x, y = _unequal(rng, case, "normal", 1.0, 20_000)
    assert float(np.mean(confidence.log_ratio_test(x, y)["p"] < confidence.ALPHA)) > 0.06


def test_a_flat_penalty_is_too_cautious_where_the_small_side_is_the_noisy_one(monkeypatch):
    """The upper control: the rule before this one, Welch's df less a flat 3.5 x (1 - n_small /
    n_large) down to 1, whatever the sides' shares of the variance. At 20 quiet repeats against 3
    noisy ones Welch's df is already about 2 and the flat rule drives it to 1: it covers ~98 %, over
    the 97 % the rule above keeps under normal noise."""
    def flat(welch, va, vb, dfa, dfb):
        return np.maximum(welch - 3.5 * (1 - (min(dfa, dfb) + 1) / (max(dfa, dfb) + 1)), 1.0)
    monkeypatch.setattr(confidence, "unequal_df", flat)
    rng = np.random.default_rng(62)
    x, y = _unequal(rng, (20, 3, 1, 3), "normal", 1.2, 20_000)
    r = confidence.log_ratio_test(x, y)
    assert covered(r["low"], r["high"], 1.2) > 0.972


def test_two_repeats_get_no_interval_and_the_percentile_bootstrap_fails_at_three():
    """At 2 repeats a side the Welch interval would cover ~97.7 % (too cautious to say 95 %):
    the code says "too few repeats". The control: the percentile bootstrap at 3 repeats covers
    far less than 95 % (measured ~0.80)."""
    rng = np.random.default_rng(2)
    assert confidence.ratio_estimate([1.0, 1.1], [1.0, 1.2]).reason == confidence.TOO_FEW
    x, y = 120 * noise("normal", rng, (TRIALS // 4, 3)), 100 * noise("normal", rng, (TRIALS // 4, 3))
    low, high = percentile_bootstrap_ratio(x, y, rng)
    assert covered(low, high, 1.2) < 0.88


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_the_means_interval_covers_what_it_says(kind, n):
    rng = np.random.default_rng(n + 7 * len(kind))
    x = 100 * noise(kind, rng, (TRIALS, n))
    truth = 100 * (1.0 if kind == "normal" else np.exp(0.25 ** 2 / 2))
    lows, highs = np.array([confidence.mean_interval(row) for row in x]).T
    assert 0.93 - slack(0.95) <= covered(lows, highs, truth) <= 0.97 + slack(0.95)


def test_rare_slow_runs_defeat_the_means_interval_not_the_medians():
    """What the docs say of ``mean_low``/``mean_high``: 10 repeats that caught no slow run (35 % of
    them) cannot see the slow runs in the mean, so its interval covers ~86 %; the median's
    distribution-free interval covers at least 95 % whatever the noise. The control of the mean's:
    the percentile bootstrap covers ~76 % at 3 repeats even under normal noise."""
    rng = np.random.default_rng(9)
    x = 100 * noise("outliers", rng, (TRIALS, 10))
    mean_truth = 100 * 1.03
    lows, highs = np.array([confidence.mean_interval(row) for row in x]).T
    assert covered(lows, highs, mean_truth) < 0.9
    big = noise("outliers", rng, (2_000_000,))
    median_truth = 100 * np.median(big)
    lows, highs = np.array([confidence.median_interval(row) for row in x[:1000]]).T
    assert covered(lows, highs, median_truth) >= 0.95 - slack(0.95)
    y = 100 * noise("normal", rng, (TRIALS // 4, 3))
    means = np.take_along_axis(y[:, None, :].repeat(1000, 1), rng.integers(0, 3, (len(y), 1000, 3)), 2).mean(2)
    assert covered(np.quantile(means, 0.025, 1), np.quantile(means, 0.975, 1), 100.0) < 0.85


def _knee_trials(rng, efficiencies, n: int, threshold: float, trials: int):
    """Per trial, the size index each rule names as the knee (-1: none), for sizes 1, 2, 4, ...
    whose true efficiency is given: throughput = ranks x efficiency x 100, repeats with 5 % noise."""
    sizes = 2 ** np.arange(len(efficiencies))
    base = 100 * noise("normal", rng, (trials, n))
    bounds = []
    for size, eff in zip(sizes[1:], efficiencies[1:]):
        runs = size * eff * 100 * noise("normal", rng, (trials, n))
        r = confidence.log_ratio_test(runs, base)
        bounds.append(knee.upper_bound(r["ratio"] / size, r["se"], r["df"]))
    bounds = np.column_stack([np.full(trials, np.nan), *bounds])
    fixed = knee.fixed_sequence(bounds, threshold)
    below = bounds < threshold
    first_below = np.where(below.any(axis=1), below.argmax(axis=1), -1)   # the control: read from the small end
    return fixed, first_below


def test_the_knee_names_a_size_not_below_the_threshold_at_most_five_percent_of_the_time():
    """Sizes 1-16 with true efficiency 1, 0.9, then 0.8 three times at a threshold of 0.8: every
    size is at best at the threshold, so any knee named is wrong. The fixed sequence names one
    ~5 % of the time (its level); the first-below rule, at the same one-sided bound, ~13 %."""
    rng = np.random.default_rng(4)
    fixed, first_below = _knee_trials(rng, [1.0, 0.9, 0.8, 0.8, 0.8], 3, 0.8, TRIALS)
    assert np.mean(fixed >= 0) <= 0.055 + slack(0.05)
    assert np.mean(first_below >= 0) > 0.09


def _family_of_knees(rng, series: int, level_each: float, trials: int) -> float:
    """The share of trials in which some of ``series`` series, every one exactly at the
    threshold (sizes 1-16 at efficiency 1, 0.9, then 0.8 three times), is given a knee (wrong)."""
    sizes, effs, n = 2 ** np.arange(5), [1.0, 0.9, 0.8, 0.8, 0.8], 3
    wrong = np.zeros(trials, dtype=bool)
    for _ in range(series):
        base = 100 * noise("normal", rng, (trials, n))
        bounds = [np.full(trials, np.nan)]
        for size, eff in zip(sizes[1:], effs[1:]):
            r = confidence.log_ratio_test(size * eff * 100 * noise("normal", rng, (trials, n)), base)
            bounds.append(knee.upper_bound(r["ratio"] / size, r["se"], r["df"], level_each))
        wrong |= knee.fixed_sequence(np.column_stack(bounds), 0.8) >= 0
    return float(wrong.mean())


@pytest.mark.parametrize("series", [5, 10])
def test_knees_of_several_series_are_held_as_one_family(series):
    """Issue 61: every series exactly at the threshold, so any knee named is wrong. Each series at
    the family's level (Bonferroni, ``knee.series_level``): some wrong knee at most 5 % of the time
    across them all. The control: each series at 95 % (the per-series rule printed before) names
    some wrong knee in ~18 % (5 series) and ~33 % (10) of trials."""
    rng = np.random.default_rng(series)
    assert _family_of_knees(rng, series, knee.series_level(series), TRIALS) <= 0.05 + slack(0.05)
    assert _family_of_knees(rng, series, confidence.LEVEL, TRIALS) > 0.12


def test_the_knee_reports_its_family():
    """``knee`` on a table of 3 series: each tested at 1 - 0.05 / 3, and says so."""
    import pandas as pd

    table = pd.DataFrame({"model": ["a", "a", "b", "b", "c", "c"], "nodes": [1, 2] * 3,
                          "efficiency": [1.0, 0.5] * 3, "log_se": [np.nan, 0.05] * 3, "df": [np.nan, 4.0] * 3})
    out = knee.knee(table, "nodes", 0.8, ["model"])
    assert out.attrs["family"] == 3 and out.attrs["series_level"] == pytest.approx(1 - 0.05 / 3)
    expected = 0.5 * np.exp(stats.t.ppf(1 - 0.05 / 3, 4.0) * 0.05)
    assert out["efficiency_upper"].tolist() == pytest.approx([expected] * 3)


def test_the_knee_is_found_where_efficiency_falls_clearly():
    rng = np.random.default_rng(5)
    fixed, _ = _knee_trials(rng, [1.0, 0.95, 0.9, 0.6, 0.45], 5, 0.8, TRIALS)
    assert np.mean(fixed == 3) > 0.9 - slack(0.9) and np.mean((fixed >= 0) & (fixed < 3)) <= 0.05 + slack(0.05)


def _family(rng, configs: int, n: int, change: np.ndarray, trials: int, method: str):
    """Per trial: p-values of ``configs`` comparisons (3 repeats a side, 5 % noise), adjusted."""
    a = 100 * noise("normal", rng, (trials * configs, n))
    b = 100 * np.tile(change, trials)[:, None] * noise("normal", rng, (trials * configs, n))
    p = confidence.log_ratio_test(b, a)["p"].reshape(trials, configs)
    return np.array([multiplicity.adjust(row, method) for row in p])


def test_holm_holds_the_chance_of_any_false_verdict_across_twenty_configurations():
    """20 configurations, no real change, 3 repeats a side: some false verdict in at most 5 % of
    comparisons with Holm (measured ~2 %: Welch at 3 repeats is cautious); the control, each at
    5 % on its own, gives one in ~45 % of them."""
    rng = np.random.default_rng(6)
    holm = _family(rng, 20, 3, np.ones(20), 2000 // SCALE, "holm")
    assert np.mean((holm < 0.05).any(axis=1)) <= 0.05 + slack(0.05, 2000)
    none = _family(rng, 20, 3, np.ones(20), 2000 // SCALE, "none")
    assert np.mean((none < 0.05).any(axis=1)) > 0.3


def test_the_power_reported_for_a_real_change_is_what_the_design_promises():
    """Half of 20 configurations changed by 10 % under 5 % noise: the share of them found is at
    least what ``power.power`` promises at the level Holm asks of the first (alpha / 20), and the
    unchanged ones stay under 5 % family-wise. At 3 repeats that promise is small (~2 %: the
    comparison says so in its "detectable" column, ~69 %); at 10 repeats, ~74 %."""
    rng = np.random.default_rng(7)
    change = np.r_[np.full(10, 1.10), np.ones(10)]
    for n in (3, 10):
        adjusted = _family(rng, 20, n, change, 1000 // SCALE, "holm")
        found = np.mean(adjusted[:, :10] < 0.05)
        promised = power.power(0.10, 0.05, 0.05, n, n, alpha=0.05 / 20)
        assert found >= promised - 0.03 - slack(0.8, 1000 * 10), (n, found, promised)
        assert np.mean((adjusted[:, 10:] < 0.05).any(axis=1)) <= 0.05 + slack(0.05, 1000)
    assert power.power(0.10, 0.05, 0.05, 10, 10, alpha=0.05 / 20) > 0.7


def test_the_detectable_change_is_detected_four_times_in_five():
    """At the change ``detectable_change`` names for the true noise, the test finds it 80 % of
    the time (measured 78-82 %); the pooled test's noncentral t (the control) names a change
    found only ~71 % of the time at 3 repeats."""
    rng = np.random.default_rng(8)
    for n in (3, 5, 10):
        change = power.detectable_change(0.05, 0.05, n, n)
        a = 100 * noise("normal", rng, (TRIALS, n))
        b = 100 * (1 + change) * noise("normal", rng, (TRIALS, n))
        found = np.mean(confidence.log_ratio_test(b, a)["p"] < 0.05)
        assert 0.77 - slack(0.8) <= found <= 0.83 + slack(0.8), (n, change, found)
        if n == 3:
            from statsmodels.stats.power import TTestIndPower
            effect = TTestIndPower().solve_power(nobs1=3, alpha=0.05, power=0.8, ratio=1.0)
            pooled = np.expm1(effect * 0.05)
            b = 100 * (1 + pooled) * noise("normal", rng, (TRIALS, n))
            assert np.mean(confidence.log_ratio_test(b, a)["p"] < 0.05) < 0.75


def _sequential(rng, kind: str, first: int, cap: int, target: float, trials: int):
    """(interval lows, highs) of a configuration sampled by Stein's rule against a baseline of 5
    fixed repeats, with the first stage's variance (the rule's) and with every repeat's (the control)."""
    x = 120 * noise(kind, rng, (trials, cap))
    y = 100 * noise(kind, rng, (trials, 5))
    totals = sequential.stein_repeats(x[:, :first], target, cap)
    out = {True: [np.empty(trials), np.empty(trials)], False: [np.empty(trials), np.empty(trials)]}
    for n in np.unique(totals):
        rows = totals == n
        for staged in (True, False):
            r = confidence.log_ratio_test(x[rows, :n], y[rows], first_stage=(first if staged else None, None))
            out[staged][0][rows], out[staged][1][rows] = r["low"], r["high"]
    return out, totals


def test_repeats_on_demand_keep_the_intervals_coverage():
    """Stein's two-stage rule, ±3 % from a first stage of 3, at most 30 repeats, against a baseline
    of 5: the interval with the first stage's variance covers 93-97 % under normal and lognormal
    noise. The control: stopping as soon as the mean's own interval is within ±3 % (the rule one
    writes first) covers ~90 % (``sequential``'s docstring)."""
    rng = np.random.default_rng(10)
    for kind in ("normal", "lognormal"):
        out, totals = _sequential(rng, kind, 3, 30, 0.03, TRIALS)
        assert 0.93 - slack(0.95) <= covered(*out[True], 1.2) <= 0.97 + slack(0.95), kind
        assert 3 < np.median(totals) <= 30
    # the naive rule: stop at the first n whose own t-interval of the mean is within ±3 %
    x = 100 * noise("normal", rng, (TRIALS, 30))
    stopped = np.full(TRIALS, 30)
    for n in range(29, 2, -1):
        half = stats.t.ppf(0.975, n - 1) * x[:, :n].std(axis=1, ddof=1) / np.sqrt(n)
        stopped = np.where(half <= 0.03 * x[:, :n].mean(axis=1), n, stopped)
    means = np.array([x[i, :k].mean() for i, k in enumerate(stopped)])
    halves = np.array([stats.t.ppf(0.975, k - 1) * x[i, :k].std(ddof=1) / np.sqrt(k) for i, k in enumerate(stopped)])
    assert covered(means - halves, means + halves, 100.0) < 0.93


def _printed_met(rng, n0: int, cv: float, target: float, cap: int, trials: int) -> float:
    """The share of uncapped configurations whose printed relative half-width (``sequential.half_width``:
    the first stage's variance over all n repeats' mean) is within the target."""
    x = 100 * (1 + cv * rng.standard_normal((trials, cap)))
    totals = sequential.stein_repeats(x[:, :n0], target, cap)
    met = [sequential.half_width(x[i, :n], n0) <= target for i, n in enumerate(totals) if n < cap]
    return float(np.mean(met))


@pytest.mark.parametrize("n0,cv", [(3, 0.02), (3, 0.05), (5, 0.05)])
def test_repeats_on_demand_print_the_width_they_promise(n0, cv, monkeypatch):
    """Issue 61: the rule met ±3 % on the first stage's mean, the interval printed is on all
    repeats' mean; a run stopped at 11 repeats printed ±3.11 %. Tightened by how far that mean may
    fall, the printed half-width is within the target in >= 95 % of the configurations the cap did
    not stop. The control: the plain rule (no margin) in ~68 % (3 at 5 %) and ~79 % (5 at 5 %)."""
    rng = np.random.default_rng(int(100 * cv) + n0)
    # 95 % less two standard errors of a rate measured on 4,000 trials (measured 95.8-99.9 %)
    assert _printed_met(rng, n0, cv, 0.03, 200, TRIALS) >= 0.943 - slack(0.95)
    if cv >= 0.05:   # at 2 % noise the plain rule falls short only just (94 %): no control there
        monkeypatch.setattr(sequential, "MEAN_MARGIN_Z", 0.0)
        assert _printed_met(rng, n0, cv, 0.03, 200, TRIALS) < 0.9


@pytest.mark.parametrize("n,cv_a,cv_b", [(3, 0.05, 0.05), (5, 0.05, 0.05), (10, 0.05, 0.05), (3, 0.05, 0.15),
                                         (5, 0.05, 0.15)])
def test_the_detectable_changes_range_holds_the_true_one(n, cv_a, cv_b):
    """Issue 61: the detectable change, computed from the repeats' own noise, is printed with the
    range that noise allows (``power.detectable_range``, nominal 80 %): it holds the change
    detectable at the true noise in at least ~80 % of comparisons (measured 82-93 %). The control:
    the point alone is within ±20 % of the truth in far fewer (22-76 %)."""
    rng = np.random.default_rng(n + int(100 * cv_b))
    truth = power.detectable_change(cv_a, cv_b, n, n)
    trials = max(TRIALS // 8, 200)
    a = 100 * (1 + cv_a * rng.standard_normal((trials, n)))
    b = 100 * (1 + cv_b * rng.standard_normal((trials, n)))
    held, near = 0, 0
    for x, y in zip(a, b):
        noise = (x.std(ddof=1) / x.mean(), y.std(ddof=1) / y.mean(), n, n)
        low, high = power.detectable_range(*noise)
        held += low <= truth <= high
        near += abs(power.detectable_change(*noise) / truth - 1) < 0.2
    assert held / trials >= 0.77 - slack(0.8, 500), held / trials
    assert near / trials < 0.8
