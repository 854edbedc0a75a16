"""No one else's code runs in a user's sweep: the interchange a sweep starts (the real
executors ``build_parsl_config`` makes for a site) accepts only worker pools holding the
sweep's CurveZMQ keys, and the results database is created readable by its owner only.

The intruder is a plain ZeroMQ client that sends the interchange exactly what a worker
pool sends to register. Against an unencrypted interchange (Parsl's ``MPIExecutor``
default) it is registered as a manager — it would then be sent tasks, and what it sends
is unpickled by the interchange: the control case, which shows the check can fail."""

from __future__ import annotations

import os
import pickle
import platform
import stat
import time

import parsl
import pytest
import zmq

from orchestrator.pools.parsl_config import build_parsl_config
from orchestrator.site.queues import plan_batch_jobs
from orchestrator.site.config import load_site
from results_db import connect


def _intruder_registers(executor) -> bool:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, b"intruder-1")
    sock.connect(f"tcp://127.0.0.1:{executor.worker_port}")
    sock.send(pickle.dumps({"type": "registration", "python_v": platform.python_version(),
                            "parsl_v": parsl.__version__, "start_time": time.time(), "block_id": "intruder",
                            "worker_count": 1, "max_capacity": 1, "uid": "intruder-1"}))
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if any(m.get("block_id") == "intruder" for m in executor.connected_managers()):
                return True
            time.sleep(0.2)
        return False
    finally:
        sock.close()
        ctx.term()


@pytest.mark.parametrize("encrypted", [True, False], ids=["as-configured", "control-unencrypted"])
def test_only_worker_pools_with_the_sweeps_keys_can_register(tmp_path, encrypted):
    site = load_site("local_slurm")
    config = build_parsl_config(site, tmp_path, plan_batch_jobs(site, [1]))   # no block is submitted
    [executor] = config.executors
    assert executor.encrypted, "the site's executor must be encrypted"
    executor.encrypted = encrypted   # the control case: what Parsl's MPIExecutor does by default
    dfk = parsl.load(config)
    try:
        if encrypted:
            mode = stat.S_IMODE(os.stat(executor.cert_dir).st_mode)
            assert mode == 0o700 and str(executor.cert_dir).startswith(str(tmp_path))
            assert os.path.isfile(os.path.join(executor.cert_dir, "client.key_secret"))
        assert _intruder_registers(executor) is (not encrypted)
    finally:
        dfk.cleanup()


def test_a_new_sqlite_database_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "results.db"
    engine = connect(f"sqlite:///{path}")
    engine.dispose()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


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
