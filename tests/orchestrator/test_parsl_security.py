"""No one else's code runs in a user's sweep: the interchange a sweep starts (the real
executors ``build_parsl_config`` makes for a site) accepts only worker pools holding the
sweep's CurveZMQ keys, and the results database is created readable by its owner only.

The intruder is Parsl's own worker pool, started with the very command Parsl gives the
sweep's blocks (the executor's ``launch_cmd``) but holding another pair of keys. Against an
unencrypted interchange (Parsl's ``MPIExecutor`` default) it registers as a manager — it
would then be sent tasks, and what it sends is unpickled by the interchange: the control
case, which shows the check can fail. Before it a pool with the sweep's own keys registers;
after it another one (the witness) is started, and the intruder is given as long as the witness
took to register, and as long again: a margin measured in the test, so that a busy machine
cannot pass the check. Only Parsl's public parts, so that the test runs unchanged on every Parsl
release CI tests."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import parsl
import pytest
from parsl import curvezmq

from orchestrator.pools.parsl_config import build_parsl_config
from orchestrator.site.queues import plan_batch_jobs
from orchestrator.site.config import load_site
from results_db import connect


def _start_pool(executor, tmp_path: Path, name: str, keys: str) -> subprocess.Popen:
    """Parsl's worker pool, started with the block's launch command as block ``name``, holding
    ``keys`` ("own": the sweep's; "other": another pair made the same way)."""
    cmd = executor.launch_cmd.replace("{block_id}", name)
    if keys == "other" and executor.cert_dir:
        cmd = cmd.replace(str(executor.cert_dir), curvezmq.create_certificates(tmp_path / name))
    nodefile = tmp_path / "nodes"
    nodefile.write_text(f"{socket.gethostname()}\n")
    env = {**os.environ, "PBS_NODEFILE": str(nodefile),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("SLURM_NODELIST", None)
    with open(tmp_path / f"{name}.out", "w") as out:
        return subprocess.Popen(["bash", "-c", f"exec {cmd}"], env=env, cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _registered(executor, name: str) -> bool:
    return any(str(m.get("block_id")) == name for m in executor.connected_managers())


def _wait(predicate, timeout: float) -> float | None:
    """Seconds until ``predicate()`` held, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


@pytest.mark.parametrize("encrypted", [True, False], ids=["as-configured", "control-unencrypted"])
@pytest.mark.sweep
def test_only_worker_pools_with_the_sweeps_keys_can_register(tmp_path, encrypted):
    site = load_site("local_slurm")
    config = build_parsl_config(site, tmp_path, plan_batch_jobs(site, [1]))   # no block is submitted
    [executor] = config.executors
    assert executor.encrypted, "the site's executor must be encrypted"
    executor.encrypted = encrypted   # the control case: what Parsl's MPIExecutor does by default
    # how long a pool tries the interchange's addresses (the executor's documented
    # address_probe_timeout): a generous ceiling for a loaded machine. (Before Parsl 2025.7.7, the
    # floor since, a pool that missed the "connected" event waited all of it: orchestrator.sweep.versions)
    executor.address_probe_timeout = 120
    dfk = parsl.load(config)
    pools = []
    try:
        if encrypted:
            mode = stat.S_IMODE(os.stat(executor.cert_dir).st_mode)
            assert mode == 0o700 and str(executor.cert_dir).startswith(str(tmp_path))
            assert os.path.isfile(os.path.join(executor.cert_dir, "client.key_secret"))
        pools.append(_start_pool(executor, tmp_path, "honest", "own"))
        took = _wait(lambda: _registered(executor, "honest") or pools[0].poll() is not None, 120)
        assert took is not None and pools[0].poll() is None, \
            f"a pool with the sweep's own keys never registered: {(tmp_path / 'honest.out').read_text()[-2000:]}"
        # then the intruder, one pool at a time: each registration is an event of its own
        pools.append(_start_pool(executor, tmp_path, "intruder", "other"))
        if not encrypted:
            # the control case: it must register, so it gets the honest pool's ceiling, not a
            # margin derived from how fast the honest one was (a busy machine is slower)
            took = _wait(lambda: _registered(executor, "intruder"), 120)
            assert took is not None, \
                f"the control intruder never registered: {(tmp_path / 'intruder.out').read_text()[-2000:]}"
            return
        # it must not register: a witness with the sweep's own keys, started right after it,
        # registering shows how long a pool needs on this machine now; the intruder, started
        # first, is then given as long again
        pools.append(_start_pool(executor, tmp_path, "witness", "own"))
        took = _wait(lambda: _registered(executor, "witness") or pools[-1].poll() is not None
                     or _registered(executor, "intruder"), 120)
        assert took is not None and pools[-1].poll() is None, \
            f"the witness pool never registered: {(tmp_path / 'witness.out').read_text()[-2000:]}"
        assert _wait(lambda: _registered(executor, "intruder"), took) is None, \
            "a pool holding another pair of keys registered with the sweep's interchange"
    finally:
        for pool in pools:
            try:
                os.killpg(pool.pid, signal.SIGKILL)   # the pool and the processes it started
            except ProcessLookupError:                # it had exited already
                pass
            pool.wait(10)
        dfk.cleanup()
        parsl.clear()


def test_a_new_sqlite_database_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "results.db"
    engine = connect(f"sqlite:///{path}")
    engine.dispose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.sweep
def test_run_folders_are_private_and_hold_no_password(tmp_path, postgres_url):
    """A sweep's files are the user's alone (umask 077), and the database password given on
    the command line reaches no run folder, spec, config or log."""
    from sqlalchemy.engine import make_url

    from conftest import _fresh_postgres, scalestudy

    _fresh_postgres(postgres_url)   # other tests leave rows (and sequences) behind
    password = make_url(postgres_url).password
    assert password
    proc = scalestudy("sweep", f"db_url={postgres_url}", "study_name=private", "nodes=1", "workers_per_node=1",
                      "epochs=1", "steps_per_epoch=1", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert password not in proc.stdout + proc.stderr
    paths = list((tmp_path / "mr").rglob("*"))
    assert any(p.name == "spec.json" for p in paths)
    for p in [tmp_path / "mr", *paths]:
        mode = stat.S_IMODE(os.lstat(p).st_mode)
        assert mode & 0o077 == 0, f"{p} is mode {oct(mode)}"
        if p.is_file():
            assert password.encode() not in p.read_bytes(), p
