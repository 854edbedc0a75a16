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


def run_workload(spec: dict[str, Any], ranks: int, timeout: float = 900) -> dict[str, Any]:
    """One real MPI run of the workload; returns its result.json (plus the run dir)."""
    base = {"study": "bench", "site": "local", "nodes": 1, "workers_per_node": ranks,
            "threads_per_node": ranks, "epochs": 1}
    run_dir = Path(tempfile.mkdtemp(prefix="bench-"))
    (run_dir / "spec.json").write_text(json.dumps({**base, **spec}))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, "-m", "workloads", str(run_dir / "spec.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"workload failed: {proc.stderr[-2000:]}")
    result = json.loads((run_dir / "result.json").read_text())
    result["run_dir"] = str(run_dir)
    return result


def measure(spec: dict[str, Any], ranks: int, key: str = "throughput") -> float:
    """One run's ``result.json[key]``; the run's folder is removed afterwards."""
    import shutil

    result = run_workload(spec, ranks)
    shutil.rmtree(result["run_dir"], ignore_errors=True)
    return result[key]


def relaunch_under_mpiexec(ranks: int, argv: list[str]) -> int:
    """Run this script again as ``ranks`` MPI processes (with ``--worker``); return its exit code."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, *argv, "--worker"]
    return subprocess.run(cmd, env=env).returncode
