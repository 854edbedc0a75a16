"""Parsl's interchange, started so that it ends with the sweep driver that started it.

Parsl starts its interchange as a plain child process: when the driver is killed
(SIGKILL, a lost login session) the interchange lives on, keeps the worker pools in
the batch jobs alive with its heartbeats, and the allocations burn node-hours until
their walltime. Started through this module the interchange gets SIGTERM from the
kernel as soon as its parent dies (Linux's parent-death signal); the worker pools then
lose contact and exit after Parsl's heartbeat threshold, and their batch jobs end. A
resumed sweep cancels a stopped driver's batch jobs at once.

Only public parts of Parsl: the executor's ``interchange_launch_cmd`` option names the
program Parsl starts (``parsl_config.interchange_launcher`` writes one that calls ``main``);
``main`` arms the signal and then *replaces itself* (``execv``) with Parsl's own
``interchange.py``, the option's documented default. The signal setting and the ignored
SIGINT survive the exec (the kernel keeps both for an ordinary program), and the config
Parsl writes to the program's stdin reaches Parsl's script untouched.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

PR_SET_PDEATHSIG = 1


def interchange_program() -> str | None:
    """Parsl's ``interchange.py`` of this environment (beside this Python, else on PATH)."""
    return shutil.which("interchange.py", path=os.path.dirname(sys.executable) + os.pathsep +
                        os.environ.get("PATH", ""))


def main() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    # Ctrl-C in a terminal reaches the whole process group: the driver handles it (stops its runs,
    # cancels its blocks, which needs this interchange alive); here it would only print a
    # traceback and leave the driver's shutdown waiting for an interchange that is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() == 1:  # the driver died before the signal was armed
        sys.exit(1)
    program = interchange_program()
    if program is None:
        sys.exit("orchestrator.pools.interchange: Parsl's interchange.py is not in this environment's bin/ "
                 "nor on PATH")
    # this environment's Python runs Parsl's script, whatever its first line says
    os.execv(sys.executable, [sys.executable, program, *sys.argv[1:]])


if __name__ == "__main__":
    main()
