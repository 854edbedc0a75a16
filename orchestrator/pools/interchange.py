"""Parsl's interchange, started so that it ends with the sweep driver that started it.

Parsl starts its interchange as a plain child process: when the driver is killed
(SIGKILL, a lost login session) the interchange lives on, keeps the worker pools in
the batch jobs alive with its heartbeats, and the allocations burn node-hours until
their walltime. Started through this module the interchange gets SIGTERM from the
kernel as soon as its parent dies (Linux's parent-death signal, armed before Parsl's
interchange script runs in this same process); the
worker pools then lose contact and exit after Parsl's heartbeat threshold, and their
batch jobs end. A resumed sweep cancels a stopped driver's batch jobs at once.

``parsl_config.interchange_launcher`` writes the program Parsl starts in its place.
"""

from __future__ import annotations

import os
import runpy
import shutil
import signal
import sys


def main() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    # Ctrl-C in a terminal reaches the whole process group: the driver handles it (stops its runs,
    # cancels its blocks, which needs this interchange alive); here it would only print a
    # traceback and leave the driver's shutdown waiting for an interchange that is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() == 1:  # the driver died before the signal was armed
        sys.exit(1)
    program = shutil.which("interchange.py", path=os.path.dirname(sys.executable) + os.pathsep +
                           os.environ.get("PATH", ""))
    if program is None:
        sys.exit("orchestrator.pools.interchange: Parsl's interchange.py is not on PATH")
    from .lean_parsl import hollow_packages, typechecks_off

    # run in this process, not exec'd: the interchange's modules of Parsl only, without
    # typeguard's checks (lean_parsl: its imports 0.6-0.7 s -> 0.17 s on this VM, which the
    # first run's worker pool may wait on); it builds nothing from user input. Its config comes
    # on stdin, as it would to the script run directly.
    hollow_packages()
    sys.argv[0] = program
    with typechecks_off():
        runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
