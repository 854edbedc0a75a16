"""The one harness of every benchmark that times: interleaved rounds, medians with their spread,
per-round ratios, and the processes a benchmark times (a workload run, an MPI job, a command
as a user types it), in this tree or in an earlier checkout of it (``--before DIR``).

Baseline and candidate alternate (A B A B …) so that drift in a shared machine's load hits
both alike; medians resist the odd slow repeat; a ratio is taken per round, of the pair that
ran side by side, and reported with its spread. ``tests/project/test_benchmarks.py`` holds every
``bench_*.py`` to it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Hashable, TypeVar

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def _named(key: Hashable) -> str:
    return " ".join(map(str, key)) if isinstance(key, tuple) else str(key)


def interleave(variants: dict[Any, Callable[[], T]], repeats: int, report: bool = True) -> dict[Any, list[T]]:
    """Call each variant once per round, ``repeats`` rounds; collect what each returns. ``report``:
    a line per round (False on all but one MPI rank)."""
    samples: dict[Any, list[T]] = {name: [] for name in variants}
    for r in range(repeats):
        for name, fn in variants.items():
            samples[name].append(fn())
        if report:
            print(f"  round {r + 1}/{repeats}: " + ", ".join(f"{_named(n)}={_shown(samples[n][-1])}"
                                                           for n in variants), flush=True)
    return samples


def seconds(fn: Callable[[], Any]) -> float:
    """Wall seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(xs: list[float], digits: int = 3, unit: str = "") -> str:
    """``median (min–max)``: a figure with its spread over the rounds."""
    return f"{statistics.median(xs):.{digits}f}{unit} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def per_round(after: list[float], before: list[float]) -> list[float]:
    """Each round's ratio after/before, of the pair that ran side by side."""
    if len(after) != len(before):
        raise ValueError(f"{len(after)} rounds against {len(before)}: ratios are taken per round")
    return [a / b for a, b in zip(after, before)]


def trees(before: str | None) -> dict[str, Path]:
    """The source trees a benchmark runs: an earlier checkout (``git worktree add DIR COMMIT``)
    as ``before`` where given, then this one as ``after``, in the order they alternate."""
    return {**({"before": Path(before).absolute()} if before else {}), "after": REPO}


def tree_env(tree: Path = REPO, **extra: str) -> dict[str, str]:
    """This environment with ``tree``'s code first on the path and its programs (mpiexec) found."""
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(tree), **extra)


def mpiexec(ranks: int, argv: list[str], tree: Path = REPO, timeout: float = 1800, cwd: Path | None = None,
            capture: bool = True) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python argv…`` with ``tree``'s code; raises with the tail of its errors."""
    proc = subprocess.run([str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, *map(str, argv)],
                          env=tree_env(tree), cwd=cwd, timeout=timeout, text=True, capture_output=capture)
    if proc.returncode != 0:
        raise RuntimeError(f"mpiexec -n {ranks} {' '.join(map(str, argv))} ({tree}) exited {proc.returncode}:\n"
                           f"{(proc.stderr or '')[-3000:]}")
    return proc


def time_cli(commands: dict[str, list[str]], sources: dict[str, Path], repeats: int, cwd: Path,
             **env: str) -> dict[tuple[str, str], list[float]]:
    """Each ``scalestudy`` command's wall time as a user runs it (a new process: start-up and
    imports included), per source tree, interleaved: every command once a round and tree."""
    def run(argv: list[str], tree: Path) -> Callable[[], float]:
        def once() -> float:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv], cwd=cwd,
                                  env=tree_env(tree, **env), capture_output=True, text=True)
            took = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"scalestudy {' '.join(argv)} ({tree}) failed:\n{proc.stderr[-2000:]}")
            return took
        return once

    return interleave({(name, t): run(argv, path) for name, argv in commands.items() for t, path in sources.items()},
                      repeats, report=False)


def cli_lines(commands: dict[str, list[str]], times: dict[tuple[str, str], list[float]], limit_s: float,
              width: int) -> list[str]:
    """One line a command: median (min–max) against ``limit_s``, and after/before where measured."""
    lines = []
    for name in commands:
        xs = times[(name, "after")]
        line = f"  scalestudy {name:{width}s} {summary(xs, 2, ' s')}  " \
               f"{'ok' if statistics.median(xs) <= limit_s else 'OVER'} <= {limit_s:g} s"
        if (name, "before") in times:
            old = times[(name, "before")]
            line += f"; before {summary(old, 2, ' s')}, after/before {summary(per_round(xs, old), 2)}"
        lines.append(line)
    return lines


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def start_workload(spec: dict[str, Any], ranks: int, cpus: str | None = None) -> tuple[subprocess.Popen, Path]:
    """Start one real MPI run of the workload (``mpiexec -n ranks``); its process and run folder.
    ``cpus``: a ``taskset -c`` CPU list every rank is pinned to (the ranks record it)."""
    base = {"study": "bench", "site": "local", "nodes": 1, "workers_per_node": ranks,
            "threads_per_node": ranks, "epochs": 1}
    run_dir = Path(tempfile.mkdtemp(prefix="bench-"))
    (run_dir / "spec.json").write_text(json.dumps({**base, **spec}))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, "-m", "workloads", str(run_dir / "spec.json")]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), run_dir


