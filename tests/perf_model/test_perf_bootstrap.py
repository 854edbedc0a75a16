"""The band's bootstrap (perf_model/bootstrap.py): runs drawn whole, every term and every
measured part refitted per replicate, and the replicate's own parts used in the band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perf_model.bootstrap import BootstrapError, RunDraws, bootstrap_fits
from perf_model.predict import predict
from perf_model.study import load_study
from results_db import connect


def _study(tmp_path, configs=((8, 2), (8, 4), (16, 2), (16, 4), (32, 2), (32, 4))):
    from perf_synthetic import write_study

    engine = connect(f"sqlite:///{tmp_path / 'b.db'}")
    write_study(engine, "syn", configs, comm_wait=lambda p, cpus: 0.002 * math.log2(p))
    return engine, load_study(engine, "syn", 5)


def test_a_run_drawn_twice_is_two_runs(tmp_path):
    _, data = _study(tmp_path)
    draws = RunDraws(data)
    rng = np.random.default_rng(3)
    for _ in range(5):
        drawn = draws.draw(rng)
        assert list(drawn.runs["run_id"]) == list(range(len(data.runs)))   # as many runs, renumbered
        # each drawn run carries all of its original's rows, under its new id
        originals = drawn.runs.set_index("run_id")["run_key"]
        for new_id, key in originals.items():
            [orig] = data.runs.loc[data.runs["run_key"] == key, "run_id"]
            for frame in ("per_step", "allreduce", "compute"):
                mine = getattr(drawn, frame)
                theirs = getattr(data, frame)
                assert (mine["run_id"] == new_id).sum() == (theirs["run_id"] == orig).sum()
            assert drawn.step_seconds[new_id] == data.step_seconds[orig]
    # over many draws some run is drawn twice (6 runs: P(all distinct) = 6!/6^6 < 2 %)
    assert any(draws.draw(rng).runs["run_key"].nunique() < len(data.runs) for _ in range(10))


def test_every_term_and_measured_part_is_refitted(tmp_path):
    import dataclasses

    _, data = _study(tmp_path)
    # each run's own update time (1, 2, ... ms): the measured part a replicate must re-measure
    steps = data.per_step.assign(update=data.per_step["run_id"].rank(method="dense") * 1e-3)
    data = dataclasses.replace(data, per_step=steps)
    boot = bootstrap_fits(data, None, replicates=30, seed=1)
    assert len(boot.replicates) == 30
    for replicate in boot.replicates:
        assert {"compute", "allreduce", "straggler", "workloads"} <= set(replicate)
        assert set(replicate["workloads"]) == {"sync"}
    # the refitted parts move between replicates: compute (the drawn batch sizes), the
    # straggler's spread and the measured update (the median over the drawn runs' steps)
    c0 = {round(r["compute"]["c0"], 9) for r in boot.replicates}
    sigma = {round(r["straggler"]["sigma"], 9) for r in boot.replicates}
    update = {r["workloads"]["sync"]["update_seconds"] for r in boot.replicates}
    assert len(c0) > 5 and len(sigma) > 5 and len(update) > 2
    assert update <= {k * 1e-3 for k in range(1, 7)} | {(k + 0.5) * 1e-3 for k in range(1, 6)}


def test_band_takes_each_replicates_own_measured_parts():
    """Two replicates that differ only in the measured update: the band spans exactly their
    steps, whereas the fit's shape alone would give no band at all."""
    from test_perf_predict import _fit

    fit = _fit()
    base = fit["workloads"]["sync"]
    terms = {k: v["params"] for k, v in fit["terms"].items()}
    fit["bootstrap"] = [{**terms, "workloads": {"sync": {**base, "update_seconds": u, "batch_size": 999}}}
                        for u in (0.001, 0.003)]
    [row] = predict(fit, "sync", [4], 4, band=1.0).to_dict("records")
    assert row["step_high"] - row["step_low"] == pytest.approx(0.002, rel=1e-6)
    # the layout asked about stays the fit's: a replicate's batch size is not taken
    assert row["throughput"] == pytest.approx(16 * 32 / row["step_seconds"])
    old = {**fit, "bootstrap": [terms, terms]}   # a fit stored before replicates refitted shapes
    [flat] = predict(old, "sync", [4], 4, band=1.0).to_dict("records")
    assert flat["step_high"] == flat["step_low"] == pytest.approx(flat["step_seconds"])


def test_too_few_runs_to_resample_is_one_clear_error(tmp_path, monkeypatch):
    """2 runs at 2 rank counts: half the draws lose a rank count (no allreduce term); with no
    redraws allowed, one of 60 replicates meets such a draw (all 60 not: 2^-60)."""
    import perf_model.bootstrap

    _, data = _study(tmp_path, configs=((8, 2), (16, 4)))
    monkeypatch.setattr(perf_model.bootstrap, "MAX_REDRAWS", 0)
    with pytest.raises(BootstrapError, match="could not refit allreduce.*too few runs to resample"):
        bootstrap_fits(data, None, replicates=60, seed=0)
