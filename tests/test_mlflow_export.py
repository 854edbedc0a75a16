"""``scalestudy export mlflow``: a study's runs in a real local MLflow store (SQLite
backend), read back with ``mlflow.search_runs`` and compared with our SQL."""

from __future__ import annotations

import dataclasses
import time

import pytest

from sqlalchemy import text

from conftest import scalestudy
from results_db import connect, query

mlflow = pytest.importorskip("mlflow", reason="the [mlflow] extra (mlflow-skinny) is not installed")


@pytest.fixture()
def study(tmp_path):
    """Two finished synthetic runs and one still pending."""
    from perf_synthetic import write_study
    from results_db.runs import PlannedRun, register_runs
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


def test_an_interrupted_export_is_redone(study):
    """A run an export left half-written (cut off before its completion tag) is deleted and
    sent again whole; the whole ones stay as they are."""
    tmp, url, engine = study
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    done = query.runs(engine, study="syn", where="status=done")
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.create_experiment("scalestudy/syn")
    cut = client.create_run(experiment, tags={"scalestudy.run_key": str(done["run_key"].iloc[0]),
                                              "scalestudy.attempt": str(int(done["attempt"].iloc[0]))})
    proc = scalestudy("export", "mlflow", "--study", "syn", "--tracking-uri", uri, "--db", url, cwd=tmp)
    assert proc.returncode == 0 and "2 run(s) added, 0 already there" in proc.stdout, proc.stderr
    got = _search(uri)
    assert len(got) == 2 and cut.info.run_id not in set(got["run_id"])
    assert set(got["tags.scalestudy.complete"]) == {"true"} and got["metrics.throughput"].notna().all()


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
