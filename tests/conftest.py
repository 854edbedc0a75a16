"""Shared helpers: real MPI jobs and the real ``scalestudy`` command in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# a researcher's own events folder (results_db.store.event_files) must not decide where the tests'
# databases keep their timelines, nor receive their files; the tests that want it set it
os.environ.pop("SCALESTUDY_EVENTS_DIR", None)

# Debian's MPICH (apt-get install mpich; .ci/run does): the "machine's MPI" of the mpi: system
# tests, exposed as libmpi.so.12 the way Cray's cray-mpich-abi module exposes Cray MPICH
SYSTEM_HYDRA = Path("/usr/bin/mpiexec.hydra")
SYSTEM_LIBMPICH = Path("/usr/lib/x86_64-linux-gnu/libmpich.so.12")
needs_system_mpi = pytest.mark.skipif(
    not (SYSTEM_HYDRA.exists() and SYSTEM_LIBMPICH.exists()),
    reason="Debian's mpich (the stand-in for a machine's MPI) is not installed: apt-get install mpich (.ci/run does)")


def system_mpi_lib(folder: Path) -> Path:
    """A folder holding libmpi.so.12 -> Debian's MPICH: the stand-in machine's MPI library."""
    lib = folder / "system-mpi" / "lib"
    lib.mkdir(parents=True)
    (lib / "libmpi.so.12").symlink_to(SYSTEM_LIBMPICH)
    return lib


def env_with_bin(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("SCALESTUDY_DB_URL", None)
    env.update(extra or {})
    return env


def sigint_default() -> None:
    """``preexec_fn`` for a driver a test will Ctrl-C: SIGINT back to its default action. A
    test runner started in the background by a non-interactive shell (``.ci/run &``)
    ignores SIGINT, its children inherit that, and the driver (rightly) keeps ignoring it;
    a terminal's Ctrl-C, which these tests stand for, meets a process that does not."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def write_spec(run_dir: Path, **fields) -> Path:
    spec = {"study": "test", "site": "local", "nodes": 1, "workers_per_node": 1, "threads_per_node": 1,
            "batch_size": 16, "epochs": 1, **fields}
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def mpiexec(n: int, *args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "mpiexec"), "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env_with_bin(), cwd=cwd, timeout=timeout)


