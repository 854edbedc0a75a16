"""Comparisons with confidence: the bootstrap interval against a hand-written bootstrap, the
verdict's false-verdict rate with no change and its power with a real one (synthetic repeats
with known differences), the knee, and the commands on a real database (SQLite)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from scipy import stats

from results_db import connect
from results_db.analysis import compare, regression
from results_db.stats import confidence, knee, multiplicity, power
from results_db.store import query
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Run
from workloads.spec import RunSpec

from conftest import scalestudy


def _welch_half_width(x, y, level=0.95):
    """scipy's Welch interval of mean(x / mean(x)) - mean(y / mean(y)): on each side divided by
    its own mean, its standard error and degrees of freedom are the delta method's for log(ratio)."""
    x, y = np.asarray(x), np.asarray(y)
    result = stats.ttest_ind(x / x.mean(), y / y.mean(), equal_var=False)
    return result.confidence_interval(level).high, result.df


def test_the_ratio_interval_is_welchs_t_on_the_log_ratio():
    """Checked against scipy's own Welch test, not against this module's expression: at equal
    repeats exactly Welch's; at unequal repeats Welch's standard error with its degrees of freedom
    lowered by 7 x (1 - n_small / n_large) x the small side's share of the variance, never below
    the small side's n - 1 (the coverage simulation's rule; the third pair meets that floor)."""
    for x, y in (([210.0, 190.0, 205.0, 230.0], [100.0, 104.0, 97.0, 110.0]),
                 ([210.0, 190.0, 205.0, 230.0, 199.0], [100.0, 104.0, 97.0, 110.0]),
                 ([200.0, 201.0, 199.0, 200.5, 199.5, 200.2], [100.0, 130.0, 75.0])):
        est = confidence.ratio_estimate(x, y)
        half, df = _welch_half_width(x, y)
        se = half / stats.t.ppf(0.975, df)
        rel = [np.var(v, ddof=1) / (len(v) * np.mean(v) ** 2) for v in (x, y)]
        small = int(len(y) < len(x))
        share = rel[small] / sum(rel)
        df = max(df - 7 * (1 - min(len(x), len(y)) / max(len(x), len(y))) * share, min(len(x), len(y)) - 1)
        half = stats.t.ppf(0.975, df) * se
        centre = np.log(np.mean(x) / np.mean(y))
        assert est.low == pytest.approx(np.exp(centre - half), rel=1e-9)
        assert est.high == pytest.approx(np.exp(centre + half), rel=1e-9)
        assert est.df == pytest.approx(df, rel=1e-9)


def test_the_test_and_the_interval_agree_and_a_time_gets_the_throughputs_verdict():
    """The interval excludes 1 exactly when p < 0.05; throughput and the same runs' time (its
    reciprocal) get the same verdict wherever p is not at the edge (the old Welch test on linear
    values and a ratio interval disagreed)."""
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(300):
        a = rng.lognormal(np.log(100), 0.05, 4)
        b = rng.lognormal(np.log(100 * rng.uniform(0.9, 1.1)), 0.05, 4)
        est = confidence.ratio_estimate(b, a)
        assert (est.p_value < 0.05) == (est.high < 1 or est.low > 1)
        up = confidence.verdict(a, b, higher_is_better=True)
        down = confidence.verdict(1 / a, 1 / b, higher_is_better=False)
        if abs(up.p_value - 0.05) > 0.01:
            checked += 1
            assert up.verdict == down.verdict
    assert checked > 250


def test_two_repeats_are_too_few_and_ties_never_give_a_certain_verdict():
    assert confidence.ratio_estimate([200.0, 201.0], [100.0, 101.0, 99.0]).reason == confidence.TOO_FEW
    assert confidence.verdict([2.0, 2.0], [3.0, 3.0]).verdict == confidence.TOO_FEW
    tied = confidence.verdict([2.0, 2.0, 2.0], [3.0, 3.0, 3.0])
    assert tied.verdict == confidence.NO_VARIATION and tied.p_value != tied.p_value
    one = confidence.ratio_estimate([10.0, 10.0, 11.0], [12.0, 12.0, 12.0])   # quantised: one side tied
    assert 0 < one.p_value < 1 and one.df == pytest.approx(2.0)   # the other side's noise, its 2 degrees
    assert one.low < (31 / 3) / 12 < one.high


