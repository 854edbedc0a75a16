"""The first batch job goes to the scheduler while the interchange starts (orchestrator/pools/early_block.py),
and the worker pool forks its processes from a fork server (orchestrator/pools/worker_pool.py).

Real Parsl: a DataFlowKernel, the interchange, and a block of ``orchestrator.pools.worker_pool``
started by Parsl's ``LocalProvider`` on this host (a scheduler's batch job without the
scheduler), in MPI mode on a node file of one node."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import parsl
import pytest
from parsl.app.python import PythonApp
from parsl.config import Config
from parsl.jobs.states import JobState
from parsl.launchers import SimpleLauncher
from parsl.providers import LocalProvider

from orchestrator.pools import early_block
from orchestrator.pools.early_block import EarlyBlockMPIExecutor, InterchangeStartError
from orchestrator.pools.parsl_config import interchange_launcher, worker_pool_launch_cmd


# sent by value (the worker cannot import this test module), with globals of its own
_NAMESPACE: dict = {}
exec("def _where_it_ran(parsl_resource_specification=None):\n"
     "    import os\n"
     "    return {'pid': os.getpid(), 'prefix': os.environ.get('PARSL_MPI_PREFIX', '')}\n", _NAMESPACE)
_where_it_ran = _NAMESPACE["_where_it_ran"]
_where_it_ran.__module__ = "__main__"


def _executor(tmp_path, early: bool) -> EarlyBlockMPIExecutor:
    nodefile = tmp_path / "nodes"
    nodefile.write_text(f"{socket.gethostname()}\n")
    provider = LocalProvider(launcher=SimpleLauncher(), init_blocks=0, min_blocks=0, max_blocks=1,
                             worker_init=f"export PBS_NODEFILE={nodefile}")
    return EarlyBlockMPIExecutor(label="early", provider=provider, early_block=early, address="127.0.0.1",
                                 mpi_launcher="mpiexec", max_workers_per_block=1, encrypted=True,
                                 launch_cmd=worker_pool_launch_cmd(), heartbeat_period=2, heartbeat_threshold=10,
                                 interchange_launch_cmd=interchange_launcher(tmp_path))


@pytest.fixture
def dfk_of(tmp_path):
    loaded = []

    def load(executor):
        dfk = parsl.load(Config(executors=[executor], run_dir=str(tmp_path / "runinfo"), strategy_period=1))
        loaded.append(dfk)
        return dfk

    yield load
    for dfk in loaded:
        dfk.cleanup()
        parsl.clear()


def _log_order(tmp_path, *lines: str) -> list[int]:
    log = (tmp_path / "runinfo" / "000" / "parsl.log").read_text()
    return [log.index(line) for line in lines]


def test_the_block_is_submitted_before_the_interchange_starts_and_binds_the_chosen_port(tmp_path, dfk_of):
    executor = _executor(tmp_path, early=True)
    dfk = dfk_of(executor)
    assert len(executor.blocks_to_job_id) == 1          # submitted during Parsl's start
    launched, popened, answered = _log_order(tmp_path, "Launched block 0", "Popened interchange process",
                                             "Interchange process started")
    assert launched < popened < answered                 # the batch job first, then the interchange
    interchange_log = (tmp_path / "runinfo" / "000" / "early" / "interchange.log").read_text()
    assert f"Bound to port {executor.worker_port} for incoming worker connections" in interchange_log
    app = PythonApp(_where_it_ran, data_flow_kernel=dfk, executors=["early"])
    out = app(parsl_resource_specification={"num_nodes": 1, "ranks_per_node": 1}).result(timeout=120)
    assert out["prefix"].startswith("mpiexec")          # MPI mode, on the node file's one node
    assert len(executor.blocks_to_job_id) == 1          # the strategy added no second block


def test_without_early_block_parsl_submits_after_the_interchange_answers(tmp_path, dfk_of):
    executor = _executor(tmp_path, early=False)
    dfk = dfk_of(executor)
    assert executor.blocks_to_job_id == {}
    app = PythonApp(_where_it_ran, data_flow_kernel=dfk, executors=["early"])
    assert app(parsl_resource_specification={"num_nodes": 1, "ranks_per_node": 1}).result(timeout=120)["pid"]
    answered, launched = _log_order(tmp_path, "Interchange process started", "Launched block 0")
    assert answered < launched


def _until_cancelled(provider, job: str) -> JobState:
    deadline = time.monotonic() + 20
    while provider.status([job])[0].state != JobState.CANCELLED and time.monotonic() < deadline:
        time.sleep(0.1)
    return provider.status([job])[0].state


def test_a_port_taken_before_the_interchange_binds_it_falls_back_to_parsls_own_start(tmp_path, dfk_of,
                                                                                      monkeypatch):
    holder = socket.socket()      # not ZeroMQ: listens and never greets
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    monkeypatch.setattr(early_block, "free_port", lambda address, port_range: taken)
    try:
        executor = _executor(tmp_path, early=True)
        t0 = time.monotonic()
        dfk = dfk_of(executor)
        assert time.monotonic() - t0 < 60                 # seen exiting, not Parsl's two minutes
        assert executor.worker_port != taken              # the interchange chose its own port
        (first,) = [job for job, held in executor.provider.resources.items() if held.get("cancelled")]
        assert _until_cancelled(executor.provider, first) == JobState.CANCELLED   # the block given that port
        assert first not in executor.blocks_to_job_id.values()   # and Parsl does not count it failed
        app = PythonApp(_where_it_ran, data_flow_kernel=dfk, executors=["early"])
        out = app(parsl_resource_specification={"num_nodes": 1, "ranks_per_node": 1}).result(timeout=120)
        assert out["prefix"].startswith("mpiexec")        # on a block the strategy submitted
        assert len(executor.provider.resources) == 2
    finally:
        holder.close()


def test_a_failed_start_cancels_the_early_block_and_stops_the_interchange(tmp_path, monkeypatch):
    def never_listens(self, port, timeout_s=0):
        raise InterchangeStartError(f"Parsl's interchange did not listen on worker port {port} within 0 s")

    monkeypatch.setattr(EarlyBlockMPIExecutor, "wait_until_listening", never_listens)
    executor = _executor(tmp_path, early=True)
    stopped = []
    real_stop = EarlyBlockMPIExecutor.stop_interchange

    def stop(self):
        stopped.append(self.interchange_proc)
        real_stop(self)

    monkeypatch.setattr(EarlyBlockMPIExecutor, "stop_interchange", stop)
    with pytest.raises(InterchangeStartError, match="did not listen on worker port"):
        try:
            parsl.load(Config(executors=[executor], run_dir=str(tmp_path / "runinfo"), strategy_period=1))
        finally:
            parsl.clear()
    (job,) = executor.provider.resources       # the one block, submitted early
    assert _until_cancelled(executor.provider, job) == JobState.CANCELLED
    assert executor.blocks_to_job_id == {}
    (proc,) = stopped
    assert proc is not None and proc.poll() is not None     # the interchange was running, and is ended
    assert executor.interchange_proc is None


def test_free_port_skips_ports_in_use_and_says_when_none_is_left():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    try:
        with pytest.raises(InterchangeStartError, match=f"no free port in {taken}-{taken + 1}"):
            early_block.free_port("127.0.0.1", (taken, taken + 1), tries=5)
        port = early_block.free_port("127.0.0.1", (taken, taken + 3), tries=200)
        assert port in (taken + 1, taken + 2)
    finally:
        holder.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the manager is forked on Linux only")
def test_the_pool_forks_its_manager_at_once_and_its_workers_from_the_fork_server(tmp_path):
    """In a process of its own (the fork server is one per process): the manager's server is
    the caller's own child; a worker pickled as ``__main__.report`` runs the module's
    ``report``, as a child of the fork server, which had imported the module before forking."""
    (tmp_path / "pool_stand_in.py").write_text(textwrap.dedent("""
        import os, sys
        def report(queue):
            queue.put({"ppid": os.getppid(), "preloaded": "pool_stand_in" in sys.modules})
    """))
    script = textwrap.dedent("""
        import json, os
        from multiprocessing import forkserver
        from orchestrator.pools.worker_pool import ForkServerContext, fast_start_context
        ctx = fast_start_context(("pool_stand_in",))
        assert isinstance(ctx, ForkServerContext)
        ctx._module_name = "pool_stand_in"
        manager = ctx.Manager()
        with open(f"/proc/{manager._process.pid}/stat") as f:
            manager_parent = int(f.read().rsplit(")", 1)[1].split()[1])
        def report(queue):
            raise SystemExit("the __main__ copy ran")
        report.__module__ = "__main__"
        queue = ctx.Queue()
        p = ctx.Process(target=report, args=(queue,))
        p.start()
        got = queue.get(timeout=60)
        p.join(60)
        print(json.dumps({"me": os.getpid(), "manager_parent": manager_parent, "worker": got, "exit": p.exitcode,
                          "server": forkserver._forkserver._forkserver_pid}))
        manager.shutdown()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["manager_parent"] == out["me"]       # forked at once, not waiting for the server
    assert out["exit"] == 0                         # the module's report ran, not __main__'s
    assert out["worker"]["ppid"] == out["server"] != out["me"]
    assert out["worker"]["preloaded"]               # imported in the server, before the fork


