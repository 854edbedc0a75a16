"""A timeline's window of steps and sample of ranks: what the spec selects, and a real 2-rank run
that records only those (so a long, wide run's timeline stays small)."""

from __future__ import annotations

import pytest

from results_db import connect
from results_db.store import query
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from workloads.spec import RunSpec

from conftest import mpiexec, write_spec


def spec(**fields) -> RunSpec:
    return RunSpec(study="t", site="local", nodes=2, workers_per_node=4, threads_per_node=4, batch_size=8,
                   timeline=True, **fields)


def test_the_rank_sample_is_spread_from_the_first_to_the_last():
    assert spec(timeline_ranks=3).timeline_rank_sample() == {0, 4, 7}     # 0, 3.5 -> 4, 7 of ranks 0..7
    assert spec(timeline_ranks=2).timeline_rank_sample() == {0, 7}
    assert spec(timeline_ranks=1).timeline_rank_sample() == {0}
    assert spec(timeline_ranks=8).timeline_rank_sample() is None          # all of them: no sample
    assert spec().timeline_rank_sample() is None


def test_a_step_and_rank_are_recorded_only_inside_the_window_and_sample():
    s = spec(timeline_steps="10-19", timeline_ranks=2)
    assert s.records_timeline(10, 0) and s.records_timeline(19, 7)
    assert not s.records_timeline(9, 0) and not s.records_timeline(20, 0) and not s.records_timeline(12, 3)
    assert not RunSpec(study="t", site="local", nodes=1, workers_per_node=1, threads_per_node=1,
                       batch_size=8).records_timeline(0, 0)   # no timeline at all


@pytest.mark.mpi
def test_a_run_records_only_its_window_and_sample(tmp_path):
    path = write_spec(tmp_path / "r", workers_per_node=2, threads_per_node=2, steps_per_epoch=6, timeline=True,
                      timeline_steps="2-3", timeline_ranks=1)
    proc = mpiexec(2, "-m", "workloads", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    [d] = register_runs(engine, "t", [PlannedRun("k", RunSpec.load(path).to_dict(), str(tmp_path / "r"))])
    ingest_run(engine, d.run_id, tmp_path / "r")
    events = query.events(engine, [d.run_id])
    assert set(events["step"]) == {2, 3} and set(events["rank"]) == {0}
    assert {"forward", "backward", "allreduce"} <= set(events["phase"])
    [row] = query.runs(engine, study="t").to_dict("records")
    assert row["timeline_steps"] == "2-3" and row["timeline_ranks"] == 1
    assert row["steps"] == 6     # every step still ran and was timed: only the timeline is sampled
