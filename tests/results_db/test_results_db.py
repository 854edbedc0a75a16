"""Ingestion and queries against a real SQLite database, on a real run's files."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store import query
from results_db.ingest.folder import IngestError, ingest_run
from results_db.store.runs import PlannedRun, mark_failed, new_attempt, register_runs
from results_db.store.schema import Eval, RankSummary, Run, Step
from workloads.spec import RunSpec


@pytest.fixture
def engine(db_url):
    engine = connect(db_url)
    yield engine
    engine.dispose()


def _plan(run_dir, key="k1", **over):
    spec = {**RunSpec.load(run_dir / "spec.json").to_dict(), **over}
    return PlannedRun(run_key=key, spec=spec, run_dir=str(run_dir))


def _count(engine, table, run_id):
    with Session(engine) as s:
        return s.scalar(select(func.count()).select_from(table).where(table.run_id == run_id))


@pytest.mark.sweep
def test_ingest_loads_every_record_once(engine, finished_run):
    [d] = register_runs(engine, "s", [_plan(finished_run)])
    assert d.submit and d.previous_status is None
    assert ingest_run(engine, d.run_id, finished_run) is True
    result = json.loads((finished_run / "result.json").read_text())
    assert _count(engine, Step, d.run_id) == result["steps"] * result["world_size"]
    assert _count(engine, Eval, d.run_id) == result["epochs"]
    assert _count(engine, RankSummary, d.run_id) == 2
    # idempotent: a second ingestion changes nothing
    assert ingest_run(engine, d.run_id, finished_run) is False
    assert _count(engine, Step, d.run_id) == result["steps"] * result["world_size"]
    with Session(engine) as s:
        run = s.get(Run, d.run_id)
        assert run.status == "done" and run.throughput == pytest.approx(result["throughput"])
        assert run.world_size == 2 and run.global_batch_size == 2 * run.batch_size
        assert run.versions["mpi4py"] and run.hosts


def test_registering_again_skips_done_runs_and_never_duplicates(engine, finished_run):
    [d] = register_runs(engine, "s", [_plan(finished_run)])
    ingest_run(engine, d.run_id, finished_run)
    [again] = register_runs(engine, "s", [_plan(finished_run)])
    assert not again.submit and again.run_id == d.run_id and again.previous_status == "done"
    steps_before = _count(engine, Step, d.run_id)
    [forced] = register_runs(engine, "s", [_plan(finished_run)], rerun=True)
    # a forced rerun is a new attempt: the first one and its measurements stay, no longer the latest
    assert forced.submit and forced.run_id != d.run_id
    assert _count(engine, Step, d.run_id) == steps_before > 0 and _count(engine, Step, forced.run_id) == 0
    with Session(engine) as s:
        first, second = s.get(Run, d.run_id), s.get(Run, forced.run_id)
        assert (first.attempt, first.latest, first.status) == (1, False, "done")
        assert (second.attempt, second.latest, second.status) == (2, True, "pending")
        assert first.throughput is not None and second.throughput is None
        assert second.run_key == first.run_key and second.spec == first.spec
    # still one run for every reader; both attempts when asked
    assert list(query.runs(engine, study="s")["run_id"]) == [forced.run_id]
    every = query.runs(engine, study="s", attempts="all", columns=["run_id", "attempt", "latest", "status"])
    assert every.values.tolist() == [[d.run_id, 1, False, "done"], [forced.run_id, 2, True, "pending"]]
    counts = query.status_counts(engine, "s").iloc[0]
    assert (counts["pending"], counts["done"], counts["total"], counts["earlier_attempts"]) == (1, 0, 1, 1)
    # registering again while the second attempt is pending under no live sweep: taken over in place
    [again] = register_runs(engine, "s", [_plan(finished_run)])
    assert again.run_id == forced.run_id
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 2


def test_failed_attempts_are_kept_when_retried(engine, finished_run):
    [d] = register_runs(engine, "s", [_plan(finished_run)], driver="host:1")
    mark_failed(engine, d.run_id, "lost: its batch job 7 ended (FAILED)", status="lost")
    retry = new_attempt(engine, d.run_id, "host:1", run_dir=str(finished_run))
    ingest_run(engine, retry, finished_run)
    runs = query.runs(engine, study="s", attempts="all", columns=["run_id", "attempt", "latest", "status", "error"])
    assert runs[["run_id", "attempt", "latest", "status"]].values.tolist() == [[d.run_id, 1, False, "lost"],
                                                                              [retry, 2, True, "done"]]
    assert runs["error"][0] == "lost: its batch job 7 ended (FAILED)" and pd.isna(runs["error"][1])
    assert query.status_counts(engine, "s").iloc[0]["done"] == 1


def test_failed_runs_are_planned_again(engine, finished_run):
    [d] = register_runs(engine, "s", [_plan(finished_run)])
    mark_failed(engine, d.run_id, "boom")
    [again] = register_runs(engine, "s", [_plan(finished_run)])
    assert again.submit and again.previous_status == "failed"


def test_unknown_metrics_schema_is_refused(engine, finished_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    path = run_dir / "metrics" / "rank-1.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"schema":1', '"schema":99')
    path.write_text("\n".join(lines) + "\n")
    [d] = register_runs(engine, "s", [_plan(run_dir)])
    with pytest.raises(IngestError, match="metrics schema 99 is not supported"):
        ingest_run(engine, d.run_id, run_dir)
    assert _count(engine, Step, d.run_id) == 0  # one transaction: nothing half-ingested


def test_missing_result_means_not_finished(engine, finished_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "result.json").unlink()
    [d] = register_runs(engine, "s", [_plan(run_dir)])
    with pytest.raises(IngestError, match="no result.json"):
        ingest_run(engine, d.run_id, run_dir)


def test_query_filters_and_frames(engine, finished_run):
    plans = [_plan(finished_run, key=f"k{n}", nodes=n) for n in (1, 2, 4)]
    decisions = register_runs(engine, "s", plans)
    ingest_run(engine, decisions[0].run_id, finished_run)
    frame = query.runs(engine, study="s", where="nodes>=2")
    assert sorted(frame["nodes"]) == [2, 4] and set(frame["status"]) == {"pending"}
    assert len(query.runs(engine, where=["nodes>=2", "status=pending"])) == 2
    assert len(query.runs(engine, where="algorithm = sync and nodes < 2")) == 1
    assert query.runs(engine, study="other").empty
    done = query.runs(engine, where="status=done")
    steps = query.steps(engine, done["run_id"])  # a DataFrame column feeds the next query
    assert set(steps["rank"]) == {0, 1} and {"forward", "backward", "comm_wait"} <= set(steps.columns)
    assert len(query.evals(engine, [decisions[0].run_id])) == 2
    counts = query.status_counts(engine).set_index("study")
    assert counts.loc["s", "done"] == 1 and counts.loc["s", "pending"] == 2 and counts.loc["s", "total"] == 3


def test_status_counts_every_state_and_earlier_attempt(engine, finished_run):
    """``status`` counts in SQL without pandas: checked against a count of the rows themselves."""
    a = register_runs(engine, "a", [_plan(finished_run, key=f"a{n}", nodes=n) for n in (1, 2, 4, 8)])
    b = register_runs(engine, "b", [_plan(finished_run, key="b1")])
    ingest_run(engine, a[0].run_id, finished_run)
    mark_failed(engine, a[1].run_id, "boom")
    mark_failed(engine, a[2].run_id, "too slow", status="timeout")
    register_runs(engine, "a", [_plan(finished_run, key="a2", nodes=2)])   # a retry: attempt 2, pending
    mark_failed(engine, b[0].run_id, "node died", status="lost")
    frame = query.status_counts(engine).set_index("study")
    assert list(frame.columns) == ["pending", "running", "done", "failed", "timeout", "lost", "total",
                                   "earlier_attempts"]
    with Session(engine) as s:
        for study, study_id in (("a", a[0].run_id), ("b", b[0].run_id)):
            sid = s.get(Run, study_id).study_id
            latest = dict(s.execute(select(Run.status, func.count()).where(Run.study_id == sid, Run.latest)
                                    .group_by(Run.status)).all())
            earlier = s.scalar(select(func.count()).where(Run.study_id == sid, Run.latest.is_(False)))
            row = frame.loc[study]
            assert {k: int(row[k]) for k in latest} == latest
            assert int(row["total"]) == sum(latest.values()) and int(row["earlier_attempts"]) == earlier
    assert frame.loc["a", "earlier_attempts"] == 1 and frame.loc["a", "pending"] == 2   # a2 again and a8
    assert list(query.status_counts(engine, "b").columns)[-3:] == ["lost", "total", "earlier_attempts"]


@pytest.mark.parametrize("where, words", [
    ("nodes>>2", "cannot read filter"),
    ("bogus=1", "unknown column 'bogus'"),
    ("nodes=", "cannot read filter"),
    ("nodes=>2", "cannot read filter"),
    ("nodes>=2 or nodes=1", "'or' is not supported"),       # read as nodes >= '2 or nodes=1' once
    ("nodes>=two", "filter on nodes: 'two' is not an integer"),  # an empty table, exit 0, once
    ("lr>=fast", "'fast' is not a number"),
    ("timeline=maybe", "'maybe' is not true or false"),
    ("nodez>=2", "did you mean 'nodes'?"),
    ("params=1", "a JSON column; filter on one of its keys"),
    ("params.=1", "cannot read filter"),
])
def test_bad_filters_are_refused(engine, where, words):
    with pytest.raises(query.QueryError, match=words):
        query.runs(engine, where=where)


def test_filter_values_are_bound_not_pasted(engine, finished_run):
    register_runs(engine, "s", [_plan(finished_run)])
    assert query.runs(engine, where="algorithm=sync'; DROP TABLE runs; --").empty
    assert len(query.runs(engine)) == 1


def test_a_cut_off_last_line_is_skipped_and_the_run_marked_partial(engine, finished_run, tmp_path, caplog):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    path = run_dir / "metrics" / "rank-1.jsonl"
    whole = path.read_text()
    path.write_text(whole + '{"type":"step","schema":1,"step":99,"epo')  # the writer died mid-line
    [d] = register_runs(engine, "s", [_plan(run_dir)])
    with caplog.at_level("WARNING"):
        assert ingest_run(engine, d.run_id, run_dir)
    assert "cut off mid-line in rank-1.jsonl" in caplog.text
    result = json.loads((run_dir / "result.json").read_text())
    assert _count(engine, Step, d.run_id) == result["steps"] * result["world_size"]  # every whole record
    with Session(engine) as s:
        run = s.get(Run, d.run_id)
        assert run.status == "partial" and "rank-1.jsonl" in run.error
    assert ingest_run(engine, d.run_id, run_dir) is False  # and still idempotent


def _with_affinities(src, dst, cpus_and_hosts):
    """A copy of run ``src`` whose ranks' run_start records say ``(cpus, host)``."""
    shutil.copytree(src, dst)
    for rank, (cpus, host) in enumerate(cpus_and_hosts):
        path = dst / "metrics" / f"rank-{rank}.jsonl"
        lines = path.read_text().splitlines()
        start = json.loads(lines[0])
        assert start["type"] == "run_start"
        start.update(cpus=cpus, host=host, node=host)
        path.write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")
    return dst


