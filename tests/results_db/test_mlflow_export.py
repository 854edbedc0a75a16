"""``scalestudy export mlflow``: a study's runs in a real local MLflow store (SQLite
backend), read back with ``mlflow.search_runs`` and compared with our SQL."""

from __future__ import annotations

import dataclasses
import time

import pytest

from sqlalchemy import text

from conftest import scalestudy
from results_db import connect
from results_db.store import query

mlflow = pytest.importorskip("mlflow", reason="the [mlflow] extra (mlflow-skinny) is not installed")


@pytest.fixture()
def study(tmp_path):
    """Two finished synthetic runs and one still pending."""
    from perf_synthetic import write_study
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = connect(url)
    write_study(engine, "syn", configs=((8, 2), (16, 4)))
    pending = dataclasses.replace(RunSpec(study="syn", site="local"), batch_size=64, workers_per_node=2,
                                  threads_per_node=2)
    register_runs(engine, "syn", [PlannedRun("syn-pending", pending.to_dict(), "/nowhere")])
    with engine.begin() as conn:   # an injected delay in every step, and one step whose command reported its length
        conn.execute(text("UPDATE steps SET delay = 0.05"))
        conn.execute(text("UPDATE steps SET seconds = 9.5 WHERE step = 1"))
    return tmp_path, url, engine


def _search(uri: str):
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=["scalestudy/syn"])


@pytest.mark.sweep
def test_runs_arrive_as_in_sql_and_only_once(study):
    tmp, url, engine = study
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    assert "2 run(s) added, 0 already there, 1 still pending or running" in proc.stdout
    assert "INFO" not in proc.stderr          # MLflow's own chatter kept out
    got = _search(uri).set_index("tags.scalestudy.run_key")
    ours = query.runs(engine, study="syn", where="status=done").set_index("run_key")
    assert sorted(got.index) == sorted(ours.index)
    for key, run in ours.iterrows():
        row = got.loc[key]
        assert row["status"] == "FINISHED" and row["tags.scalestudy.attempt"] == str(int(run["attempt"]))
        for axis in ("nodes", "workers_per_node", "batch_size", "algorithm", "site"):
            assert row[f"params.{axis}"] == str(run[axis])
        assert row["metrics.throughput"] == pytest.approx(float(run["throughput"]))
        assert row["metrics.wall_seconds"] == pytest.approx(float(run["wall_seconds"]))
        assert row["tags.site"] == run["site"] and row["tags.scalestudy.run_id"] == str(int(run["run_id"]))
        # the per-step history: rank 0's step time, one point per step, equal to SQL's
        steps = query.steps(engine, [int(run["run_id"])])
        first = steps[steps["rank"] == 0].sort_values("step")
        history = mlflow.tracking.MlflowClient(uri).get_metric_history(row["run_id"], "step_seconds")
        assert [h.step for h in sorted(history, key=lambda h: h.step)] == list(first["step"])
        # the step's reported length where there is one, else its phases, the injected delay included
        expect = [9.5 if step == 1 else d + f + 0.05 + b + c + u for step, d, f, b, c, u in
                  first[["step", "data", "forward", "backward", "comm_wait", "update"]].itertuples(index=False)]
        assert [h.value for h in sorted(history, key=lambda h: h.step)] == pytest.approx(expect)
    again = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
    assert again.returncode == 0 and "0 run(s) added, 2 already there" in again.stdout, again.stderr
    assert len(_search(uri)) == 2


def _complete(got) -> set:
    return set(got["tags.scalestudy.complete"].fillna("")) if "tags.scalestudy.complete" in got else {""}


@pytest.mark.sweep
def test_a_failed_export_removes_its_own_half_written_run_only(study):
    """An export that MLflow stops midway (a metric name it refuses) deletes the half-written
    run it made; a half-written run of another export (one killed earlier, or one still
    writing: nothing tells them apart) is left as it is, and its attempt is sent again whole."""
    tmp, url, engine = study
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    done = query.runs(engine, study="syn", where="status=done")
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.create_experiment("scalestudy/syn")
    cut = client.create_run(experiment, tags={"scalestudy.run_key": str(done["run_key"].iloc[0]),
                                              "scalestudy.attempt": str(int(done["attempt"].iloc[0])),
                                              "scalestudy.export": "another-export"})
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET metrics = :m WHERE id = :i"),
                     {"m": '{"bad!name": 1.0}', "i": int(done["run_id"].iloc[1])})
    failed = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
    assert failed.returncode == 2 and "MLflow refused it" in failed.stderr, failed.stderr
    got = _search(uri)
    # what is left: the other export's run, and whatever this one finished whole
    assert set(got["run_id"]) - {cut.info.run_id} == set(got[got["tags.scalestudy.complete"] == "true"]["run_id"])
    assert cut.info.run_id in set(got["run_id"])
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET metrics = NULL"))
    proc = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    assert "1 half-written run(s) of other exports left as they are" in proc.stdout
    got = _search(uri)
    whole = got[got["tags.scalestudy.complete"] == "true"]
    assert sorted(whole["tags.scalestudy.run_key"]) == sorted(done["run_key"]) and whole["metrics.throughput"].notna().all()
    assert set(got["run_id"]) == set(whole["run_id"]) | {cut.info.run_id}


