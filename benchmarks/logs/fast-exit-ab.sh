#!/bin/bash
# A = 2db71d9 (before: Parsl's typeguard instrumentation, interpreter teardown, Hydra's get_mode compose), B = bdd8cb4;
# A from a worktree first on PYTHONPATH (so the batch job's pool and the interchange are A's too); interleaved A B x5;
# bench_overhead waits for an empty queue + 2 s before each timed command
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
for i in 1 2 3 4 5; do
  echo "== round $i A"; PYTHONPATH=/tmp/old python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
  echo "== round $i B"; python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
done