def test_the_means_interval_is_students():
    from statsmodels.stats.weightstats import DescrStatsW
    for values in ([101.0, 98.0], [101.0, 98.0, 104.0], [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]):
        assert confidence.mean_interval(values) == pytest.approx(DescrStatsW(np.asarray(values)).tconfint_mean())
    assert all(v != v for v in confidence.mean_interval([1.0]))


@pytest.mark.parametrize("n", [6, 8, 10, 15, 20])
def test_the_medians_interval_is_the_order_statistics_a_binomial_table_gives(n):
    """The textbook rule (e.g. Conover, Practical Nonparametric Statistics, sec. 3.2): the widest k
    with 2 P(B <= k - 1) <= 0.05 for B ~ Binomial(n, 1/2) gives (x_(k), x_(n+1-k))."""
    k = max(k for k in range(1, n // 2 + 1) if 2 * stats.binom.cdf(k - 1, n, 0.5) <= 0.05)
    x = np.random.default_rng(n).lognormal(0, 0.3, n)
    s = np.sort(x)
    assert confidence.median_interval(x) == pytest.approx((s[k - 1], s[n - k]))
    assert all(v != v for v in confidence.median_interval(x[:5]))


def test_hedges_g_is_nearly_unbiased_where_cohens_d_is_not():
    """Hedges' correction exists to remove d's small-sample bias: over 20,000 pairs of 3 repeats
    with a true standardised difference of 1, g averages 1 within 3 % while the uncorrected d
    (the control) is ~25 % high."""
    rng = np.random.default_rng(11)
    a = rng.normal(0.0, 1.0, (20000, 3))
    b = rng.normal(1.0, 1.0, (20000, 3))
    g = np.array([confidence.hedges_g(x, y) for x, y in zip(a, b)])
    pooled = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2)
    d = (b.mean(axis=1) - a.mean(axis=1)) / pooled
    assert g.mean() == pytest.approx(1.0, abs=0.03)
    assert d.mean() > 1.15


@pytest.mark.parametrize("method,theirs", [("holm", "holm"), ("bh", "fdr_bh")])
def test_the_corrections_are_statsmodels(method, theirs):
    from statsmodels.stats.multitest import multipletests
    rng = np.random.default_rng(3)
    for m in (1, 2, 7, 20):
        p = rng.uniform(0, 0.2, m)
        assert multiplicity.adjust(p, method) == pytest.approx(multipletests(p, method=theirs)[1])
    with_nan = multiplicity.adjust([0.01, float("nan"), 0.04], method)
    assert with_nan[1] != with_nan[1]
    assert with_nan[[0, 2]] == pytest.approx(multipletests([0.01, 0.04], method=theirs)[1])


def test_power_is_welchs_as_run_and_statsmodels_where_that_is_the_same():
    """With many repeats Welch's estimated degrees of freedom are the pooled test's, and the
    power is statsmodels' (the noncentral t for the effect log(1 + change) / cv); at 3 repeats
    Welch's test is the more cautious one, and its power lower (simulated in
    test_confidence_coverage.py: this is the one that matches the runs)."""
    from statsmodels.stats.power import TTestIndPower
    for change, cv, n, alpha in ((0.02, 0.05, 60, 0.05), (0.05, 0.05, 20, 0.0025), (0.01, 0.01, 30, 0.05)):
        theirs = TTestIndPower().power(effect_size=np.log1p(change) / cv, nobs1=n, alpha=alpha, ratio=1.0)
        assert power.power(change, cv, cv, n, n, alpha) == pytest.approx(theirs, abs=0.01)
    pooled = TTestIndPower().power(effect_size=np.log1p(0.10) / 0.05, nobs1=3, alpha=0.05, ratio=1.0)
    assert power.power(0.10, 0.05, 0.05, 3, 3) < pooled - 0.05
    found = power.detectable_change(0.05, 0.05, 5, 5)
    assert power.power(found, 0.05, 0.05, 5, 5) == pytest.approx(0.80, abs=1e-4)
    # the detectable change of unequal sides, interpolated between solved shares, against a direct solve
    for cv_a, cv_b, n_a, n_b in ((0.02, 0.07, 3, 5), (0.09, 0.01, 4, 4), (0.05, 0.03, 10, 3)):
        found = power.detectable_change(cv_a, cv_b, n_a, n_b)
        assert power.power(found, cv_a, cv_b, n_a, n_b) == pytest.approx(0.80, abs=0.003)
    needed = power.repeats_needed(0.05, 0.05)
    assert power.power(0.05, 0.05, 0.05, needed, needed) >= 0.8 > power.power(0.05, 0.05, 0.05, needed - 1, needed - 1)


def test_the_knee_is_reached_from_the_largest_size_down():
    # bounds below 0.8 at 4, 8, 16 nodes; at 2 not: the knee is 4
    table = pd.DataFrame({"nodes": [1, 2, 4, 8, 16], "efficiency": [1.0, 0.85, 0.7, 0.6, 0.5],
                          "log_se": [np.nan, 0.05, 0.05, 0.05, 0.05], "df": [np.nan, 4, 4, 4, 4]})
    row = knee.knee(table, "nodes", 0.8).iloc[0]
    assert row["knee"] == 4 and row["beyond"] == 3
    assert row["efficiency_upper"] == pytest.approx(0.7 * np.exp(stats.t.ppf(0.95, 4) * 0.05))
    # a size whose bound reaches the threshold stops the sequence: the first-below reading would say 4
    bumpy = table.assign(efficiency=[1.0, 0.85, 0.7, 0.9, 0.5])
    assert knee.knee(bumpy, "nodes", 0.8).iloc[0]["knee"] == 16
    assert knee.knee(table, "nodes", 0.4).iloc[0]["knee"] is None


THROUGHPUT = {  # (study, nodes) -> repeats; "new" is 20 % faster at 2 nodes, the same at 1
    ("old", 1): [100.0, 103.0, 98.0, 101.0], ("old", 2): [150.0, 154.0, 148.0, 152.0],
    ("new", 1): [101.0, 99.0, 102.0, 100.0], ("new", 2): [180.0, 184.0, 178.0, 182.0],
}


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = connect(url)
    for study in ("old", "new"):
        plans, values = [], []
        for (s, nodes), repeats in THROUGHPUT.items():
            if s != study:
                continue
            for repeat, value in enumerate(repeats):
                spec = RunSpec(study=study, site="local", nodes=nodes, workers_per_node=1, threads_per_node=1,
                               batch_size=16, algorithm="sync", repeat=repeat)
                plans.append(PlannedRun(f"{study}-{nodes}-{repeat}", spec.to_dict(), "/nowhere"))
                values.append(value)
        decisions = register_runs(engine, study, plans)
        with Session(engine) as s, s.begin():
            for d, value, plan in zip(decisions, values, plans):
                nodes = plan.spec["nodes"]
                # the time of a fixed amount of work, the energy it drew, and a metric of the user's own
                s.execute(update(Run).where(Run.id == d.run_id).values(
                    status="done", throughput=value, world_size=nodes, train_seconds=3000.0 / value,
                    energy_joules=250.0 * nodes * 3000.0 / value, metrics={"mine": value / 10},
                    config={"workload": {"metrics": {"mine": {"better": "higher"}}}} if study == "new" else None))
    engine.dispose()
    return url


def test_compare_sets_finds_the_change_and_only_it(db):
    engine = connect(db)
    from results_db.store import query
    table = regression.compare_sets(query.runs(engine, study="old"), query.runs(engine, study="new")).set_index("nodes")
    assert table.loc[2, "verdict"] == "faster" and table.loc[2, "change"] == pytest.approx(181.0 / 151.0)
    assert table.loc[1, "verdict"] == "no evidence"
    engine.dispose()


@pytest.mark.sweep
def test_compare_against_another_study_on_the_command_line(db, tmp_path):
    proc = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "1 faster, 1 no evidence"
    assert "t-interval on the log ratio" in proc.stderr and "Holm" in proc.stderr
    csv = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, "--format", "csv", cwd=tmp_path)
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].endswith(
        "p_value,p_adjusted,effect,detectable,detectable_low,detectable_high,verdict")
    drawn = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, "--figure",
                       str(tmp_path / "change.png"), cwd=tmp_path)
    assert drawn.returncode == 0 and (tmp_path / "change.png").stat().st_size > 10_000
    bad = scalestudy("compare", "--study", "old", "--against", "nosuch", "--db", db, cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nosuch" in bad.stderr


@pytest.mark.sweep
def test_compare_prints_intervals_and_the_knee(db, tmp_path):
    proc = scalestudy("compare", "--study", "new", "--knee", "0.95", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "t-intervals on the log ratio" in proc.stderr
    assert "knee: nodes=2: efficiency 0.9" in proc.stdout   # 2 nodes give 1.81x for 2x the ranks: 0.9
    frame = compare.compare(connect(db), "nodes=1", study="new").set_index("nodes")
    low, high = frame.loc[2, "speedup_low"], frame.loc[2, "speedup_high"]
    assert low < frame.loc[2, "speedup"] < high
    assert frame.loc[2, "efficiency_high"] == pytest.approx(high / 2)
    # the baseline's own row: 1 by definition, no interval from resampling the same runs twice
    assert frame.loc[1, "speedup"] == 1 and frame.loc[1, "speedup_low"] != frame.loc[1, "speedup_low"]
    assert frame.loc[1, "interval"] == "baseline"


@pytest.mark.sweep
def test_the_report_has_a_section_against_another_study(db, tmp_path):
    out = tmp_path / "rep"
    proc = scalestudy("report", "--study", "new", "--against", "old", "--db", db, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    html = (out / "index.html").read_text()
    assert "<h2>Against old</h2>" in html and "1 faster" in html and "1 no evidence" in html
    assert "Holm" in html and "p adj." in html and "t-interval on the log ratio" in html
    # per configuration, the smallest change its repeats can see, against the baseline (4 repeats a side)
    assert "detectable change (80 % power; in brackets, the 80 % range" in html and "±" in html
    assert (out / "against-old.csv").exists() and (out / "figures/against-old.png").stat().st_size > 10_000
    bad = scalestudy("report", "--study", "new", "--against", "nosuch", "--db", db, "--out", str(out), cwd=tmp_path)
    assert bad.returncode == 2 and "nosuch" in bad.stderr
    # issue 61: the section compares the metric asked for, not throughput always; the same verdicts for
    # the time of the same work (lower is better), as compare --against gives them
    timed = scalestudy("report", "--study", "new", "--against", "old", "--against-metric", "train_seconds",
                       "--db", db, "--out", str(tmp_path / "rep2"), cwd=tmp_path)
    assert timed.returncode == 0, timed.stderr
    page = (tmp_path / "rep2" / "index.html").read_text()
    assert "A: train_seconds (repeats)" in page and "train_seconds (lower is better)" in page and "1 faster" in page
    typo = scalestudy("report", "--study", "new", "--against", "old", "--against-metric", "trian_seconds",
                      "--db", db, "--out", str(tmp_path / "rep3"), cwd=tmp_path)
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1 and "trian_seconds" in typo.stderr


def test_query_groups_with_the_means_interval(db, tmp_path):
    """``--agg throughput:mean_low,mean_high``: the mean's t-interval over each group's runs."""
    proc = scalestudy("query", "--study", "old", "--group-by", "nodes", "--agg",
                      "throughput:mean,mean_low,mean_high", "--format", "csv", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head, *rows = [line.split(",") for line in proc.stdout.strip().splitlines()]
    assert head == ["nodes", "throughput_mean", "throughput_mean_low", "throughput_mean_high"]
    values = np.asarray(THROUGHPUT[("old", 2)])
    low, high = stats.t.interval(0.95, len(values) - 1, values.mean(), stats.sem(values))
    two = next(r for r in rows if r[0] == "2")
    assert float(two[2]) == pytest.approx(low, abs=0.3) and float(two[3]) == pytest.approx(high, abs=0.3)
    assert float(two[2]) < float(two[1]) < float(two[3])


def _runs(version, values, extra=None):
    rows = []
    for nodes, vals in values.items():
        for v in vals:
            rows.append({"status": "done", "nodes": nodes, "algorithm": "sync", "throughput": v,
                         "params": {"version": version, **(extra or {})}})
    return pd.DataFrame(rows)


def test_two_sets_differing_in_one_value_each_side_are_matched_ignoring_it():
    """The docs' example: --where params.version=1 against --against-where params.version=2."""
    a = _runs(1, {1: [100.0, 101.0, 99.0], 2: [150.0, 152.0, 149.0]})
    b = _runs(2, {1: [100.0, 99.5, 100.5], 2: [180.0, 181.0, 179.0]})
    table = regression.compare_sets(a, b).set_index("nodes")
    assert table.attrs["treatment"] == ["params.version"]
    assert table.loc[2, "verdict"] == "faster" and table.loc[1, "verdict"] == "no evidence"


def test_a_parameter_missing_on_some_runs_still_matches():
    """A configuration whose axis is missing (NaN) on both sides is one configuration, not two."""
    a = pd.concat([_runs(1, {1: [100.0, 101.0]}), _runs(1, {2: [150.0, 151.0]}, {"x": 3})])
    b = pd.concat([_runs(1, {1: [120.0, 121.0]}), _runs(1, {2: [150.5, 150.0]}, {"x": 3})])
    table = regression.compare_sets(a, b)
    assert len(table) == 2 and not table["verdict"].str.startswith("only").any()


def test_the_knee_stays_out_of_csv(db, tmp_path):
    proc = scalestudy("compare", "--study", "new", "--knee", "0.95", "--format", "csv", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0 and "knee" not in proc.stdout and "knee: nodes=2" in proc.stderr


@pytest.mark.sweep
def test_a_time_an_energy_and_a_users_metric_read_in_their_direction(db, tmp_path):
    """The same runs as throughput, as the time of the same work (lower is better), as energy and
    as a metric of the user's own: speedup above 1 where better in each; the undeclared user
    metric refused until declared (the old study's runs do not declare it)."""
    engine = connect(db)
    by_throughput = compare.compare(engine, "nodes=1", study="new").set_index("nodes")
    by_time = compare.compare(engine, "nodes=1", study="new", metric="train_seconds").set_index("nodes")
    assert by_time.attrs["better"] == "lower"
    assert by_time.loc[2, "speedup"] == pytest.approx(np.mean([3000 / v for v in THROUGHPUT[("new", 1)]])
                                                      / np.mean([3000 / v for v in THROUGHPUT[("new", 2)]]))
    assert by_time.loc[2, "speedup"] == pytest.approx(by_throughput.loc[2, "speedup"], rel=0.01)
    assert by_time.loc[2, "efficiency"] == pytest.approx(by_time.loc[2, "speedup"] / 2)
    energy = compare.compare(engine, "nodes=1", study="new", metric="energy_joules").set_index("nodes")
    assert energy.loc[2, "speedup"] == pytest.approx(by_time.loc[2, "speedup"] / 2, rel=1e-6)   # 2 nodes draw 2x
    mine = compare.compare(engine, "nodes=1", study="new", metric="metrics.mine").set_index("nodes")
    assert mine.loc[2, "speedup"] == pytest.approx(by_throughput.loc[2, "speedup"])
    with pytest.raises(compare.CompareError, match="declares no direction"):
        compare.compare(engine, "nodes=1", study="old", metric="metrics.mine")
    flipped = compare.compare(engine, "nodes=1", study="old", metric="metrics.mine", better="lower").set_index("nodes")
    assert flipped.loc[2, "speedup"] < 1
    with pytest.raises(compare.CompareError, match="not a measure"):
        compare.compare(engine, "nodes=1", study="new", metric="steps")
    engine.dispose()
    proc = scalestudy("compare", "--study", "new", "--baseline", "nodes=1", "--metric", "train_seconds", "--db", db,
                      cwd=tmp_path)
    assert proc.returncode == 0 and "lower is better" in proc.stderr and "baseline / this" in proc.stderr
    bad = scalestudy("compare", "--study", "old", "--baseline", "nodes=1", "--metric", "metrics.mine", "--db", db,
                     cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "better" in bad.stderr
    typo = scalestudy("compare", "--study", "new", "--baseline", "nodes=1", "--metric", "trian_seconds", "--db", db,
                      cwd=tmp_path)
    assert typo.returncode == 2 and "did you mean 'train_seconds'" in typo.stderr
    assert len(typo.stderr.strip().splitlines()) == 1
    sets = regression.compare_sets(query.runs(connect(db), study="old"), query.runs(connect(db), study="new"),
                                   metric="train_seconds").set_index("nodes")
    assert sets.loc[2, "verdict"] == "faster" and sets.loc[2, "change"] < 1   # less time: faster
    joules = regression.compare_sets(query.runs(connect(db), study="old"), query.runs(connect(db), study="new"),
                                     metric="energy_joules").set_index("nodes")
    assert joules.loc[2, "verdict"] == "better"


@pytest.mark.sweep
def test_the_correction_is_named_and_can_be_chosen(db, tmp_path):
    for method, words in (("holm", "Holm"), ("bh", "Benjamini-Hochberg"), ("none", "on its own")):
        proc = scalestudy("compare", "--study", "old", "--against", "new", "--correction", method, "--db", db,
                          cwd=tmp_path)
        assert proc.returncode == 0 and words in proc.stderr, proc.stderr
    bad = scalestudy("compare", "--study", "old", "--against", "new", "--correction", "bonf", "--db", db, cwd=tmp_path)
    assert bad.returncode == 2