@pytest.mark.sweep
def test_host_cpus_is_the_union_of_a_hosts_affinities_on_the_most_crowded_host(engine, finished_run, tmp_path):
    """Two ranks bound to a core each on one host could use 2 CPUs between them; on two
    hosts, the host whose ranks could use fewer decides; a host where a rank recorded none
    is left out, and a run that recorded none has none."""
    import os

    cases = {"bound": ([[0], [1]], ["h", "h"], 2), "overlap": ([[0, 1], [1]], ["h", "h"], 2),
             "two-hosts": ([[0, 1, 2], [5]], ["a", "b"], 1), "unrecorded": ([None, None], ["h", "h"], None),
             # a host with a rank that said nothing is left out, not counted on the others' CPUs
             "half-said": ([[0, 1, 2], None], ["h", "h"], None), "one-host-said": ([[0], None], ["a", "b"], 1)}
    for key, (cpus, hosts, expected) in cases.items():
        run_dir = _with_affinities(finished_run, tmp_path / key, list(zip(cpus, hosts)))
        [d] = register_runs(engine, "s", [_plan(run_dir, key=key)])
        assert ingest_run(engine, d.run_id, run_dir)
        with Session(engine) as s:
            assert s.get(Run, d.run_id).host_cpus == expected, key
    # the real run's ranks recorded this process's affinity, which mpiexec passed on
    [d] = register_runs(engine, "s", [_plan(finished_run, key="real")])
    ingest_run(engine, d.run_id, finished_run)
    assert query.runs(engine, columns=["run_id", "host_cpus"]).set_index("run_id").loc[d.run_id, "host_cpus"] == \
        len(os.sched_getaffinity(0))


