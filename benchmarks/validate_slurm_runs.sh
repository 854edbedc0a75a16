#!/usr/bin/env bash
# The model comparison's held-out site (issue 38; benchmarks/RESULTS.md, "The model against
# Extra-P, as a referee would have it"): the runs of validate_model_runs.py's fit set moved to the
# local Slurm cluster (site local_slurm: srun --mpi=pmi2, ranks spread over its 4 virtual nodes,
# MPICH's OFI netmod over tcp), P = 4 and 8, 5 repetitions, stored as study validate-slurm.
#
#   bash benchmarks/validate_slurm_runs.sh DB PROFILE D_MS
#
# DB: the SQLite file of validate_model_runs.py; PROFILE: the profile.json it wrote (named on its
# first lines); D_MS: its injected delay (ms, also on its first lines). Needs the cluster up
# (bash scripts/local-slurm-cluster.sh start). epochs x steps_per_epoch as harness.epochs_for
# gives the validate runs (50 steps or a few more).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 DB PROFILE D_MS" >&2; exit 2; }
db=$(realpath "$1"); profile=$(realpath "$2"); delay=$3
here=$(cd "$(dirname "$0")/.." && pwd)
common=(study_name=validate-slurm site=local_slurm "db_url=sqlite:///$db" model=resnet20 dataset=synthetic_images
        batch_size=32 nodes=4 timeline=true sync_every=10 compute=emulated "compute_profile=$profile" seed=0,1,2,3,4)
for size in "workers_per_node=1 epochs=3 steps_per_epoch=19" "workers_per_node=2 epochs=6 steps_per_epoch=9"; do
  # shellcheck disable=SC2086  # $size is two or three keys
  "$here/.venv/bin/scalestudy" sweep "${common[@]}" $size algorithm=sync
  # shellcheck disable=SC2086
  "$here/.venv/bin/scalestudy" sweep "${common[@]}" $size algorithm=eager_solo,eager_majority \
    imbalance.kind=injected imbalance.ranks=1 "imbalance.delay_ms=$delay"
done
