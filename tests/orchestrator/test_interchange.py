"""Parsl's interchange, started through ``orchestrator.pools.interchange``, ends with its driver.

The launcher Parsl is given (``interchange_launch_cmd``) arms the parent-death signal and then
becomes Parsl's own ``interchange.py`` (exec, not a wrapper around it): here a stand-in driver
starts it as Parsl does (its config still to come on stdin) and is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.pools.parsl_config import interchange_launcher

from conftest import sigint_default

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_the_interchange_is_parsls_own_and_dies_with_its_driver_not_with_ctrl_c(tmp_path):
    program = interchange_launcher(tmp_path)
    driver = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([{program!r}], stdin=subprocess.PIPE)   # as Parsl starts it
        print(child.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, preexec_fn=sigint_default)   # as a terminal's would: see conftest
    try:
        pid = int(driver.stdout.readline())
        # exec'd: the process is Parsl's interchange.py under this environment's Python (a
        # generous ceiling: it only matters if the exec never happens, and the machine may be busy)
        assert _wait(lambda: "interchange.py" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(), 120)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[0].decode() == sys.executable and cmdline[1].decode().endswith("/interchange.py")
        # Ctrl-C reaches the process group: the driver handles it. A witness, a plain Python
        # sent the same signal at the same moment, dies of it: the interchange is given as long
        # as the witness took to die, and as long again (measured here, not a constant)
        witness = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(600)"],
                                   stdout=subprocess.PIPE, text=True, preexec_fn=sigint_default)
        try:
            witness.stdout.readline()             # its SIGINT handler is installed
            t0 = time.monotonic()
            os.kill(pid, signal.SIGINT)
            os.kill(witness.pid, signal.SIGINT)
            assert _wait(lambda: witness.poll() is not None, 120), "a plain Python outlived a SIGINT"
            time.sleep(time.monotonic() - t0)
        finally:
            witness.kill()
            witness.wait(60)
        assert _alive(pid)
        driver.kill()                             # SIGKILL: no handler of the driver's runs
        driver.wait(60)
        # a generous ceiling: only an interchange that never dies fails it
        assert _wait(lambda: not _alive(pid), 120), "the interchange outlived its driver"
    finally:
        driver.kill()
