"""Shared plumbing for side-by-side benchmarks: interleaved repeats, medians, ratios.

Baseline and candidate alternate (A B A B …) so that drift in a shared machine's
load hits both alike; medians resist the odd slow repeat.
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
from typing import Any, Callable

BIN = Path(sys.executable).parent


def interleave(variants: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Call each variant once per round, ``repeats`` rounds; collect what each returns."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(repeats):
        for name, fn in variants.items():
            samples[name].append(fn())
        print(f"  round {r + 1}/{repeats}: " + ", ".join(f"{n}={samples[n][-1]:.4g}" for n in variants), flush=True)
    return samples


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
