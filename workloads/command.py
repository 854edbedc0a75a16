"""``$PARSL_MPI_PREFIX python -m workloads.command <spec.json>``: one rank of a user's command.

The site's MPI launcher starts this wrapper once per rank; it starts the user's
program as that rank and gets out of the way. It gives the program what
torch.distributed-style scripts expect — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` — derived from the launcher's
own variables (MPICH/Hydra, srun, aprun, Cray PALS, Open MPI), so an unmodified
``init_process_group("gloo")`` script runs. MPI programs (Horovod) run unchanged: the
wrapper never initialises MPI and passes the launcher's PMI descriptors through.

It copies the program's output to ``<run_dir>/output/rank-<r>.log`` (where metric
patterns are matched) as well as to its own, records where and how long the rank ran
in ``metrics/rank-<r>.jsonl``, and exits with the program's exit code. Needs neither
torch nor MPI.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import report
from .energy import HostEnergy, open_meter
from .failure import SETUP, record_failure
from .cpu_grant import cpu_record
from .placement import bind_gpu, host_gpus, launcher_ranks, listed_gpu, listed_threads, visible_gpus
from .run_folder import REPORTED_RESULT_FILE, rank_metrics_file, rank_output_file
from .spec import RunSpec

OUTPUT_DRAIN_SECONDS = 2.0
ABORT_POLL_SECONDS, ABORT_GRACE_SECONDS = 0.5, 5.0
ATTEMPT_ENV, LAUNCH_DIR_ENV = "SCALESTUDY_ATTEMPT", "SCALESTUDY_LAUNCH_DIR"
RENDEZVOUS_SECONDS = 300.0
def rendezvous(run_dir: Path, attempt: str, rank: int, timeout: float = RENDEZVOUS_SECONDS) -> tuple[str, int]:
    """Rank 0 publishes its host and a free port in the run folder (shared by every node);
    the others wait for it. A new attempt of the run uses a new file."""
    path = run_dir / f".rendezvous-{attempt}.json"
    if rank == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"addr": socket.gethostname(), "port": port}))
        os.replace(tmp, path)
        return socket.gethostname(), port
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = json.loads(path.read_text())
            return str(found["addr"]), int(found["port"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.01)
    raise RuntimeError(f"rank {rank}: rank 0 did not publish its address in {path} within {timeout:.0f} s")


def resolve_argv(argv: tuple[str, ...], launch_dir: Path) -> list[str]:
    """Arguments that name existing files relative to where the sweep was launched become
    absolute paths, since the program runs in its run folder."""
    out = []
    for i, arg in enumerate(argv):
        candidate = launch_dir / arg
        if (not os.path.isabs(arg) and not arg.startswith("-") and (i > 0 or "/" in arg)
                and candidate.exists()):
            out.append(str(candidate))
        else:
            out.append(arg)
    return out


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The program must not outlive this wrapper, even when it is killed with SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m workloads.command <run_dir>/spec.json", file=sys.stderr)
        return 2
    spec_path = Path(args[0]).absolute()
    spec = RunSpec.load(spec_path)
    run_dir = spec_path.parent
    env = dict(os.environ)
    rank, local_rank, local_size = launcher_ranks(spec.world_size, spec.workers_per_node, env)
    addr, port = rendezvous(run_dir, env.get(ATTEMPT_ENV, "0"), rank)
    env.update({
        "RANK": str(rank), "WORLD_SIZE": str(spec.world_size), "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size), "MASTER_ADDR": addr, "MASTER_PORT": str(port),
        report.RUN_DIR_ENV: str(run_dir), report.RANK_ENV: str(rank), report.SIZE_ENV: str(spec.world_size),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS") or str(spec.threads_per_worker),
    })
    program = resolve_argv(spec.command, Path(env.get(LAUNCH_DIR_ENV, os.getcwd())))
    metrics = rank_metrics_file(run_dir, rank)
    gpus = host_gpus(spec.gpu_binding, spec.gpus_per_node, spec.workers_per_node, env) if spec.device == "cuda" else None
    if spec.device == "cuda":
        if not visible_gpus():
            return _cannot_start(run_dir, rank, metrics, f"workloads: rank {rank}: device=cuda: no GPU is visible on "
                                 f"{socket.gethostname()} (no NVIDIA driver: /proc/driver/nvidia/gpus is absent)", 1)
        bind_gpu(spec.gpu_binding, spec.gpus_per_node, spec.world_size, spec.workers_per_node, env)
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    # what the train loop records of where a rank ran, so that the same audit and columns apply:
    # the threads the program is told to run and the GPU it was given
    report.append_record(metrics, "run_start", {"rank": rank, "size": spec.world_size, "host": socket.gethostname(),
                                                "node": node, "pid": os.getpid(), "t": time.time(),
                                                "command": program, "local_rank": local_rank,
                                                "threads": listed_threads(env, spec.threads_per_worker),
                                                **cpu_record(),
                                                "gpu": listed_gpu(env) if spec.device == "cuda" else None})
    out_path = rank_output_file(run_dir, rank)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:   # the host's first rank reads its energy counters (workloads/energy.py)
        energy = HostEnergy(open_meter(device=spec.device, gpus=gpus)) if local_rank == 0 else None
    except ValueError as exc:
        return _cannot_start(run_dir, rank, metrics, f"workloads: rank {rank}: {exc}", 2)
    t0 = time.monotonic()
    try:
        child = subprocess.Popen(program, env=env, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 close_fds=False, preexec_fn=_die_with_parent)
    except OSError as exc:
        return _cannot_start(run_dir, rank, metrics,
                             f"workloads: rank {rank}: cannot start {program[0]!r}: {exc.strerror or exc}", 127)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    abort_file = run_dir / f".abort-{env.get(ATTEMPT_ENV, '0')}"
    with open(out_path, "wb") as log:
        copier = threading.Thread(target=_copy_output, args=(child.stdout, log), daemon=True)
        copier.start()
        code = _wait_or_abort(child, abort_file)
        # a process the program left in the background may hold its output open: do not wait for it
        copier.join(timeout=OUTPUT_DRAIN_SECONDS)
    sys.stdout.flush()
    code = code if code >= 0 else 128 - code   # killed by signal N: 128 + N, as a shell reports it
    if code != 0 and not abort_file.exists():
        abort_file.write_text(f"rank {rank} exited with {code}\n")   # tell the other ranks
    reading = energy.stop() if energy is not None else None
    report.append_record(metrics, "run_end", {"status": "done" if code == 0 else "failed", "exit_code": code,
                                              "seconds": time.monotonic() - t0, "t": time.time(),
                                              **({"summary": {"energy": reading.to_dict()}} if reading else {})})
    return code


def _cannot_start(run_dir: Path, rank: int, metrics: Path, message: str, code: int) -> int:
    """The program cannot start on this rank (and would not on a retry): one line, recorded as a
    setup failure, and the rank's exit code."""
    out_path = rank_output_file(run_dir, rank)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(message + "\n")
    print(message, file=sys.stderr, flush=True)
    record_failure(run_dir, rank, SETUP, message)
    report.append_record(metrics, "run_end", {"status": "failed", "exit_code": code, "error": message,
                                              "t": time.time()})
    return code