def finish_workload(proc: subprocess.Popen, run_dir: Path, timeout: float = 900) -> dict[str, Any]:
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"workload failed: {err[-2000:]}")
    result = json.loads((run_dir / "result.json").read_text())
    result["run_dir"] = str(run_dir)
    return result


def run_workload(spec: dict[str, Any], ranks: int, timeout: float = 900) -> dict[str, Any]:
    """One real MPI run of the workload; returns its result.json (plus the run dir)."""
    return finish_workload(*start_workload(spec, ranks), timeout=timeout)


def measure(spec: dict[str, Any], ranks: int, key: str = "throughput") -> float:
    """One run's ``result.json[key]``; the run's folder is removed afterwards."""
    import shutil

    result = run_workload(spec, ranks)
    shutil.rmtree(result["run_dir"], ignore_errors=True)
    return result[key]


def interleaved_mpi_times(comm, variants: dict[str, Callable[[], None]], repeats: int, iters: int = 1,
                          on_round: Callable[[int, dict[str, list[float]]], None] | None = None,
                          ) -> dict[str, list[float]]:
    """Seconds per call of each variant, ``repeats`` rounds interleaved (A B C A B C ...), on
    every rank of ``comm``: each variant warmed up once, then per round ``iters`` calls between
    two ``Barrier``s, so a time is the slowest rank's. ``on_round(r, times)`` after each round."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats):
        for name, fn in variants.items():
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            comm.Barrier()
            times[name].append((time.perf_counter() - t0) / iters)
        if on_round is not None:
            on_round(r, times)
    return times


def relaunch_under_mpiexec(ranks: int, argv: list[str]) -> int:
    """Run this script again as ``ranks`` MPI processes (with ``--worker``); return its exit code."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, *argv, "--worker"]
    return subprocess.run(cmd, env=env).returncode


def epochs_for(dataset: str, batch_size: int, ranks: int, steps: int) -> tuple[int, int]:
    """Epochs of at most ``steps`` steps each that together run at least ``steps`` steps:
    small data sets (digits: 1,437 training images) hold fewer steps than asked for in one
    epoch, and a benchmark must not silently measure fewer."""
    from workloads.data import load_dataset

    n_train = len(load_dataset(dataset).x_train)
    per_epoch = min(steps, n_train // (batch_size * ranks))
    if per_epoch < 1:
        raise ValueError(f"batch {batch_size} x {ranks} ranks exceeds {dataset}'s {n_train} training samples")
    return -(-steps // per_epoch), per_epoch


def measure_steps(spec: dict[str, Any], ranks: int, warmup: int) -> tuple[float, int]:
    """Samples/s over the steps after the first ``warmup`` (rank 0's per-step times summed:
    evaluation between epochs and start-up excluded); and how many steps that was. The run's
    folder is removed afterwards."""
    return measured_rate(run_workload(spec, ranks), warmup)


def measured_rate(result: dict[str, Any], warmup: int) -> tuple[float, int]:
    """``measure_steps`` of a finished run (its folder is removed)."""
    import shutil

    try:
        steps = [json.loads(line) for line in (Path(result["run_dir"]) / "metrics" / "rank-0.jsonl")
                 .read_text().splitlines() if '"type":"step"' in line]
    finally:
        shutil.rmtree(result["run_dir"], ignore_errors=True)
    measured = steps[warmup:]
    if not measured:
        raise ValueError(f"the run had {len(steps)} steps, none after {warmup} warm-up steps")
    seconds = sum(step_seconds(s) for s in measured)
    global_batch = result["global_batch_size"]
    return len(measured) * global_batch / seconds, len(measured)


def spread(xs: list[float]) -> str:
    """min–max of the repeats, beside a median."""
    return f"{min(xs):.4g}–{max(xs):.4g}"


PHASE_KEYS = ("data", "forward", "delay", "backward", "comm_wait", "update")


def run_steps(spec: dict[str, Any], ranks: int) -> tuple[dict[str, Any], dict[int, list[dict[str, Any]]]]:
    """One run: its result.json and every rank's step records (ranks without steps, such as a
    parameter server, are left out). The run's folder is removed afterwards."""
    import shutil

    result = run_workload(spec, ranks)
    steps: dict[int, list[dict[str, Any]]] = {}
    try:
        for rank in range(ranks):
            path = Path(result["run_dir"]) / "metrics" / f"rank-{rank}.jsonl"
            mine = [json.loads(line) for line in path.read_text().splitlines() if '"type":"step"' in line]
            if mine:
                steps[rank] = mine
    finally:
        shutil.rmtree(result["run_dir"], ignore_errors=True)
    return result, steps


def step_seconds(record: dict[str, Any]) -> float:
    return sum(record[k] for k in PHASE_KEYS)
