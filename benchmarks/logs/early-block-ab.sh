#!/bin/bash
# A = 7c14bd1 (before the early block and the fork server), B = a73285c; interleaved A B x5; bench_overhead pauses 2 s before each timed command
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
for i in 1 2 3 4 5; do
  echo "== round $i A"; PYTHONPATH=/tmp/old python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
  echo "== round $i B"; python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
done
