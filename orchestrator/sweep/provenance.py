"""Where a run came from: the project's commit, the orchestrator's environment, the config.

Recorded when a run is planned, on the login node; the workload adds its own side
(torch, mpi4py and MPI library versions, hostnames) in its metrics.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from workloads.metrics import cpu_affinity

PROJECT = Path(__file__).resolve().parents[2]   # the checkout: orchestrator/sweep/ is two below it
_SECRET_KEYS = {"db_url"}


@functools.lru_cache(maxsize=1)
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the scalestudy checkout, or (None, None) outside a git checkout."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT,
                                capture_output=True, text=True, timeout=10)
        return sha.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return None, None


@functools.lru_cache(maxsize=1)
def git_remote() -> str | None:
    """Where the checkout came from (``origin``'s URL, any credentials in it left out): an
    artifact's README tells its reader where to get the software."""
    try:
        url = subprocess.run(["git", "remote", "get-url", "origin"], cwd=PROJECT, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = url.stdout.strip()
    if url.returncode != 0 or not text:
        return None
    scheme, sep, rest = text.partition("://")
    return f"{scheme}{sep}{rest.split('@', 1)[-1]}" if sep else text


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpus() -> int | None:
    """The cores this process may use: its affinity, read as each rank's is
    (``workloads.metrics.cpu_affinity``), or the host's count where the OS gives none."""
    allowed = cpu_affinity()
    return len(allowed) if allowed else os.cpu_count()


def sweep_command(argv: list[str] | None = None) -> str:
    """The command line this sweep was started with, as its user typed it (``scalestudy sweep ...``:
    the ``--multirun`` that ``sweep`` hands Hydra is its own), every database URL's password masked
    (an artifact's ``sweeps.txt`` is read from it, and re-run by a reader)."""
    from results_db.store.connect import safe_url

    given = list(sys.argv if argv is None else argv)[1:]
    if given[:1] == ["--multirun"]:
        given = given[1:]
    words = ["scalestudy", "sweep"]
    for word in given:
        if "://" in word:
            key, sep, value = word.rpartition("=") if "=" in word.split("://")[0] else ("", "", word)
            word = f"{key}{sep}{safe_url(value)}"
        words.append(word)
    return shlex.join(words)


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """The orchestrator's side. ``cpus`` is this host's cores: for site=local runs, the cores
    every rank shares (a figure of such runs says when ranks outnumber them)."""
    return {
        "login_host": socket.gethostname(),
        "repository": git_remote(),
        "command": sweep_command(),
        "cpus": _cpus(),
        "python": platform.python_version(),
        **{name: _version(name) for name in ("scalestudy", "parsl", "hydra-core", "sqlalchemy", "torch", "mpi4py",
                                             "mpich")},
    }


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The job's full resolved config, without Hydra's own node or anything secret."""
    out = {}
    for key in cfg.keys():
        if key == "hydra" or key in _SECRET_KEYS:
            continue
        value = OmegaConf.select(cfg, str(key))
        out[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return out


def provenance(cfg: DictConfig) -> dict[str, Any]:
    commit, dirty = git_state()
    return {"git_commit": commit, "git_dirty": dirty, "environment": environment(), "config": resolved_config(cfg)}
