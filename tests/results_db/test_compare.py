"""Aggregates and comparisons against a baseline, checked against hand-computed values."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from results_db import connect
from results_db.analysis import compare
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Run
from workloads.spec import RunSpec

from conftest import scalestudy

THROUGHPUT = {  # (algorithm, nodes, seed) -> samples/s
    ("sync", 1, 0): 100.0, ("sync", 1, 1): 110.0, ("eager_solo", 1, 0): 150.0, ("eager_solo", 1, 1): 170.0,
    ("sync", 2, 0): 180.0, ("sync", 2, 1): 200.0, ("eager_solo", 2, 0): 300.0, ("eager_solo", 2, 1): 320.0,
}


@pytest.fixture
def engine(db_url):
    engine = connect(db_url)
    plans, values = [], []
    for (algorithm, nodes, seed), thr in THROUGHPUT.items():
        spec = RunSpec(study="cmp", site="local", nodes=nodes, workers_per_node=2, threads_per_node=2, batch_size=16,
                       algorithm=algorithm, seed=seed)
        plans.append(PlannedRun(f"{algorithm}-{nodes}-{seed}", spec.to_dict(), "/nowhere"))
        values.append(thr)
    decisions = register_runs(engine, "cmp", plans)
    with Session(engine) as s, s.begin():
        for d, thr in zip(decisions, values):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=thr))
    yield engine
    engine.dispose()


def test_compare_against_an_algorithm(engine):
    frame = compare.compare(engine, "algorithm=sync", study="cmp").set_index(["nodes", "algorithm"])
    solo = frame.loc[(2, "eager_solo")]
    assert solo["repeats"] == 2 and solo["throughput_mean"] == 310.0
    assert solo["throughput_std"] == pytest.approx(statistics.stdev([300.0, 320.0]))
    assert solo["speedup"] == pytest.approx(310.0 / 190.0) and solo["efficiency"] == pytest.approx(310.0 / 190.0)
    assert frame.loc[(1, "sync"), "speedup"] == pytest.approx(1.0)


def test_compare_against_one_node_gives_scaling_efficiency(engine):
    frame = compare.compare(engine, "nodes=1", study="cmp").set_index(["algorithm", "nodes"])
    two = frame.loc[("sync", 2)]
    assert two["speedup"] == pytest.approx(190.0 / 105.0)
    assert two["efficiency"] == pytest.approx(190.0 / 105.0 / 2)  # twice the ranks


def test_aggregate_groups(engine):
    frame = compare.aggregate(engine, ["algorithm"], {"throughput": ["count", "mean", "max"]}, study="cmp")
    row = frame.set_index("algorithm").loc["eager_solo"]
    assert (row["throughput_count"], row["throughput_mean"], row["throughput_max"]) == (4, 235.0, 320.0)


@pytest.mark.parametrize("baseline, words", [("algorithm", "AXIS=VALUE"), ("colour=red", "not a sweep axis"),
                                             ("algorithm=horovod", "no finished runs with algorithm='horovod'")])
def test_bad_baselines(engine, baseline, words):
    with pytest.raises(compare.CompareError, match=words):
        compare.compare(engine, baseline, study="cmp")


@pytest.mark.sweep
def test_cli_compare_and_query_formats(engine, db_url, tmp_path):
    out = scalestudy("compare", "--study", "cmp", "--baseline", "algorithm=sync", "--format", "csv", "--db", db_url,
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "speedup" in out.stdout.splitlines()[0] and len(out.stdout.strip().splitlines()) == 5
    grouped = scalestudy("query", "--study", "cmp", "--group-by", "algorithm,nodes", "--agg", "throughput:mean,std",
                         "--format", "json", "--db", db_url, cwd=tmp_path)
    assert grouped.returncode == 0 and '"throughput_mean":310.0' in grouped.stdout
    parquet = tmp_path / "runs.parquet"
    wrote = scalestudy("query", "--study", "cmp", "--where", "nodes=2", "--format", "parquet", "--out", str(parquet),
                       "--db", db_url, cwd=tmp_path)
    assert wrote.returncode == 0 and len(pd.read_parquet(parquet)) == 4
    refused = scalestudy("query", "--format", "parquet", "--db", db_url, cwd=tmp_path)
    assert refused.returncode == 2 and "--out" in refused.stderr


@pytest.mark.sweep
def test_cli_refuses_what_it_cannot_answer(engine, db_url, tmp_path):
    for args, words in ((["--agg", "throughput:mean"], "--agg needs --group-by"),
                        (["--where", "nodes>=2 or nodes=1"], "'or' is not supported"),
                        (["--where", "nodes>=two"], "'two' is not an integer"),
                        (["--group-by", "nodez"], "unknown column 'nodez'"),
                        (["--group-by", "nodes", "--agg", "algorithm:mean"], "not a numeric column")):
        out = scalestudy("query", "--study", "cmp", *args, "--db", db_url, cwd=tmp_path)
        assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_sweep_help_is_ours(tmp_path):
    out = scalestudy("sweep", "--help", cwd=tmp_path)
    assert out.returncode == 0
    for words in ("--rerun", "--dry-run", "--detach", "--config-dir", "local_slurm", "eager_majority", "resnet20",
                  "horovod_scaling", "params.NAME", "workload.command", "imbalance.delay_ms [0.0]", "momentum [0.9]"):
        assert words in out.stdout, words
    assert "Powered by Hydra" not in out.stdout


@pytest.mark.parametrize("command", [["query"], ["compare", "--baseline", "algorithm=sync"]])
@pytest.mark.sweep
def test_an_unknown_study_is_one_line_and_exit_2_naming_the_studies_there(tmp_path, command):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    register_runs(connect(url), "mine", [PlannedRun("k", RunSpec(study="mine").to_dict(), str(tmp_path / "run"))])
    proc = scalestudy(*command, "--study", "nosuch", "--db", url, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("scalestudy: error: --study 'nosuch': no such study in this database; "
                                   "studies here: mine")
    if command == ["query"]:   # the study that is there: its (pending) run, exit 0
        known = scalestudy("query", "--study", "mine", "--db", url, "--format", "csv", cwd=tmp_path)
        assert known.returncode == 0 and "pending" in known.stdout


@pytest.mark.sweep
def test_compare_without_a_baseline_takes_the_reports_default(engine, tmp_path):
    """The report's default (the fewest nodes, here nodes=1), said on stderr; the same table as
    with --baseline nodes=1."""
    url = engine.url.render_as_string(hide_password=False)
    chosen = scalestudy("compare", "--study", "cmp", "--db", url, "--format", "csv", cwd=tmp_path)
    given = scalestudy("compare", "--study", "cmp", "--db", url, "--format", "csv", "--baseline", "nodes=1",
                       cwd=tmp_path)
    assert chosen.returncode == 0 and given.returncode == 0, chosen.stderr
    assert "baseline: nodes=1 (the default" in chosen.stderr and chosen.stdout == given.stdout
    bare = scalestudy("compare", "--db", url, cwd=tmp_path)
    assert bare.returncode == 2 and "--baseline AXIS=VALUE, or --study NAME" in bare.stderr


def _runs_on_demand(values_by_nodes: dict[int, list[float]], first_stage: int | None) -> pd.DataFrame:
    """Finished runs as query.runs gives them, one configuration per node count, repeats in
    order; ``first_stage``: what repeats on demand recorded in each run's config."""
    from workloads.spec import RunSpec

    rows = []
    for nodes, values in values_by_nodes.items():
        for repeat, value in enumerate(values):
            spec = RunSpec(study="s", nodes=nodes, repeat=repeat)
            config = {"repeats": {"first_stage": first_stage}} if first_stage else {}
            rows.append({**spec.to_dict(), "world_size": spec.world_size, "status": "done", "throughput": value,
                         "config": config})
    return pd.DataFrame(rows)


