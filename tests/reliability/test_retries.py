"""The retry policy and the attempts it keeps: a crash or a timeout is retried as often as
``retries.*`` says, a failure while setting up never is, and every attempt stays in the
database (and its files in its own folder); ``--rerun`` keeps the earlier measurement."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import scalestudy

pytestmark = pytest.mark.mpi


def _attempts(tmp_path) -> list[Run]:
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.id)).all()
        s.expunge_all()
    engine.dispose()
    return runs


def _sweep(tmp_path, *overrides: str, env=None):
    return scalestudy("sweep", "site=local", "study_name=retries", "nodes=1", "workers_per_node=1",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", *overrides, cwd=tmp_path, env=env, timeout=300)


def flaky(tmp_path) -> tuple[str, ...]:
    """A command that fails the first time it runs and succeeds after."""
    marker = tmp_path / "ran-once"
    return ("workload.kind=command", "workload.shell=true",
            f"workload.command='test -f {marker} || {{ touch {marker}; echo first attempt >&2; exit 3; }}; "
            "echo rate 7.5'", "+workload.metrics.throughput.pattern='rate ([0-9.]+)'")


def test_a_crash_is_retried_as_often_as_the_policy_says_and_both_attempts_are_kept(tmp_path):
    proc = _sweep(tmp_path, *flaky(tmp_path), "retries.crash=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "crash retry 1 of 1" in proc.stderr
    first, second = _attempts(tmp_path)
    assert (first.attempt, first.latest, first.status) == (1, False, "failed")
    assert "exited with 3" in first.error and first.exit_code == 3
    assert (second.attempt, second.latest, second.status, second.throughput) == (2, True, "done", 7.5)
    assert first.run_key == second.run_key
    # the first attempt's files moved aside, not overwritten; the folder holds the second's
    run_dir = tmp_path / "mr" / "0"
    assert first.run_dir == str(run_dir / f"attempt-{first.id}") and second.run_dir == str(run_dir)
    assert "first attempt" in (run_dir / f"attempt-{first.id}" / "output" / "rank-0.log").read_text()
    assert json.loads((run_dir / "result.json").read_text())["status"] == "done"
    # readers see the run once; --attempts all shows both
    latest = scalestudy("query", "--study", "retries", "--format", "json", cwd=tmp_path)
    assert [r["run_id"] for r in json.loads(latest.stdout)] == [second.id]
    every = scalestudy("query", "--study", "retries", "--attempts", "all", "--format", "json", cwd=tmp_path)
    rows = json.loads(every.stdout)
    assert [(r["run_id"], r["attempt"], r["status"]) for r in rows] == [(first.id, 1, "failed"), (second.id, 2, "done")]
    status = scalestudy("status", "--study", "retries", cwd=tmp_path)
    assert status.returncode == 0 and "earlier_attempts" in status.stdout


def test_without_retries_a_crash_fails_the_run_once(tmp_path):
    proc = _sweep(tmp_path, *flaky(tmp_path))
    assert proc.returncode == 1 and "retry" not in proc.stderr
    [only] = _attempts(tmp_path)
    assert only.status == "failed" and only.attempt == 1


def test_a_failure_while_setting_up_is_never_retried(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "broken.py").write_text("def make(input_shape, num_classes, params, seed):\n"
                                   "    raise ValueError('hidden must be even, got 3')\n")
    proc = _sweep(tmp_path, "model=broken:make", "epochs=1", "steps_per_epoch=2", "retries.crash=3",
                  env={"PYTHONPATH": str(pkg)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "not retried: it failed while being set up" in proc.stderr and "retry 1" not in proc.stderr
    [only] = _attempts(tmp_path)
    assert only.status == "failed" and "setup failed: ValueError: hidden must be even, got 3" in only.error


def test_a_command_that_cannot_start_is_never_retried(tmp_path):
    proc = _sweep(tmp_path, "workload.kind=command", "workload.command=[no-such-program-xyz]",
                  "workload.check_command=false", "retries.crash=2")
    assert proc.returncode == 1 and "retry 1" not in proc.stderr, proc.stderr[-3000:]
    [only] = _attempts(tmp_path)
    assert only.status == "failed" and "cannot start" in only.error


def test_a_timeout_is_retried_and_each_attempt_recorded_as_timeout(tmp_path):
    proc = _sweep(tmp_path, "workload.kind=command", "workload.command=[sleep,60]", "run_timeout=2",
                  "retries.timeout=1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "timeout retry 1 of 1" in proc.stderr
    first, second = _attempts(tmp_path)
    assert [(r.attempt, r.status, r.latest) for r in (first, second)] == [(1, "timeout", False), (2, "timeout", True)]
    assert "time limit of 2 s" in first.error


def test_rerun_keeps_the_earlier_measurement(tmp_path):
    args = ("workload.kind=command", "workload.command=[echo,rate 3.25]",
            "+workload.metrics.throughput.pattern='rate ([0-9.]+)'")
    assert _sweep(tmp_path, *args).returncode == 0
    again = _sweep(tmp_path, *args)
    assert again.returncode == 0 and "already done" in again.stderr
    assert _sweep(tmp_path, *args, "--rerun").returncode == 0
    first, second = _attempts(tmp_path)
    assert (first.status, first.throughput, first.latest) == ("done", 3.25, False)
    assert (second.status, second.throughput, second.latest, second.attempt) == ("done", 3.25, True, 2)
    # the same sweep folder again: the first attempt's files moved aside, not overwritten
    assert first.run_dir == str(tmp_path / "mr" / "0" / f"attempt-{first.id}")
    assert second.run_dir == str(tmp_path / "mr" / "0")
    assert (tmp_path / "mr" / "0" / f"attempt-{first.id}" / "result.json").is_file()


@pytest.mark.parametrize("override, says", [
    ("retries.crash=-1", "retries.crash=-1: expected an integer >= 0"),
    ("retries.timeout=two", "retries.timeout='two': expected an integer >= 0"),
    ("retries.node_lots=1", "retries.node_lots: unknown key"),
])
def test_a_bad_retry_policy_is_one_line_and_nothing_runs(tmp_path, override, says):
    proc = _sweep(tmp_path, "workload.kind=command", "workload.command=[echo,hi]", override)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "scalestudy.db").exists() or not _attempts(tmp_path)


def test_how_a_failure_is_sorted(tmp_path):
    """The kind decides the retry: a batch job that ran out of walltime is a timeout, one
    someone cancelled is never retried, one that failed with its node is a lost node, an
    executor that cannot submit blocks (a bad account) is a setup failure."""
    from orchestrator.errors import ConfigError
    from orchestrator.mpi.run import RunTimedOut
    from orchestrator.sweep.retry_policy import NodeLost, RetryPolicy, classify
    from workloads.failure import record_failure

    class BadStateException(Exception):  # Parsl's name, as the task's error carries it
        pass

    assert classify(NodeLost("x", "7", "FAILED"), tmp_path) == "node_lost"
    assert classify(NodeLost("x", "7", "COMPLETED"), tmp_path) == "node_lost"   # gone from the queue
    assert classify(NodeLost("x", "7", "TIMEOUT"), tmp_path) == "timeout"
    assert classify(NodeLost("x", "7", "CANCELLED"), tmp_path) == "cancelled"
    assert classify(BadStateException("no account"), tmp_path) == "setup"
    assert classify(ConfigError("nodes", 0, "bad"), tmp_path) == "setup"
    assert classify(RunTimedOut("t"), tmp_path) == "timeout"
    assert classify(RuntimeError("boom"), tmp_path) == "crash"
    record_failure(tmp_path, 1, "setup", "workloads: rank 1: setup failed: ImportError")
    assert classify(RuntimeError("exited with 1"), tmp_path) == "setup"
    policy = RetryPolicy(crash=1, timeout=0, node_lost=2)
    assert policy.allows("node_lost", 1) and not policy.allows("node_lost", 2)
    assert not policy.allows("cancelled", 0) and not policy.allows("setup", 0) and not policy.allows("timeout", 0)


def test_a_run_taken_over_by_another_sweep_is_not_retried_or_marked_by_the_first(tmp_path):
    """Driver A was frozen past the stale time; sweep B took its run over in place. When A
    wakes up and sees its attempt fail, it must neither record that failure over B's attempt
    nor start a new attempt (the run would then execute twice)."""
    from results_db.store.runs import PlannedRun, mark_failed, new_attempt, register_runs

    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    spec = {"study": "s", "nodes": 1, "workers_per_node": 1, "batch_size": 8}
    [a] = register_runs(engine, "s", [PlannedRun("k", spec, str(tmp_path / "a"))], driver="host:1")
    with Session(engine) as s:   # A's heartbeat goes stale
        s.get(Run, a.run_id).heartbeat = 0.0
        s.commit()
    [b] = register_runs(engine, "s", [PlannedRun("k", spec, str(tmp_path / "b"))], driver="host:2")
    assert b.submit and b.run_id == a.run_id   # taken over in place
    assert mark_failed(engine, a.run_id, "lost", status="lost", driver="host:1") is False
    assert new_attempt(engine, a.run_id, "host:1") is None
    with Session(engine) as s:
        [run] = s.scalars(select(Run)).all()
        assert (run.driver, run.status, run.latest, run.attempt) == ("host:2", "pending", True, 1)
    assert mark_failed(engine, b.run_id, "boom", driver="host:2") is True
    assert new_attempt(engine, b.run_id, "host:2") is not None