def _wait_or_abort(child: subprocess.Popen, abort_file: Path) -> int:
    """The program's exit code. If another rank's program failed first (its wrapper wrote
    ``abort_file`` in the shared run folder), this one is stopped: peers of a failed rank
    would otherwise wait for it forever (a gloo collective, a barrier). MPI launchers do
    this for MPI programs; a program that only uses torch.distributed needs it from here."""
    while True:
        try:
            return child.wait(timeout=ABORT_POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        if abort_file.exists():
            child.terminate()
            try:
                return child.wait(timeout=ABORT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()


def _copy_output(stream, log) -> None:
    """The program's output, line by line, to its rank's log and to this process's output."""
    for line in iter(stream.readline, b""):
        log.write(line)
        log.flush()
        sys.stdout.buffer.write(line)



TAIL_LINES, TAIL_CHARS = 30, 4000


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-TAIL_LINES:])[-TAIL_CHARS:]


def _exit_codes(run_dir: Path, world_size: int) -> dict[int, tuple[int, float]]:
    """Each rank's program exit code and the time it ended, from the wrapper's run_end records."""
    codes = {}
    for rank in range(world_size):
        try:
            lines = rank_metrics_file(run_dir, rank).read_text().splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("type") == "run_end" and "exit_code" in record:
                codes[rank] = (int(record["exit_code"]), float(record.get("t", 0.0)))
                break
    return codes


def ended_by_themselves(run_dir: Path, world_size: int) -> bool:
    """Whether every rank's program ended (the wrapper wrote its run_end record), none of
    them killed by a signal: such a run can be summarised from its folder alone."""
    codes = _exit_codes(run_dir, world_size)
    return len(codes) == world_size and all(code < 128 for code, _ in codes.values())


def first_failure(codes: dict[int, tuple[int, float]]) -> int | None:
    """The rank whose failure came first: its peers often fail after it (a lost connection,
    the launcher's kill), so the earliest program that exited by itself with an error is
    the cause; signal deaths (128 + N) count only when no rank exited by itself."""
    failed = [(code >= 128, t, rank) for rank, (code, t) in codes.items() if code != 0]
    return min(failed)[2] if failed else None


def summarize(spec: RunSpec, run_dir: Path, launcher_exit: int, wall_seconds: float | None,
              launcher_log: Path | None = None) -> dict:
    """The run's ``result.json`` once its whole MPI job has ended: exit code, output tail,
    wall time, and the metrics from patterns and from ``report.result`` (patterns win).
    ``launcher_log`` holds the launcher's own output, the reason when a rank never got to
    start the program (the wrapper failed, or the launcher did)."""
    from .output_metrics import extract

    outputs = {r: rank_output_file(run_dir, r) for r in range(spec.world_size)}
    codes = _exit_codes(run_dir, spec.world_size)
    failing = first_failure(codes)
    exit_code = codes[failing][0] if failing is not None else (launcher_exit if launcher_exit else
                                                               codes.get(0, (0, 0.0))[0])
    reported = {}
    reported_path = run_dir / REPORTED_RESULT_FILE
    if reported_path.is_file():
        reported = {k: v for k, v in json.loads(reported_path.read_text()).items() if k != "schema"}
    found, missing = extract(spec.metric_patterns, outputs)
    values = {**reported, **found}
    tail_rank = failing if failing is not None else 0
    tail = _tail(outputs[tail_rank])
    if not tail.strip() and launcher_log is not None:
        tail = _tail(launcher_log)
    error = None
    if exit_code != 0:
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "no output")
        who = f"rank {failing}" if failing is not None else "the launcher; a rank never started the program"
        error = f"{spec.command[0]} exited with {exit_code} ({who}): {last}"[:500]
    elif missing:
        error = missing[0]
    steps = 0
    try:
        steps = sum(1 for line in rank_metrics_file(run_dir, 0).read_text().splitlines() if '"type":"step"' in line)
    except OSError:
        pass
    summary = {"status": "failed" if error else "done", "kind": "command", "world_size": spec.world_size,
               "exit_code": exit_code, "wall_seconds": wall_seconds, "output_tail": tail,
               "throughput": values.pop("throughput", None), "metrics": values, "steps": steps or None}
    if error:
        summary["error"] = error
    return summary


if __name__ == "__main__":
    sys.exit(main())
