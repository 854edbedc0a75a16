"""Parsl imported lean (``orchestrator.pools.lean_parsl``): without typeguard's checks (what
is switched off, only there, and that every site's Parsl config still passes the checks), and
without the package ``__init__``s in the worker pool and the interchange (what is not loaded,
and that a package completes itself when asked for a name it lacks).

Each case runs in a fresh interpreter: whether Parsl's modules are instrumented is decided
once, when they are first imported, and this test process may have imported them either way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


# A wrongly typed argument to a Parsl constructor that typeguard instruments: TypeCheckError
# when checked; unchecked, Config stores it without a word.
_PROBE = """
def probe():
    from parsl.config import Config
    try:
        Config(retries="three")
    except Exception as exc:
        return type(exc).__name__
    return "accepted"
"""


def _python(body: str, probe: bool = True) -> dict:
    program = (_PROBE if probe else "") + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])




def test_parsl_imported_inside_is_unchecked_and_typeguard_is_restored_after():
    out = _python("""
        import json, typeguard
        from orchestrator.pools.lean_parsl import typechecks_off
        before = typeguard.typechecked
        with typechecks_off():
            import parsl.config
        print(json.dumps({"probe": probe(), "restored": typeguard.typechecked is before}))
    """)
    assert out == {"probe": "accepted", "restored": True}


def test_parsl_imported_plainly_keeps_its_checks():
    """The control: the same call fails when Parsl was imported without ``typechecks_off``."""
    out = _python("""
        import json
        import parsl.config
        print(json.dumps({"probe": probe()}))
    """)
    assert out == {"probe": "TypeCheckError"}


def test_every_sites_parsl_config_passes_parsls_checks(tmp_path):
    """What the checks would have caught in scalestudy's own Parsl objects, they still catch
    here: each site file's executors and providers built with typeguard on."""
    sites = sorted(p.stem for p in (REPO / "site_configs").glob("*.yaml") if p.stem != "template")
    out = _python(f"""
        import json
        import parsl.config   # checked: imported before anything of scalestudy's
        from orchestrator.pools.parsl_config import build_parsl_config
        from orchestrator.site.config import load_site
        from orchestrator.site.queues import plan_batch_jobs
        built = {{}}
        for name in {sites!r}:
            site = load_site(name)
            if not site.scheduler.batch_jobs:
                continue
            config = build_parsl_config(site, __import__("pathlib").Path({str(tmp_path)!r}) / name,
                                        plan_batch_jobs(site, [1]))
            built[name] = [type(e.provider).__name__ for e in config.executors]
        print(json.dumps({{"probe": probe(), "built": built}}))
    """)
    assert out["probe"] == "TypeCheckError"      # the checks were on while the configs were built
    assert set(out["built"]) >= {"local_slurm", "polaris", "perlmutter", "theta"}, out["built"]
    assert all(out["built"].values())


def test_the_sweep_drivers_pool_and_the_batch_jobs_pool_import_parsl_unchecked(tmp_path):
    """The three processes on the way to a first run import Parsl through ``typechecks_off``:
    the driver's pool (``ParslRunPool``), the worker pool and its fork server's preload, and the
    interchange (its launcher runs Parsl's script in-process, within the context); the last two
    also through ``hollow_packages``."""
    source = {name: (REPO / "orchestrator" / "pools" / f"{name}.py").read_text()
              for name in ("parsl_pool", "worker_pool", "worker_pool_preload", "interchange")}
    for name, text in source.items():
        assert "typechecks_off()" in text, name
        assert ("hollow_packages()" in text) is (name != "parsl_pool"), name
    out = _python("""
        import json, sys
        import orchestrator.pools.worker_pool_preload   # what the fork server imports
        lean = not any(m in sys.modules for m in ("sqlalchemy", "parsl.dataflow.dflow", "parsl.executors.flux"))
        from parsl.log_utils import set_stream_logger   # @typechecked, and imported by the pool
        probe = "checked" if "typeguard" in set_stream_logger.__code__.co_names else "accepted"
        print(json.dumps({"probe": probe, "lean": lean,
                          "pool_module": "parsl.executors.high_throughput.process_worker_pool" in sys.modules}))
    """, probe=False)
    assert out == {"probe": "accepted", "lean": True, "pool_module": True}


