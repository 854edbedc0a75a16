"""`scalestudy figures`: the tables behind each figure against hand computations, and a real sweep drawn end to end."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pandas as pd
import pytest
from PIL import Image
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from results_db import connect
from results_db.report.figures import FigureDataError, render_study
from results_db.report.figures import data as fd
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Eval, Event, Round, Run, Step, StepStat
from workloads.spec import RunSpec

from conftest import scalestudy

# (algorithm, nodes, seed) -> samples/s; two repeats of each configuration
THROUGHPUT = {
    ("sync", 1, 0): 100.0, ("sync", 1, 1): 120.0, ("sync", 2, 0): 180.0, ("sync", 2, 1): 200.0,
    ("sync", 4, 0): 300.0, ("sync", 4, 1): 340.0,
    ("eager_solo", 1, 0): 150.0, ("eager_solo", 1, 1): 170.0, ("eager_solo", 2, 0): 290.0,
    ("eager_solo", 2, 1): 310.0, ("eager_solo", 4, 0): 500.0, ("eager_solo", 4, 1): 560.0,
}
# per-run phase seconds of steps 1..3 (step 0 is warm-up and must be left out)
PHASES = {"data": 0.001, "forward": 0.010, "delay": 0.0, "backward": 0.020, "comm_wait": 0.005, "update": 0.002}


@pytest.fixture
def engine(db_url):
    engine = connect(db_url)
    plans, values = [], []
    for (algorithm, nodes, seed), thr in THROUGHPUT.items():
        spec = RunSpec(study="figs", site="local", nodes=nodes, workers_per_node=2, threads_per_node=2,
                       batch_size=16, algorithm=algorithm, seed=seed)
        plans.append(PlannedRun(f"{algorithm}-{nodes}-{seed}", spec.to_dict(), "/nowhere"))
        values.append((algorithm, nodes, seed, thr))
    decisions = register_runs(engine, "figs", plans)
    with Session(engine) as s, s.begin():
        for d, (algorithm, nodes, seed, thr) in zip(decisions, values):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=thr))
            k = 1 + seed + (2 if algorithm == "eager_solo" else 0)   # a per-run scale, so averages are not trivial
            for rank in range(2):
                for step in range(4 + 2 * seed):                     # repeats of unequal length: pooled means
                    warm = 10.0 if step == 0 else 1.0                # a slow first step the breakdown must skip
                    s.add(Step(run_id=d.run_id, rank=rank, step=step, epoch=0, samples=16, t_start=float(step),
                               loss=1.0, **{p: v * k * warm for p, v in PHASES.items()}))
            for step in range(1, 4):
                s.add(StepStat(run_id=d.run_id, step=step, collectives=2, allreduce_seconds=0.01,
                               arrival_skew_max=0.001 * step * k, arrival_skew_mean=0.0005, hidden_fraction=0.5,
                               update_delay=0.03 * k))
            for epoch in range(2):
                s.add(Eval(run_id=d.run_id, epoch=epoch, wall=10.0 * (epoch + 1) * k, top1=0.5 + 0.1 * epoch + 0.01 * seed,
                           loss=1.0, samples_seen=100 * (epoch + 1)))
            if (algorithm, seed) == ("sync", 0):   # fused allreduces: ranks ready at different moments
                for step in (1, 2):
                    for b, tensor in enumerate(("fused-0", "fused-1")):
                        for rank in range(2):
                            ready = step + 0.01 * b + 0.001 * (rank * (b + 1) * nodes)   # skew (b+1)*nodes ms
                            s.add(Event(run_id=d.run_id, rank=rank, step=step, tensor=tensor, phase="allreduce",
                                        t0=ready, t1=ready + 0.005, bytes=1024, arrival=ready))
            if algorithm == "eager_solo":
                mix = [(2, 0, 0), (1, 0, 1), (1, 1, 0), (2, 0, 0)] + [(2, 0, 0)] * (4 * seed)
                for r, (fresh, stale, null) in enumerate(mix):
                    s.add(Round(run_id=d.run_id, round=r, initiator=0, fresh=fresh, stale=stale, null=null,
                                synchronous=False, t0=float(r), latency=0.002 * k))
                s.add(Round(run_id=d.run_id, round=len(mix), initiator=-1, fresh=2, stale=0, null=0,
                            synchronous=True, t0=99.0, latency=1.0))   # synchronous rounds are not partial: left out
    # a failed run must not be drawn
    spec = RunSpec(study="figs", site="local", nodes=8, workers_per_node=2, threads_per_node=2, batch_size=16)
    [failed] = register_runs(engine, "figs", [PlannedRun("failed-8", spec.to_dict(), "/nowhere")])
    with Session(engine) as s, s.begin():
        s.execute(update(Run).where(Run.id == failed.run_id).values(status="failed", throughput=1e9))
    yield engine
    engine.dispose()


def test_scaling_table_is_the_mean_over_seeds_with_linear_reference(engine):
    sr = fd.load_study(engine, "figs")
    assert sr.varying == ("algorithm", "nodes") and 8 not in set(sr.runs["nodes"])
    table = fd.throughput_vs(sr, "nodes").set_index(["series", "nodes"])
    sync4 = table.loc[("algorithm=sync", 4)]
    assert sync4["throughput_mean"] == 320.0 and sync4["repeats"] == 2
    assert sync4["throughput_std"] == pytest.approx(statistics.stdev([300.0, 340.0]))
    assert sync4["ideal"] == pytest.approx(110.0 * 4)           # linear from the 1-node mean
    assert table.loc[("algorithm=eager_solo", 2), "ideal"] == pytest.approx(160.0 * 2)


def test_an_axis_swept_in_step_with_another_is_not_a_separate_dimension():
    # threads_per_node = workers_per_node (the default): a plot against threads would repeat the one against wpn
    runs = pd.DataFrame({"nodes": [1, 1, 2, 2, 1, 1], "workers_per_node": [1, 2, 1, 2, 1, 2],
                         "threads_per_node": [1, 2, 1, 2, 1, 2], "batch_size": [16, 16, 16, 16, 32, 32]})
    assert fd.independent_axes(runs, ["nodes", "workers_per_node", "threads_per_node", "batch_size"]) == \
        ("nodes", "workers_per_node", "batch_size")
    # threads swept on their own at a fixed wpn are a dimension of their own
    runs["threads_per_node"] = [1, 2, 2, 4, 2, 4]
    assert "threads_per_node" in fd.independent_axes(runs, ["nodes", "workers_per_node", "threads_per_node"])


def test_linear_reference_starts_from_the_smallest_measured_node_count(engine):
    with Session(engine) as s, s.begin():   # the 1-node sync runs lost their measurement
        s.execute(update(Run).where(Run.nodes == 1, Run.algorithm == "sync").values(throughput=None))
    table = fd.throughput_vs(fd.load_study(engine, "figs"), "nodes").set_index(["series", "nodes"])
    assert table.loc[("algorithm=sync", 4), "ideal"] == pytest.approx(190.0 * 2)   # from the 2-node mean


def test_algorithm_table_gives_speedup_over_sync(engine):
    table = fd.throughput_by_algorithm(fd.load_study(engine, "figs")).set_index(["setting", "algorithm"])
    assert table.loc[("nodes=4", "eager_solo"), "speedup_vs_sync"] == pytest.approx(530.0 / 320.0)
    assert table.loc[("nodes=1", "sync"), "speedup_vs_sync"] == pytest.approx(1.0)


def test_breakdown_skips_the_warm_up_step_and_averages_repeats(engine):
    table = fd.step_time_breakdown(engine, fd.load_study(engine, "figs")).set_index("config")
    row = table.loc["algorithm=eager_solo, nodes=2"]
    # seed 0: 2 ranks x steps 1..3 at scale 3; seed 1: 2 ranks x steps 1..5 at scale 4 -> pooled over 16 records
    pooled_k = (6 * 3 + 10 * 4) / 16
    assert row["step_records"] == 16
    for phase, seconds in PHASES.items():
        assert row[phase] == pytest.approx(seconds * pooled_k)
    assert row["total"] == pytest.approx(sum(PHASES.values()) * pooled_k)


@pytest.mark.sweep
def test_distributions_rounds_and_accuracy(engine):
    sr = fd.load_study(engine, "figs")
    skew = fd.step_stat_distribution(engine, sr, "arrival_skew_max")
    one = skew[skew["config"] == "algorithm=sync, nodes=1"]
    assert sorted(one["value"].round(6)) == sorted([1.0 * s * k for s in (1, 2, 3) for k in (1, 2)])
    # at each fused allreduce: the spread of the ranks' ready times, one value per (run, step, buffer)
    per_collective = fd.collective_skew(engine, sr)
    assert list(per_collective["nodes"]) == sorted(per_collective["nodes"])      # ordered by node count
    assert sorted(per_collective["value"].round(6)) == sorted([float((b + 1) * n) for n in (1, 2, 4) for b in (0, 1)
                                                               for _ in (1, 2)])
    rounds = fd.round_composition(engine, sr).set_index("config")
    assert list(rounds.index) == [f"algorithm=eager_solo, nodes={n}" for n in (1, 2, 4)]   # sync ran no partial rounds
    r = rounds.iloc[0]
    # seed 0: 4 partial rounds (fresh 6, stale 1, null 1), latency 6 ms; seed 1: 8 (fresh 14, 1, 1), 8 ms
    assert r["rounds"] == 12
    assert (r["fresh"], r["stale"], r["null"]) == pytest.approx((20 / 12, 2 / 12, 2 / 12))
    assert r["latency_ms"] == pytest.approx((4 * 6.0 + 8 * 8.0) / 12)
    acc = fd.accuracy_curves(engine, sr).set_index(["config", "epoch"])
    assert acc.loc[("algorithm=sync, nodes=2", 1), "top1"] == pytest.approx(0.6 + 0.005)
    assert acc.loc[("algorithm=sync, nodes=2", 1), "wall"] == pytest.approx(20.0 * 1.5)


@pytest.mark.sweep
def test_render_writes_images_tables_and_manifest(engine, tmp_path):
    out = tmp_path / "figs"
    results = {r.name: r for r in render_study(engine, "figs", out, formats=("png", "svg"))}
    drawn = {n for n, r in results.items() if not r.skipped}
    assert drawn == {"throughput_vs_nodes", "efficiency_vs_nodes", "throughput_by_algorithm", "step_time_breakdown",
                     "straggler_skew", "update_delay", "allreduce_hidden", "accuracy_vs_epoch", "accuracy_vs_time",
                     "time_to_accuracy", "partial_rounds", "timeline"}
    assert results["speedup_vs_delay"].skipped.startswith("needs runs of sync and another algorithm")
    assert "batch_size" in results["throughput_vs_batch_size"].skipped
    for name in drawn:
        with Image.open(out / f"{name}.png") as img:
            assert img.width > 400 and img.height > 300
        assert (out / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    # the CSV is the table the figure was drawn from
    table = pd.read_csv(out / "throughput_vs_nodes.csv")
    assert len(table) == 6 and set(table.columns) >= {"series", "nodes", "throughput_mean", "ideal"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["runs"]) == 12 and manifest["varying_axes"] == ["algorithm", "nodes"]
    assert not list(out.glob(".*.tmp"))


def test_bad_choices_fail_before_anything_is_written(engine, tmp_path):
    out = tmp_path / "never"
    for kwargs, words in [({"only": ["nope"]}, "unknown figure 'nope'"), ({"formats": ("jpg",)}, "format 'jpg'"),
                          ({"run_id": 2}, "has no timeline"), ({"run_id": 999}, "not a finished run")]:
        with pytest.raises(FigureDataError, match=words):
            render_study(engine, "figs", out, **kwargs)
    with pytest.raises(FigureDataError, match="study 'other' has no runs in this database; studies here: figs"):
        render_study(engine, "other", out)
    with pytest.raises(FigureDataError, match=r"no finished runs matching nodes=8 to draw \(runs by state: \{'failed': 1\}\)"):
        render_study(engine, "figs", out, where="nodes=8")
    with pytest.raises(FigureDataError, match=r"matching nodes=16 to draw \(runs by state: none\)"):
        render_study(engine, "figs", out, where="nodes=16")
    assert not out.exists()


@pytest.mark.mpi
def test_a_real_sweep_is_drawn_end_to_end(tmp_path):
    sweep = scalestudy("sweep", "study=smoke", "study_name=drawn", "epochs=2", "timeline=true", "nodes=1",
                       "workers_per_node=2", "algorithm=sync,eager_solo", f"hydra.sweep.dir={tmp_path / 'mr'}",
                       cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    db = tmp_path / "scalestudy.db"
    engine = connect(f"sqlite:///{db}")
    with Session(engine) as s:
        before = s.scalar(select(func.count()).select_from(Step))
        sync_run = s.scalar(select(Run.id).where(Run.algorithm == "sync"))

    drawn = scalestudy("figures", "--study", "drawn", "--out", str(tmp_path / "fig"), cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    # the skipped ones in one line (issue 39: 13 lines of "skipped"); why each, when asked by name
    last = drawn.stdout.splitlines()[-1]
    assert last.startswith("skipped, for want of what they draw: ") and "throughput_vs_nodes" in last
    assert not any(line.startswith("  skipped ") for line in drawn.stdout.splitlines())
    asked = scalestudy("figures", "--study", "drawn", "--out", str(tmp_path / "fig2"), "--only",
                       "throughput_vs_nodes,partial_rounds", cwd=tmp_path)
    assert "skipped throughput_vs_nodes: needs nodes swept at two values or more" in asked.stdout
    for name in ("throughput_by_algorithm", "step_time_breakdown", "timeline", "straggler_skew", "partial_rounds",
                 "accuracy_vs_epoch"):
        assert f"drew    {name}" in drawn.stdout
        with Image.open(tmp_path / "fig" / f"{name}.png") as img:
            img.verify()
    # the throughput drawn is the throughput stored
    stored = json.loads(scalestudy("query", "--study", "drawn", "--format", "json", "--columns",
                                   "algorithm,throughput", cwd=tmp_path).stdout)
    bars = {r["algorithm"]: float(r["throughput_mean"])
            for r in csv.DictReader(io.StringIO((tmp_path / "fig" / "throughput_by_algorithm.csv").read_text()))}
    assert bars == pytest.approx({r["algorithm"]: r["throughput"] for r in stored})
    speedup = {r["algorithm"]: float(r["speedup_vs_sync"])
               for r in csv.DictReader(io.StringIO((tmp_path / "fig" / "throughput_by_algorithm.csv").read_text()))}
    assert speedup["eager_solo"] == pytest.approx(bars["eager_solo"] / bars["sync"]) and speedup["sync"] == 1.0
    # the timeline is the sync run's (its engine logs fused allreduces), both ranks, two steps
    timeline = pd.read_csv(tmp_path / "fig" / "timeline.csv")
    assert set(timeline["run_id"]) == {sync_run} and set(timeline["rank"]) == {0, 1}
    assert timeline["step"].nunique() == 2 and {"allreduce", "grad_ready", "backward"} <= set(timeline["phase"])
    assert json.loads((tmp_path / "fig" / "manifest.json").read_text())["timeline_run"] == sync_run
    # drawing is read-only
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Step)) == before

    bad = scalestudy("figures", "--study", "drawn", "--only", "timelin", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("scalestudy: error: unknown figure 'timelin'")
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "figures").exists()
