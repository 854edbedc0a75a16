"""A short run's start-up, before and after issue 59's two changes to it (A B A B ..., medians):

- ``before``: the ranks that arrive first wait in MPI_Barrier and the engines' first collectives,
  where MPICH polls at full speed, and each rank imports scikit-learn to load the digits;
- ``asleep``: they wait asleep (``workloads/comm/arrival.py``), each still importing scikit-learn;
- ``after`` (as shipped): asleep, and the digits read from the per-release cache (``workloads/data.py``).

The same code either way: ``before`` is the shipped workload with those two functions put back
as they were, in each rank (``--rank``). A run of 4 ranks on this 2-core machine, 3 steps of the
digits CNN: a test's run, whose start-up is most of it. Measured: the MPI job's wall seconds and
the CPU seconds of all its processes (``RUSAGE_CHILDREN``), which is what the suite runs short of.

    python benchmarks/bench_rank_startup.py [--repeats 5] [--ranks 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import BIN, interleave, median, spread

SPEC = {"study": "bench", "site": "local", "nodes": 1, "model": "small_cnn", "dataset": "digits",
        "batch_size": 16, "epochs": 1, "steps_per_epoch": 3}


def rank(variant: str, spec: str) -> int:
    """One rank of the workload, with the start-up as ``variant`` has it."""
    if variant in ("before", "asleep"):
        import numpy as np

        import workloads.data
        import workloads.train

        def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
            from sklearn.datasets import load_digits

            bunch = load_digits()
            return bunch.data, bunch.target

        workloads.data._digits_arrays = sklearn_digits
        if variant == "before":
            workloads.train.all_arrived = lambda comm: comm.Barrier()
    from workloads.__main__ import main

    return main([spec])


def one_run(variant: str, ranks: int, seconds: dict[str, list[float]]) -> float:
    folder = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    (folder / "spec.json").write_text(json.dumps({**SPEC, "workers_per_node": ranks, "threads_per_node": ranks}))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([str(BIN / "mpiexec"), "-n", str(ranks), sys.executable, __file__, "--rank", variant,
                           str(folder / "spec.json")], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant}: the run failed: {proc.stderr[-2000:]}")
    seconds.setdefault(variant, []).append(wall)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rank", nargs=2, metavar=("VARIANT", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        return rank(*args.rank)
    wall: dict[str, list[float]] = {}
    one_run("after", args.ranks, {})    # the digits' cache written, the page cache warm: neither side pays it
    cpu = interleave({v: (lambda v=v: one_run(v, args.ranks, wall)) for v in ("before", "asleep", "after")}, args.repeats)
    print(f"{args.ranks} ranks on {os.cpu_count()} CPUs, {SPEC['steps_per_epoch']} steps of {SPEC['model']} on "
          f"{SPEC['dataset']}, {args.repeats} interleaved repeats (median, min-max):")
    for what, samples in (("CPU seconds, all processes", cpu), ("wall seconds", wall)):
        b = median(samples["before"])
        print(f"  {what}: " + ", ".join(f"{v} {median(samples[v]):.2f} ({spread(samples[v])})" for v in samples)
              + "; over before: " + ", ".join(f"{v} {median(samples[v]) / b:.2f}" for v in samples if v != "before"))
    for v in ("asleep", "after"):
        ratios = [a / b for a, b in zip(cpu[v], cpu["before"])]
        print(f"  CPU {v}/before per round: median {median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
