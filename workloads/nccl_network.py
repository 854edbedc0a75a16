"""Which network NCCL used, read from its own log.

A GPU run's launcher environment asks NCCL for its initialisation and network messages
(``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,NET``) in files of the run folder
(``NCCL_DEBUG_FILE``, one per process: NCCL expands ``%h`` to the host and ``%p`` to the
pid), set by ``orchestrator/mpi/run_env.py``. Each communicator NCCL creates logs the
network it chose, e.g. (ALCF's published logs, argonne-lcf/alcf-nccl-tests,
``pytests/resnet50/results/2025-06-27-09-51-31``)::

    x3006c0s19b1n0:4138718:4138853 [0] NCCL INFO Using network AWS Libfabric
    x3006c0s19b1n0:4136197:4136297 [0] NCCL INFO Using network Socket

``Socket`` is NCCL's TCP fallback: without the facility's network plugin a run on Polaris
moved a 1 GiB allreduce about ten times slower (``site_configs/polaris.yaml``). The run's
summary records what the ranks logged (``nccl_network``) next to the plugin its site
declares (``nccl_plugin``), so that such a run is flagged instead of looking normal.

Standard library only: the orchestrator imports the names (``workloads`` imports neither
``orchestrator`` nor ``results_db``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

# under the run folder: NCCL's debug files, one per process
LOG_DIR = "nccl"
LOG_FILE = "nccl.%h.%p.log"
# the plugin the site declares (exported by the batch job even when the site turns it off)
PLUGIN_ENV = "SCALESTUDY_NCCL_PLUGIN"
# NCCL's fallback over TCP sockets
SOCKET = "Socket"

_USING = re.compile(r"NCCL INFO Using network (.+?)\s*$")


def network_used(run_dir: str | Path) -> str | None:
    """The networks NCCL logged for the run (``AWS Libfabric``; ``AWS Libfabric,Socket`` where
    processes differed), or None where no NCCL log holds one (no NCCL communicator, a CPU run)."""
    found: set[str] = set()
    folder = Path(run_dir) / LOG_DIR
    for path in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        try:
            with open(path, errors="replace") as fh:
                for line in fh:
                    match = _USING.search(line)
                    if match:
                        found.add(match.group(1))
        except OSError:
            continue
    return ",".join(sorted(found))[:128] or None   # runs.nccl_network holds 128 characters


def network_facts(run_dir: str | Path, env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """What a run's summary says of NCCL's network: the one(s) used and the site's plugin."""
    env = os.environ if env is None else env
    return {"nccl_network": network_used(run_dir), "nccl_plugin": env.get(PLUGIN_ENV) or None}


def used_sockets(network: str | None, plugin: str | None) -> bool:
    """A run that used NCCL's socket fallback on a site that declares a network plugin."""
    return bool(plugin) and SOCKET in (network or "").split(",")
