"""``mpi: system``: the machine's MPI, and ``scalestudy sites --check`` telling which MPI a site gets.

The "machine's MPI" here is Debian's MPICH (``apt install mpich``; ``.ci/run`` installs it),
exposed as ``libmpi.so.12`` on ``LD_LIBRARY_PATH`` the way Cray's ``cray-mpich-abi`` module
exposes Cray MPICH. The mechanism under test is the one the real site files use: mpi4py's
binary wheel (>= 4.1) in an environment *without* the ``mpich`` wheel loads whatever
MPICH-ABI ``libmpi.so.12`` the dynamic linker finds. It is checked two ways: a fresh venv
holding only mpi4py runs a 2-rank allreduce under the system's ``mpiexec`` on the system
library (compared with the sum computed here), and ``sites --check`` reports that library.
With the ``mpich`` wheel present (this project's venv) mpi4py loads the wheel's library
instead, and ``sites --check`` says so and fails: the bug it exists to catch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN, SYSTEM_HYDRA, SYSTEM_LIBMPICH, needs_system_mpi, scalestudy, system_mpi_lib, write_spec

pytestmark = [pytest.mark.mpi, needs_system_mpi]

ALLREDUCE = """
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
x = np.arange(5, dtype=np.float64) * (c.rank + 1)
y = np.empty_like(x)
c.Allreduce(x, y)
if c.rank == 0:
    import json
    print(json.dumps({"sum": y.tolist(), "size": c.size,
                      "library": " ".join(MPI.Get_library_version().splitlines()[0].split())}))
"""


@pytest.fixture(scope="module")
def system_lib(tmp_path_factory) -> Path:
    return system_mpi_lib(tmp_path_factory.mktemp("system"))


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """An environment as a real site has it: mpi4py's wheel and numpy, no mpich wheel."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "mpi4py==4.1.2", "numpy"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"could not install mpi4py from PyPI: {proc.stderr.strip().splitlines()[-1:]}")
    assert not (venv / "lib" / "libmpi.so.12").exists()
    return venv


def _site(tmp_path: Path, worker_init: list[str], extra: str = "") -> Path:
    path = tmp_path / "sysmpi.yaml"
    lines = "".join(f"  - {w}\n" for w in worker_init)
    path.write_text("description: a machine whose MPI is Debian's MPICH\nprovider: pbspro\nmpi_launcher: mpiexec\n"
                    "cores_per_node: 2\nmax_nodes: 2\nmpi: system\n" + extra + "worker_init:\n" + lines)
    return path


def test_mpi4py_wheel_runs_on_the_system_library(bare_venv, system_lib, tmp_path):
    env = {"PATH": f"{bare_venv / 'bin'}:/usr/bin:/bin", "LD_LIBRARY_PATH": str(system_lib), "HOME": str(tmp_path)}
    proc = subprocess.run([str(SYSTEM_HYDRA), "-n", "2", str(bare_venv / "bin" / "python"), "-c", ALLREDUCE],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["size"] == 2 and out["sum"] == [3.0 * i for i in range(5)]   # (1 + 2) x [0..4]
    assert out["library"].startswith("MPICH Version: 4.0"), out                # Debian's, not the wheel's 5.x


def test_check_passes_on_a_venv_without_the_mpich_wheel(bare_venv, system_lib, tmp_path):
    """Batch jobs run the environment the sweep is launched from (its bin/ first on PATH after the
    site's set-up); the check of a sweep launched from the bare venv, asked for that environment."""
    from orchestrator.mpi.env import findings, probe_site, render_check
    from orchestrator.site.config import load_site

    site = load_site(str(_site(tmp_path, [f"export LD_LIBRARY_PATH={system_lib}"])))
    probe = probe_site(site, env_bin=str(bare_venv / "bin"))
    found = findings(site, probe)
    text = render_check(site, probe, found)
    assert not any(f.level == "error" for f in found), text
    assert f"libmpi:      {SYSTEM_LIBMPICH.resolve()}" in text
    assert "MPI library: MPICH Version: 4.0" in text
    assert f"runs start with {Path('/usr/bin/mpiexec')}" in text and "ERROR" not in text


def test_check_fails_where_the_mpich_wheel_would_shadow_the_machine(system_lib, tmp_path):
    site = _site(tmp_path, [f"export LD_LIBRARY_PATH={system_lib}"])
    proc = scalestudy("sites", "--check", str(site), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"ERROR mpi4py loads {(BIN.parent / 'lib' / 'libmpi.so.12').resolve()}" in proc.stdout
    assert "pip uninstall mpich" in proc.stdout
    assert f"WARN  {BIN / 'mpiexec'} comes first on PATH" in proc.stdout
    # pinning the machine's library is the way out when the wheel must stay
    pinned = _site(tmp_path, [f"export LD_LIBRARY_PATH={system_lib}"],
                   extra=f"libmpi: {system_lib}/libmpi.so.12\n")
    proc = scalestudy("sites", "--check", str(pinned), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "MPI library: MPICH Version: 4.0" in proc.stdout, proc.stdout


def test_check_reports_a_setup_that_fails(tmp_path):
    site = _site(tmp_path, ["export PATH=/nonexistent"])
    proc = scalestudy("sites", "--check", str(site), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and "ERROR" in proc.stdout


def test_sweep_refuses_system_site_with_the_wheel_before_submitting(tmp_path):
    site = _site(tmp_path, ["echo ready"])
    proc = scalestudy("sweep", f"site={site}", "nodes=1", "epochs=1", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "site.mpi='system'" in lines[0] and "pip uninstall mpich" in lines[0]
    assert not (tmp_path / "scalestudy.db").exists()


def test_local_check_reports_this_environment(tmp_path):
    proc = scalestudy("sites", "--check", "local", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert f"runs start with {BIN / 'mpiexec'}" in proc.stdout
    assert str((BIN.parent / "lib" / "libmpi.so.12").resolve()) in proc.stdout


def test_system_site_runs_take_the_launcher_from_outside_the_venv(tmp_path, monkeypatch):
    """What a batch job's run does on an mpi: system site: the venv's mpiexec first on PATH is
    skipped; with no launcher outside it the run fails as a setup error naming the fix."""
    from orchestrator.errors import ConfigError
    from orchestrator.mpi.env import resolve_launcher
    from workloads.spec import RunSpec

    env = {"PATH": f"{BIN}:/usr/bin:/bin"}
    assert resolve_launcher("mpiexec", env) == "/usr/bin/mpiexec"
    with pytest.raises(FileNotFoundError, match="load the module that provides it"):
        resolve_launcher("mpiexec", {"PATH": str(BIN)})
    # mpi_run turns that into a setup failure (never retried), naming the site's mpi key
    import orchestrator.mpi.run as mpi_run
    from orchestrator.sweep.retry_policy import SETUP_FAILURE, classify

    spec = RunSpec.load(write_spec(tmp_path / "run"))
    monkeypatch.setenv("SCALESTUDY_SITE_MPI", "system")
    monkeypatch.setenv("PATH", str(BIN))           # only the venv's mpiexec: the machine has none
    monkeypatch.delenv("PARSL_MPI_PREFIX", raising=False)
    with pytest.raises(ConfigError, match="site.mpi='system'.*load the module") as err:
        mpi_run.execute_run(spec, tmp_path / "run")
    assert classify(err.value, tmp_path / "run") == SETUP_FAILURE
