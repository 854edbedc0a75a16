"""Orchestration overhead: one small command through ``scalestudy sweep`` vs the same command under bare ``mpiexec``.

    python benchmarks/bench_overhead.py [--ranks 2] [--repeats 5] [--sweep-runs 10] [--site local]

Four variants, interleaved (A B C D A B C D …), each timed as wall clock of the whole
command from this process:

  bare1    mpiexec -n R python -c "print('throughput: …')"           (by hand)
  sweep1   scalestudy sweep of that command as one run                (a new run_key each time)
  bareN    the bare command N times in a row (N = --sweep-runs, 10 by default)
  sweepN   one scalestudy sweep of N runs of it (+params.i=0..N-1)

On a scheduler site (``--site local_slurm``, the Parsl path every real site takes) the
by-hand baseline is what a user types there: ``bare1`` is ``srun`` of the command from the
login node (the site's launcher options and env; it allocates, runs, returns), ``bareN``
one ``salloc`` running it N times in a row (the sweep's ``allocation: per_size`` also puts a
node count's runs in one batch job). Both sides pay Slurm's allocation; the difference is
what scalestudy adds (Hydra, Parsl's provider, batch script, interchange and worker, the
per-rank wrapper, ingestion).

Overhead per run = (sweep1 - bare1) and (sweep10 - bare10) / 10. Goals on a 2-core
machine: <= 3 s for a one-run sweep, <= 1 s per run amortised over 10 runs. The sweeps
write their phase times (``SCALESTUDY_PHASES``), so the report also says where the
overhead goes: process start-up and imports, Hydra, validation and the database,
the run pool, the MPI job with scalestudy's per-rank wrapper, ingestion, the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import BIN, interleave, median

REPO = Path(__file__).resolve().parent.parent
PROGRAM = "print('throughput: 1.0 samples/s')"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sweep-runs", type=int, default=10)
    ap.add_argument("--site", default="local")
    ap.add_argument("--builtin", action="store_true",
                    help="the run is the smoke study's built-in training (digits, small_cnn, 10 epochs) instead of "
                         "a trivial command; bare is `mpiexec -n R python -m workloads spec.json` of the same spec")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCALESTUDY_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"   # `python` is the environment's, for both
    bare_cmd = [str(BIN / "mpiexec"), "-n", str(args.ranks), "python", "-c", PROGRAM]
    if args.builtin:
        spec = {"study": "overhead", "site": "local", "nodes": 1, "workers_per_node": args.ranks,
                "threads_per_node": args.ranks, "epochs": 10}
        (work / "bare").mkdir()
        (work / "bare" / "spec.json").write_text(json.dumps(spec))
        bare_cmd = [str(BIN / "mpiexec"), "-n", str(args.ranks), "python", "-m", "workloads",
                    str(work / "bare" / "spec.json")]
    bare_env: dict[str, str] = {}
    if args.site != "local":
        bare_cmd, bare_many, bare_env = _slurm_baseline(args, work)
    else:
        bare_many = None
    phases_file = work / "phases.jsonl"
    counter = iter(range(1_000_000))

    def timed(cmd: list[str], extra_env: dict | None = None) -> float:
        if args.site != "local":
            _wait_until_nodes_idle()   # both sides alike, untimed
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=work, env={**env, **(extra_env or {})}, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} … failed:\n{proc.stderr[-2000:]}")
        return elapsed

    def sweep(runs: int) -> list[str]:
        batch = next(counter)   # new params -> new run_keys: every run really executes
        values = ",".join(str(batch * 1000 + i) for i in range(runs))
        what = ["epochs=10"] if args.builtin else [
            "workload.kind=command", f"workload.command=[python,-c,{json.dumps(PROGRAM)}]",
            "+workload.metrics.throughput.pattern='throughput: ([0-9.]+)'"]
        return [sys.executable, "-m", "orchestrator.cli", "sweep", f"site={args.site}", "study_name=overhead",
                "nodes=1", f"workers_per_node={args.ranks}", *what, f"+params.i={values}",
                f"hydra.sweep.dir={work / 'multirun' / str(batch)}"]

    n = args.sweep_runs
    variants = {
        "bare1": lambda: timed(bare_cmd, bare_env),
        "sweep1": lambda: timed(sweep(1), {"SCALESTUDY_PHASES": str(phases_file)}),
        f"bare{n}": (lambda: timed(bare_many(n), bare_env)) if bare_many else
        (lambda: sum(timed(bare_cmd) for _ in range(n))),
        f"sweep{n}": lambda: timed(sweep(n), {"SCALESTUDY_PHASES": str(phases_file)}),
    }
    timed(sweep(1))  # creates and migrates the database once, outside the measurement
    print(f"orchestration overhead: {'smoke training' if args.builtin else 'a trivial command'}, {args.ranks} ranks "
          f"on site {args.site}, {args.repeats} interleaved repeats, sweeps of 1 and {args.sweep_runs} runs")
    samples = interleave(variants, args.repeats)
    records = [json.loads(line) for line in phases_file.read_text().splitlines()]
    one = [r for i, r in enumerate(records) if i % 2 == 0]    # sweep1, sweep10 alternate
    ten = [r for i, r in enumerate(records) if i % 2 == 1]

    def spread(xs: list[float]) -> str:
        return f"{median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"

    print(f"\nwall time, median of {args.repeats}:")
    for name in variants:
        print(f"  {name:8s} {spread(samples[name])}")
    per_run_1 = [s - b for s, b in zip(samples["sweep1"], samples["bare1"])]
    per_run_10 = [(s - b) / n for s, b in zip(samples[f"sweep{n}"], samples[f"bare{n}"])]
    for label, recs, walls in (("1-run sweep", one, samples["sweep1"]),
                               (f"{n}-run sweep", ten, samples[f"sweep{n}"])):
        keys = [k for k in recs[0] if k not in ("since_import", "cpu_s", "peak_rss_mib", "children_cpu_s")]
        med = {k: statistics.median(r.get(k, 0.0) for r in recs) for k in keys}
        inner = sum(v for k, v in med.items() if k not in ("hydra_total", "mpi_job"))  # runs holds mpi_job
        startup = median(walls) - statistics.median(r["since_import"] for r in recs)
        print(f"\nwhere a {label} goes (medians, seconds):")
        print(f"  start-up and imports before the sweep  {startup:.2f}")
        print(f"  Hydra: composing the sweep, plugins    {med['hydra_total'] - inner:.2f}"
              " (what the phases below leave of Hydra's time)")
        for k in ("compose_jobs", "validate_and_register", "pool_start", "runs", "mpi_job", "ingest", "poll",
                  "report", "pool_stop"):
            if k in med:
                note = {"runs": " (waiting for runs: the MPI jobs and Hydra's run_job around them)",
                        "mpi_job": " (of which: mpiexec + scalestudy's per-rank wrapper + the command)",
                        "validate_and_register": " (specs, the user's factories, the database)"}.get(k, "")
                print(f"    {k:24s} {med[k]:.3f}{note}")
    print(f"\noverhead per run: one-run sweep {spread(per_run_1)} (goal <= 3 s); "
          f"{args.sweep_runs}-run sweep {spread(per_run_10)} per run (goal <= 1 s)")
    print(f"ratio sweep1/bare1 = {median(samples['sweep1']) / median(samples['bare1']):.1f}; "
          f"overhead per run (1 run) = {median(per_run_1):.2f} s; "
          f"overhead per run ({args.sweep_runs} runs) = {median(per_run_10):.2f} s")
    shutil.rmtree(work, ignore_errors=True)


def _wait_until_nodes_idle(pause_s: float = 2.0, limit_s: float = 60.0) -> None:
    """Before each timed command on Slurm: no job left, then ``pause_s`` of quiet. Back to back,
    Slurm started the next batch job late: `sbatch` of a one-line job right after an `srun`
    began 2.6 s later (3 tries), after 2 s of quiet 0.3-0.7 s (4 tries), though `sinfo` shows
    the node idle at once. That is this benchmark's pace, not a cost of either side; both
    sides get the same pause, outside the timed part."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(0.1)
    time.sleep(pause_s)


