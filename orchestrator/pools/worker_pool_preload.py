"""Imported by the worker pool's fork server (``worker_pool.fast_start_context``): Parsl's pool
module, as the pool itself imports it (``lean_parsl``: without the rest of Parsl's package
and without typeguard's checks), so the server is ready to fork the pool's worker sooner."""

from .lean_parsl import hollow_packages, typechecks_off

hollow_packages()
with typechecks_off():
    import parsl.executors.high_throughput.process_worker_pool  # noqa: F401

# what the worker's first task imports to unpickle and run (Hydra, OmegaConf, the sweep's task):
# imported here while the pool registers, not after the task has arrived (0.2-0.25 s on this VM).
# Should one fail, the task meets the same error and reports it; the fork server must live on.
try:
    import orchestrator.sweep.app  # noqa: F401
    import orchestrator.sweep.job_returns  # noqa: F401
except Exception:  # noqa: BLE001
    pass
