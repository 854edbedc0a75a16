"""``autotune=true``: the cycle-time tuner's schedule and choice, and a real run that uses it."""

from __future__ import annotations

from workloads.event_log import read_events

import collections
import json
import math

import pytest
from mpi4py import MPI

from results_db import connect
from results_db.store import query
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from workloads.comm.cycle_tuner import ONE_PER_STEP, CycleTimeTuner, candidates_for
from workloads.spec import RunSpec

from conftest import REPO, mpiexec, write_spec


def test_candidates_are_the_configured_a_fifth_and_one_per_step():
    assert candidates_for(0.005) == (0.005, 0.001, ONE_PER_STEP)


def test_schedule_interleaves_the_candidates_after_step_0():
    t = CycleTimeTuner(0.005, total_steps=100)
    assert t.rounds == 3 and t.last_trial == 9
    assert [t.cycle_for(s) for s in range(11)] == [0.005] + [0.005, 0.001, ONE_PER_STEP] * 3 + [0.005]
    assert not t.due(9) and t.due(10)


def test_a_short_run_is_not_tuned():
    # three rounds or none, and the choice must run at least as many steps as the trials took
    assert CycleTimeTuner(0.005, total_steps=19).rounds == 3   # steps 1-9 trials, 10-18 the choice
    untuned = CycleTimeTuner(0.005, total_steps=18)
    assert untuned.rounds == 0 and untuned.chosen == 0.005 and not untuned.due(50)
    assert [untuned.cycle_for(s) for s in range(18)] == [0.005] * 18
    assert untuned.report() == {"autotune_cycle_time_ms": 5.0, "autotune_tuned": False}


def test_the_choice_is_the_fastest_median_and_one_slow_step_does_not_decide_it():
    t = CycleTimeTuner(0.005, total_steps=100)
    times = {0.005: [0.100, 0.101, 0.099], 0.001: [0.104, 0.105, 0.103], ONE_PER_STEP: [0.095, 0.300, 0.096]}
    seen = collections.defaultdict(int)
    for step in range(0, 12):
        c = t.cycle_for(step)
        if t.first_step <= step <= t.last_trial:
            t.observe(step, times[c][seen[c]])
            seen[c] += 1
        else:
            t.observe(step, 5.0)   # outside the trials: ignored
    assert all(len(v) == 3 for v in t.samples.values())
    assert t.decide(MPI.COMM_SELF) == ONE_PER_STEP   # median 0.096 despite the 0.300 outlier
    assert [t.cycle_for(s) for s in (10, 50)] == [ONE_PER_STEP] * 2
    report = t.report()
    assert report["autotune_cycle_time_ms"] is None and report["autotune_tuned"] is True
    assert report["autotune_trials"] == {"5 ms": 100.0, "1 ms": 104.0, "one per step": 96.0}
    assert report["autotune_trial_steps"] == 9


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_that_measured_differently_adopt_one_cycle(ranks):
    proc = mpiexec(ranks, str(REPO / "tests" / "mpi_programs" / "check_cycle_tuner.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK {ranks} ranks" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("engine_thread", [True, False])
def test_an_autotuned_run_runs_each_trial_with_its_cycle_and_keeps_the_choice(tmp_path, engine_thread):
    """With one cycle per step the engine negotiates exactly once a step; with 1 or 5 ms cycles
    over resnet20's backward (tens of ms here) several times. So the negotiations per step
    show which cycle each step ran with: the trials' schedule, then the choice stored in the
    run's metrics. Broken on purpose (the tuner's cycle not handed to the engine), the
    one-per-step trials negotiate several times and this fails."""
    run_dir = tmp_path / "run"
    spec = write_spec(run_dir, workers_per_node=2, threads_per_node=2, epochs=1, steps_per_epoch=19,
                      model="resnet20", dataset="synthetic_images", timeline=True, autotune=True, batch_size=16,
                      engine_thread=engine_thread)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((run_dir / "result.json").read_text())["metrics"]
    assert metrics["autotune_tuned"] is True and metrics["autotune_trial_steps"] == 9   # 3 rounds of 3 in 19 steps
    assert set(metrics["autotune_trials"]) == {"5 ms", "1 ms", "one per step"}
    chosen = metrics["autotune_cycle_time_ms"]
    fastest = min(metrics["autotune_trials"], key=metrics["autotune_trials"].get)
    assert fastest == ("one per step" if chosen is None else f"{chosen:g} ms")
    tuner = CycleTimeTuner(0.005, total_steps=19)
    for rank in range(2):
        negotiations = collections.Counter(r["step"] for r in read_events(run_dir, rank) if r["phase"] == "negotiate")
        for step in range(1, 19):
            planned = tuner.cycle_for(step) if step <= tuner.last_trial else \
                (ONE_PER_STEP if chosen is None else chosen / 1e3)
            if math.isinf(planned):
                assert negotiations[step] == 1, (rank, step, negotiations)
            elif planned == 0.001:
                assert negotiations[step] >= 3, (rank, step, negotiations)
    # the database keeps the setting and the choice
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    [d] = register_runs(engine, "tuned", [PlannedRun("k", RunSpec.load(spec).to_dict(), str(run_dir))])
    ingest_run(engine, d.run_id, run_dir)
    [row] = query.runs(engine, study="tuned").to_dict("records")
    assert row["autotune"] is True or row["autotune"] == 1
    assert row["metrics"]["autotune_cycle_time_ms"] == chosen


@pytest.mark.mpi
def test_one_rank_has_nothing_to_tune_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    spec = write_spec(run_dir, epochs=1, steps_per_epoch=20, autotune=True)
    proc = mpiexec(1, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir / "result.json").read_text())["metrics"] == {"autotune_tuned": False}
