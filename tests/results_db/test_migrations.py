"""Alembic migrations: a database made by an earlier revision, with data in it, upgrades without loss."""

from __future__ import annotations

import json

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from results_db import connect
from results_db.store.migrate import alembic_config, current_revision, downgrade, head_revision, upgrade

from conftest import scalestudy


def _old_database(url: str) -> None:
    """A database at revision 0001 (the foundation schema) holding a study, a run, steps and evals."""
    engine = create_engine(url)
    cfg = alembic_config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text("insert into studies (id, name, created_at) values (1, 'old', '2026-01-01T00:00:00+00:00')"))
        conn.execute(text(
            "insert into runs (id, study_id, run_key, status, site, nodes, workers_per_node, threads_per_node, "
            "world_size, batch_size, global_batch_size, algorithm, model, dataset, epochs, lr, seed, spec, "
            "throughput, final_top1, created_at) values (7, 1, 'k7', 'done', 'local', 2, 2, 2, 4, 16, 64, 'sync', "
            "'small_cnn', 'digits', 1, 0.1, 0, :spec, 1234.5, 0.9, '2026-01-01T00:00:00+00:00')"),
                     {"spec": json.dumps({"nodes": 2, "momentum": 0.5, "steps_per_epoch": 7, "imbalance_sigma": 2.0})})
        for step in range(3):
            conn.execute(text('insert into steps (run_id, rank, step, epoch, samples, t_start, data, forward, backward,'
                              ' comm_wait, "update", loss) values (7, 0, :s, 0, 16, :s, 0.1, 0.2, 0.3, 0.4, 0.5, 2.0)'),
                         {"s": step})
        conn.execute(text("insert into evals (run_id, epoch, wall, top1, loss, samples_seen) values (7, 0, 1.5, 0.9, 0.3, 64)"))
    engine.dispose()


def test_upgrade_keeps_the_data_of_an_earlier_revision(db_url):
    url = db_url
    _old_database(url)
    assert current_revision(create_engine(url)) == "0001"
    engine = connect(url)  # opening migrates
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        run = conn.execute(text("select run_key, throughput, final_top1, fusion_threshold_mb, git_commit from runs")).one()
        assert tuple(run) == ("k7", 1234.5, 0.9, None, None)
        # 0003 back-fills the fields that lived only in the stored spec, and the defaults of new ones
        filled = conn.execute(text("select momentum, steps_per_epoch, imbalance_sigma, imbalance_rank, repeat, "
                                   "workload_kind from runs")).one()
        assert tuple(filled) == (0.5, 7, 2.0, -1, 0, "builtin")
        # 0006: a run recorded before it ran its engine on a thread of its own, and computed for real
        assert tuple(conn.execute(text("select engine_thread, compute, compute_profile from runs")).one()) \
            in ((True, "real", None), (1, "real", None))
        count, total = conn.execute(text("select count(*), sum(comm_wait) from steps")).one()
        assert count == 3 and abs(total - 1.2) < 1e-9
        assert conn.execute(text("select count(*) from steps where delay is null")).scalar() == 3
        assert conn.execute(text("select top1 from evals")).scalar() == 0.9
        tables = set(inspect(conn).get_table_names())
    assert {"events", "step_stats", "rounds"} <= tables
    indexes = {i["name"] for i in inspect(engine).get_indexes("runs")}
    assert {"ix_runs_study_algorithm_nodes", "ix_runs_study_status_latest"} <= indexes   # 0005: status counts
    # 0004: the old run is its first and latest attempt; (study, run_key) no longer unique, the attempt is
    from results_db.store.runs import new_attempt

    with engine.connect() as conn:
        assert tuple(conn.execute(text("select attempt, latest from runs")).one()) == (1, True)
        conn.execute(text("update runs set driver = 'h:1' where id = 7"))
        conn.commit()
    second = new_attempt(engine, 7, "h:1")
    with engine.connect() as conn:
        rows = conn.execute(text("select id, run_key, attempt, latest from runs order by attempt")).all()
        assert [tuple(r) for r in rows] == [(7, "k7", 1, False), (second, "k7", 2, True)]
        with pytest.raises(IntegrityError):   # one row per attempt
            conn.execute(text("update runs set attempt = 1 where id = :i"), {"i": second})


