"""What a rank knows of its site's MPI: whether it is the machine's, and how to get more threads from it.

Standard library only (``workloads`` imports neither ``orchestrator`` nor ``results_db``); the
batch job exports ``SITE_MPI_ENV`` (``orchestrator/mpi/env.py``).
"""

from __future__ import annotations

import os
from typing import Mapping

# "system" where the batch job runs on the machine's MPI (a site with mpi: system)
SITE_MPI_ENV = "SCALESTUDY_SITE_MPI"


def thread_multiple_hint(env: Mapping[str, str] | None = None) -> str:
    """How to get MPI_THREAD_MULTIPLE, for a refusal that found less: on a site's own MPI (Cray
    MPICH caps what MPI_Init_thread grants by MPICH_MAX_THREAD_SAFETY) the site's ``env:``; with
    this environment's MPI, one built with thread support."""
    env = os.environ if env is None else env
    if env.get(SITE_MPI_ENV) == "system":
        return ("the machine's MPI granted less: Cray MPICH grants what MPICH_MAX_THREAD_SAFETY allows, so set "
                "MPICH_MAX_THREAD_SAFETY: multiple under the site's env: (`scalestudy sites --check SITE` shows the "
                "level granted)")
    return "use an MPI built with thread support (the mpich wheel: pip install mpich)"
