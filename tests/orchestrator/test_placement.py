"""Runs reach a batch job only when their nodes are free in it (orchestrator/pools/placement.py).

Parsl's worker pool loops for ever on a backlogged MPI task that does not fit (Parsl PR #3800,
open); the driver never lets one reach the pool. First the placement's own rules, on plain
futures; then real Parsl: an ``MPIExecutor`` whose block (Parsl's ``LocalProvider`` on this
host, a scheduler's batch job without the scheduler) has two nodes in its node file, given
three two-node runs: placed, all three run one after the other; handed to Parsl directly (the
control), the pool's backlog loops and none of them ever returns."""

from __future__ import annotations

import concurrent.futures
import socket
import sys
import time
from pathlib import Path

import parsl
import pytest
from parsl.app.python import PythonApp
from parsl.config import Config
from parsl.executors import MPIExecutor
from parsl.launchers import SimpleLauncher
from parsl.providers import LocalProvider

from orchestrator.pools.parsl_config import interchange_launcher
from orchestrator.pools.placement import BlockPlacement

BIN = Path(sys.executable).parent


def _placed(blocks):
    """A placement whose runs start as futures the test resolves by hand."""
    placement = BlockPlacement(blocks)
    started: dict[str, concurrent.futures.Future] = {}

    def run(label, nodes, name):
        def start():
            started[name] = concurrent.futures.Future()
            return started[name]
        return placement.submit(label, nodes, start)

    return placement, started, run


def _settle(placement):
    placement.dispatch.submit(lambda: None).result(timeout=60)   # what was queued has been placed


def test_runs_start_in_order_as_their_nodes_free_up():
    placement, started, run = _placed({"packed": (4, 3)})
    a, b, c, d, e = (run("packed", n, name) for n, name in ((1, "a"), (2, "b"), (4, "c"), (1, "d"), (1, "e")))
    _settle(placement)
    assert sorted(started) == ["a", "b", "d"]        # 1+2+1 nodes; c (4) waits; e: no slot left (3)
    started["a"].set_result("A")
    _settle(placement)
    assert a.result(timeout=60) == "A"
    assert sorted(started) == ["a", "b", "d", "e"]   # a's node and slot: e fits, c still does not
    for name in ("b", "d", "e"):
        started[name].set_result(name)
    _settle(placement)
    assert "c" in started and not c.done()           # every node free: c starts
    started["c"].set_exception(RuntimeError("rank 3 died"))
    with pytest.raises(RuntimeError, match="rank 3 died"):
        c.result(timeout=60)
    assert [f.result() for f in (b, d, e)] == ["b", "d", "e"]
    assert placement.close() == 0


def test_a_released_run_frees_its_nodes_and_close_cancels_what_waits():
    placement, started, run = _placed({"2n": (2, 2)})
    first = run("2n", 2, "first")
    second = run("2n", 2, "second")
    third = run("2n", 2, "third")
    _settle(placement)
    assert list(started) == ["first"]
    placement.release(first)           # its batch job ended under it: the next block is a new one
    _settle(placement)
    assert list(started) == ["first", "second"]
    started["first"].set_exception(RuntimeError("ManagerLost, long after"))   # counted once only
    _settle(placement)
    assert list(started) == ["first", "second"]
    assert placement.close() == 1 and third.cancelled()
    started["second"].set_result("late")            # ends after the pool closed: nothing starts
    assert second.result(timeout=60) == "late"


def test_a_run_larger_than_its_block_fails_at_once():
    placement, started, run = _placed({"2n": (2, 1)})
    with pytest.raises(ValueError, match="4-node run cannot start in a 2-node batch job"):
        run("2n", 4, "big").result(timeout=60)
    placement.close()


