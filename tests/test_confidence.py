"""Comparisons with confidence: the bootstrap interval against a hand-written bootstrap, the
verdict's false-verdict rate with no change and its power with a real one (synthetic repeats
with known differences), the knee, and the commands on a real database (SQLite)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from results_db import compare, confidence, connect, regression
from results_db.runs import PlannedRun, register_runs
from results_db.schema import Run
from workloads.spec import RunSpec

from conftest import scalestudy


def _hand_bootstrap(x, y, resamples=20000, seed=7):
    """The percentile bootstrap of mean(x)/mean(y) written out: each side resampled within itself."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(x), np.asarray(y)
    xs = x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=1)
    ys = y[rng.integers(0, len(y), (resamples, len(y)))].mean(axis=1)
    return np.quantile(xs / ys, [0.025, 0.975])


def test_the_interval_is_the_percentile_bootstrap_of_the_ratio_of_means():
    x, y = [210.0, 190.0, 205.0, 230.0, 199.0], [100.0, 104.0, 97.0, 110.0]
    low, high = confidence.ratio_interval(x, y)
    ref_low, ref_high = _hand_bootstrap(x, y)
    assert low == pytest.approx(ref_low, rel=0.01) and high == pytest.approx(ref_high, rel=0.01)
    assert low < np.mean(x) / np.mean(y) < high


def test_no_interval_from_a_single_repeat_and_a_point_from_constant_values():
    assert all(v != v for v in confidence.ratio_interval([200.0], [100.0, 101.0]))
    assert confidence.ratio_interval([2.0, 2.0], [1.0, 1.0]) == (2.0, 2.0)


def _pairs(change: float, trials: int, n: int, sd: float, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        yield rng.normal(100, 100 * sd, n), rng.normal(100 * change, 100 * change * sd, n)


def test_no_change_gives_a_verdict_at_most_at_the_stated_rate():
    """400 comparisons of 5 vs 5 repeats from one distribution (5 % noise): a verdict needs the
    interval to exclude 1 and Welch's p < 0.05, so at most ~5 % may have one (binomial sd 1.1 %)."""
    verdicts = [confidence.verdict(a, b).verdict for a, b in _pairs(1.0, 400, 5, 0.05, seed=1)]
    rate = sum(v != "no evidence" for v in verdicts) / len(verdicts)
    assert rate <= confidence.ALPHA + 0.025, rate


def test_a_real_change_is_found_and_in_the_right_direction():
    """A 20 % gain under 5 % noise, 5 vs 5 repeats (effect size 4): 'faster' in nearly every comparison, never
    'slower'; a 20 % loss: 'slower'. (At 10 % the verdict comes in ~2 of 3: Welch's power at
    effect size 2 and 5 repeats a side is ~0.8.) For a time (lower is better) the words swap."""
    up = [confidence.verdict(a, b).verdict for a, b in _pairs(1.20, 200, 5, 0.05, seed=2)]
    assert up.count("faster") / len(up) >= 0.9 and "slower" not in up
    down = [confidence.verdict(a, b).verdict for a, b in _pairs(0.80, 200, 5, 0.05, seed=3)]
    assert down.count("slower") / len(down) >= 0.9 and "faster" not in down
    times = confidence.verdict([10.0, 10.2, 9.9, 10.1], [8.0, 8.1, 7.9, 8.2], higher_is_better=False)
    assert times.verdict == "faster" and times.ratio == pytest.approx(0.8, rel=0.01)


def test_hedges_g_against_its_formula():
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    pooled = 1.0  # both sample sd are 1
    assert confidence.hedges_g(a, b) == pytest.approx(3.0 / pooled * (1 - 3 / (4 * 6 - 9)))


def test_the_knee_is_the_first_size_below_the_threshold_with_confidence():
    table = pd.DataFrame({"nodes": [1, 2, 4, 8], "efficiency": [1.0, 0.85, 0.7, 0.5],
                          "efficiency_low": [0.95, 0.75, 0.6, 0.45], "efficiency_high": [1.05, 0.95, 0.79, 0.55]})
    row = confidence.knee(table, "nodes", 0.8).iloc[0]
    assert row["knee"] == 4      # at 2 nodes the interval still reaches 0.8
    assert confidence.knee(table, "nodes", 0.4).iloc[0]["knee"] is None


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
                s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=value,
                                                                       world_size=nodes))
    engine.dispose()
    return url


