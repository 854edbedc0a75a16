"""Imported by the worker pool's fork server (``worker_pool.fast_start_context``): Parsl's pool
module, as the pool itself imports it (``lean_parsl``: without the rest of Parsl's package
and without typeguard's checks), so the server is ready to fork the pool's worker sooner; then
the modules of the tasks to come (``$SCALESTUDY_POOL_PRELOAD``, set by ``worker_pool.main`` from
the launch command's ``--preload``: for scalestudy's sweep, Hydra and the sweep's run, 0.2-0.25 s
on this VM), while the pool registers rather than after the first task has arrived."""

import importlib
import os

from .lean_parsl import hollow_packages, typechecks_off
from .worker_pool import PRELOAD_ENV   # the pool's launcher (standard library only at import)

hollow_packages()
with typechecks_off():
    import parsl.executors.high_throughput.process_worker_pool  # noqa: F401


for _name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001 - the task meets the same error and reports it; the server lives on
        pass
