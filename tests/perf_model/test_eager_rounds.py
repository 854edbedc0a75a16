"""The simulation of eager-SGD's rounds that the model's catch-up wait comes from
(``perf_model.eager_rounds.eager_steps``), against hand-worked cases, the older round-rate
simulation written apart from it, and the lock-step closed form; and the prediction that uses it."""

from __future__ import annotations

import numpy as np
import pytest

from perf_model.eager_rounds import eager_steps, solo_round_rate
from perf_model.predict import step_parts
from perf_model.terms import injected_wait_eager
from workloads.imbalance import DelayInjector

C, D = 0.1, 0.1


def test_hand_worked_cases():
    # no imbalance, no noise: a step is its compute, one round a gradient, for either mode
    for mode in ("solo", "majority"):
        none = eager_steps(mode, 8, C, D, 0, 0.0, 10)
        assert none.seconds_per_gradient == pytest.approx(C)
        assert none.rounds_per_gradient == pytest.approx(1.0)
    # one rank: it waits for no one and computes every round, delayed in each
    assert eager_steps("solo", 1, C, D, 1, 0.0, 10).seconds_per_gradient == pytest.approx(C + D)
    # every round synchronous: everyone waits for the delayed rank each round, as sync SGD does
    every = eager_steps("solo", 4, C, D, 1, 0.0, 1)
    assert every.seconds_per_gradient == pytest.approx(C + D)
    assert every.rounds_per_gradient == pytest.approx(1.0)
    # two ranks, solo, catch-up, no synchronous round but the last: round s completes at the
    # first arrival; the undelayed rank leads, the delayed one (computing C + D = 2 C) misses
    # the round after and joins the next, so it computes one gradient in two rounds at most
    two = eager_steps("solo", 2, C, D, 1, 0.0, 0, rounds=2000)
    assert 1.0 < two.rounds_per_gradient < 2.0


@pytest.mark.sweep
def test_rate_agrees_with_the_round_rate_simulation():
    """solo_round_rate (written before, an event loop of its own, the run's own delay draws)
    gives rounds per second; eager_steps' rounds per gradient over seconds per gradient is the same."""
    for p in (2, 4, 8):
        mine = eager_steps("solo", p, C, D, 1, 0.0, 0, rounds=400)
        theirs = np.mean([solo_round_rate(DelayInjector("injected", 1, D * 1e3, 0, 0.0, seed, p), C, 400)
                          for seed in range(8)])
        assert mine.rounds_per_gradient / mine.seconds_per_gradient == pytest.approx(theirs, rel=0.03), p


def test_lockstep_agrees_with_its_closed_form_and_catch_up_is_faster():
    """Without catch-up the simulation is the lock-step mechanism, whose closed form
    (terms.injected_wait_eager) takes the ranks' delay counts as independent: within 5 %.
    Catch-up (the control) must be faster than both at every size."""
    for p in (2, 4, 8, 16):
        lock = eager_steps("solo", p, C, D, 1, 0.0, 10, catch_up=False).seconds_per_gradient
        closed = C + injected_wait_eager(p, 1, D, 0.0, 10)
        assert lock == pytest.approx(closed, rel=0.05), p
        caught = eager_steps("solo", p, C, D, 1, 0.0, 10).seconds_per_gradient
        assert caught < 0.97 * min(lock, closed), p


def test_majority_waits_for_its_initiator():
    # a delayed initiator holds every rank: majority's step is longer than solo's, and noise
    # alone (no injection) makes majority wait where solo never does
    for p in (2, 8):
        assert eager_steps("majority", p, C, D, 1, 0.0, 10).seconds_per_gradient > \
            1.02 * eager_steps("solo", p, C, D, 1, 0.0, 10).seconds_per_gradient
    assert eager_steps("majority", 8, C, 0.0, 0, 0.01, 0).seconds_per_gradient > C + 0.004
    assert eager_steps("solo", 8, C, 0.0, 0, 0.01, 0).seconds_per_gradient < C + 0.001


def test_prediction_uses_the_mechanism_the_runs_ran():
    # with noise, as runs have (without it the simulation's exact ties break by rank, which
    # rounding at another time scale reorders: the prediction simulates in units of C)
    sigma = 0.004
    params = {"compute": {"c0": C, "c1": 0.0, "alpha": 0.0}, "straggler": {"sigma": sigma}}
    shape = {"batch_size": 32, "threads_per_worker": 1, "injected_ranks": 1, "injected_delay": D,
             "sync_every": 10, "steps": 50, "update_seconds": 0.002, "workers_per_node": 8, "hidden": 0.0}
    lock = step_parts(params, {**shape, "catch_up": "lockstep"}, "eager_solo", 8, 1, None, None)
    old = step_parts(params, shape, "eager_solo", 8, 1, None, None)        # a fit stored before catch-up
    caught = step_parts(params, {**shape, "catch_up": "apply_all"}, "eager_solo", 8, 1, None, None)
    latest = step_parts(params, {**shape, "catch_up": "latest"}, "eager_solo", 8, 1, None, None)
    assert old == lock
    assert lock["wait"] == pytest.approx(injected_wait_eager(8, 1, D, sigma, 10))
    sim = eager_steps("solo", 8, C, D, 1, sigma, 10)
    assert caught["wait"] == pytest.approx(sim.seconds_per_gradient - C, rel=0.01)
    assert caught["update"] == pytest.approx(0.002 * sim.rounds_per_gradient, rel=0.01)
    assert latest["update"] == pytest.approx(0.002) and latest["wait"] == caught["wait"]
    assert caught["step"] < lock["step"]
    sync = {**shape, "catch_up": "apply_all"}
    assert step_parts(params, sync, "sync", 8, 1, None, None) == step_parts(params, {**sync, "catch_up": "lockstep"},
                                                                            "sync", 8, 1, None, None)


@pytest.mark.sweep
def test_the_fit_records_the_catch_up_its_runs_ran(tmp_path):
    """shape.workload_shapes reads the runs' eager_catch_up: apply_all (the default) as it is,
    lockstep as it is, and runs stored before the column existed (null) as lockstep, the only
    mechanism there was then; the prediction path above keys on it."""
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from perf_model.shape import workload_shapes
    from perf_model.study import load_study
    from results_db import connect
    from results_db.store.schema import Run

    from perf_synthetic import write_study

    engine = connect(f"sqlite:///{tmp_path / 'c.db'}")
    ids = {study: write_study(engine, study, configs=((8, 2), (8, 4)), algorithm="eager_solo")
           for study in ("default", "lock", "before")}
    with Session(engine) as s, s.begin():
        s.execute(update(Run).where(Run.id.in_(ids["lock"])).values(eager_catch_up="lockstep"))
        s.execute(update(Run).where(Run.id.in_(ids["before"])).values(eager_catch_up=None))
    seen = {study: workload_shapes(load_study(engine, study, 10))["eager_solo"]["catch_up"] for study in ids}
    assert seen == {"default": "apply_all", "lock": "lockstep", "before": "lockstep"}