def test_a_run_parsl_refuses_fails_and_frees_its_nodes():
    placement = BlockPlacement({"1n": (1, 1)})

    def refused():
        raise TypeError("cannot pickle")

    with pytest.raises(TypeError, match="cannot pickle"):
        placement.submit("1n", 1, refused).result(timeout=60)
    ok = concurrent.futures.Future()
    ok.set_result(5)
    assert placement.submit("1n", 1, lambda: ok).result(timeout=60) == 5
    placement.close()


# -- real Parsl ------------------------------------------------------------------------------

# sent by value (the worker cannot import this test module), with globals of its own
_NAMESPACE: dict = {}
exec("def _two_nodes(marker, seconds, parsl_resource_specification=None):\n"
     "    import os, pathlib, time\n"
     "    t0 = time.time()\n"
     "    pathlib.Path(marker).write_text(os.environ.get('PARSL_MPI_PREFIX', ''))\n"
     "    time.sleep(seconds)\n"
     "    return t0, time.time()\n", _NAMESPACE)
_two_nodes = _NAMESPACE["_two_nodes"]
_two_nodes.__module__ = "__main__"
SPEC = {"num_nodes": 2, "ranks_per_node": 1}


@pytest.fixture
def two_node_block(tmp_path):
    nodefile = tmp_path / "nodes"
    host = socket.gethostname()
    nodefile.write_text(f"{host}\n{host}\n")
    provider = LocalProvider(launcher=SimpleLauncher(), init_blocks=0, min_blocks=0, max_blocks=1,
                             worker_init=f"export PATH={BIN}:$PATH PBS_NODEFILE={nodefile}")
    executor = MPIExecutor(label="packed", provider=provider, address="127.0.0.1", mpi_launcher="mpiexec",
                           max_workers_per_block=3, encrypted=True, heartbeat_period=2, heartbeat_threshold=10,
                           interchange_launch_cmd=interchange_launcher(tmp_path))
    dfk = parsl.load(Config(executors=[executor], run_dir=str(tmp_path / "runinfo"), strategy_period=1))
    try:
        yield PythonApp(_two_nodes, data_flow_kernel=dfk, executors=["packed"])
    finally:
        dfk.cleanup()
        parsl.clear()


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never started"
        time.sleep(0.1)


@pytest.mark.timeout(300)
@pytest.mark.sweep
def test_placed_two_node_runs_all_finish_one_after_another(tmp_path, two_node_block):
    placement = BlockPlacement({"packed": (2, 3)})
    futures = [placement.submit("packed", 2, lambda i=i: two_node_block(str(tmp_path / f"run{i}"), 0.5,
                                                                       parsl_resource_specification=SPEC))
               for i in range(3)]
    spans = sorted(f.result(timeout=180) for f in futures)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))   # never two at once
    assert all("-n 2 " in (tmp_path / f"run{i}").read_text() for i in range(3))   # MPI mode, 2 nodes each
    placement.close()


@pytest.mark.timeout(300)
@pytest.mark.sweep
def test_control_handed_to_parsl_directly_the_backlog_never_returns(tmp_path, two_node_block):
    """Why the placement exists: the same three runs, straight to Parsl. If this starts to
    pass through Parsl (its backlog fixed upstream), the placement still holds, merely unneeded."""
    t0 = time.monotonic()
    futures = [two_node_block(str(tmp_path / f"run{i}"), 0.5, parsl_resource_specification=SPEC) for i in range(3)]
    _wait_for(tmp_path / "run0", 120)
    # the results are given as long as the pool took to start the first run (measured here: a
    # busy machine is slower at both), and at least the 15 s they always had
    done, _ = concurrent.futures.wait(futures, timeout=max(15.0, time.monotonic() - t0))
    if len(done) == 3:
        pytest.skip("this Parsl's pool did not loop on these runs (its backlog fixed, Parsl PR #3800, "
                    "or they never met in it)")
    # the first ended 0.5 s in; its result was lost to the backlog's RecursionError (a Parsl whose
    # pool thread dies of it returns none at all): the sweep would wait for it for ever
    assert not futures[0].done()
