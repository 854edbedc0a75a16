"""The fine-grain timeline: what the workload records, and what ingestion derives from it."""

from __future__ import annotations

from workloads.event_log import read_events

import json

import numpy as np
import pandas as pd
import pytest

from results_db import connect
from results_db.store import query
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, register_runs
from results_db.ingest.timeline import step_stats
from workloads.spec import RunSpec

from conftest import mpiexec, write_spec


def _ev(rank, step, phase, t0, t1, tensor="-", arrival=None):
    return {"rank": rank, "step": step, "tensor": tensor, "phase": phase, "t0": t0, "t1": t1, "arrival": arrival}


def test_step_stats_by_hand():
    events = pd.DataFrame([
        # step 1, rank 0: backward 10..20; buffer A 12..14 (all hidden), buffer B 19..23 (1 of 4 hidden)
        _ev(0, 1, "backward", 10, 20), _ev(0, 1, "allreduce", 12, 14, "fused-0", arrival=11),
        _ev(0, 1, "allreduce", 19, 23, "fused-1", arrival=18), _ev(0, 1, "update", 24, 25),
        # step 1, rank 1: backward 10..22; buffer A 12..14 (hidden), buffer B 19..23 (3 of 4 hidden)
        _ev(1, 1, "backward", 10, 22), _ev(1, 1, "allreduce", 12, 14, "fused-0", arrival=11.5),
        _ev(1, 1, "allreduce", 19, 23, "fused-1", arrival=21), _ev(1, 1, "update", 24, 26),
        # step 2: updates only
        _ev(0, 2, "update", 30, 31), _ev(1, 2, "update", 32, 33),
    ])
    stats = step_stats(events).set_index("step")
    assert stats.loc[1, "collectives"] == 2
    assert stats.loc[1, "allreduce_seconds"] == pytest.approx(6.0)
    assert stats.loc[1, "arrival_skew_max"] == pytest.approx(3.0)      # fused-1: 21 - 18
    assert stats.loc[1, "arrival_skew_mean"] == pytest.approx(1.75)    # (0.5 + 3) / 2
    assert stats.loc[1, "hidden_fraction"] == pytest.approx(((2 + 1) / 6 + (2 + 3) / 6) / 2)
    assert np.isnan(stats.loc[1, "update_delay"])                       # no earlier update
    assert stats.loc[2, "update_delay"] == pytest.approx(((30 - 25) + (32 - 26)) / 2)
    assert stats.loc[2, "collectives"] == 0


def test_the_arrival_spread_folded_in_chunks_equals_one_groupby():
    """``ArrivalSpread`` keeps (step, buffer) extremes in sorted arrays, folded chunk by chunk in
    any order: against one pandas groupby over the whole (independent), on 30 random runs with
    ranks that recorded no arrival (NaN), a buffer whose every arrival is missing, a buffer
    named "" and one with no name (None: no group, as the events table may hold it)."""
    from results_db.ingest.timeline import StepStats

    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = 2000
        events = pd.DataFrame({"rank": rng.integers(0, 6, n), "step": rng.integers(0, 40, n),
                               "tensor": rng.choice(np.array(["fused-0", "fused-1", "fused-2", "", None], object), n),
                               "phase": "allreduce", "t0": rng.random(n), "t1": 1 + rng.random(n),
                               "arrival": rng.random(n)})
        events.loc[rng.random(n) < 0.1, "arrival"] = np.nan
        events.loc[events["tensor"] == "fused-2", "arrival"] = np.nan
        stats = StepStats()
        for rank in rng.permutation(6):   # a rank at a time, as ingestion folds them, in no order
            stats.add(events[events["rank"] == rank])
        got = stats.result().set_index("step")
        spread = events.groupby(["step", "tensor"])["arrival"].agg(lambda a: a.max() - a.min()).groupby(level=0)
        assert np.allclose(got["arrival_skew_max"], spread.max().reindex(got.index), equal_nan=True), seed
        assert np.allclose(got["arrival_skew_mean"], spread.mean().reindex(got.index), equal_nan=True), seed


