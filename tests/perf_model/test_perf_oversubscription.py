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
from perf_model.machine import Host
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


def test_fit_recovers_the_host_q_from_points_the_term_made():
    term = fit_oversubscription(_points({"sync": 0.0025, "eager_solo": 0.0025}, noise=0.002))
    assert term.params == {"q": pytest.approx(0.0025, rel=0.05)}
    assert term.quality.points == 18 and term.quality.rms_seconds < 0.004   # the crowded points only
    # the counterfactual: one q per algorithm
    apart = fit_oversubscription(_points({"sync": 0.0025, "eager_solo": 0.0012}, noise=0.002), per_algorithm=True)
    assert apart.params["q_sync"] == pytest.approx(0.0025, rel=0.05)
    assert apart.params["q_eager_solo"] == pytest.approx(0.0012, rel=0.05)
    # pooled, the host's q lies between the two, weighted by the points' x^2
    both = fit_oversubscription(_points({"sync": 0.0025, "eager_solo": 0.0012}, noise=0.0))
    assert both.params["q"] == pytest.approx((0.0025 + 0.0012) / 2, rel=1e-9)


def test_fit_keeps_a_negative_q_at_zero_and_says_so():
    term = fit_oversubscription(_points({"horovod": -0.001}, noise=0.0))
    assert term.params["q"] == 0.0 and any("kept at 0" in n for n in term.notes)


def test_fit_without_crowded_runs_fails_clearly():
    roomy = pd.DataFrame({"algorithm": ["sync"] * 2, "ranks": [2, 4], "ranks_per_core": [0.5, 1.0],
                          "residual": [0.01, 0.02]})
    with pytest.raises(FitError, match="need runs with more ranks than cores on a host"):
        fit_oversubscription(roomy)
    with pytest.raises(FitError, match="need >= 1 multi-rank run"):
        fit_oversubscription(roomy.iloc[:0])


def _crowded_study(engine, configs, known: float) -> None:
    """A synthetic study whose steps are the model's own: compute C(b) + noise (as the plain
    one), and a comm_wait of the wait and exposed communication the model predicts with the
    generating parameters (with the hidden share, collectives and bytes the plain study's
    fit measured) plus O(P) with q = ``known``, P ranks on the local site's 2 cores."""
    from perf_model.model import fit_study
    from perf_model.terms import allreduce_seconds, expected_max_normal

    from perf_synthetic import BANDWIDTH, LATENCY, SIGMA, write_study

    write_study(engine, "plain", [c[:2] for c in configs])
    shape = fit_study(engine, "plain", replicates=0)["workloads"]["sync"]
    m, n, h = shape["collectives_per_step"], shape["gradient_bytes"], shape["hidden"]

    def waited(p: int, cpus: int | None) -> float:
        comm = (m - 1) * 2 * math.ceil(math.log2(p)) * LATENCY + float(allreduce_seconds(n, p, LATENCY, BANDWIDTH))
        return SIGMA * expected_max_normal(p) + (1 - h) * comm + float(oversubscription_seconds(p, p / (cpus or 2),
                                                                                               known))

    write_study(engine, "crowded", configs, comm_wait=waited)


