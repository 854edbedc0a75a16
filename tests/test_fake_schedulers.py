"""Cobalt and PBS Pro, which cannot run here, through scripted stand-ins of their command lines.

The stand-in (tests/fake_scheduler/fake_sched.py) checks every argument the real
provider code passes (our CobaltProvider; Parsl's PBSProProvider) and really runs the
submitted batch scripts on this host, so a whole sweep goes: Hydra → Parsl provider →
qsub → batch script → Parsl worker → aprun / PALS mpiexec → MPI ranks → results DB.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.schema import Run

from conftest import BIN, REPO, scalestudy

pytestmark = pytest.mark.mpi
FAKE = REPO / "tests" / "fake_scheduler" / "fake_sched.py"


def _stand_in(tmp_path: Path, flavor: str) -> dict[str, str]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    tools = ["qsub", "qstat", "qdel"] + (["aprun"] if flavor == "cobalt" else ["mpiexec"])
    for tool in tools:
        path = bin_dir / tool
        path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} {tool} \"$@\"\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "fake-state"
    return {"FAKE_SCHED_BIN": str(bin_dir), "FAKE_SCHED_DIR": str(state), "FAKE_SCHED_FLAVOR": flavor,
            "FAKE_SCHED_REAL_MPIEXEC": str(BIN / "mpiexec"),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _calls(env) -> list[dict]:
    path = Path(env["FAKE_SCHED_DIR"]) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("flavor, site", [("cobalt", "fake_cobalt.yaml"), ("pbs", "fake_pbs.yaml")])
def test_sweep_through_scheduler_stand_in(tmp_path, flavor, site):
    env = _stand_in(tmp_path, flavor)
    site_file = REPO / "tests" / "sites" / site
    proc = scalestudy("sweep", f"site={site_file}", "nodes=1,2", "workers_per_node=2", "epochs=1", "steps_per_epoch=2",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = s.scalars(select(Run).order_by(Run.nodes)).all()
    assert [(r.nodes, r.status) for r in runs] == [(1, "done"), (2, "done")]
    assert all(r.job_id for r in runs) and runs[0].job_id != runs[1].job_id  # one batch job per node count
    calls = _calls(env)
    qsubs = [c["argv"] for c in calls if c["tool"] == "qsub"]
    assert len(qsubs) == 2
    if flavor == "cobalt":
        for argv in qsubs:
            assert argv[:2] == ["--mode", "script"] and "-A" in argv and argv[argv.index("-A") + 1] == "testproj"
            assert argv[argv.index("-q") + 1] == "debug-cache-quad" and argv[argv.index("-t") + 1] == "10"
        assert sorted(int(a[a.index("-n") + 1]) for a in qsubs) == [1, 2]
        apruns = [c["argv"] for c in calls if c["tool"] == "aprun"]
        assert sorted(a[a.index("-n") + 1] for a in apruns) == ["2", "4"]
        assert all(a[a.index("-N") + 1] == "2" and a[a.index("-d") + 1] == "1" for a in apruns)
    else:
        for argv in qsubs:
            assert argv[argv.index("-q") + 1] == "debug" and argv[argv.index("-A") + 1] == "testproj"
        mpiexecs = [c["argv"] for c in calls if c["tool"] == "mpiexec"]
        assert sorted(a[a.index("-n") + 1] for a in mpiexecs) == ["2", "4"]
        assert all("--depth=1" in a and "--cpu-bind=depth" in a for a in mpiexecs)


def test_cobalt_stand_in_refuses_what_cobalt_refuses(tmp_path):
    import subprocess

    env = dict(os.environ, **_stand_in(tmp_path, "cobalt"))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho $COBALT_NODEFILE\n")
    qsub = str(Path(env["FAKE_SCHED_BIN"]) / "qsub")
    ok = subprocess.run([qsub, "--mode", "script", "-n", "1", "-t", "5", str(script)], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip().isdigit()
    for bad in (["-n", "1", "-t", "5", str(script)],                        # no --mode script
                ["--mode", "script", "-n", "x", "-t", "5", str(script)],    # bad node count
                ["--mode", "script", "-n", "1", "-t", "5", "-A", "a;b", str(script)]):
        assert subprocess.run([qsub, *bad], env=env, capture_output=True).returncode != 0
