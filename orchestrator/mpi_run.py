"""Start one run's MPI job: runs wherever the Parsl worker runs (batch node or this host).

The launch prefix comes from Parsl (``$PARSL_MPI_PREFIX``, sized for this run); the
command after it is an argument list, never shell text built from config values.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from workloads.spec import RunSpec

from .errors import RunFailed

SPEC_FILE = "spec.json"
LOG_FILE = "workload.log"
_JOB_ID_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "COBALT_JOBID")


def launch_prefix(spec: RunSpec) -> list[str]:
    """Parsl's prefix for this allocation, or plain ``mpiexec -n N`` outside Parsl."""
    prefix = os.environ.get("PARSL_MPI_PREFIX")
    if prefix:
        return shlex.split(prefix)
    return ["mpiexec", "-n", str(spec.world_size)]


def workload_command(spec: RunSpec, spec_path: Path) -> list[str]:
    return [*launch_prefix(spec), sys.executable, "-m", "workloads", str(spec_path)]


def workload_command_after_prefix(spec_path: Path) -> str:
    return shlex.join([sys.executable, "-m", "workloads", str(spec_path)])


def _reason(path: Path, lines: int = 3) -> str:
    """The workload's own one-line error if it printed one, else the log's last lines."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    own = [line.strip() for line in text if line.startswith("workloads: rank ")]
    return own[0] if own else " | ".join(line.strip() for line in text[-lines:])


def execute_run(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / SPEC_FILE
    spec.save(spec_path)
    cmd = workload_command(spec, spec_path)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(spec.threads_per_worker)
    if shutil.which(cmd[0], path=env.get("PATH")) is None:  # e.g. the venv's mpiexec, venv not activated
        env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{Path(sys.executable).parent}"
    (run_dir / "command.txt").write_text(shlex.join(cmd) + "\n")
    with open(run_dir / LOG_FILE, "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run_dir)
    result_path = run_dir / "result.json"
    if proc.returncode != 0 or not result_path.is_file():
        raise RunFailed(
            f"run in {run_dir} failed: {cmd[0]} exited with {proc.returncode}; "
            f"{_reason(run_dir / LOG_FILE) or 'no output'} (log: {run_dir / LOG_FILE})"
        )
    job_id = next((os.environ[v] for v in _JOB_ID_VARS if os.environ.get(v)), None)
    return {"run_dir": str(run_dir), "job_id": job_id, "result": json.loads(result_path.read_text())}
