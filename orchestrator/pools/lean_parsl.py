"""Parsl imported lean, on the way to a sweep's first run: without typeguard's run-time type
checks (``typechecks_off``), and, in the processes that only run Parsl's worker pool or its
interchange, without the package ``__init__``s that import all of Parsl (``hollow_packages``).

Parsl decorates about thirty of its classes and functions with typeguard's ``@typechecked``,
and typeguard instruments each one as it is decorated, at import: it reads the source again,
rewrites its syntax tree and compiles it again. That is 0.25-0.35 s of the 0.7-0.9 s ``import
parsl`` takes on this VM (``benchmarks/RESULTS.md``, issue 29), paid on the way to a sweep's
first run three times over: by the sweep driver, by the interchange and by the worker pool in
the batch job. The checks guard Parsl's constructors against wrongly typed arguments from a
user writing a Parsl config by hand; scalestudy's Parsl objects are built by ``parsl_config``
from a validated ``SiteConfig``, and ``tests/test_lean_parsl.py`` builds every site file's
Parsl config with the checks on, so a wrong type there still fails a test. (typeguard itself
makes the decorator a no-op under ``python -O``; this does the same for Parsl's modules only,
and only for those imported inside ``typechecks_off``.)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typechecked`` that checks nothing: ``@typechecked`` and ``@typechecked(...)`` alike."""
    return target if target is not None else _unchecked


@contextmanager
def typechecks_off() -> Iterator[None]:
    """Modules first imported inside bind a ``typechecked`` that returns what it decorates
    (Parsl's do ``from typeguard import typechecked`` at import); modules already imported,
    and those imported after, keep typeguard's. Without typeguard installed, nothing to do."""
    try:
        import typeguard
    except ImportError:
        yield
        return
    original = typeguard.typechecked
    typeguard.typechecked = _unchecked
    try:
        yield
    finally:
        typeguard.typechecked = original


# Packages whose ``__init__`` imports far more than the worker pool and the interchange use:
# ``parsl`` (the DataFlowKernel, every executor), ``parsl.executors`` (Flux, Globus Compute, Work
# Queue...) and ``parsl.monitoring`` (its database manager, which imports SQLAlchemy).
HOLLOW_PACKAGES = ("parsl", "parsl.executors", "parsl.monitoring")


def hollow_packages(names: tuple[str, ...] = HOLLOW_PACKAGES) -> list[str]:
    """Put these packages in ``sys.modules`` without running their ``__init__``: importing a
    submodule (``parsl.executors.high_throughput.process_worker_pool``) then loads that module
    and what it imports, not everything the packages' ``__init__`` do: 0.6 s -> 0.2 s for the
    worker pool's imports on this VM, and no SQLAlchemy in the batch job. A package completes
    itself the first time a name it lacks is asked for (``parsl.load``, ``from parsl.executors
    import MPIExecutor``): its ``__init__`` runs then, in place. Only for processes that run
    Parsl's worker pool or interchange; the packages already imported are left as they are.
    Importing there a module of Parsl's that a plain ``import parsl`` reaches only from inside
    its ``__init__`` (``parsl.config`` directly) can meet a circular import: the worker's task
    (``sweep/job_returns``, ``sweep/app``, ``mpi/run``) imports nothing of Parsl's, which
    ``tests/test_lean_parsl.py`` checks. Returns the names hollowed."""
    import importlib.util
    import sys

    done = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            continue
        module = importlib.util.module_from_spec(spec)
        module.__getattr__ = _completer(module, spec)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        done.append(name)
    return done


def _completer(module: Any, spec: Any):
    """The hollow package's module ``__getattr__``: run its ``__init__`` once, then answer.

    One thread runs it; another asking meanwhile waits for it and then reads the completed
    module (the pool and the interchange have several threads). A name asked for by the
    ``__init__`` itself while it runs (its own imports) is missing, as in a plain import. An
    ``__init__`` that fails raises its own error, and the next request runs it again."""
    import threading
    from importlib.machinery import PathFinder

    lock = threading.RLock()
    state = {"running_in": None, "done": False}

    def __getattr__(name: str) -> Any:  # noqa: N807 (PEP 562's name)
        missing = AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        # a submodule not imported yet (``from parsl import curvezmq`` asks first): the import
        # system imports it on hearing AttributeError, without the package's __init__
        if name in ("__path__", "__file__", "__spec__", "__loader__") or \
                PathFinder.find_spec(f"{module.__name__}.{name}", module.__path__) is not None:
            raise missing
        if state["running_in"] == threading.get_ident():
            raise missing
        with lock:
            if not state["done"]:
                state["running_in"] = threading.get_ident()
                try:
                    spec.loader.exec_module(module)   # the package's own __init__, in this namespace
                    state["done"] = True
                finally:
                    state["running_in"] = None
                if module.__dict__.get("__getattr__") is __getattr__:
                    del module.__dict__["__getattr__"]
        if name in module.__dict__:
            return module.__dict__[name]
        raise missing

    return __getattr__
