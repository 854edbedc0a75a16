"""Thousands of runs: what the sweep driver costs per run, and whether any of it grows with the sweep.

    python benchmarks/bench_sweep_scale.py [--runs 500,2000] [--site local]

For each size N, one ``scalestudy sweep`` of N runs of a trivial command workload on
``--site`` (1 rank; the command prints a throughput line), ``+params.i=range(0,N)``,
into a new SQLite database. Measured on the driver process alone (not its MPI jobs); on a
scheduler site (``local_slurm``: the Parsl path, every run an ``srun`` in one batch job)
also the login node's other processes the driver started and reaped: Parsl's interchange
and the scheduler's commands (``children_cpu_s``; on ``site=local`` that would hold the runs
themselves, so it is not printed there):

- CPU time (user + system, all its threads; ``SCALESTUDY_PHASES``) per run — goal <= 50 ms;
- resident memory sampled every 0.5 s from /proc against the runs finished so far (read
  from the sweep's one-line-per-event log) — goal: flat once the runs start, not growing
  with the runs finished;
- the time Hydra takes to compose the jobs (the launcher's ``compose_jobs`` phase) and the
  other phases, per run;
- the database's size on disk, per run.

Two sizes, so that a step quadratic in the number of runs shows as a per-run cost that
grows from the smaller sweep to the larger one (linear work stays flat per run). Not
interleaved: each sweep is minutes long and measures itself; the machine's noise shows in
the wall time, not in the CPU time of one process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import BIN

PROGRAM = "print('throughput: 1.0 samples/s')"
FINISHED = re.compile(r"\[(\d+)/(\d+) finished")


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def one_sweep(runs: int, site: str = "local") -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-scale-"))
    phases = work / "phases.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESTUDY_")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", SCALESTUDY_PHASES=str(phases))
    cmd = [sys.executable, "-m", "orchestrator.cli", "sweep", f"site={site}", "study_name=scale", "nodes=1",
           "workers_per_node=1", "threads_per_node=1", "workload.kind=command",
           f"workload.command=[python,-c,{json.dumps(PROGRAM)}]",
           "+workload.metrics.throughput.pattern='throughput: ([0-9.]+)'", f"+params.i=range(0,{runs})",
           f"hydra.sweep.dir={work / 'multirun'}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    finished = [0]
    tail: list[str] = []

    def read_log() -> None:
        for line in proc.stderr:
            tail.append(line)
            del tail[:-20]
            m = FINISHED.search(line)
            if m:
                finished[0] = int(m.group(1))

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    samples: list[tuple[float, int, float]] = []   # (seconds, runs finished, RSS MiB)
    while proc.poll() is None:
        rss = rss_mib(proc.pid)
        if rss is not None:
            samples.append((time.perf_counter() - t0, finished[0], rss))
        time.sleep(0.5)
    wall = time.perf_counter() - t0
    reader.join(timeout=5)
    if proc.returncode != 0:
        raise RuntimeError(f"the {runs}-run sweep failed:\n{''.join(tail)}")
    record = json.loads(phases.read_text().splitlines()[-1])
    db = work / "scalestudy.db"
    size = sum(p.stat().st_size for p in work.glob("scalestudy.db*"))
    shutil.rmtree(work, ignore_errors=True)
    return {"runs": runs, "wall": wall, "phases": record, "samples": samples, "db_bytes": size, "db": str(db)}


def rss_at(samples: list[tuple[float, int, float]], fraction: float, runs: int) -> float:
    """Highest RSS sampled while fewer than ``fraction`` of the runs had finished (and at least one had)."""
    window = [rss for _, done, rss in samples if 0 < done <= fraction * runs]
    return max(window) if window else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="500,2000", help="sweep sizes, comma-separated")
    ap.add_argument("--site", default="local", help="site (local_slurm: the Parsl path)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.runs.split(",")]
    print(f"sweep scale: sweeps of {', '.join(map(str, sizes))} runs of a trivial command, site={args.site}, 1 rank, "
          "SQLite", flush=True)
    results = []
    for n in sizes:
        r = one_sweep(n, args.site)
        results.append(r)
        ph, s = r["phases"], r["samples"]
        print(f"\n{n} runs: wall {r['wall']:.0f} s ({n / r['wall']:.2f} runs/s)")
        print(f"  driver CPU {ph['cpu_s']:.1f} s = {ph['cpu_s'] / n * 1e3:.1f} ms per run (goal <= 50); "
              f"peak RSS {ph['peak_rss_mib']:.0f} MiB")
        if args.site != "local" and "children_cpu_s" in ph:
            both = ph["cpu_s"] + ph["children_cpu_s"]
            print(f"  with the interchange and scheduler commands it reaped: {both:.1f} s = "
                  f"{both / n * 1e3:.1f} ms per run")
        print(f"  RSS (MiB) by runs finished: <=10% {rss_at(s, .1, n):.0f}, <=50% {rss_at(s, .5, n):.0f}, "
              f"<=90% {rss_at(s, .9, n):.0f}, all {rss_at(s, 1.0, n):.0f}")
        print(f"  Hydra composing the jobs: {ph.get('compose_jobs', 0):.1f} s = "
              f"{ph.get('compose_jobs', 0) / n * 1e3:.1f} ms per run")
        for k in ("validate_and_register", "pool_start", "runs", "mpi_job", "ingest", "poll", "report", "pool_stop",
                  "hydra_total"):
            if k in ph:
                print(f"  phase {k:22s} {ph[k]:8.1f} s  {ph[k] / n * 1e3:7.1f} ms per run")
        print(f"  database: {r['db_bytes'] / 2**20:.1f} MiB, {r['db_bytes'] / n / 1024:.1f} KiB per run")
    if len(results) > 1:
        a, b = results[0], results[-1]
        cpu_a, cpu_b = a["phases"]["cpu_s"] / a["runs"], b["phases"]["cpu_s"] / b["runs"]
        print(f"\ndriver CPU per run, {b['runs']} runs over {a['runs']} runs: {cpu_b / cpu_a:.2f} "
              "(1: linear in the runs; a quadratic step grows it with the sweep)")
        comp_a = a["phases"].get("compose_jobs", 0) / a["runs"]
        comp_b = b["phases"].get("compose_jobs", 0) / b["runs"]
        print(f"Hydra composition per run, same ratio: {comp_b / comp_a:.2f}")


if __name__ == "__main__":
    main()