def test_a_bad_line_in_the_middle_is_an_error_not_a_skip(engine, finished_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run, run_dir)
    path = run_dir / "metrics" / "rank-0.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:10]
    path.write_text("\n".join(lines) + "\n")
    [d] = register_runs(engine, "s", [_plan(run_dir)])
    with pytest.raises(IngestError, match="rank-0.jsonl:3: not valid JSON"):
        ingest_run(engine, d.run_id, run_dir)
    assert _count(engine, Step, d.run_id) == 0


def test_provenance_is_recorded(engine, finished_run):
    prov = {"git_commit": "a" * 40, "git_dirty": True, "environment": {"parsl": "2026.10.26"},
            "config": {"nodes": 1, "imbalance": {"kind": "none"}}}
    plan = PlannedRun("kp", RunSpec.load(finished_run / "spec.json").to_dict(), str(finished_run), prov)
    [d] = register_runs(engine, "s", [plan])
    ingest_run(engine, d.run_id, finished_run, job_id="4242.0")
    row = query.runs(engine, columns=["git_commit", "git_dirty", "environment", "config", "versions", "job_id",
                                      "hosts", "site"]).iloc[0]
    assert row["git_commit"] == "a" * 40 and bool(row["git_dirty"]) and row["environment"]["parsl"] == "2026.10.26"
    assert row["config"]["imbalance"] == {"kind": "none"} and row["job_id"] == "4242.0" and row["site"] == "local"
    assert {"torch", "mpi4py", "mpi_library"} <= set(row["versions"]) and row["hosts"]