def test_db_command_upgrades_and_reports(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _old_database(url)
    current = scalestudy("db", "current", "--db", url, cwd=tmp_path)
    assert current.returncode == 0 and "revision 0001" in current.stdout
    upgraded = scalestudy("db", "upgrade", "--db", url, cwd=tmp_path)
    assert upgraded.returncode == 0 and f"revision {head_revision()}" in upgraded.stdout


def test_head_constant_is_alembics_head():
    """``migrate.HEAD`` lets an up-to-date database open without Alembic; it must name the newest revision."""
    from results_db.store.migrate import HEAD

    assert HEAD == head_revision()


@pytest.mark.sweep
def test_reading_commands_never_migrate(tmp_path):
    """status, query, compare, figures and report on an older database: one line saying to run
    `scalestudy db upgrade`, exit 2, and the file unchanged (no DDL from a reader)."""
    import sqlite3

    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    _old_database(url)
    dump = lambda: "\n".join(sqlite3.connect(db).iterdump())  # noqa: E731 - every table, index and row
    before = dump()
    for args in (["status"], ["query"], ["compare", "--baseline", "nodes=1"], ["figures", "--study", "old"],
                 ["report", "--study", "old"]):
        out = scalestudy(*args, "--db", url, cwd=tmp_path)
        assert out.returncode == 2 and "scalestudy db upgrade" in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1
    assert dump() == before
    assert current_revision(create_engine(url)) == "0001"


def _schema(engine) -> dict[str, tuple]:
    """Each table's columns (name, nullable), index names and unique column sets: what a
    migration adds or removes (unique constraints by their columns, since SQLite reflects an
    unnamed one without a name)."""
    found = inspect(engine)
    return {table: (sorted((c["name"], bool(c["nullable"])) for c in found.get_columns(table)),
                    sorted(i["name"] for i in found.get_indexes(table)),
                    sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(table)))
            for table in found.get_table_names() if table != "alembic_version"}


@pytest.mark.sweep
def test_every_revision_downgrades_and_upgrades_again_to_the_same_schema(db_url):
    """Step down one revision at a time to the empty database, then back up: each downgrade
    runs (a broken one fails here, not on a user's database), and head is head again. On the
    way, 0004's downgrade keeps a run's latest attempt with its measurements and drops the
    earlier attempt's, which the old (study_id, run_key) constraint cannot hold."""
    from results_db.store.runs import new_attempt

    _old_database(db_url)                  # run 7 with 3 steps, at 0001
    engine = connect(db_url)               # to head
    at_head = _schema(engine)
    with engine.begin() as conn:
        conn.execute(text("update runs set driver = 'h:1' where id = 7"))
    second = new_attempt(engine, 7, "h:1")
    with engine.begin() as conn:
        conn.execute(text('insert into steps (run_id, rank, step, epoch, samples, t_start, data, forward, backward, '
                          'comm_wait, "update", loss) values (:r, 0, 0, 0, 16, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 2.0)'),
                     {"r": second})
    walked = []
    while (revision := current_revision(engine)) is not None:
        walked.append(revision)
        downgrade(engine, "-1")
        if current_revision(engine) == "0003":
            with engine.connect() as conn:
                assert [tuple(r) for r in conn.execute(text("select id, run_key from runs"))] == [(second, "k7")]
                assert [tuple(r) for r in conn.execute(text("select run_id, count(*) from steps group by run_id"))] \
                    == [(second, 1)]
    assert walked[0] == head_revision() and walked[-1] == "0001" and len(walked) == len(set(walked))
    assert "0004" in walked
    assert _schema(engine) == {}
    upgrade(engine)
    assert _schema(engine) == at_head
    engine.dispose()