def scalestudy(*args: str, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "orchestrator.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env_with_bin(env), cwd=cwd, timeout=timeout)


def run_lifetime(run_dir: Path) -> tuple[float, float]:
    """When a run's MPI job started (its command.txt is written then) and when its ranks last
    wrote (metrics, result): read from the run folder, not from the driver's polls."""
    files = [p for p in [run_dir / "result.json", *(run_dir / "metrics").glob("*")] if p.is_file()]
    return (run_dir / "command.txt").stat().st_mtime, max(p.stat().st_mtime for p in files)


def overlapping_runs(runs: dict[str, tuple[tuple[float, float], set[str]]]) -> list[tuple[str, str]]:
    """Pairs of runs (name -> (lifetime, node set)) whose lifetimes overlap; asserts that every
    such pair ran on disjoint nodes."""
    pairs = []
    names = sorted(runs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (a0, a1), nodes_a = runs[a]
            (b0, b1), nodes_b = runs[b]
            if a0 < b1 and b0 < a1:
                assert not nodes_a & nodes_b, f"runs {a} and {b} overlapped in time on nodes {nodes_a & nodes_b}"
                pairs.append((a, b))
    return pairs


SLURM_SCRIPT = REPO / "scripts" / "local-slurm-cluster.sh"
# One test at a time uses the local Slurm cluster, whatever process it runs in: the suite's
# workers (scripts/test.sh runs it under pytest-xdist, a module to a worker) and the floor suites
# that CI runs beside it all take this lock. A test's assertions about its own jobs (which nodes,
# how many, cancelled or not) and the test that sets a node DOWN must not meet another test's jobs.
SLURM_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "scalestudy-tests-slurm.lock"


@pytest.fixture(scope="session")
def _slurm_started() -> None:
    if subprocess.run(["bash", str(SLURM_SCRIPT), "status"], capture_output=True).returncode == 0:
        return
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root to run munged and the Slurm daemons")
    proc = subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        import shutil

        if shutil.which("slurmctld") is None:
            pytest.skip(f"Slurm could not be installed here: {proc.stderr.strip()[-300:]}")
        pytest.fail(f"Slurm is installed but the cluster did not start: {proc.stderr[-2000:]}")


@pytest.fixture
def slurm_cluster(_slurm_started):
    """The local 4-node Slurm cluster (started when it is not running, or the test skips),
    held by this test alone while it runs."""
    import fcntl

    with open(SLURM_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        yield


@pytest.hookimpl(tryfirst=True)   # before ``-m`` selects by marker
def pytest_collection_modifyitems(config, items):
    """A test that asks for ``slurm_cluster`` is marked ``slurm``, and every ``slurm`` test
    ``serial``: ``-m serial`` selects the tests that hold a shared service alone, which
    scripts/test.sh runs one after another in a lane of their own."""
    for item in items:
        if "slurm_cluster" in item.fixturenames and item.get_closest_marker("slurm") is None:
            item.add_marker(pytest.mark.slurm)
        if item.get_closest_marker("slurm") is not None and item.get_closest_marker("serial") is None:
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _services_of_marked_tests(request):
    """``@pytest.mark.slurm`` (on a test or on one of its parameters) brings ``slurm_cluster``."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")
    yield


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """One real 2-rank run of the workload, shared by the tests that read its files."""
    run_dir = tmp_path_factory.mktemp("run")
    spec = write_spec(run_dir, workers_per_node=2, threads_per_node=2, epochs=2, steps_per_epoch=5)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr
    return run_dir


def _postgres_url() -> str | None:
    url = os.environ.get("SCALESTUDY_TEST_PG_URL")
    if url:
        return url
    if os.geteuid() != 0:
        return None
    proc = subprocess.run(["bash", str(REPO / "scripts" / "local-postgres.sh"), "start"], capture_output=True,
                          text=True, timeout=180)
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None


def _worker_database(url: str, worker: str) -> str:
    """The test database of one pytest process (``<database>_<worker>``, created when missing):
    tests empty their database as they start (``_fresh_postgres``), so two processes that run at
    once (pytest-xdist's workers, the lanes of scripts/test.sh) must never share one. Needs
    CREATEDB, which scripts/local-postgres.sh gives its role."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = make_url(url)
    name = f"{base.database}_{worker}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")   # CREATE DATABASE runs outside a transaction
    try:
        with engine.connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first() is None:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    url = _postgres_url()
    if not url:
        pytest.skip("no PostgreSQL server: set SCALESTUDY_TEST_PG_URL or run scripts/local-postgres.sh start as root")
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError

    try:
        make_url(url)
    except ArgumentError:
        # one clear failure instead of two dozen set-up errors (the URL is a test-only one, masked all the same)
        pytest.fail(f"SCALESTUDY_TEST_PG_URL is not a single SQLAlchemy URL: {url.splitlines()[0][:60]!r}…", pytrace=False)
    # scripts/test.sh names its lanes; pytest-xdist its workers
    worker = "_".join(filter(None, (os.environ.get("SCALESTUDY_TEST_LANE"), os.environ.get("PYTEST_XDIST_WORKER"))))
    if worker:
        try:
            return _worker_database(url, worker)
        except DBAPIError as exc:
            pytest.fail(f"a test database for worker {worker} could not be created (the role needs CREATEDB, as "
                        f"scripts/local-postgres.sh gives it): {str(exc.orig).strip()[:200]}", pytrace=False)
    return url


def _fresh_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """An empty results database: a SQLite file, and a real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    url = request.getfixturevalue("postgres_url")
    _fresh_postgres(url)
    return url
