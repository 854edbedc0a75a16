"""The host term O(P) = q (r - 1)^+ ceil(log2 P): ranks that share cores (issue 15, item 4).

Checked against numbers computed here by hand: the fit on points the term made (with
noise), the fit through the database on a synthetic study whose steps carry a known q,
and predictions for a crowded host and for a site where every rank has a core."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perf_model.fit import FitError, fit_oversubscription
from perf_model.oversubscription import Host
from perf_model.terms import oversubscription_seconds


def test_term_is_zero_where_every_rank_has_a_core_and_counts_exchanges_beyond():
    assert oversubscription_seconds(64, 1.0, 0.01) == 0.0 and oversubscription_seconds(8, 0.5, 0.01) == 0.0
    # 32 ranks on 2 cores: r = 16, 5 exchanges in sequence
    assert oversubscription_seconds(32, 16.0, 0.002) == pytest.approx(0.002 * 15 * 5)
    assert oversubscription_seconds(8, 4.0, 0.002) == pytest.approx(0.002 * 3 * 3)
    assert Host(2, True).ranks_per_core(4, 4) == 8.0 and Host(2, False).ranks_per_core(4, 4) == 2.0


def _points(q: dict[str, float], noise: float, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for algorithm, qa in q.items():
        for p in (2, 4, 8, 16):
            for _ in range(3):
                r = p / 2
                x = max(r - 1, 0) * math.ceil(math.log2(p))
                rows.append({"algorithm": algorithm, "ranks": p, "ranks_per_core": r,
                             # a run where every rank had a core carries any residual: it must not move q
                             "residual": qa * x + noise * rng.standard_normal() + (0.5 if x == 0 else 0.0)})
    return pd.DataFrame(rows)


def test_fit_recovers_q_per_algorithm_from_points_the_term_made():
    term = fit_oversubscription(_points({"sync": 0.0025, "eager_solo": 0.0012}, noise=0.002))
    assert term.params["q_sync"] == pytest.approx(0.0025, rel=0.05)
    assert term.params["q_eager_solo"] == pytest.approx(0.0012, rel=0.05)
    assert term.quality.points == 18 and term.quality.rms_seconds < 0.004   # the crowded points only


def test_fit_keeps_a_negative_q_at_zero_and_says_so():
    term = fit_oversubscription(_points({"horovod": -0.001}, noise=0.0))
    assert term.params["q_horovod"] == 0.0 and any("kept at 0" in n for n in term.notes)


def test_fit_without_crowded_runs_fails_clearly():
    roomy = pd.DataFrame({"algorithm": ["sync"] * 2, "ranks": [2, 4], "ranks_per_core": [0.5, 1.0],
                          "residual": [0.01, 0.02]})
    with pytest.raises(FitError, match="need runs with more ranks than cores on a host"):
        fit_oversubscription(roomy)
    with pytest.raises(FitError, match="need >= 1 multi-rank run"):
        fit_oversubscription(roomy.iloc[:0])


def test_fit_through_the_database_recovers_a_known_q(tmp_path):
    """Two synthetic studies, the same steps but one with O(P) of a known q added to every
    rank's comm_wait (2, 4 and 8 ranks on the local site's 2 cores). The other terms are
    fitted on compute and the collectives, which the added wait does not touch, so the fitted
    q must move by exactly the known q, whatever the other terms leave unexplained in the
    first (computed here from its own residuals)."""
    from perf_model.model import fit_study
    from perf_model.oversubscription import residual_points
    from perf_model.predict import step_parts, term_params
    from perf_model.shape import workload_shapes
    from perf_model.study import load_study
    from orchestrator.planner import host_of_site_name
    from results_db import connect

    from perf_synthetic import write_study

    known = 0.004
    configs = ((8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (16, 8))
    engine = connect(f"sqlite:///{tmp_path / 'o.db'}")
    write_study(engine, "plain", configs)
    write_study(engine, "crowded", configs, crowding=known)
    plain = fit_study(engine, "plain", replicates=0, host_of=host_of_site_name)
    crowded = fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    assert crowded["terms"]["oversubscription"]["params"]["cores_per_host"] == 2.0
    assert crowded["terms"]["oversubscription"]["params"]["one_host"] == 1.0

    data = load_study(engine, "plain")
    points, _ = residual_points(data, term_params(plain["terms"]), workload_shapes(data), host_of_site_name,
                                step_parts)
    x = np.array([max(p / 2 - 1, 0) * math.ceil(math.log2(p)) for p in points["ranks"]])
    baseline = float(np.dot(x, points["residual"]) / np.dot(x, x))   # the plain study's unclipped q
    assert crowded["terms"]["oversubscription"]["params"]["q_sync"] == pytest.approx(known + baseline, rel=0.05)
    assert abs(baseline) < known   # the other terms explain the plain study's steps to within the known q

    # without site hosts the term is left out, with the reason
    blind = fit_study(engine, "crowded", replicates=0)
    assert "oversubscription" not in blind["terms"] and "cores per host unknown" in blind["unfitted"]["oversubscription"]


def test_prediction_crowds_the_fit_host_and_not_a_site_with_cores(tmp_path):
    from perf_model.model import fit_study
    from perf_model.predict import predict
    from orchestrator.planner import host_of_site_name
    from results_db import connect
    from results_db.model_fits import latest_model_fit

    from perf_synthetic import write_study

    engine = connect(f"sqlite:///{tmp_path / 'p.db'}")
    write_study(engine, "crowded", ((8, 2), (8, 4), (8, 8)), crowding=0.004)
    fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    fit = latest_model_fit(engine, "crowded")
    q = fit["terms"]["oversubscription"]["params"]["q_sync"]
    # on the fit's host (the local site: every rank on one 2-core machine) 32 ranks crowd 16 to a core
    here = predict(fit, "sync", [32], 1)
    assert here["crowding_seconds"].iloc[0] == pytest.approx(q * 15 * 5)
    # the same 32 ranks on a site whose nodes have 64 cores each: nobody waits for a core
    roomy = predict(fit, "sync", [4], 8, host=Host(64, False))
    assert roomy["crowding_seconds"].iloc[0] == 0.0
    assert roomy["step_seconds"].iloc[0] == pytest.approx(here["step_seconds"].iloc[0] - q * 15 * 5, rel=1e-9)
