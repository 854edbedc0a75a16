"""A team's PostgreSQL: sweeps write to it, and its password never reaches logs or messages."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import _fresh_postgres, scalestudy

pytestmark = pytest.mark.mpi


def test_sweep_into_postgres_keeps_the_password_out_of_every_file(tmp_path, postgres_url):
    _fresh_postgres(postgres_url)
    password = make_url(postgres_url).password
    assert password
    proc = scalestudy("sweep", f"db_url={postgres_url}", "nodes=1", "workers_per_node=1,2", "epochs=1",
                      "steps_per_epoch=2", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert password not in proc.stdout + proc.stderr and "***" in proc.stderr  # "results in postgresql+psycopg://scalestudy:***@..."
    for path in (tmp_path / "mr").rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), f"password written to {path}"
    engine = connect(postgres_url)
    with Session(engine) as s:
        assert [r.status for r in s.scalars(select(Run))] == ["done", "done"]
    engine.dispose()


def test_a_wrong_password_fails_in_one_line_without_the_password(tmp_path, postgres_url):
    bad = make_url(postgres_url).set(password="Wr0ng-s3cret")
    url = bad.render_as_string(hide_password=False)
    for args in (["status", "--db", url], ["query", "--db", url]):
        proc = scalestudy(*args, cwd=tmp_path)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Wr0ng-s3cret" not in proc.stderr
        assert lines[0].startswith("scalestudy: error: database postgresql+psycopg://scalestudy:***@")
    sweep = scalestudy("sweep", f"db_url={url}", "epochs=1", "steps_per_epoch=1", f"hydra.sweep.dir={tmp_path / 'mr'}",
                       cwd=tmp_path)
    assert sweep.returncode != 0 and "Wr0ng-s3cret" not in sweep.stdout + sweep.stderr
    assert not list((tmp_path / "mr").glob("*/spec.json"))
