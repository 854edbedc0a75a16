"""What kind of failure ended a run, for the orchestrator's retry policy.

A run that fails while it is being set up (a dataset or model factory that raises, an
import path that does not import, a command that cannot be started) would fail the
same way every time: it is recorded here as a ``setup`` failure and never retried. A
crash later on (a rank killed, a numerical error, a lost node) may be transient. The
first rank to fail writes the file; the others leave it as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .run_folder import FAILURE_FILE

SETUP = "setup"


class SetupError(Exception):
    """The run could not be set up (its configuration or code is at fault, not the machine)."""


def record_failure(run_dir: str | Path, rank: int, kind: str, error: str) -> None:
    path = Path(run_dir) / FAILURE_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:   # another rank was first, or the folder is gone
        return
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"kind": kind, "rank": rank, "error": error[-2000:]}) + "\n")


def read_failure(run_dir: str | Path) -> dict[str, Any] | None:
    try:
        record = json.loads((Path(run_dir) / FAILURE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