@pytest.mark.sweep
def test_a_foreign_run_in_the_experiment_is_kept(study):
    """A user's own run in the study's experiment, made with the plain MLflow client (none of
    our tags): an export adds beside it and never deletes it."""
    tmp, url, _ = study
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.create_experiment("scalestudy/syn")
    mine = client.create_run(experiment, run_name="my notebook's run")
    client.log_metric(mine.info.run_id, "loss", 0.5)
    for _ in range(2):     # a first export and one that adds nothing
        proc = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
        assert proc.returncode == 0, proc.stderr
    kept = client.get_run(mine.info.run_id)
    assert kept.info.lifecycle_stage == "active" and kept.data.metrics == {"loss": 0.5}
    assert len(_search(uri)) == 3


@pytest.mark.sweep
def test_two_exports_at_once_keep_each_others_runs(tmp_path, monkeypatch):
    """Two databases holding study syn (two sites' runs, say) exported into one store at the
    same time. Export A is held (a hook on the real client's log_batch) with its first run
    created but not yet complete while export B runs from start to end; then A goes on. B
    must not delete A's run in progress, and both end whole."""
    import threading

    from mlflow.tracking import MlflowClient

    from perf_synthetic import write_study
    from results_db.publish.mlflow_export import export_study

    engines = [connect(f"sqlite:///{tmp_path / f'{side}.db'}") for side in "ab"]
    write_study(engines[0], "syn", configs=((8, 2),))
    write_study(engines[1], "syn", configs=((16, 4),))
    with engines[1].begin() as conn:    # another site's run: its own run_key
        conn.execute(text("UPDATE runs SET run_key = 'site-b-' || run_key"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    held, go_on = threading.Event(), threading.Event()
    log_batch = MlflowClient.log_batch

    def holding(self, run_id, *args, **kwargs):
        if threading.current_thread().name == "export-a" and not held.is_set():
            held.set()
            assert go_on.wait(120), "export B never finished"
        return log_batch(self, run_id, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", holding)
    outcome = {}

    def export_a():
        try:
            outcome["a"] = export_study(engines[0], "syn", uri)
        except Exception as exc:   # noqa: BLE001 - reported by the assertion below
            outcome["a"] = exc

    a = threading.Thread(target=export_a, name="export-a")
    a.start()
    assert held.wait(120), "export A never reached its first run"
    in_progress = _search(uri)
    assert len(in_progress) == 1
    b = export_study(engines[1], "syn", uri)
    after_b = _search(uri)
    go_on.set()
    a.join(120)
    assert b.added == 1 and not isinstance(outcome["a"], Exception), outcome["a"]
    assert set(in_progress["run_id"]) <= set(after_b["run_id"])        # A's run in progress survived B
    got = _search(uri)
    assert len(got) == 2 and set(got["tags.scalestudy.complete"]) == {"true"}
    assert sorted(got["tags.scalestudy.run_key"]) == ["site-b-syn-k0", "syn-k0"]
    assert got["tags.scalestudy.export"].nunique() == 2                 # each run names the export that wrote it


def test_two_exports_of_the_same_runs_at_once_leave_one_copy(tmp_path, monkeypatch):
    """The same study exported twice at once (two terminals): export A is held with its copy of
    run syn-k0 created but not complete while B sends the same run whole; then A completes its
    copy. One complete copy stays (B's, complete first); A deletes only its own."""
    import threading

    from mlflow.tracking import MlflowClient

    from perf_synthetic import write_study
    from results_db.publish.mlflow_export import export_study

    engine = connect(f"sqlite:///{tmp_path / 'a.db'}")
    write_study(engine, "syn", configs=((8, 2),))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    held, go_on = threading.Event(), threading.Event()
    log_batch = MlflowClient.log_batch

    def holding(self, run_id, *args, **kwargs):
        if threading.current_thread().name == "export-a" and not held.is_set():
            held.set()
            assert go_on.wait(120), "export B never finished"
        return log_batch(self, run_id, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", holding)
    outcome = {}
    a = threading.Thread(target=lambda: outcome.setdefault("a", export_study(engine, "syn", uri)), name="export-a")
    a.start()
    assert held.wait(120), "export A never reached its first run"
    b = export_study(engine, "syn", uri)
    go_on.set()
    a.join(120)
    got = _search(uri)
    assert len(got) == 1 and set(got["tags.scalestudy.complete"]) == {"true"}, got
    assert b.added == 1 and outcome["a"].added == 0 and outcome["a"].skipped == 1


@pytest.mark.sweep
def test_bad_input_is_one_line(study):
    tmp, url, _ = study
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    (tmp / "a-file").write_text("not a folder\n")
    began = time.perf_counter()
    for args, said in ((["--study", "nosuch", "--tracking-uri", uri], "study 'nosuch': no runs"),
                       (["--study", "syn", "--tracking-uri", "http://127.0.0.1:9"], "unreachable"),
                       (["--study", "syn", "--tracking-uri", f"sqlite:///{tmp / 'a-file' / 'm.db'}"],
                        "--tracking-uri sqlite:///"),      # a path under a file: no store can be made there
                       (["--study", "syn", "--tracking-uri", "gopher://store"], "--tracking-uri gopher://store")):
        proc = scalestudy("export", "mlflow", *args, "--db", url, cwd=tmp)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert time.perf_counter() - began < 60     # no minutes of retries against a closed port
    assert not (tmp / "mlflow.db").exists()     # nothing created for a refused export
