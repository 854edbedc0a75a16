"""The studies at the papers' settings, and the report's "paper vs this run" table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.errors import ConfigError
from orchestrator.sweep.runspec import build_run_spec
from results_db.analysis.paper_claims import CLAIMS, paper_vs_run
from workloads.emulation import ComputeProfile, shipped_profile
from workloads.imbalance import DelayInjector

from conftest import scalestudy

PRESETS = ("eager_sgd_paper_resnet50", "eager_sgd_paper_resnet32", "eager_sgd_paper_lstm")


def test_shifted_imbalance_is_the_papers_severe_setting():
    """Sec. 7.2.3: all 8 processes delayed 50 to 400 ms every step, the amounts shifted after each
    step: each step holds every amount once, and each rank's amount moves one place on."""
    shifted = DelayInjector("shifted", 1, 400, -1, 1.0, 0, 8)
    for step in range(10):
        amounts = [round(shifted.seconds(step, r) * 1000) for r in range(8)]
        assert sorted(amounts) == [50, 100, 150, 200, 250, 300, 350, 400]
        assert amounts == [round(shifted.seconds(step + 1, (r - 1) % 8) * 1000) for r in range(8)]


def test_shipped_profiles_name_their_source_and_are_checked_against_the_run():
    for name, model, batch, step in (("paper_resnet50_p100", "resnet50", 128, 0.641),
                                     ("paper_resnet32_p100", "resnet32", 64, 0.198)):
        path = shipped_profile(name)
        assert path is not None
        profile = ComputeProfile.load(path)
        assert profile.source["model"] == model and "PPoPP'20" in profile.source["from"]
        assert profile.forward[0] + profile.backward[0] == pytest.approx(step)
        spec = build_run_spec({"study_name": "p", "model": model, "dataset": "synthetic_images", "batch_size": batch,
                               "compute": "emulated", "compute_profile": name})
        assert spec.compute_profile == str(path)
        with pytest.raises(ConfigError, match="batch_size=.*this run"):
            build_run_spec({"study_name": "p", "model": model, "dataset": "synthetic_images", "batch_size": 8,
                            "compute": "emulated", "compute_profile": name})
    assert shipped_profile("no_such_profile") is None and shipped_profile("a/b") is None


