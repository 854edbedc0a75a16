"""Cobalt and PBS Pro, which cannot run here, through scripted stand-ins of their command lines.

The stand-in (tests/fake_scheduler/fake_sched.py) checks every argument the real
provider code passes (our CobaltProvider; Parsl's PBSProProvider) and really runs the
submitted batch scripts on this host, so a whole sweep goes: Hydra → Parsl provider →
qsub → batch script → Parsl worker → aprun / PALS mpiexec → MPI ranks → results DB.

The stand-ins cannot hide a wrong environment: a batch script starts from the stand-in's
login environment (its bin/ and the system paths, nothing of the test's PATH), so it must
activate the venv itself, as on the real machine; and the sites say ``mpi: system``, the
machine's MPI being the stand-in's launcher and Debian's MPICH (``apt install mpich``, which
``.ci/run`` does), with the venv's own ``mpiexec`` (the mpich wheel's) first on PATH after
activation, as it would be on Polaris. The stand-in launchers reject what the real ones do,
including binding that does not fit a node (ranks x depth > hardware threads).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from results_db import connect
from results_db.store.schema import Run

from conftest import (BIN, REPO, SYSTEM_HYDRA, SYSTEM_LIBMPICH, needs_system_mpi, overlapping_runs, run_lifetime,
                      scalestudy, system_mpi_lib)

pytestmark = pytest.mark.mpi
FAKE = REPO / "tests" / "fake_scheduler" / "fake_sched.py"
def _stand_in(tmp_path: Path, flavor: str, cores: int = 2, threads_per_core: int = 2) -> dict[str, str]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    tools = ["qsub", "qstat", "qdel"] + (["aprun"] if flavor == "cobalt" else ["mpiexec"])
    for tool in tools:
        path = bin_dir / tool
        path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} {tool} \"$@\"\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "fake-state"
    env = {"FAKE_SCHED_BIN": str(bin_dir), "FAKE_SCHED_DIR": str(state), "FAKE_SCHED_FLAVOR": flavor,
           "FAKE_SCHED_REAL_MPIEXEC": str(SYSTEM_HYDRA if SYSTEM_HYDRA.exists() else BIN / "mpiexec"),
           "FAKE_SCHED_VENV": str(BIN.parent), "FAKE_SCHED_CORES": str(cores),
           "FAKE_SCHED_THREADS_PER_CORE": str(threads_per_core),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    if SYSTEM_LIBMPICH.exists():
        env["FAKE_SCHED_SYSTEM_LIB"] = str(system_mpi_lib(tmp_path))
    return env


def _site_file(tmp_path: Path, name: str, env: dict[str, str]) -> Path:
    text = (REPO / "tests" / "sites" / name).read_text()
    text += f"libmpi: {env['FAKE_SCHED_SYSTEM_LIB']}/libmpi.so.12\n"
    path = tmp_path / name
    path.write_text(text)
    return path


def _calls(env) -> list[dict]:
    path = Path(env["FAKE_SCHED_DIR"]) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _library(path: Path, env: dict) -> str:
    """What MPI library mpi4py reports when it loads ``path``, asked independently of scalestudy."""
    code = "import mpi4py; mpi4py.rc.initialize=False; from mpi4py import MPI; print(' '.join(MPI.Get_library_version().splitlines()[0].split()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "MPI4PY_LIBMPI": str(path), "LD_LIBRARY_PATH": str(path.parent)})
    return proc.stdout.strip()


@needs_system_mpi
@pytest.mark.parametrize("flavor, site", [("cobalt", "fake_cobalt.yaml"), ("pbs", "fake_pbs.yaml")])
def test_sweep_through_scheduler_stand_in(tmp_path, flavor, site):
    """Also: the study has a model fit made on this site (a study made by the model, whose runs
    had 990 s of start-up each), so the batch jobs ask for its predicted walltime, not the
    site's 10 minutes: (990 s + 2 steps of ~70 ms) x 1.5 + 5 min, rounded up to 5 min = 30 min.
    (A fit from another site sets nothing: tests/perf_model/test_perf_predict.py.)"""
    from perf_model.model import fit_study
    from perf_synthetic import write_study

    fitted = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    write_study(fitted, study="smoke", overhead=990.0, site=Path(site).stem)
    fit_study(fitted, "smoke", replicates=0)
    fitted.dispose()
    env = _stand_in(tmp_path, flavor)
    site_file = _site_file(tmp_path, site, env)
    proc = scalestudy("sweep", f"site={site_file}", "nodes=1,2", "workers_per_node=2", "epochs=1", "steps_per_epoch=2",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        runs = [r for r in s.scalars(select(Run).order_by(Run.nodes)).all() if r.run_dir != "/nowhere"]
    assert [(r.nodes, r.status) for r in runs] == [(1, "done"), (2, "done")]
    assert all(r.job_id for r in runs) and runs[0].job_id != runs[1].job_id  # one batch job per node count
    assert "walltime 00:30:00 per batch job from the predicted run times" in proc.stderr
    # each run's own limit follows the batch job's walltime: 30 min less 5 % (not the site's 10 min)
    assert all(json.loads((Path(r.run_dir) / "spec.json").read_text())["run_timeout"] == 1710 for r in runs)
    # the ranks ran on the machine's MPI (Debian's MPICH), not the venv's mpich wheel
    system = _library(Path(env["FAKE_SCHED_SYSTEM_LIB"]) / "libmpi.so.12", env)
    wheel = _library(BIN.parent / "lib" / "libmpi.so.12", env)
    assert system != wheel
    assert all(r.versions["mpi_library"] == system for r in runs), [r.versions["mpi_library"] for r in runs]
    calls = _calls(env)
    qsubs = [c["argv"] for c in calls if c["tool"] == "qsub"]
    assert len(qsubs) == 2
    if flavor == "cobalt":
        for argv in qsubs:
            assert argv[:2] == ["--mode", "script"] and "-A" in argv and argv[argv.index("-A") + 1] == "testproj"
            assert argv[argv.index("-q") + 1] == "debug-cache-quad" and argv[argv.index("-t") + 1] == "30"
        assert sorted(int(a[a.index("-n") + 1]) for a in qsubs) == [1, 2]
        apruns = [c["argv"] for c in calls if c["tool"] == "aprun"]
        assert sorted(a[a.index("-n") + 1] for a in apruns) == ["2", "4"]
        assert all(a[a.index("-N") + 1] == "2" and a[a.index("-d") + 1] == "1" and a[a.index("-j") + 1] == "1"
                   for a in apruns)
    else:
        for argv in qsubs:
            assert argv[argv.index("-q") + 1] == "debug" and argv[argv.index("-A") + 1] == "testproj"
        scripts = [c for c in calls if c["tool"] == "qsub"]
        assert all("#PBS -l walltime=00:30:00" in Path(c["argv"][-1]).read_text() for c in scripts)
        # the launcher that ran is PALS's (the stand-in's), though the venv's mpiexec came first on PATH
        mpiexecs = [c["argv"] for c in calls if c["tool"] == "mpiexec"]
        assert sorted(a[a.index("-n") + 1] for a in mpiexecs) == ["2", "4"]
        assert all("--depth=1" in a and "--cpu-bind=depth" in a for a in mpiexecs)


@needs_system_mpi
@pytest.mark.parametrize("flavor, site", [("cobalt", "fake_cobalt.yaml"), ("pbs", "fake_pbs.yaml")])
def test_packed_sweep_through_scheduler_stand_in(tmp_path, flavor, site):
    """allocation=packed through the stand-ins: one qsub of 4 nodes; inside it Parsl's MPIExecutor
    gives each run nodes of its own, which reach aprun's -L (Theta's node IDs from
    COBALT_PARTNAME) or PALS mpiexec's -hosts (Polaris-style names from PBS_NODEFILE, checked by
    the stand-in against the job's nodes); runs that overlapped in time had disjoint node sets."""
    env = _stand_in(tmp_path, flavor)
    site_file = _site_file(tmp_path, site, env)
    site_file.write_text(site_file.read_text().replace("max_nodes: 2", "max_nodes: 4") + "max_concurrent_runs: 4\n")
    proc = scalestudy("sweep", f"site={site_file}", "allocation=packed", "nodes=1,2,4", "workers_per_node=1", "batch_size=16,32",
                      "epochs=1", "steps_per_epoch=4", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, env=env,
                      timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    calls = _calls(env)
    qsubs = [c["argv"] for c in calls if c["tool"] == "qsub"]
    assert len(qsubs) == 1   # allocation_nodes unset: the sweep's largest run
    if flavor == "cobalt":
        assert qsubs[0][qsubs[0].index("-n") + 1] == "4"
    else:
        script = Path(qsubs[0][-1]).read_text()
        assert "#PBS -l select=4:" in script
    launcher, flag = ("aprun", "-L") if flavor == "cobalt" else ("mpiexec", "-hosts")
    launches = [c for c in calls if c["tool"] == launcher]
    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    with Session(engine) as s:
        rows = s.scalars(select(Run)).all()
    assert sorted(r.nodes for r in rows) == [1, 1, 2, 2, 4, 4] and {r.status for r in rows} == {"done"}
    runs = {}
    for run in rows:
        assert run.job_id == launches[0]["job"]   # every run in the one batch job
        argv = next(c["argv"] for c in launches if str(Path(run.run_dir) / "spec.json") in c["argv"])
        nodes = set(argv[argv.index(flag) + 1].split(","))
        assert len(nodes) == run.nodes
        runs[str(run.id)] = (run_lifetime(Path(run.run_dir)), nodes)
    assert overlapping_runs(runs), f"no two runs ran at once: {runs}"


@needs_system_mpi
def test_batch_script_gets_no_path_from_the_submitter(tmp_path):
    """A batch script sees the stand-in machine's PATH, not the test's: a site that forgot to
    activate the environment would fail in the batch job, as it would on the machine."""
    env = _stand_in(tmp_path, "pbs")
    out = subprocess.run([str(Path(env["FAKE_SCHED_BIN"]) / "qsub"), "-q", "debug", str(_probe_script(tmp_path))],
                         env={**os.environ, **env}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip()
    _wait_for(Path(env["FAKE_SCHED_DIR"]), job)
    seen = dict(line.split("=", 1) for line in (tmp_path / "probe.out").read_text().splitlines())
    assert str(BIN) not in seen["PATH"] and seen["PATH"].startswith(env["FAKE_SCHED_BIN"] + ":")
    assert seen["mpiexec"] == str(Path(env["FAKE_SCHED_BIN"]) / "mpiexec")


def _probe_script(tmp_path: Path) -> Path:
    script = tmp_path / "probe.sh"
    out = tmp_path / "probe.out"
    script.write_text(f"#!/bin/bash\n#PBS -l select=1:ncpus=2\n#PBS -l walltime=00:01:00\n#PBS -o {out}.o\n"
                      f"#PBS -e {out}.e\necho PATH=$PATH > {out}\necho mpiexec=$(command -v mpiexec) >> {out}\n")
    return script


def _wait_for(state: Path, job: str, timeout: float = 300) -> None:   # generous: only a job that never ends reaches it
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = json.loads((state / f"{job}.job").read_text())
        try:
            os.kill(info["pid"], 0)
            with open(f"/proc/{info['pid']}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not end")


def test_cobalt_stand_in_refuses_what_cobalt_refuses(tmp_path):
    env = dict(os.environ, **_stand_in(tmp_path, "cobalt"))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho $COBALT_PARTNAME\n")
    qsub = str(Path(env["FAKE_SCHED_BIN"]) / "qsub")
    args = ["--mode", "script", "-n", "1", "-t", "5", str(script)]
    not_executable = subprocess.run([qsub, *args], env=env, capture_output=True, text=True)
    assert not_executable.returncode != 0 and "execute bit" in not_executable.stderr
    script.chmod(0o700)
    ok = subprocess.run([qsub, *args], env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip().isdigit()
    for bad in (["-n", "1", "-t", "5", str(script)],                        # no --mode script
                ["--mode", "script", "-n", "x", "-t", "5", str(script)],    # bad node count
                ["--mode", "script", "-n", "1", "-t", "5", "-A", "a;b", str(script)]):
        assert subprocess.run([qsub, *bad], env=env, capture_output=True).returncode != 0


@pytest.mark.parametrize("argv, reason", [
    (["-n", "4", "-N", "2", "-L", "0,1", "-d", "2", "-cc", "depth", "-j", "1"], "CPUs"),
    (["-n", "2", "-N", "2", "-L", "0", "-d", "1", "-cc", "depth", "-j", "4"], "hardware thread"),
    (["-n", "2", "-N", "2", "-L", "0", "-d", "1"], "-cc depth"),
    (["-n", "2", "-N", "2", "-L", "0", "--depth=1"], "unknown option"),
    (["-n", "2", "-N", "2", "-node-list", "nid00000"], "unknown option"),   # Parsl's spelling: aprun takes -L
    (["-n", "3", "-N", "2", "-L", "0", "-d", "1", "-cc", "depth"], "does not match"),
])
def test_aprun_stand_in_checks_binding(tmp_path, argv, reason):
    """2 cores x 2 hardware threads a node: 2 ranks x -d 2 needs -j 2; -j 4 is more than a core has."""
    env = dict(os.environ, **_stand_in(tmp_path, "cobalt"))
    aprun = str(Path(env["FAKE_SCHED_BIN"]) / "aprun")
    out = subprocess.run([aprun, *argv, "true"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and reason in out.stderr, out.stderr
    fits = ["-n", "4", "-N", "2", "-L", "0,1", "-d", "2", "-cc", "depth", "-j", "2"]
    assert subprocess.run([aprun, *fits, "true"], env=env, capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("argv, reason", [
    (["-n", "3", "-ppn", "3", "--depth=2", "--cpu-bind=depth"], "hardware threads"),
    (["-n", "2", "-ppn", "2", "--depth=2"], "--cpu-bind=depth"),
    (["-n", "2", "-ppn", "2", "-d", "2"], "unrecognized argument"),
    (["-n", "2", "-ppn", "2", "--bind-to", "core"], "unrecognized argument"),   # MPICH hydra's flag, not PALS's
])
def test_pals_stand_in_checks_binding(tmp_path, argv, reason):
    """4 hardware threads a node: 3 ranks x depth 2 do not fit; hydra's flags are not PALS's."""
    env = dict(os.environ, **_stand_in(tmp_path, "pbs"))
    mpiexec = str(Path(env["FAKE_SCHED_BIN"]) / "mpiexec")
    out = subprocess.run([mpiexec, *argv, "true"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and reason in out.stderr, out.stderr
    fits = ["-n", "2", "-ppn", "2", "--depth=2", "--cpu-bind=depth"]
    assert subprocess.run([mpiexec, *fits, "true"], env=env, capture_output=True, text=True).returncode == 0


def test_wheel_mpiexec_rejects_pals_flags():
    """The bug the stand-ins exist to catch: the mpich wheel's mpiexec (hydra) does not know
    PALS's --depth, so a Polaris job that picks it from the venv's bin fails."""
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "1", "--depth=2", "--cpu-bind=depth", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
