#!/bin/bash
# Issue 37's trade, side by side on local_slurm: A = commit $1 (today's code before the change,
# with Parsl's private parts: a git worktree first on PYTHONPATH, so its interchange and the batch
# job's pool are A's too), B = this checkout (public interfaces only). Same environment (.venv:
# the same Parsl and Hydra) for both. Interleaved A B, $2 rounds (default 5) of each measure:
#   1. bench_overhead.py --site local_slurm --repeats 1: the one-run sweep's overhead over a bare
#      `srun` (goal <= 6 s) and a 10-run sweep's per run over one `salloc` of 10 (goal <= 1 s);
#   2. bench_sweep_scale.py --runs $3 (default 400) --site local_slurm: the driver's CPU per run
#      (goal <= 60 ms), and with the interchange and scheduler commands it reaped.
# Then medians, ranges and the B/A ratio of each pair (benchmarks/ab_summary.py). The whole log
# goes to benchmarks/logs/public-interfaces-ab.log (and the terminal). About 35 min at 5
# rounds. Run it on a quiet machine:
#   bash benchmarks/ab_public_interfaces.sh f122cec 5
set -euo pipefail
a=${1:?usage: ab_public_interfaces.sh A_COMMIT [ROUNDS] [SCALE_RUNS]}
rounds=${2:-5}
runs=${3:-400}
repo=$(cd "$(dirname "$0")/.." && pwd)
tree=/tmp/ab-public-interfaces-$a
[ -d "$tree" ] || git -C "$repo" worktree add -q --detach "$tree" "$a"
cd "$repo"
export PATH=$repo/.venv/bin:$PATH
log=${AB_LOG:-benchmarks/logs/public-interfaces-ab.log}
exec > >(tee "$log") 2>&1
echo "A = $a ($tree), B = $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- orchestrator hydra_plugins || echo '+changes'), \
parsl $(python -c 'import parsl; print(parsl.__version__)'), hydra-core $(python -c 'import hydra; print(hydra.__version__)'), \
$rounds rounds, sweep scale $runs runs"
side() {   # side NAME COMMAND...: one measure of one side, its result lines tagged with the side
  local name=$1; shift
  if [ "$name" = A ]; then PYTHONPATH=$tree "$@"; else "$@"; fi 2>&1 | sed "s/^/[$name] /"
}
for i in $(seq "$rounds"); do
  for s in A B; do
    echo "== overhead round $i $s"
    side $s python benchmarks/bench_overhead.py --site local_slurm --repeats 1 | grep -E "overhead per run:|failed"
  done
done
for i in $(seq "$rounds"); do
  for s in A B; do
    echo "== scale round $i $s"
    side $s python benchmarks/bench_sweep_scale.py --runs "$runs" --site local_slurm \
      | grep -E "runs: wall|driver CPU|with the interchange|Hydra composing|Error"
  done
done
echo "== summary"
python benchmarks/ab_summary.py "$log"
