"""Start one run's MPI job: on a Parsl worker in a batch job, or in a driver thread (the local site).

The launch prefix comes from Parsl (``$PARSL_MPI_PREFIX``, sized for this run) or, on
the local site, from the run pool (``set_thread_launch``); the command after it is an
argument list, never shell text built from config values.
The job runs in a process group of its own and under the run's time limit: when the
limit passes, the whole group is stopped (SIGTERM, then SIGKILL), so no rank outlives
its run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from workloads.failure import FAILURE_FILE
from workloads.metrics import write_result
from workloads.nccl_network import network_facts
from workloads.site_mpi import SITE_MPI_ENV
from workloads.run_folder import JOB_FILE, LOG_FILE, RESULT_FILE, SPEC_FILE, STARTED_FILE, result_file
from workloads.spec import RunSpec

from ..driver_timing import timed
from ..errors import ConfigError, RunFailed
from ..site.launchers import fix_prefix
from ..site.schedulers import JOB_ID_VARS
from .run_env import run_environment

KILL_GRACE_SECONDS = 10.0


class RunTimedOut(RunFailed):
    """The run's MPI job passed its time limit and was stopped."""


# A run started from one of the driver's threads (the local site) gets its launch prefix
# and environment here instead of from the process environment, which threads share.
_thread_launch = threading.local()


def set_thread_launch(prefix: str | None, env: dict[str, str] | None = None) -> None:
    _thread_launch.prefix, _thread_launch.env = prefix, dict(env or {})


def run_prefix(spec: RunSpec) -> list[str]:
    """This run's launch prefix (Parsl's ``$PARSL_MPI_PREFIX``, sized for it, as its launcher
    takes it), or plain ``mpiexec -n N``."""
    prefix = getattr(_thread_launch, "prefix", None) or os.environ.get("PARSL_MPI_PREFIX")
    if prefix:
        return fix_prefix(shlex.split(prefix))
    return ["mpiexec", "-n", str(spec.world_size)]


def program(spec: RunSpec, spec_path: Path) -> list[str]:
    """What each rank runs: the built-in workload, or the wrapper around the user's command."""
    module = "workloads.command" if spec.workload_kind == "command" else "workloads"
    return [sys.executable, "-m", module, str(spec_path)]


def workload_command(spec: RunSpec, spec_path: Path) -> list[str]:
    return [*run_prefix(spec), *program(spec, spec_path)]


def _reason(path: Path, lines: int = 3) -> str:
    """The workload's own one-line error if it printed one, else the log's last lines."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    own = [line.strip() for line in text if line.startswith("workloads: rank ")]
    return own[0] if own else " | ".join(line.strip() for line in text[-lines:])


# MPI jobs running from this process (the local site's threads), so that an interrupted
# driver can stop them: each runs in a process group of its own, which a terminal's
# Ctrl-C does not reach.
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


def stop_running() -> int:
    """Stop every MPI job this process started and is still waiting for; returns how many."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_SECONDS
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
    return len(procs)


