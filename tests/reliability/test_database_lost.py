"""The results database goes away and comes back: nothing is lost, nothing ingested twice.

Real PostgreSQL, stopped and started with its own tools (``scripts/local-postgres.sh``)
in the middle of a real sweep on the local site; and ``scalestudy ingest``, which brings
in from the run folders whatever a sweep could not write.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run, Step

from conftest import REPO, _fresh_postgres, env_with_bin, scalestudy

pytestmark = pytest.mark.mpi
PG = REPO / "scripts" / "local-postgres.sh"
SLOW = "import time; time.sleep(3); print('throughput: 5 samples/s')"


def _sweep_args(tmp_path: Path, runs: str, study: str = "dblost") -> list[str]:
    return ["sweep", f"study_name={study}", "nodes=1", "workers_per_node=1", "workload.kind=command",
            f"workload.command=[python,-c,{SLOW!r}]",
            "+workload.metrics.throughput.pattern='throughput: ([0-9.]+)'", f"+params.i={runs}",
            f"hydra.sweep.dir={tmp_path / 'mr'}"]


def _counts(url: str) -> dict[str, int]:
    engine = connect(url)
    with Session(engine) as s:
        rows = s.execute(select(Run.status, func.count()).group_by(Run.status)).all()
    engine.dispose()
    return dict(rows)


@pytest.mark.alone   # it stops the PostgreSQL server every other test's database lives on
def test_postgres_restarted_mid_sweep_loses_nothing(tmp_path, postgres_url):
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.skip("stopping and starting PostgreSQL needs root")
    _fresh_postgres(postgres_url)
    args = [sys.executable, "-m", "orchestrator.cli", *_sweep_args(tmp_path, "0,1,2")]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env_with_bin({"SCALESTUDY_DB_URL": postgres_url}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # generous ceilings: they only matter if the event never happens
        deadline = time.monotonic() + 300
        while not (tmp_path / "mr" / "0" / "command.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run(["bash", str(PG), "stop"], check=True, capture_output=True, timeout=120)
        time.sleep(8)          # runs 0 and 1 end while the server is down
    finally:
        subprocess.run(["bash", str(PG), "start"], check=True, capture_output=True, timeout=120)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "database unreachable" in err and "database reachable again" in err
    assert _counts(postgres_url) == {"done": 3}
    # ingesting the folders again changes nothing
    again = scalestudy("ingest", str(tmp_path / "mr"), "--db", postgres_url, cwd=tmp_path)
    assert again.returncode == 0 and "0 ingested, 3 already in the database" in again.stdout, again.stdout
    engine = connect(postgres_url)
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Step)) == 0  # commands without the reporting module
        assert sorted(r.throughput for r in s.scalars(select(Run))) == [5.0, 5.0, 5.0]
    engine.dispose()


def test_ingest_brings_in_run_folders_a_database_never_saw(tmp_path):
    """Run folders are the record: a sweep into one database, its folders ingested into
    another (as after a lost database), once; again, nothing changes."""
    first = scalestudy(*_sweep_args(tmp_path, "0,1"), cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    other = f"sqlite:///{tmp_path / 'other.db'}"
    (tmp_path / "mr" / "extra").mkdir()          # a folder without a run is passed over
    unfinished = tmp_path / "mr" / "9"
    unfinished.mkdir()
    (unfinished / "spec.json").write_text((tmp_path / "mr" / "0" / "spec.json").read_text())
    out = scalestudy("ingest", str(tmp_path / "mr"), "--db", other, cwd=tmp_path)
    assert out.returncode == 0 and "2 ingested, 0 already in the database, 1 not finished" in out.stdout, out.stdout
    again = scalestudy("ingest", str(tmp_path / "mr" / "1"), str(tmp_path / "mr"), "--db", other, cwd=tmp_path)
    assert again.returncode == 0 and "0 ingested, 2 already in the database" in again.stdout, again.stdout
    assert _counts(other) == {"done": 2}
    source = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    target = connect(other)
    with Session(source) as a, Session(target) as b:
        keys = lambda s: sorted((r.run_key, r.throughput, r.exit_code) for r in s.scalars(select(Run)))  # noqa: E731
        assert keys(a) == keys(b)
    missing = scalestudy("ingest", str(tmp_path / "nowhere"), "--db", other, cwd=tmp_path)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