@pytest.mark.sweep
def test_fit_through_the_database_recovers_a_known_q(tmp_path):
    """2, 4 and 8 ranks on the local site's 2 cores, steps made by the model with a known q:
    the fit recovers q within 5 %, and without site hosts says why it cannot."""
    from perf_model.model import fit_study
    from orchestrator.site.model_inputs import host_of_site_name
    from results_db import connect

    known = 0.004
    engine = connect(f"sqlite:///{tmp_path / 'o.db'}")
    _crowded_study(engine, ((8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (16, 8)), known)
    crowded = fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    term = crowded["terms"]["oversubscription"]
    assert term["params"]["q"] == pytest.approx(known, rel=0.05)
    assert term["params"]["cpus_per_host"] == 2.0 and term["params"]["one_host"] == 1.0
    assert term["quality"]["points"] == 4   # the 4- and 8-rank runs; 2 ranks have their cores

    # without site hosts the term is left out, with the reason
    blind = fit_study(engine, "crowded", replicates=0)
    assert "oversubscription" not in blind["terms"] and "cores per host unknown" in blind["unfitted"]["oversubscription"]
    # a study of one rank per run says it has nothing to fit from
    from perf_synthetic import write_study

    write_study(engine, "alone", ((8, 1), (16, 1)))
    alone = fit_study(engine, "alone", replicates=0, host_of=host_of_site_name)
    assert "need >= 1 multi-rank run" in alone["unfitted"]["oversubscription"]


@pytest.mark.sweep
def test_a_run_pinned_to_fewer_cpus_counts_its_crowding_on_them(tmp_path):
    """Runs that recorded fewer CPUs than the site's (``runs.host_cpus``: 8 ranks on 1 of the
    local site's 2 cores) have the ranks per core of 16 ranks on both: the fit counts their ranks
    per core on the recorded CPUs and recovers q, and the host stored for predictions stays
    the site's (2 cores), not the pinned runs'. Read on the site's cores instead, the pinned
    runs' crowding would be put down to half the ranks per core and q overestimated."""
    from perf_model.model import fit_study
    from perf_model.oversubscription import residual_points
    from perf_model.predict import term_params
    from perf_model.study import load_study
    from orchestrator.site.model_inputs import host_of_site_name
    from results_db import connect

    known = 0.004
    engine = connect(f"sqlite:///{tmp_path / 'pin.db'}")
    _crowded_study(engine, ((8, 2), (8, 4), (8, 8, 1), (16, 2), (16, 4, 1), (16, 8, 1)), known)
    fit = fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    term = fit["terms"]["oversubscription"]
    assert term["params"]["q"] == pytest.approx(known, rel=0.05)
    assert term["params"]["cpus_per_host"] == 2.0
    points, _, _ = residual_points(load_study(engine, "crowded"), term_params(fit["terms"]), fit["workloads"],
                                   host_of_site_name)
    assert sorted(zip(points["ranks"], points["ranks_per_core"])) == [(2, 1.0), (2, 1.0), (4, 2.0), (4, 4.0),
                                                                      (8, 8.0), (8, 8.0)]
    # the same runs read on the site's 2 cores: the pinned runs' crowding lands on fewer ranks per core
    from results_db.store.schema import Run
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    with Session(engine) as s, s.begin():
        s.execute(update(Run).values(host_cpus=None))
    unpinned = fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    assert unpinned["terms"]["oversubscription"]["params"]["q"] > 1.3 * known


@pytest.mark.sweep
def test_runs_recording_more_cpus_than_the_site_are_counted_on_the_sites(tmp_path):
    """Predictions count ranks on the site YAML's CPUs, so the fit must too: runs whose ranks
    saw 8 CPUs on a site that says 2 are fitted at the site's ranks per core (q recovered as
    made, on 2), with a note that the YAML undercounts this machine."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from perf_model.model import fit_study
    from orchestrator.site.model_inputs import host_of_site_name
    from results_db import connect
    from results_db.store.schema import Run

    engine = connect(f"sqlite:///{tmp_path / 'roomy.db'}")
    _crowded_study(engine, ((8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (16, 8)), 0.004)
    with Session(engine) as s, s.begin():
        s.execute(update(Run).values(host_cpus=8))
    term = fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)["terms"]["oversubscription"]
    assert term["params"]["q"] == pytest.approx(0.004, rel=0.05) and term["params"]["cpus_per_host"] == 2.0
    assert any("recorded more CPUs than the site YAML" in n for n in term["notes"])


@pytest.mark.sweep
def test_prediction_crowds_the_fit_host_and_not_a_site_with_cores(tmp_path):
    from perf_model.model import fit_study
    from perf_model.predict import predict
    from orchestrator.site.model_inputs import host_of, host_of_site_name
    from orchestrator.site.config import load_site
    from results_db import connect
    from results_db.store.model_fits import latest_model_fit

    engine = connect(f"sqlite:///{tmp_path / 'p.db'}")
    _crowded_study(engine, ((8, 2), (8, 4), (8, 8)), 0.004)
    fit_study(engine, "crowded", replicates=0, host_of=host_of_site_name)
    fit = latest_model_fit(engine, "crowded")
    q = fit["terms"]["oversubscription"]["params"]["q"]
    assert q == pytest.approx(0.004, rel=0.05)
    # on the fit's host (the local site: every rank on one 2-core machine) 32 ranks crowd 16 to a core
    here = predict(fit, "sync", [32], 1)
    assert here["crowding_seconds"].iloc[0] == pytest.approx(q * 15 * 5)
    # the same 32 ranks on a site whose nodes have 64 hardware threads each: nobody waits for one
    roomy = predict(fit, "sync", [4], 8, host=Host(64, False))
    assert roomy["crowding_seconds"].iloc[0] == 0.0
    assert roomy["step_seconds"].iloc[0] == pytest.approx(here["step_seconds"].iloc[0] - q * 15 * 5, rel=1e-9)
    # local_slurm's four virtual nodes are one 2-core host: 4 nodes x 2 ranks crowd 4 to a core
    slurm = predict(fit, "sync", [4], 2, host=host_of(load_site("local_slurm")))
    assert slurm["crowding_seconds"].iloc[0] == pytest.approx(q * 3 * 3)
    # Theta: 64 cores x 4 hardware threads per node, 128 ranks per node have one each
    assert host_of(load_site("theta")).ranks_per_core(8, 128) == 0.5


def test_exposure_counts_the_collectives_that_every_rank_waits_through():
    """A synchronous step: 1 at any size. eager-SGD with sync_every s: (1 - 1/s) of the steps
    are partial rounds (Solo: 1/P of the ranks wait through it, Majority: half), 1/s a
    synchronous round plus the weights' averaging (2); numbers worked by hand."""
    from perf_model.terms import crowding_exposure

    for algorithm in ("sync", "horovod", "ddp"):
        assert crowding_exposure(algorithm, 32, 10) == pytest.approx(1.0)
    assert crowding_exposure("eager_solo", 32, 10) == pytest.approx(0.9 / 32 + 0.2)
    assert crowding_exposure("eager_majority", 32, 10) == pytest.approx(0.9 * 0.5 + 0.2)
    assert crowding_exposure("eager_majority", 4, 10) == pytest.approx(0.65)   # Majority's does not move with P
    # every step synchronous: a synchronous round and an averaging each step
    assert crowding_exposure("eager_solo", 8, 1) == pytest.approx(2.0)
    assert list(crowding_exposure("eager_solo", np.array([2, 4]), 5)) == pytest.approx([0.8 / 2 + 0.4, 0.8 / 4 + 0.4])


def test_fit_weights_each_run_by_its_exposure():
    """Residuals made as e q x (the eager runs with their exposure) give back the host's q
    when the points carry e; read as if every step were synchronous (no column), the eager
    runs pull q down."""
    from perf_model.terms import crowding_exposure

    q = 0.003
    rows = []
    for algorithm in ("sync", "eager_solo", "eager_majority"):
        for p in (4, 8):
            r = p / 2
            e = float(crowding_exposure(algorithm, p, 10))
            rows.append({"algorithm": algorithm, "ranks": p, "ranks_per_core": r, "exposure": e,
                         "residual": e * q * (r - 1) * math.ceil(math.log2(p))})
    points = pd.DataFrame(rows)
    assert fit_oversubscription(points).params["q"] == pytest.approx(q, rel=1e-9)
    assert fit_oversubscription(points.drop(columns="exposure")).params["q"] < 0.75 * q


def _shape(**over) -> dict:
    shape = {"batch_size": 32, "threads_per_worker": 1, "workers_per_node": 32, "injected_ranks": 0,
             "injected_delay": 0.0, "sync_every": 10, "steps": 50, "gradient_bytes": 1.09e6,
             "collectives_per_step": 1.0, "hidden": 0.5, "update_seconds": 0.001}
    return {**shape, **over}


def test_eager_steps_pay_the_averaging_and_their_share_of_the_crowding():
    """step_parts against the formulas worked here: eager-SGD's update is the measured one plus
    one allreduce of the model's bytes per sync_every steps, never hidden; sync's is the measured
    one. Crowding at 32 ranks on 2 cores: e q (r - 1) ceil(log2 P) with e from the algorithm."""
    from perf_model.predict import step_parts

    lat, bw, q = 4e-5, 3e8, 0.002
    params = {"compute": {"c0": 0.17, "c1": 0.0, "alpha": 0.0}, "straggler": {"sigma": 0.0},
              "allreduce": {"latency": lat, "bandwidth": bw}, "oversubscription": {"q": q, "by_exposure": 1.0}}
    p, n = 32, 1.09e6
    averaging = (2 * 5 * lat + 2 * 31 / 32 * n / bw) / 10
    crowd = q * 15 * 5
    host = Host(2, True)
    sync = step_parts(params, _shape(), "sync", p, 1, None, host)
    solo = step_parts(params, _shape(), "eager_solo", p, 1, None, host)
    majority = step_parts(params, _shape(sync_every=5), "eager_majority", p, 1, None, host)
    assert sync["update"] == pytest.approx(0.001) and sync["crowding"] == pytest.approx(crowd)
    assert solo["update"] == pytest.approx(0.001 + averaging)
    assert solo["crowding"] == pytest.approx(crowd * (0.9 / 32 + 0.2))
    assert majority["update"] == pytest.approx(0.001 + averaging * 10 / 5)
    assert majority["crowding"] == pytest.approx(crowd * (0.8 * 0.5 + 0.4))
    # one rank: nothing to average, nobody to crowd
    alone = step_parts(params, _shape(), "eager_solo", 1, 1, None, host)
    assert alone["update"] == pytest.approx(0.001) and alone["crowding"] == 0.0
    # a fit stored before the exposure (no by_exposure): its q was fitted with every step as
    # a synchronous one's, and is predicted so
    old = {**params, "oversubscription": {"q": q}}
    assert step_parts(old, _shape(), "eager_solo", p, 1, None, host)["crowding"] == pytest.approx(crowd)


def test_a_fit_on_exposure_says_so():
    """The fit marks q as fitted per collective waited through (by_exposure) only when its
    points carry the exposure; points without it (a caller of the old form) are not marked."""
    points = _points({"sync": 0.0025}, noise=0.0)
    assert "by_exposure" not in fit_oversubscription(points).params
    marked = fit_oversubscription(points.assign(exposure=1.0)).params
    assert marked["by_exposure"] == 1.0 and marked["q"] == pytest.approx(0.0025)
