"""Imported by the worker pool's fork server (``worker_pool.fast_start_context``): Parsl's pool
module, with typeguard's checks off as in the pool itself (``unchecked_parsl``), so the server
is ready to fork the pool's worker sooner."""

from .unchecked_parsl import typechecks_off

with typechecks_off():
    import parsl.executors.high_throughput.process_worker_pool  # noqa: F401
