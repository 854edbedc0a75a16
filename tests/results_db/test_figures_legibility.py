"""Figures a reader understands without the code, and the figures the reference studies need:
scaling efficiency, speedup against the injected delay, time to accuracy, the timeline's title."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest
from sqlalchemy.orm import Session

from orchestrator.cli import main
from results_db import connect
from results_db.report.figures import CATALOG, render_study
from results_db.report.figures import data as fd
from results_db.report.figures import derived, draw
from results_db.report.figures.data import PHASE_LABELS
from results_db.ingest.folder import _derive_step_stats
from results_db.store.schema import Event, Step

from test_report import add_runs


def _svg_texts(path) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text())]


def test_each_series_has_its_own_linear_reference_in_its_colour():
    frame = pd.DataFrame({"series": ["a"] * 2 + ["b"] * 2, "nodes": [1, 2, 1, 2],
                          "throughput_mean": [10.0, 18.0, 20.0, 30.0], "throughput_std": [0.0] * 4,
                          "ideal": [10.0, 20.0, 20.0, 40.0]})
    fig = draw.new_figure()
    draw.throughput_vs(frame, fig, "nodes")
    ax = fig.axes[0]
    refs = {line.get_gid(): line.get_color() for line in ax.lines if (line.get_gid() or "").startswith("ideal-")}
    series = [c.lines[0].get_color() for c in ax.containers]          # the error-bar lines, in series order
    assert refs == {"ideal-0": series[0], "ideal-1": series[1]} and series[0] != series[1]
    assert "linear scaling" in " ".join(t.get_text() for t in ax.get_legend().get_texts())


def test_a_series_hidden_under_another_is_named_and_still_visible():
    frame = pd.DataFrame({"config": ["sync"] * 2 + ["ddp"] * 2, "epochs_done": [1, 2, 1, 2],
                          "top1": [0.5, 0.6, 0.5, 0.6], "wall": [1.0, 2.0, 1.0, 2.0], "repeats": [1] * 4})
    assert draw.coinciding(frame, "config", "epochs_done", "top1") == {"ddp": "sync"}
    fig = draw.new_figure()
    draw.accuracy(frame, fig, "epochs_done")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["sync", "ddp (same values as sync)"]
    first, second = ax.lines[:2]
    assert first.get_marker() != second.get_marker() and second.get_markersize() < first.get_markersize()
    assert first.get_linestyle() != second.get_linestyle()


def test_one_epoch_reads_as_one_epoch():
    frame = pd.DataFrame({"config": ["a", "b"], "epoch": [0, 0], "epochs_done": [1, 1], "top1": [0.31, 0.42],
                          "wall": [3.0, 4.0], "repeats": [1, 1]})
    fig = draw.new_figure()
    draw.accuracy(frame, fig, "epochs_done")
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 0 and list(ax.get_xticks()) == [0, 1] and ax.get_xlabel() == "epochs completed"
    assert ax.get_ylim() == (0, 100) and "%" in ax.get_ylabel()
    assert {t.get_text() for t in ax.texts} == {"31.0 %", "42.0 %"}     # one point per line: its value written


@pytest.fixture
def scaling(tmp_path):
    """nodes x workers per node x threads per node x batch size, every run on a host with 16 cores."""
    engine = connect(f"sqlite:///{tmp_path / 'scaling.db'}")
    rows = []
    for n in (1, 2):
        for w in (1, 2):
            for t in (2, 4):
                for b in (16, 32):
                    rows.append({"site": "local", "nodes": n, "workers_per_node": w, "threads_per_node": t,
                                 "batch_size": b, "cpus": 16, "throughput": 100.0 * n * (1 + 0.5 * (w - 1))
                                 * (1 + 0.25 * (t // 2 - 1)) * (b / 16) ** 0.5,
                                 "final_top1": 0.3, "evals": [(0, 5.0, 0.3)]})
    ids = add_runs(engine, "scaling", rows)
    with Session(engine) as s, s.begin():   # one run's timeline: 2 ranks, steps 0-3
        for rank in range(2):
            for step in range(4):
                t = step * 0.1 + rank * 0.003
                s.add(Step(run_id=ids[-1], rank=rank, step=step, epoch=0, samples=32, t_start=t, data=0.001,
                           forward=0.02, backward=0.04, comm_wait=0.01, update=0.005, loss=1.0))
                for phase, t0, t1 in (("forward", t, t + 0.02), ("backward", t + 0.02, t + 0.06),
                                      ("wait", t + 0.06, t + 0.07), ("update", t + 0.07, t + 0.075)):
                    s.add(Event(run_id=ids[-1], rank=rank, step=step, tensor="", phase=phase, t0=t0, t1=t1, bytes=0))
                s.add(Event(run_id=ids[-1], rank=rank, step=step, tensor="fc.weight", phase="grad_ready", t0=t + 0.03,
                            t1=t + 0.03, bytes=4096))
                s.add(Event(run_id=ids[-1], rank=rank, step=step, tensor="fused-0", phase="allreduce", t0=t + 0.05,
                            t1=t + 0.065, bytes=4096, arrival=t + 0.05))
        s.flush()
        _derive_step_stats(s, ids[-1])   # what ingestion derives from a timeline
    yield engine, ids
    engine.dispose()


@pytest.mark.sweep
def test_the_horovod_figure_set_is_complete_and_legible(scaling, tmp_path):
    engine, ids = scaling
    out = tmp_path / "fig"
    results = {r.name: r for r in render_study(engine, "scaling", out, formats=("svg",))}
    drawn = {name for name, r in results.items() if not r.skipped}
    for axis in ("nodes", "workers_per_node", "threads_per_node", "batch_size"):
        assert {f"throughput_vs_{axis}", f"efficiency_vs_{axis}"} <= drawn, axis
    assert {"step_time_breakdown", "timeline", "straggler_skew", "update_delay"} <= drawn
    # the timeline's title names the run and the steps, its legend the breakdown's phase names
    timeline = results["timeline"]
    assert timeline.title == (f"Timeline of run {ids[-1]} (algorithm=sync, nodes=2, workers per node=2, threads per "
                              "node=4, batch size per worker=32, 4 ranks): steps 0–1 of 0–3; phases as in the "
                              "step-time breakdown")
    texts = _svg_texts(out / "timeline.svg")
    assert {PHASE_LABELS[p] for p in ("forward", "backward", "wait", "update", "allreduce", "grad_ready")} <= set(texts)
    assert PHASE_LABELS["wait"] == PHASE_LABELS["comm_wait"]
    assert PHASE_LABELS["comm_wait"] in _svg_texts(out / "step_time_breakdown.svg")
    # no abbreviation or code name in any legend or axis, and the batch axis says it is per worker
    for name in drawn:
        joined = " | ".join(_svg_texts(out / f"{name}.svg"))
        assert not re.search(r"\b(wpn|tpn|bs|comm_wait|grad_ready|top1)\b|batch=", joined), (name, joined)
    assert "batch size per worker" in _svg_texts(out / "throughput_vs_batch_size.svg")
    assert all(r.caption.endswith("runs.") or r.caption.endswith("1 run.") for r in results.values() if not r.skipped)
    assert results["throughput_vs_nodes"].caption.endswith("Drawn from 16 runs.")
    assert results["timeline"].caption.endswith("Drawn from 1 run.")


def test_scaling_efficiency_tables(scaling):
    engine, _ = scaling
    sr = fd.load_study(engine, "scaling")
    nodes = derived.efficiency_vs(sr, "nodes")
    assert (nodes["efficiency"].round(9) == 1.0).all()                  # throughput doubles with nodes
    workers = derived.efficiency_vs(sr, "workers_per_node").set_index(["series", "workers_per_node"])
    assert workers["efficiency"].xs(2, level=1).round(9).unique().tolist() == [0.75]   # 1.5x for 2x workers
    batch = derived.efficiency_vs(sr, "batch_size")
    # at each batch size, 2 nodes x 2 workers x 4 threads against 1 x 1 x 4 (the smallest rank count)
    row = batch[(batch["series"] == "nodes=2, workers per node=2, threads per node=4") & (batch["batch_size"] == 32)]
    assert row["baseline_world_size"].item() == 1 and row["world_size"].item() == 4
    assert row["efficiency"].item() == pytest.approx(2 * 1.5 / 4)


@pytest.mark.sweep
def test_eager_figures_speedup_against_delay_and_time_to_accuracy(tmp_path):
    engine = connect(f"sqlite:///{tmp_path / 'eager.db'}")
    rows = []
    for delay in (50.0, 100.0, 200.0):
        for algorithm, gain in (("sync", 1.0), ("eager_solo", 1.0 + delay / 100), ("async_ps", 1.2)):
            rows.append({"site": "local", "nodes": 1, "workers_per_node": 4, "threads_per_node": 4,
                         "algorithm": algorithm, "imbalance_kind": "injected", "imbalance_delay_ms": delay,
                         "throughput": 100.0 * gain, "final_top1": 0.5,
                         "evals": [(0, 10.0 / gain, 0.3), (1, 20.0 / gain, 0.5)]})
    add_runs(engine, "eager", rows)
    sr = fd.load_study(engine, "eager")
    table = derived.speedup_vs_delay(sr).set_index(["algorithm", "imbalance_delay_ms"])
    assert table.loc[("eager_solo", 200.0), "speedup"] == pytest.approx(3.0)
    assert table.loc[("async_ps", 50.0), "speedup"] == pytest.approx(1.2) and "sync" not in table.index
    tta = derived.time_to_accuracy(engine, sr).set_index("config")
    assert tta["target_top1"].unique().tolist() == [0.5]                 # the best accuracy every run reached
    assert tta.loc["algorithm=eager_solo, injected delay=200 ms", "seconds_mean"] == pytest.approx(20.0 / 3.0)
    results = {r.name: r for r in render_study(engine, "eager", tmp_path / "fig", formats=("svg",))}
    assert not any(results[n].skipped for n in ("speedup_vs_delay", "throughput_by_algorithm", "time_to_accuracy",
                                                "accuracy_vs_epoch", "accuracy_vs_time"))
    legend = _svg_texts(tmp_path / "fig" / "speedup_vs_delay.svg")
    assert "async_ps (asynchronous parameter server)" in legend and "injected delay (ms)" in legend
    assert {"50", "100", "200"} <= set(legend)


def test_figures_list_names_every_figure_and_what_it_needs(capsys):
    assert main(["figures", "--list"]) == 0
    out = capsys.readouterr().out
    for spec in CATALOG:
        assert re.search(rf"^{spec.name}\s+.*\[needs {re.escape(spec.needs)}\]$", out, re.M), spec.name
    assert "throughput_vs_param_NAME" in out and "metric_NAME" in out
    for name in ("efficiency_vs_threads_per_node", "speedup_vs_delay", "time_to_accuracy", "timeline",
                 "straggler_skew", "update_delay", "partial_rounds"):
        assert name in out