def test_compare_sets_finds_the_change_and_only_it(db):
    engine = connect(db)
    from results_db import query
    table = regression.compare_sets(query.runs(engine, study="old"), query.runs(engine, study="new")).set_index("nodes")
    assert table.loc[2, "verdict"] == "faster" and table.loc[2, "change"] == pytest.approx(181.0 / 151.0)
    assert table.loc[1, "verdict"] == "no evidence"
    engine.dispose()


def test_compare_against_another_study_on_the_command_line(db, tmp_path):
    proc = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "1 faster, 1 no evidence"
    assert "Welch's p" in proc.stderr
    csv = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, "--format", "csv", cwd=tmp_path)
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].endswith("p_value,effect,verdict")
    drawn = scalestudy("compare", "--study", "old", "--against", "new", "--db", db, "--figure",
                       str(tmp_path / "change.png"), cwd=tmp_path)
    assert drawn.returncode == 0 and (tmp_path / "change.png").stat().st_size > 10_000
    bad = scalestudy("compare", "--study", "old", "--against", "nosuch", "--db", db, cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nosuch" in bad.stderr


def test_compare_prints_intervals_and_the_knee(db, tmp_path):
    proc = scalestudy("compare", "--study", "new", "--knee", "0.95", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "bootstrap intervals" in proc.stderr
    assert "knee: nodes=2, efficiency" in proc.stdout   # 2 nodes give 1.81x for 2x the ranks: 0.9
    frame = compare.compare(connect(db), "nodes=1", study="new").set_index("nodes")
    low, high = frame.loc[2, "speedup_low"], frame.loc[2, "speedup_high"]
    assert low < frame.loc[2, "speedup"] < high
    assert frame.loc[2, "efficiency_high"] == pytest.approx(high / 2)


def test_the_report_has_a_section_against_another_study(db, tmp_path):
    out = tmp_path / "rep"
    proc = scalestudy("report", "--study", "new", "--against", "old", "--db", db, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    html = (out / "index.html").read_text()
    assert "<h2>Against old</h2>" in html and "1 faster" in html and "1 no evidence" in html
    assert (out / "against-old.csv").exists() and (out / "figures/against-old.png").stat().st_size > 10_000
    bad = scalestudy("report", "--study", "new", "--against", "nosuch", "--db", db, "--out", str(out), cwd=tmp_path)
    assert bad.returncode == 2 and "nosuch" in bad.stderr


def test_query_groups_with_the_means_interval(db, tmp_path):
    """``--agg throughput:mean_low,mean_high``: the mean's percentile bootstrap over each group's runs."""
    proc = scalestudy("query", "--study", "old", "--group-by", "nodes", "--agg",
                      "throughput:mean,mean_low,mean_high", "--format", "csv", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    head, *rows = [line.split(",") for line in proc.stdout.strip().splitlines()]
    assert head == ["nodes", "throughput_mean", "throughput_mean_low", "throughput_mean_high"]
    values = THROUGHPUT[("old", 2)]
    rng = np.random.default_rng(3)
    means = np.asarray(values)[rng.integers(0, 4, (20000, 4))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
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


def test_every_repeat_alike_on_each_side_is_still_a_verdict():
    assert confidence.verdict([2.0, 2.0], [3.0, 3.0]).verdict == "faster"
    assert confidence.verdict([2.0, 2.0], [2.0, 2.0]).verdict == "no evidence"


def test_the_knee_stays_out_of_csv(db, tmp_path):
    proc = scalestudy("compare", "--study", "new", "--knee", "0.95", "--format", "csv", "--db", db, cwd=tmp_path)
    assert proc.returncode == 0 and "knee" not in proc.stdout and "knee: nodes=2" in proc.stderr