def test_hollow_packages_load_only_what_is_imported_and_complete_themselves_when_asked():
    """The worker pool's module and the interchange's imports without the package ``__init__``s:
    no DataFlowKernel, no Flux executor, no SQLAlchemy (Parsl's monitoring database). Then
    everything a full ``import parsl`` gives is still there the first time it is asked for."""
    out = _python("""
        import json, sys
        from orchestrator.pools.lean_parsl import hollow_packages
        hollowed = hollow_packages()
        again = hollow_packages()
        import parsl.executors.high_throughput.process_worker_pool
        from parsl.executors.high_throughput.manager_selector import RandomManagerSelector
        from parsl import curvezmq   # a submodule through the hollow package: no __init__ run
        pool_modules = {m for m in sys.modules if m.startswith("parsl")}
        import orchestrator.sweep.app, orchestrator.sweep.job_returns, orchestrator.mpi.run   # the worker's task
        task_adds = sorted({m for m in sys.modules if m.startswith("parsl")} - pool_modules)
        loaded = sorted(m for m in ("sqlalchemy", "parsl.dataflow.dflow", "parsl.executors.flux.executor",
                                    "parsl.monitoring.monitoring") if m in sys.modules)
        import parsl
        version = parsl.__version__                       # the package's __init__ runs here
        from parsl.executors import MPIExecutor
        from parsl.monitoring import MonitoringHub
        try:
            parsl.no_such_name
            missing = "no error"
        except AttributeError:
            missing = "AttributeError"
        print(json.dumps({"hollowed": hollowed, "again": again, "loaded": loaded, "task_adds": task_adds,
                          "version": version,
                          "mpi": MPIExecutor.__name__, "hub": MonitoringHub.__name__, "missing": missing,
                          "load": callable(parsl.load), "getattr_left": "__getattr__" in vars(parsl)}))
    """, probe=False)
    import parsl

    assert out == {"hollowed": ["parsl", "parsl.executors", "parsl.monitoring"], "again": [], "loaded": [],
                   "task_adds": [],
                   "version": parsl.__version__, "mpi": "MPIExecutor", "hub": "MonitoringHub",
                   "missing": "AttributeError", "load": True, "getattr_left": False}


def test_a_hollow_package_completes_once_across_threads_and_again_after_a_failed_init(tmp_path, monkeypatch):
    """A stand-in package (not Parsl: its ``__init__`` is slow, counts its runs and fails while a
    flag file exists): a second thread asking while the first runs the ``__init__`` waits and
    gets the name; an ``__init__`` that fails raises its own error, and the next request runs it
    again; a submodule imports without it."""
    import importlib
    import threading

    from orchestrator.pools.lean_parsl import hollow_packages

    package = tmp_path / "hollow_stand_in"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(f"""
        import os, time
        RUNS = globals().get("RUNS", 0) + 1
        if os.path.exists({str(tmp_path / 'fail')!r}):
            raise RuntimeError("init failed on purpose")
        time.sleep(0.3)
        ANSWER = 42
    """))
    (package / "part.py").write_text("VALUE = 'part'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hollow_stand_in", raising=False)
    monkeypatch.delitem(sys.modules, "hollow_stand_in.part", raising=False)
    assert hollow_packages(("hollow_stand_in",)) == ["hollow_stand_in"]
    module = sys.modules["hollow_stand_in"]
    assert importlib.import_module("hollow_stand_in.part").VALUE == "part"
    assert "ANSWER" not in vars(module) and "RUNS" not in vars(module)     # the submodule ran no __init__

    (tmp_path / "fail").write_text("")
    with pytest.raises(RuntimeError, match="on purpose"):
        module.ANSWER
    (tmp_path / "fail").unlink()

    answers = []
    threads = [threading.Thread(target=lambda: answers.append(module.ANSWER)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [42, 42]
    assert module.RUNS == 2                                  # the failed run, then one run for both threads
    assert "__getattr__" not in vars(module)
    with pytest.raises(AttributeError):
        module.no_such_name
