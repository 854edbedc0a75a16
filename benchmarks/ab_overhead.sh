#!/bin/bash
# Orchestration overhead on local_slurm, A against B side by side: A = commit $1 (a git worktree
# first on PYTHONPATH, so its interchange and the batch job's pool are A's too), B = this checkout;
# interleaved A B, $2 rounds (default 5), each `bench_overhead.py --site local_slurm --repeats 1`
# (which waits for an empty queue + 2 s before each timed command).
#   bash benchmarks/ab_overhead.sh 2db71d9 7 > benchmarks/logs/NAME.log
set -e
a=${1:?usage: ab_overhead.sh A_COMMIT [ROUNDS]}; rounds=${2:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=/tmp/ab-overhead-$a
[ -d "$tree" ] || git -C "$repo" worktree add -q "$tree" "$a"
cd "$repo"
export PATH=$repo/.venv/bin:$PATH
for i in $(seq "$rounds"); do
  echo "== round $i A"; PYTHONPATH=$tree python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
  echo "== round $i B"; python benchmarks/bench_overhead.py --site local_slurm --repeats 1 2>&1 | grep -E "round|overhead per run:"
done