def test_the_batch_jobs_pool_module_loads_no_hydra_and_a_sqlite_ingest_no_psycopg():
    """What the batch job's pool and a SQLite sweep import before their work: neither Hydra and
    the site config (0.23 s before the pool's fork server starts) nor psycopg (60 ms)."""
    def loaded(module: str, watched: tuple[str, ...]) -> str:
        code = f"import sys, {module}; print([m for m in {watched!r} if m in sys.modules])"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert loaded("orchestrator.pools.worker_pool", ("hydra", "omegaconf", "yaml")) == "[]"
    assert loaded("results_db.ingest", ("psycopg",)) == "[]"


def test_a_postgresql_integrity_error_is_caught_once_psycopg_is_loaded():
    from results_db import ingest

    psycopg = pytest.importorskip("psycopg")
    assert psycopg.IntegrityError in ingest._integrity_errors()


def test_the_sweeps_constant_parts_are_pickled_once_and_each_job_decodes_whole():
    """``ParslRunPool._payload`` against ``job_returns.decode_payload``: the same shared bytes for
    jobs of one sweep, pickled again when a constant part is another object."""
    from orchestrator.pools.parsl_pool import ParslRunPool
    from orchestrator.sweep.job_returns import decode_payload

    pool = ParslRunPool.__new__(ParslRunPool)
    pool._shared = None
    context, task, singletons = {"ctx": 1}, len, {"singleton": [1, 2]}
    one = pool._payload((context, {"job": 1}, task, singletons))
    first_shared = pool._shared[1]
    two = pool._payload((context, {"job": 2}, task, singletons))
    assert pool._shared[1] is first_shared                  # not pickled again
    assert decode_payload(one) == (context, {"job": 1}, task, singletons)
    assert decode_payload(two) == (context, {"job": 2}, task, singletons)
    other = {"ctx": 2}
    three = pool._payload((other, {"job": 3}, task, singletons))
    assert pool._shared[1] is not first_shared
    assert decode_payload(three)[0] == other