def _slurm_baseline(args, work: Path):
    """The by-hand runs on a Slurm site, with the site's launcher options and env: ``srun``
    from the login node for one run (it allocates, runs and returns), ``salloc`` of one
    allocation running ``srun`` N times in a row for N. (``sbatch --wait`` was tried first:
    it polls the job's state every 2 s, so every bare time read 2.01 s whatever the job did.)"""
    import shlex

    sys.path.insert(0, str(REPO))
    from orchestrator.site.config import load_site

    site = load_site(args.site)
    if site.provider != "slurm":
        raise SystemExit(f"--site {args.site}: provider {site.provider}: the by-hand baseline is written for Slurm")
    where = [f"--partition={site.partition}"] if site.partition else []
    srun = ["srun", *shlex.split(site.launcher_options or ""), "-N", "1", "-n", str(args.ranks), *where,
            str(BIN / "python"), "-c", PROGRAM]
    exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in site.env)

    def many(runs: int) -> list[str]:
        path = work / f"bare-{runs}.sh"
        if not path.exists():
            path.write_text(f"#!/bin/bash\nset -e\n{exports}for i in $(seq {runs}); do {shlex.join(srun)}; done\n")
        return ["salloc", "--quiet", "-N", "1", "-n", str(args.ranks), *where, "bash", str(path)]

    return srun, many, dict(site.env)


if __name__ == "__main__":
    main()
