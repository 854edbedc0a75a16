"""How the GPU check starts its cases: as a sweep's run of the local (or the machine's) site
starts it, with the environment ``orchestrator.mpi.run_env`` gives a run, under mpiexec or srun.
``LAUNCH`` is set once by ``checks.main`` from the command line."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from workloads.run_folder import SPEC_FILE, rank_events_file, rank_metrics_file, result_file
from workloads.spec import RunSpec

RANK_MODULE = "orchestrator.gpu_check.rank"


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        raise SystemExit("gpu_check: no mpiexec in this environment (pip install mpich, or load your MPI)")
    return found


# set by main(): "mpiexec" or "srun" (Perlmutter), and whether the MPI is the machine's (a Cray)
LAUNCH = {"launcher": "mpiexec", "system_mpi": False}


def case_environment(spec: RunSpec, folder: Path) -> dict[str, str]:
    """The environment a sweep's run of ``spec`` gets (orchestrator.mpi.run_env): on a Cray,
    MPICH_GPU_SUPPORT_ENABLED as the data path needs (the facility's modules leave it at 1, and
    Cray MPICH then aborts a process without GTL), GTL preloaded for CUDA-aware MPI; NCCL's
    network log into the case's folder. ``ConfigError`` where the node lacks what the path needs."""
    from orchestrator.mpi.run_env import run_environment
    from workloads.site_mpi import SITE_MPI_ENV

    env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads_per_worker)}
    if LAUNCH["system_mpi"]:
        env[SITE_MPI_ENV] = "system"
    return {**env, **run_environment(spec, folder, env)}


def _command(ranks: int) -> list[str]:
    if LAUNCH["launcher"] == "srun":
        return ["srun", "-n", str(ranks), "--ntasks-per-node", str(ranks)]
    return [_mpiexec(), "-n", str(ranks)]


def _launch(spec: RunSpec, folder: Path, program: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    folder.mkdir(parents=True, exist_ok=True)
    spec.save(folder / SPEC_FILE)
    env = case_environment(spec, folder)
    t0 = time.monotonic()
    proc = subprocess.run([*_command(spec.world_size), sys.executable, *program],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=folder)
    return proc, time.monotonic() - t0


def _error(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]


def run(spec: RunSpec, work: Path, name: str, timeout: float = 900) -> dict:
    """One run of the workload, started as a local site starts it; its result and mean losses."""
    folder = work / name
    proc, seconds = _launch(spec, folder, ["-m", "workloads", str(folder / SPEC_FILE)], timeout)
    out = {"name": name, "seconds": seconds, "returncode": proc.returncode}
    if proc.returncode != 0 or not result_file(folder).is_file():
        out["error"] = _error(proc)
        return out
    result = json.loads(result_file(folder).read_text())
    losses = []
    for rank in range(spec.world_size):
        steps = [json.loads(line) for line in rank_metrics_file(folder, rank).read_text().splitlines()
                 if '"type":"step"' in line]
        if steps:
            losses.append((steps[0]["loss"], steps[-1]["loss"]))
    out.update(throughput=result.get("throughput"), data_path_used=result.get("data_path_used"),
               first_loss=statistics.mean(a for a, _ in losses), last_loss=statistics.mean(b for _, b in losses))
    return out


def weights(spec: RunSpec, work: Path, name: str, corrupt: bool = False, timeout: float = 900) -> dict:
    """Train ``spec`` through ``orchestrator.gpu_check.rank``: every rank's final weights, the initial ones, the
    path the run took and its fused groups per step (from rank 0's timeline)."""
    folder = work / name
    out_file = folder / "weights.npz"
    program = ["-m", RANK_MODULE, str(folder / SPEC_FILE), str(out_file)] + (["--corrupt"] if corrupt else [])
    proc, seconds = _launch(spec, folder, program, timeout)
    if proc.returncode != 0 or not out_file.is_file():
        return {"name": name, "error": _error(proc)}
    import numpy as np

    arrays = np.load(out_file)
    from workloads.event_log import read_events   # the rank's timeline stream (workloads/event_log.py)

    stream = rank_events_file(folder, 0)
    events = [e for e in read_events(folder, 0) if e["phase"] == "allreduce"] if stream.is_file() else []
    per_step: dict[int, int] = {}
    for e in events:
        per_step[e["step"]] = per_step.get(e["step"], 0) + 1
    result = json.loads(result_file(folder).read_text()) if result_file(folder).is_file() else {}
    return {"name": name, "seconds": seconds, "final": arrays["final"], "init": arrays["init"],
            "data_path_used": result.get("data_path_used"),
            "groups_per_step": statistics.median(per_step.values()) if per_step else 0}


def base(device: str, **fields) -> RunSpec:
    values = dict(study="gpu_check", site="local_gpu" if device == "cuda" else "local", nodes=1, workers_per_node=1,
                  threads_per_node=1, batch_size=32, model="small_cnn", dataset="digits", epochs=1,
                  steps_per_epoch=10, lr=0.1, momentum=0.9, seed=7, device=device,
                  gpu_binding="direct" if device == "cuda" else "none", gpus_per_node=1 if device == "cuda" else 0)
    values.update(fields)
    return RunSpec(**values)


QUERY_CUDA_SUPPORT = """
from mpi4py import MPI
query = getattr(MPI, "Query_cuda_support", None)
print("yes" if query is not None and query() else "no" if query is not None else "unknown",
      MPI.Get_library_version().splitlines()[0].strip())
"""


def cuda_aware_mpi(work: Path) -> tuple[bool, str]:
    """Whether this MPI takes device pointers (MPIX_Query_cuda_support), asked by one rank started
    as a cuda_aware_mpi run would be (never in this process: on a Cray, MPI_Init with GPU support
    on and no GTL aborts)."""
    from orchestrator.errors import ConfigError

    folder = work / "cuda-aware-query"
    folder.mkdir(parents=True, exist_ok=True)
    spec = base("cuda", algorithm="sync", data_path="cuda_aware_mpi")
    try:
        env = case_environment(spec, folder)
    except ConfigError as exc:
        return False, exc.reason
    proc = subprocess.run([*_command(1), sys.executable, "-c", QUERY_CUDA_SUPPORT], capture_output=True, text=True,
                          env=env, timeout=300, cwd=folder)
    answer, _, library = proc.stdout.strip().partition(" ")
    if proc.returncode != 0 or answer not in ("yes", "no"):
        return False, f"this MPI cannot say ({_error(proc) if proc.returncode else 'no MPIX_Query_cuda_support'})"
    return answer == "yes", f"{library} {'is' if answer == 'yes' else 'is not'} CUDA-aware"