@pytest.mark.mpi
def test_timeline_run_records_and_derives(tmp_path):
    run_dir = tmp_path / "run"
    spec_path = write_spec(run_dir, workers_per_node=2, threads_per_node=2, epochs=1, steps_per_epoch=4,
                           model="resnet20", dataset="synthetic_images", timeline=True, fusion_threshold_mb=0.2)
    proc = mpiexec(2, "-m", "workloads", str(spec_path))
    assert proc.returncode == 0, proc.stderr
    spec = RunSpec.load(spec_path)
    n_params = 65  # resnet20's parameter tensors
    for rank in range(2):
        events = read_events(run_dir, rank)
        for step in range(4):
            mine = [e for e in events if e["step"] == step]
            assert sum(e["phase"] == "grad_ready" for e in mine) == n_params
            fused = [e for e in mine if e["phase"] == "allreduce"]
            # every gradient is in exactly one collective, none over the threshold unless alone
            names = [t for e in fused for t in e["tensors"]]
            assert sorted(names) == sorted({e["tensor"] for e in mine if e["phase"] == "grad_ready"})
            assert all(e["bytes"] <= 0.2 * 2**20 or len(e["tensors"]) == 1 for e in fused)
            assert all(e["t0"] <= e["t1"] and e["arrival"] <= e["t1"] for e in fused)
            phases = {e["phase"] for e in mine}
            assert {"forward", "backward", "wait", "update", "negotiate"} <= phases
        # the rank's own count of what its timeline cost (bench_timeline_overhead reads it): every
        # event the stream holds, counted by the loop and written by the thread before the count;
        # its times within the training time
        [end] = [json.loads(line) for line in (run_dir / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()
                 if json.loads(line)["type"] == "run_end"]
        cost = end["summary"]["timeline_cost"]
        assert cost["events"] == cost["events_written"] == len(events)
        assert 0 < cost["loop_seconds"] < cost["train_seconds"] and 0 <= cost["writer_cpu_seconds"] < cost["train_seconds"]

    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    [d] = register_runs(engine, "tl", [PlannedRun("k", spec.to_dict(), str(run_dir))])
    ingest_run(engine, d.run_id, run_dir)
    stats = query.step_stats(engine, [d.run_id])
    assert list(stats["step"]) == [0, 1, 2, 3]
    assert (stats["collectives"] >= 2).all() and (stats["arrival_skew_max"] >= 0).all()
    assert stats["hidden_fraction"].between(0, 1).all()
    assert stats["update_delay"].iloc[1:].gt(0).all()
    ev = query.events(engine, [d.run_id], phases=["allreduce"])
    assert set(ev["rank"]) == {0, 1} and ev["tensors"].notna().all()
    cost = query.timeline_cost(engine, [d.run_id])
    assert list(cost["rank"]) == [0, 1] and (cost["events"] == [len(read_events(run_dir, r)) for r in (0, 1)]).all()
    assert cost["share"].between(0, 1).all()


def _run_timeline(run_dir, **fields):
    spec_path = write_spec(run_dir, workers_per_node=2, threads_per_node=2, epochs=1, steps_per_epoch=4,
                           model="resnet20", dataset="synthetic_images", batch_size=32, timeline=True, **fields)
    proc = mpiexec(2, "-m", "workloads", str(spec_path))
    assert proc.returncode == 0, proc.stderr
    events = read_events(run_dir, 0)
    return RunSpec.load(spec_path), events


@pytest.mark.mpi
def test_default_fusion_fuses_and_allreduce_overlaps_backprop(tmp_path):
    """With the default fusion threshold (64 MB) the engine issues fewer collectives than
    resnet20 has gradient tensors, and part of the allreduce time is hidden behind backprop
    (backward of batch 32 takes tens of ms: long enough to overlap). Control, which shows the
    counts can tell the difference: a threshold below every tensor's size gives one collective
    per tensor. Broken implementations this fails on: fusion off by default (threshold 0), an
    engine that starts reducing only once backward has finished (hidden fraction 0)."""
    n_params = 65   # resnet20's parameter tensors
    spec, events = _run_timeline(tmp_path / "default")
    assert spec.fusion_threshold_mb == 64.0
    per_step = [sum(e["phase"] == "allreduce" for e in events if e["step"] == s) for s in range(4)]
    assert all(1 <= c < n_params for c in per_step), per_step
    assert sum(per_step[1:]) <= 3 * n_params // 2, per_step     # well under one per tensor

    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    [d] = register_runs(engine, "tl", [PlannedRun("k", spec.to_dict(), str(tmp_path / "default"))])
    ingest_run(engine, d.run_id, tmp_path / "default")
    stats = query.step_stats(engine, [d.run_id])
    assert stats["hidden_fraction"].iloc[1:].max() > 0, stats[["step", "hidden_fraction"]]

    _, unfused = _run_timeline(tmp_path / "unfused", fusion_threshold_mb=1e-6)
    per_step_unfused = [sum(e["phase"] == "allreduce" for e in unfused if e["step"] == s) for s in range(4)]
    assert per_step_unfused == [n_params] * 4


def _reference_step_stats(events: pd.DataFrame) -> pd.DataFrame:
    """The measures computed in one pass over the whole frame (the implementation before
    StepStats folded them rank by rank): the independent computation the fold is checked against."""
    from results_db.ingest.timeline import STAT_COLUMNS, _overlap

    coll = events[events["phase"] == "allreduce"]
    steps = pd.DataFrame({"step": sorted(events["step"].unique())}).set_index("step")
    per_rank = coll.assign(d=coll["t1"] - coll["t0"]).groupby(["step", "rank"])["d"].sum()
    steps["allreduce_seconds"] = per_rank.groupby("step").mean()
    steps["collectives"] = coll.groupby(["step", "rank"]).size().groupby("step").max()
    spread = coll.groupby(["step", "tensor"])["arrival"].max() - coll.groupby(["step", "tensor"])["arrival"].min()
    steps["arrival_skew_max"] = spread.groupby("step").max()
    steps["arrival_skew_mean"] = spread.groupby("step").mean()
    joined = coll.merge(events[events["phase"] == "backward"][["rank", "step", "t0", "t1"]], on=["rank", "step"],
                        suffixes=("", "_bwd"))
    hidden = _overlap(joined["t0"].to_numpy(), joined["t1"].to_numpy(), joined["t0_bwd"].to_numpy(),
                      joined["t1_bwd"].to_numpy())
    sums = joined.assign(hidden=hidden, d=joined["t1"] - joined["t0"]).groupby(["step", "rank"])[["hidden", "d"]].sum()
    steps["hidden_fraction"] = (sums["hidden"] / sums["d"].where(sums["d"] > 0)).groupby("step").mean()
    updates = events[events["phase"] == "update"].sort_values(["rank", "step"])
    gap = updates["t0"] - updates.groupby("rank")["t1"].shift(1)
    steps["update_delay"] = updates.assign(gap=gap).groupby("step")["gap"].mean()
    steps = steps.reset_index()
    steps["collectives"] = steps["collectives"].fillna(0).astype(int)
    steps["allreduce_seconds"] = steps["allreduce_seconds"].fillna(0.0)
    return steps[STAT_COLUMNS]


def test_the_measures_folded_rank_by_rank_equal_one_pass_over_the_whole_run():
    """Ingestion folds each rank's events into StepStats as it parses them; in any rank order
    the result is the one-pass computation's (random timelines: ranks that skip a step's
    collectives, buffers with no arrival, a zero-length collective)."""
    from results_db.ingest.timeline import StepStats

    rng = np.random.default_rng(7)
    rows = []
    for rank in range(6):
        t = 0.0
        for step in range(25):
            rows.append(_ev(rank, step, "backward", t, t + rng.uniform(0.5, 1.0)))
            if not (rank == 3 and step % 4 == 0):
                for b in range(int(rng.integers(1, 4))):
                    a = t + rng.uniform(0.2, 1.2)
                    rows.append(_ev(rank, step, "allreduce", a, a + (0 if (rank, step, b) == (1, 5, 0) else rng.uniform(0, 0.3)),
                                    f"fused-{b}", arrival=None if (step, b) == (7, 1) else a - rng.uniform(0, 0.1)))
            rows.append(_ev(rank, step, "grad_ready", t + 0.3, t + 0.3, "layer.weight"))
            rows.append(_ev(rank, step, "update", t + 1.5, t + 1.6))
            t += 2.0 + rng.uniform(0, 0.2)
    events = pd.DataFrame(rows)
    reference = _reference_step_stats(events)
    assert reference["hidden_fraction"].notna().any() and reference["arrival_skew_max"].notna().any()
    for order in ([0, 1, 2, 3, 4, 5], [5, 2, 0, 4, 1, 3]):
        folded = StepStats()
        for rank in order:
            folded.add(events[events["rank"] == rank])
        pd.testing.assert_frame_equal(folded.result(), reference, check_dtype=False, rtol=1e-12)
    pd.testing.assert_frame_equal(step_stats(events), reference, check_dtype=False, rtol=1e-12)
    control = StepStats()   # the check can fail: a rank left out changes the measures
    for rank in range(5):
        control.add(events[events["rank"] == rank])
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(control.result(), reference, check_dtype=False, rtol=1e-12)


def _random_timeline(ranks: int, steps: int, late: bool = False) -> pd.DataFrame:
    """Per rank and step a backward, 1-3 fused allreduces and an update, in the order written:
    ``late``, each step's allreduces after the next step's phases (as an engine event drained a
    step late is written)."""
    rng = np.random.default_rng(11)
    rows = []
    for rank in range(ranks):
        t, waiting = 0.0, []
        for step in range(steps):
            rows.append(_ev(rank, step, "backward", t, t + rng.uniform(0.5, 1.0)))
            mine = []
            for b in range(int(rng.integers(1, 4))):
                a = t + rng.uniform(0.2, 1.2)
                mine.append(_ev(rank, step, "allreduce", a, a + rng.uniform(0, 0.3), f"fused-{b}",
                                arrival=a - rng.uniform(0, 0.1)))
            rows.append(_ev(rank, step, "update", t + 1.5, t + 1.6))
            if late:
                rows += waiting
                waiting = mine
            else:
                rows += mine
            t += 2.0 + rng.uniform(0, 0.2)
        rows += waiting
    return pd.DataFrame(rows)


def _fold_through_the_sink(tmp_path, events: pd.DataFrame, fold_rows: int, monkeypatch):
    """The events through ingestion's sink as JSON lines, blocks of 9, folding every
    ``fold_rows``: the measures it gives and how many folds it made."""
    from results_db.ingest import event_sink
    from results_db.ingest.timeline import StepStats

    monkeypatch.setattr(event_sink, "_FOLD_ROWS", fold_rows)
    folds = []
    add = StepStats.add
    monkeypatch.setattr(StepStats, "add", lambda self, chunk: (folds.append(len(chunk)), add(self, chunk)))
    sink = event_sink.ColumnSink(tmp_path / f"events-{fold_rows}", run_id=1, database="d")
    try:
        for rank, mine in events.groupby("rank", sort=True):
            lines = [json.dumps({"type": "event", "schema": 1, "step": int(e.step), "tensor": e.tensor,
                                 "phase": e.phase, "t0": e.t0, "t1": e.t1, "bytes": 0,
                                 "arrival": None if pd.isna(e.arrival) else e.arrival}).encode() + b"\n"
                     for e in mine.itertuples()]
            for i in range(0, len(lines), 9):
                sink.add_lines(int(rank), lines[i:i + 9])
            sink.end_rank()
        return sink.step_stats(), len(folds)
    finally:
        sink.close()
        sink.discard()


@pytest.mark.parametrize("late", [False, True], ids=["in-order", "collectives-a-step-late"])
def test_a_long_rank_is_folded_as_it_goes_and_gives_the_one_pass_measures(tmp_path, monkeypatch, late):
    """Memory bounded by _FOLD_ROWS however many steps a rank runs: a rank's steps well behind the
    latest are folded before it ends, its last update carried for the next update's delay. The
    result is the one-pass computation's whatever the fold size (and the small sizes do fold
    mid-rank), also when each step's collectives are written after the next step's phases."""
    events = _random_timeline(ranks=3, steps=30, late=late)
    reference = _reference_step_stats(events)
    assert reference["update_delay"].notna().sum() >= 29
    for fold_rows in (5, 23, 10**6):
        stats, folds = _fold_through_the_sink(tmp_path, events, fold_rows, monkeypatch)
        pd.testing.assert_frame_equal(stats, reference, check_dtype=False, rtol=1e-12)
        assert folds > 3 * 3 if fold_rows < 50 else folds == 1, (fold_rows, folds)


def test_a_rank_whose_events_come_steps_late_is_refused_once_folded(tmp_path, monkeypatch):
    """An event more than _LATE_STEPS steps behind the rank's latest, after those steps were
    folded, would be counted as a second rank of its step: refused in one line, not a wrong
    number. Unfolded (the whole rank fits), the same events are exact."""
    from results_db.ingest.folder import IngestError

    events = _random_timeline(ranks=2, steps=12)
    late = (events["rank"] == 0) & (events["step"] == 3)
    events = pd.concat([events[~late], events[late]]).reset_index(drop=True)   # step 3 after step 11
    reference = _reference_step_stats(events)
    stats, _ = _fold_through_the_sink(tmp_path, events, 10**6, monkeypatch)
    pd.testing.assert_frame_equal(stats, reference, check_dtype=False, rtol=1e-12)
    with pytest.raises(IngestError, match="events of step 3 came after its steps before"):
        _fold_through_the_sink(tmp_path, events, 20, monkeypatch)