@pytest.mark.parametrize("preset", PRESETS)
def test_each_paper_preset_plans_here(tmp_path, preset):
    proc = scalestudy("sweep", f"study={preset}", "--dry-run", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "workers_per_node=8" in proc.stdout
    assert any(c.study == preset for c in CLAIMS)     # each has numbers to set beside its runs


def _runs(rows):
    return pd.DataFrame([{"status": "done", "world_size": 8, "model": "resnet50", "compute": "emulated",
                          "final_top1": math.nan, **r} for r in rows])


def test_paper_vs_run_divides_mean_rates_and_says_what_it_could_not_measure():
    """Against an independent computation on made-up runs: speedup = mean rounds/s of the
    claim's runs over the mean of its baseline's at the same delay; with 2 repeats a side (too
    few for an interval) the range of each run over that mean; with 3, the log-ratio interval
    (checked against scipy's Welch on each side scaled by its mean); accuracy of emulated runs:
    not measured; each eager mode a row of its own."""
    runs = _runs([{"algorithm": "sync", "imbalance_delay_ms": 300, "rounds_per_second": 1.0},
                  {"algorithm": "sync", "imbalance_delay_ms": 300, "rounds_per_second": 1.2},
                  {"algorithm": "eager_solo", "imbalance_delay_ms": 300, "rounds_per_second": 1.4},
                  {"algorithm": "eager_solo", "imbalance_delay_ms": 300, "rounds_per_second": 1.6},
                  {"algorithm": "sync", "imbalance_delay_ms": 460, "rounds_per_second": 0.8},
                  {"algorithm": "eager_solo", "imbalance_delay_ms": 460, "rounds_per_second": 1.5},
                  {"algorithm": "async_ps", "imbalance_delay_ms": 460, "rounds_per_second": 0.5}])
    table = paper_vs_run(runs, "eager_sgd_paper_resnet50").set_index("claim")
    deep500 = table.loc["eager-SGD (solo) over synch-SGD (Deep500) at 300 ms"]
    assert deep500["paper"] == 1.25 and deep500["this_run"] == pytest.approx(1.5 / 1.1)
    assert deep500["spread"] == f"{1.5 / 1.1:.2f} ({1.4 / 1.1:.2f}–{1.6 / 1.1:.2f}, 2/2 runs: too few repeats)"
    assert deep500["runs"] == 2
    assert "ranks 8" in deep500["this_run_settings"] and "64 processes" in deep500["paper_settings"]
    ps = table.loc["eager-SGD (solo) over the asynchronous parameter server at 460 ms (1.19 vs 0.45 step/s)"]
    assert ps["paper"] == 2.64 and ps["this_run"] == pytest.approx(3.0)
    top1 = table.loc["top-1 test accuracy, eager-SGD (solo)"]
    assert math.isnan(top1["this_run"]) and top1["note"].startswith("not measured")
    assert paper_vs_run(runs, "another_study").empty
    # three repeats a side and two modes: a row per mode, each ratio with its interval
    three = _runs([{"algorithm": "sync", "imbalance_delay_ms": 300, "rounds_per_second": v, "gradients_per_second": 8 * v}
                   for v in (1.0, 1.1, 1.2)]
                  + [{"algorithm": "eager_solo", "imbalance_delay_ms": 300, "eager_catch_up": mode,
                      "rounds_per_second": v, "gradients_per_second": g}
                     for mode, vs in (("paper", (1.3, 1.4, 1.5)), ("apply_all", (1.5, 1.6, 1.7)))
                     for v, g in zip(vs, (9.0, 9.5, 10.0))])
    rows = paper_vs_run(three, "eager_sgd_paper_resnet50")
    deep = rows[rows["claim"] == "eager-SGD (solo) over synch-SGD (Deep500) at 300 ms"].set_index("mode")
    assert set(deep.index) == {"paper", "apply_all"}
    from scipy import stats
    x, y = np.array([1.3, 1.4, 1.5]), np.array([1.0, 1.1, 1.2])
    half = stats.ttest_ind(x / x.mean(), y / y.mean(), equal_var=False).confidence_interval().high
    ratio = x.mean() / y.mean()
    assert deep.loc["paper", "rounds"] == f"{ratio:.2f} [{ratio * np.exp(-half):.2f}, {ratio * np.exp(half):.2f}]"
    assert deep.loc["apply_all", "this_run"] == pytest.approx(1.6 / 1.1)
    assert deep.loc["paper", "gradients"].startswith(f"{9.5 / 8.8:.2f} [")


@pytest.mark.mpi
def test_a_paper_study_reports_paper_vs_this_run(tmp_path):
    """The severe-imbalance preset run here (emulated compute, 8 ranks; shortened to 2 epochs and
    the two algorithms of one claim, one seed and one catch-up mode of the preset's three and two,
    ~40 s): its report has the table, the paper's numbers beside this run's, and its CSV."""
    proc = scalestudy("sweep", "study=eager_sgd_paper_resnet32", "epochs=2", "algorithm=sync,eager_majority",
                      "seed=0", "eager_catch_up=apply_all", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = scalestudy("report", "--study", "eager_sgd_paper_resnet32", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Paper vs this run" in html and "1.29x" in html and "sec. 7.2.3" in html
    table = pd.read_csv(tmp_path / "rep" / "paper-vs-this-run.csv").set_index("claim")
    majority = table.loc[[c for c in table.index if c.startswith("eager-SGD (majority) over")][0]]
    assert isinstance(majority, pd.Series), majority      # one row: the one mode this sweep ran
    assert majority["mode"] == "apply_all" and majority["runs"] == 1 and majority["this_run"] > 1.0     # majority outpaces sync under shifted delays
    solo = table.loc["top-1 test accuracy, eager-SGD (solo)"]
    assert solo["runs"] == 0 and solo["note"] == "no finished run"
