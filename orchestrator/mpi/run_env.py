"""One run's own environment: set where its MPI job starts, after every module and ``worker_init``.

Two things depend on the run rather than on the site, so the batch script cannot say them:

- ``MPICH_GPU_SUPPORT_ENABLED`` (HPE Cray MPICH, ``mpi: system`` sites). Facility modules leave
  it at 1 (ALCF's ``conda`` module: argonne-lcf/alcf-nccl-tests' environment dumps), and with it
  Cray MPICH needs its GPU Transport Layer library in the process, which a pip mpi4py is not
  linked with: "MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not
  linked", and the job aborts (ALCF, Polaris "Python" and "Using GPUs"). So each run sets it as
  its data path needs: 1 only for ``cuda_aware_mpi`` (MPI on device buffers), with the GTL
  library preloaded; 0 otherwise (NCCL and host staging move device data without MPI's GPU
  support, as NERSC's NCCL tests set it, NERSC/nccl-ofi-plugin ``run_tests.sh``).
- NCCL's log of the network it chose, for a GPU run: ``NCCL_DEBUG=INFO`` with
  ``NCCL_DEBUG_SUBSYS`` holding ``INIT,NET``, into files of the run folder (``NCCL_DEBUG_FILE``;
  NCCL's environment variables, docs.nvidia.com/deeplearning/nccl, "Environment Variables"),
  read back by the workload (``workloads/nccl_network.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from workloads.nccl_network import LOG_DIR, LOG_FILE
from workloads.site_mpi import SITE_MPI_ENV
from workloads.registry import resolve_data_path
from workloads.spec import RunSpec

from ..errors import ConfigError

GTL = "libmpi_gtl_cuda.so"


def _gtl_dirs(env: Mapping[str, str]) -> list[str]:
    """Where the cray-mpich module puts its GTL libraries (an ALCF environment dump,
    alcf-nccl-tests pytests/resnet50/results/2025-06-27-09-51-31/env_aws.dat:
    CRAY_MPICH_ROOTDIR=/opt/cray/pe/mpich/8.1.28, PE_MPICH_GTL_DIR_nvidia80=-L/opt/cray/pe/mpich/8.1.28/gtl/lib,
    PE_MPICH_GTL_LIBS_nvidia80=-lmpi_gtl_cuda, CRAY_LD_LIBRARY_PATH holding .../gtl/lib), then the
    library path."""
    dirs = []
    if env.get("CRAY_MPICH_ROOTDIR"):
        dirs.append(os.path.join(env["CRAY_MPICH_ROOTDIR"], "gtl", "lib"))
    for name in sorted(env):
        if name.startswith("PE_MPICH_GTL_DIR_nvidia"):
            dirs.extend(w[2:] for w in env[name].split() if w.startswith("-L"))
    for name in ("CRAY_LD_LIBRARY_PATH", "LD_LIBRARY_PATH"):
        dirs.extend(d for d in env.get(name, "").split(":") if d)
    return list(dict.fromkeys(dirs))


def gtl_library(env: Mapping[str, str]) -> str | None:
    """Cray MPICH's CUDA GTL library as the node's modules expose it, or None."""
    for folder in _gtl_dirs(env):
        path = os.path.join(folder, GTL)
        if os.path.isfile(path):
            return path
    return None


def run_data_path(spec: RunSpec) -> str:
    """The path the run's gradients take (``auto`` resolved); ``command`` for a user's program."""
    if spec.workload_kind == "command":
        return "command"
    return resolve_data_path(spec.algorithm, spec.device, spec.data_path)


def run_environment(spec: RunSpec, run_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables to set in ``env`` (the launcher's environment, which every rank inherits) for
    this run; ``ConfigError`` in one line where its data path needs what the node lacks."""
    out: dict[str, str] = {}
    if spec.device == "cuda":
        (run_dir / LOG_DIR).mkdir(exist_ok=True)
        for stale in (run_dir / LOG_DIR).glob("*.log"):   # an earlier attempt's: not this run's network
            stale.unlink(missing_ok=True)
        if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
            out["NCCL_DEBUG"] = "INFO"
        subsys = [s for s in env.get("NCCL_DEBUG_SUBSYS", "").split(",") if s]
        if subsys and "ALL" not in (s.upper() for s in subsys):
            out["NCCL_DEBUG_SUBSYS"] = ",".join(dict.fromkeys([*subsys, "INIT", "NET"]))
        elif not subsys:
            out["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
        out["NCCL_DEBUG_FILE"] = str(run_dir / LOG_DIR / LOG_FILE)
    if env.get(SITE_MPI_ENV) == "system":
        if run_data_path(spec) == "cuda_aware_mpi":
            gtl = gtl_library(env)
            if gtl is None:
                raise ConfigError("data_path", "cuda_aware_mpi", f"needs MPICH_GPU_SUPPORT_ENABLED=1 and Cray MPICH's "
                                  f"GTL library ({GTL}), found in none of {', '.join(_gtl_dirs(env)) or 'no folder'} "
                                  f"on {os.uname().nodename}: load cray-mpich (and craype-accel-nvidia80), or use "
                                  "data_path=torch_distributed or host_staging")
            out["MPICH_GPU_SUPPORT_ENABLED"] = "1"
            preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != gtl]
            out["LD_PRELOAD"] = " ".join([gtl, *preload])
        else:
            out["MPICH_GPU_SUPPORT_ENABLED"] = "0"
    return out
