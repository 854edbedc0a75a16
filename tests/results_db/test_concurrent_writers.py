"""Several sweeps writing to one SQLite database at once lose nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run, Step, Study

from conftest import REPO, env_with_bin

WRITER = str(REPO / "tests" / "db_programs" / "sweep_writer.py")


def test_concurrent_sweeps_on_one_sqlite_file(tmp_path, finished_run):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    connect(url).dispose()  # schema first, as the first sweep would
    writers, runs_each = 4, 6
    procs = [subprocess.Popen([sys.executable, WRITER, url, f"study{w}", str(finished_run), str(runs_each)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_with_bin())
             for w in range(writers)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("OK"), err[-2000:]
    result = json.loads((finished_run / "result.json").read_text())
    engine = connect(url)
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(Study)) == writers
        assert s.scalar(select(func.count()).select_from(Run)) == writers * runs_each
        assert set(s.scalars(select(Run.status))) == {"done"}
        steps = s.scalar(select(func.count()).select_from(Step))
    assert steps == writers * runs_each * result["steps"] * result["world_size"]
