"""Runs as plain rows, grouped without pandas: checked against pandas on the same data, and the
reading commands checked to print without importing pandas (issue 14: query under 1 s)."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import subprocess
import sys

import pandas as pd
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store import run_rows
from results_db.store.run_rows import AggregateError, Rows, group_rows
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Run
from workloads.spec import RunSpec

from conftest import env_with_bin, scalestudy


def _pandas_groups(table: Rows, group_by, metrics) -> list[tuple]:
    """The same aggregate computed by pandas (the independent computation)."""
    frame = pd.DataFrame(table.rows, columns=table.columns)
    grouped = frame.groupby(list(group_by), dropna=False).agg({c: list(a) for c, a in metrics.items()})
    return [tuple(None if (isinstance(v, float) and math.isnan(v)) else v for v in (k if isinstance(k, tuple) else (k,)))
            + tuple(row) for k, row in zip(grouped.index, grouped.itertuples(index=False))]


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9)
    return a == b


def test_group_rows_agrees_with_pandas_groupby():
    rng = random.Random(7)
    rows = [(rng.choice([1, 2, 4, None]), rng.choice(["sync", "eager_solo"]),
             None if rng.random() < 0.2 else rng.uniform(10, 500)) for _ in range(400)]
    table = Rows(["nodes", "algorithm", "throughput"], rows)
    metrics = {"throughput": ["count", "mean", "std", "min", "max", "median", "sum"]}
    ours = group_rows(table, ["nodes", "algorithm"], metrics)
    theirs = _pandas_groups(table, ["nodes", "algorithm"], metrics)
    assert ours.columns == ["nodes", "algorithm", *(f"throughput_{a}" for a in metrics["throughput"])]
    assert len(ours.rows) == len(theirs) == 8   # 4 node values (None a group of its own) x 2 algorithms
    for mine, pandas_row in zip(ours.rows, theirs):   # same groups, same order (missing last)
        assert all(_same(a, b) for a, b in zip(mine, pandas_row)), (mine, pandas_row)


def test_group_rows_keeps_apart_what_run_identity_keeps_apart():
    """1, 1.0 and True are equal to Python and to pandas, not to run_key; lists group as JSON."""
    table = Rows(["params.act", "command", "throughput"],
                 [(1, ["a", "b"], 10.0), (1.0, ["a", "b"], 20.0), (True, ["a", "c"], 30.0), ("relu", ["a", "c"], 40.0)])
    by_act = group_rows(table, ["params.act"], {"throughput": ["count"]})
    assert len(by_act.rows) == 4
    by_command = group_rows(table, ["command"], {"throughput": ["sum"]})
    assert by_command.rows == [('["a", "b"]', 30.0), ('["a", "c"]', 70.0)]


def test_group_rows_refuses_what_it_cannot_compute():
    table = Rows(["nodes", "algorithm"], [(1, "sync")])
    with pytest.raises(AggregateError, match="not a numeric column"):
        group_rows(table, ["nodes"], {"algorithm": ["mean"]})
    with pytest.raises(AggregateError, match="unknown aggregate 'avg'"):
        group_rows(table, ["nodes"], {"nodes": ["avg"]})
    assert group_rows(table, ["nodes"], {"algorithm": ["count"]}).rows == [(1, 1)]


@pytest.fixture
def study(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = connect(url)
    plans = [PlannedRun(f"k{n}-{a}-{s}", RunSpec(study="rows", site="local", nodes=n, algorithm=a, seed=s,
                                                 params={"hidden": 64 * n}).to_dict(), "/nowhere")
             for n in (1, 2) for a in ("sync", "eager_solo") for s in (0, 1)]
    decisions = register_runs(engine, "rows", plans)
    with Session(engine) as s, s.begin():
        for i, d in enumerate(decisions):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=100.0 + i,
                                                                    metrics={"loss": 1.0 / (i + 1)}))
    yield engine, url
    engine.dispose()


def test_aggregate_frame_and_cli_rows_agree(study, tmp_path):
    """What the CLI prints (GROUP BY in SQL) against pandas' groupby over the runs themselves."""
    engine, url = study
    from results_db.store import query

    runs = query.runs(engine, study="rows", columns=["nodes", "algorithm", "throughput"])
    frame = (runs.groupby(["nodes", "algorithm"]).agg(throughput_count=("throughput", "count"),
                                                      throughput_mean=("throughput", "mean"),
                                                      throughput_std=("throughput", "std")).reset_index())
    out = scalestudy("query", "--study", "rows", "--group-by", "nodes,algorithm", "--format", "csv", "--db", url,
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(printed) == len(frame) == 4
    for row, (_, expected) in zip(printed, frame.iterrows()):
        assert int(row["nodes"]) == expected["nodes"] and row["algorithm"] == expected["algorithm"]
        assert int(row["throughput_count"]) == 2
        assert float(row["throughput_mean"]) == pytest.approx(expected["throughput_mean"])
        assert float(row["throughput_std"]) == pytest.approx(expected["throughput_std"])


def test_query_json_holds_params_metrics_and_missing_values(study, tmp_path):
    engine, url = study
    out = scalestudy("query", "--study", "rows", "--where", "params.hidden=128", "--format", "json", "--db", url,
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    records = json.loads(out.stdout)
    assert len(records) == 4 and {r["nodes"] for r in records} == {2}
    assert all(r["params.hidden"] == 128 and isinstance(r["metrics.loss"], float) for r in records)
    assert all(r["final_top1"] is None for r in records)   # never measured: null, not NaN


@pytest.mark.sweep
def test_reading_commands_do_not_import_pandas(study, tmp_path):
    """Fails if status or query (table, CSV, JSON, group-by) pulls pandas in again."""
    _, url = study
    for args in (["status"], ["status", "--study", "rows"], ["status", "--study", "rows", "--failed"],
                 ["query", "--where", "nodes=2"], ["query", "--format", "csv"], ["query", "--format", "json"],
                 ["query", "--group-by", "nodes"]):
        program = ("import sys; from orchestrator.cli import main; "
                   f"rc = main({[*args, '--db', url]!r}); "
                   "print('pandas imported:', 'pandas' in sys.modules); sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                              env=env_with_bin(), timeout=120)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert "pandas imported: False" in proc.stdout, (args, proc.stdout[-500:])


def _grid(engine, study: str, throughputs: list) -> None:
    plans = [PlannedRun(f"{study}-{i}", RunSpec(study=study, site="local", nodes=1 + i % 3, seed=i,
                                               algorithm=("sync", "ddp")[i % 2]).to_dict(), "/nowhere")
             for i in range(len(throughputs))]
    decisions = register_runs(engine, study, plans)
    with Session(engine) as s, s.begin():
        for d, thr in zip(decisions, throughputs):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=thr,
                                                                    steps=None if thr is None else 7))


def test_the_database_groups_as_group_rows_does(db_url):
    """GROUP BY in SQL (SQLite and PostgreSQL) against the same runs grouped in Python: missing
    and NaN values, an integer column, and values whose spread is 1e-9 of their mean (the
    one-pass variance would cancel: the second pass must take over)."""
    engine = connect(db_url)
    rng = random.Random(3)
    _grid(engine, "plain", [None if i % 7 == 0 else float("nan") if i % 11 == 0 else rng.uniform(50, 900)
                            for i in range(60)])
    _grid(engine, "narrow", [1e9 + rng.uniform(0, 1) for _ in range(30)])
    metrics = {"throughput": ["count", "mean", "std", "min", "max", "sum"], "steps": ["count", "sum", "max"]}
    for study in ("plain", "narrow"):
        in_sql = run_rows.aggregate_rows(engine, ["nodes", "algorithm"], metrics, study=study)
        table = run_rows.run_rows(engine, study=study, columns=["nodes", "algorithm", "throughput", "steps"])
        in_python = group_rows(table, ["nodes", "algorithm"], metrics)
        assert in_sql.columns == in_python.columns and len(in_sql) == len(in_python) == 6
        for a, b in zip(in_sql.rows, in_python.rows):
            assert all(_same(x, y) for x, y in zip(a, b)), (study, a, b)
        if study == "narrow":   # the spread really is resolved, not cancelled to 0 or noise
            stds = in_python.column("throughput_std")
            assert all(0.1 < s < 0.6 for s in stds), stds
    # a count of a text column (PostgreSQL has no AVG of text) and of a time column
    counted = run_rows.aggregate_rows(engine, ["nodes"], {"status": ["count"], "started_at": ["count"]},
                                      study="plain")
    assert [r[1:] for r in counted.rows] == [(20, 0)] * 3   # never started: no start time to count
    # what SQL cannot group goes through group_rows: the median, a free parameter
    median = run_rows.aggregate_rows(engine, ["nodes"], {"throughput": ["median"]}, study="plain")
    values = {n: sorted(v for (nn, v) in run_rows.run_rows(engine, study="plain", columns=["nodes", "throughput"]).rows
                        if nn == n and v is not None and v == v) for n in (1, 2, 3)}
    assert [r[1] for r in median.rows] == pytest.approx([statistics_median(values[n]) for n in (1, 2, 3)])
    engine.dispose()


def statistics_median(xs):
    import statistics

    return statistics.median(xs)


def test_non_finite_values_aggregate_and_print_as_pandas_would(tmp_path, capsys):
    """An infinite throughput gives a NaN deviation (statistics.stdev raises on it); NaN and
    infinity inside the metrics mapping print as null in JSON, and the output is whole."""
    table = Rows(["nodes", "throughput"], [(1, float("inf")), (1, 2.0), (2, 3.0), (2, 5.0)])
    grouped = group_rows(table, ["nodes"], {"throughput": ["mean", "std"]})
    assert grouped.rows[0][1] == float("inf") and math.isnan(grouped.rows[0][2])
    assert grouped.rows[1][1:] == (4.0, pytest.approx(math.sqrt(2.0)))
    from orchestrator.terminal.output import render

    render(Rows(["run_id", "metrics"], [(1, {"loss": float("nan"), "best": float("inf"), "n": 3})]), "json")
    assert json.loads(capsys.readouterr().out) == [{"run_id": 1, "metrics": {"loss": None, "best": None, "n": 3}}]