def _run_group(cmd: list[str], env: dict[str, str], cwd: Path, log_path: Path, timeout: float | None) -> tuple[int, bool]:
    """(exit code, timed out): the launcher in a new process group, stopped as a whole on timeout."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True,
                                preexec_fn=_terminate_with_parent)
        with _running_lock:
            _running.add(proc)
        try:
            try:
                return proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                pass
            except BaseException:  # the worker is being stopped: take the job down with it
                _stop_group(proc)
                raise
            _stop_group(proc)
            return proc.returncode, True
        finally:
            with _running_lock:
                _running.discard(proc)


def _terminate_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The launcher gets SIGTERM when the process that started it dies, even by SIGKILL (Linux's
    parent-death signal): mpiexec and srun then stop their ranks, so a killed driver or worker
    leaves no MPI job behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the launcher's group (srun and mpiexec forward it to every rank), SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, KILL_GRACE_SECONDS)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def execute_planned(run_dir: Path) -> dict[str, Any]:
    """Execute the run planned in ``run_dir`` (its spec written there on the login node)."""
    return execute_run(RunSpec.load(run_dir / SPEC_FILE), run_dir)


def execute_run(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / SPEC_FILE
    if not spec_path.is_file():  # planned on the login node normally; written here when run without a planner
        spec.save(spec_path)
    cmd = workload_command(spec, spec_path)
    env = {**os.environ, **getattr(_thread_launch, "env", {})}
    env["OMP_NUM_THREADS"] = str(spec.threads_per_worker)
    env["SCALESTUDY_ATTEMPT"] = uuid.uuid4().hex[:12]
    env["SCALESTUDY_LAUNCH_DIR"] = os.getcwd()
    # what this run needs that no module may override: MPICH_GPU_SUPPORT_ENABLED for its data path, NCCL's log
    env.update(run_environment(spec, run_dir, env))
    bin_dir = str(Path(sys.executable).parent)
    if getattr(_thread_launch, "prefix", None):
        # a local run: the environment's bin/ first, as a batch job's set-up puts it, so that
        # its mpiexec starts the ranks and the `python` a command names is this one
        if env.get("PATH", "").split(os.pathsep)[0] != bin_dir:
            env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    elif env.get(SITE_MPI_ENV) == "system":
        # the machine's launcher, never the venv's (whose bin/ activation put first on PATH)
        from .env import resolve_launcher

        try:
            cmd[0] = resolve_launcher(cmd[0], env)
        except FileNotFoundError as exc:
            raise ConfigError("site.mpi", "system", str(exc)) from None
    elif shutil.which(cmd[0], path=env.get("PATH")) is None:
        # in a batch job the site's set-up has set PATH (this environment's bin/ first); only
        # a launcher found nowhere is looked for in the environment's bin/
        env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{bin_dir}"
    for stale in (RESULT_FILE, JOB_FILE, FAILURE_FILE):
        (run_dir / stale).unlink(missing_ok=True)
    job_id = next((os.environ[v] for v in JOB_ID_VARS if os.environ.get(v)), None)
    # the batch job this run is in, for the driver to notice if it ends under the run (a lost node)
    (run_dir / JOB_FILE).write_text(json.dumps({"job_id": job_id, "running": True}) + "\n")
    (run_dir / STARTED_FILE).write_text(shlex.join(cmd) + "\n")
    t0 = time.monotonic()
    with timed("mpi_job"):  # recorded when the run executes in the driver's process (the local site)
        code, timed_out = _run_group(cmd, env, run_dir, run_dir / LOG_FILE, spec.run_timeout)
    wall = time.monotonic() - t0
    (run_dir / JOB_FILE).write_text(json.dumps({"job_id": job_id, "exit_code": code, "timed_out": timed_out,
                                                "wall_seconds": wall}) + "\n")
    if timed_out:
        raise RunTimedOut(f"timeout: the run passed its time limit of {spec.run_timeout:.0f} s and was stopped "
                          f"(run_timeout=SECONDS raises it; log: {run_dir / LOG_FILE})")
    result_path = result_file(run_dir)
    if spec.workload_kind == "command":
        from workloads.command import summarize

        summary = summarize(spec, run_dir, code, wall, launcher_log=run_dir / LOG_FILE)
        if spec.device == "cuda":   # the network NCCL logged, if the user's program used NCCL
            summary = {**summary, **network_facts(run_dir, env)}
        write_result(run_dir, summary)
    elif code != 0 or not result_path.is_file():
        raise RunFailed(
            f"run in {run_dir} failed: {cmd[0]} exited with {code}; "
            f"{_reason(run_dir / LOG_FILE) or 'no output'} (log: {run_dir / LOG_FILE})"
        )
    return {"run_dir": str(run_dir), "job_id": job_id, "result": json.loads(result_path.read_text())}
