"""Failpoints for the reliability suite: ``SCALESTUDY_FAILPOINT=NAME`` kills this process with
SIGKILL when execution reaches the point ``NAME`` — the way a login node's OOM killer or a
lost session would, at the worst moment (mid-transaction while registering runs, between
inserting a run's measurements and committing them). Unset, a failpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str) -> None:
    if os.environ.get("SCALESTUDY_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