def test_compare_and_compare_against_give_one_interval_on_the_same_runs():
    """Issue 61: ``compare --against`` ignored the repeats-on-demand first stage that ``compare``
    reads, and printed another interval for the same pair of configurations."""
    from results_db.analysis import regression

    values = {1: [100.0, 101.0, 102.0, 103.0, 104.0], 2: [190.0, 196.0, 193.0, 191.5, 194.0, 192.0]}
    for stage in (3, None):   # with the rule's first stage, and the control without one
        runs = _runs_on_demand(values, stage)
        table = compare.compare_runs(runs, "nodes=1").set_index("nodes")
        sets = regression.compare_sets(runs[runs["nodes"] == 1], runs[runs["nodes"] == 2])
        assert sets.attrs["treatment"] == ["nodes"]
        assert sets["change_low"].iloc[0] == pytest.approx(table.loc[2, "speedup_low"], rel=1e-12)
        assert sets["change_high"].iloc[0] == pytest.approx(table.loc[2, "speedup_high"], rel=1e-12)
    staged = compare.compare_runs(_runs_on_demand(values, 3), "nodes=1").set_index("nodes")
    plain = compare.compare_runs(_runs_on_demand(values, None), "nodes=1").set_index("nodes")
    assert staged.loc[2, "df"] != pytest.approx(plain.loc[2, "df"])   # the first stage changes the interval
