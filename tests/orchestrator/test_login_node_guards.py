"""What the login node checks and keeps to itself before anything runs: an MPI mpi4py can load,
values that match as a whole, and a database URL that never reaches a rank or a batch job."""

from __future__ import annotations

import subprocess

import pytest

from orchestrator.errors import ConfigError
from orchestrator.site.checks import check_command, check_flags, check_name, check_walltime
from orchestrator.sweep.runspec import build_run_spec

from conftest import scalestudy


@pytest.mark.parametrize("check, value", [(check_name, "debug\n"), (check_walltime, "01:00:00\n")])
def test_a_trailing_newline_does_not_slip_through(check, value):
    """``$`` in a Python pattern matches before a final newline: the patterns end with ``\\Z``."""
    with pytest.raises(ConfigError):
        check("site.x", value)


@pytest.mark.parametrize("check, value", [(check_flags, "--mpi=pmi2\n"), (check_command, "module load x\n")])
def test_flags_and_commands_reach_a_script_as_single_lines(check, value):
    """Flags and commands are checked word by word and rejoined with single spaces: what reaches
    a batch script holds no newline, whatever was given."""
    assert "\n" not in check("site.x", value)
    with pytest.raises(ConfigError):
        check("site.x", value.replace("\n", "\n; rm -rf ~\n"))


def test_parameter_and_factory_names_match_as_a_whole():
    with pytest.raises(ConfigError, match="params"):
        build_run_spec({"study_name": "s", "params": {"hidden\n": 1}})
    with pytest.raises(ConfigError, match="model"):
        build_run_spec({"study_name": "s", "model": "pkg.mod:make\n"})


def test_a_missing_mpi_stops_the_sweep_before_anything_runs(tmp_path):
    """mpi4py that cannot load an MPI (here: MPI4PY_LIBMPI names no library, as a new user's
    environment without the mpich wheel looks to it) fails the sweep at the start, in one line
    that says what to install; no database, no run folder."""
    proc = scalestudy("sweep", "study_name=nompi", "nodes=1", "workers_per_node=1", "epochs=1", cwd=tmp_path,
                      env={"MPI4PY_LIBMPI": str(tmp_path / "nowhere" / "libmpi.so.12")}, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "mpi4py cannot load an MPI library" in lines[0] and "pip install mpich" in lines[0]
    assert not (tmp_path / "scalestudy.db").exists() and not (tmp_path / "multirun").exists()


def test_the_check_is_free_where_the_wheel_is_there(monkeypatch):
    """With the mpich wheel's library in the environment nothing is started; without it, the probe
    decides (and a broken MPI is one ConfigError)."""
    from orchestrator.mpi import env as mpi_env
    from orchestrator.site.config import load_site

    started = []
    real_run = subprocess.run
    monkeypatch.setattr(mpi_env.subprocess, "run", lambda *a, **k: started.append(a) or real_run(*a, **k))
    monkeypatch.delenv("MPI4PY_LIBMPI", raising=False)
    mpi_env.check_wheel_mpi(load_site("local"))
    assert started == []
    monkeypatch.setattr(mpi_env, "wheel_libmpi", lambda prefix=None: None)   # as without the wheel
    monkeypatch.setenv("MPI4PY_LIBMPI", "/nonexistent/libmpi.so.12")
    with pytest.raises(ConfigError, match="site.mpi='wheel'"):
        mpi_env.check_wheel_mpi(load_site("local"))
    assert len(started) == 1


SITES = ["local", pytest.param("local_slurm", marks=[pytest.mark.slow, pytest.mark.slurm])]


@pytest.mark.mpi
@pytest.mark.parametrize("site", SITES)
def test_the_database_url_never_reaches_a_rank_or_a_batch_job(tmp_path, site):
    """The URL (which may hold a password) is given in the environment, as a team's PostgreSQL
    URL would be; every rank reports whether it sees it, and none may. On local_slurm the ranks
    run in a batch job that sbatch started with the submitting environment."""
    db = tmp_path / "secret.db"
    # the probe spells the name in two halves: its own text (in spec.json) must not match
    probe = ("import os; print('URL_SEEN' if any('secret' + '.db' in v for v in os.environ.values()) else "
             "'URL_ABSENT', flush=True)")
    proc = scalestudy("sweep", f"site={site}", "study_name=secrets", "nodes=1", "workers_per_node=2",
                      "workload.kind=command", f"workload.command=[python,-c,\"{probe}\"]",
                      f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path,
                      env={"SCALESTUDY_DB_URL": f"sqlite:///{db}"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert db.exists()   # the driver itself used it
    outputs = [p.read_text() for p in (tmp_path / "mr").rglob("output/rank-*.log")]
    assert len(outputs) == 2 and all("URL_ABSENT" in text for text in outputs), outputs
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "mr").rglob("*") if p.is_file()
                   and p.suffix in (".log", ".stdout", ".stderr", ".json", ".txt"))
    assert "secret.db" not in logs.replace(str(tmp_path / "mr"), "")
