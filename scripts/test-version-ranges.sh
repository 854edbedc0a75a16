#!/usr/bin/env bash
# The suites that touch Parsl or Hydra, run on another environment's releases:
#   bash scripts/test-version-ranges.sh parsl .venv-parsl-floor [pytest args]
#   bash scripts/test-version-ranges.sh hydra .venv-hydra-floor [pytest args]
# .ci/run runs them on the floors of pyproject.toml's ranges (the newest releases are .venv's,
# where the whole suite runs). A subset, to keep CI's time (~5 min on 2 cores): every
# Parsl-facing behaviour once (a packed Slurm sweep over virtual nodes, the PBS Pro and Cobalt
# stand-ins packed, encryption, node loss, run placement, the interchange tied to the driver's
# life, the version check); the Hydra suites whole, and local sweeps through Hydra's
# resolver, its run_job and its errors (~1.5 min). A test that fails is run
# once more on its own (scripts/pytest_retry.py): it fails the run only if it fails again
# (reported either way), so one flaky test does not decide a landing. The Parsl subset runs in
# two xdist workers, a module to each (its tests mostly wait on Slurm, the stand-ins and Parsl's
# pools; tests/conftest.py hands the Slurm cluster to one test at a time): ~3 min instead of 5.
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:?usage: test-version-ranges.sh parsl|hydra ENV [pytest args]}
ENV=${2:?usage: test-version-ranges.sh parsl|hydra ENV [pytest args]}
shift 2
case "$KIND" in
  parsl) WORKERS=(-n 2 --dist loadfile) TESTS=(
      tests/orchestrator/test_placement.py tests/orchestrator/test_interchange.py tests/orchestrator/test_versions.py
      "tests/orchestrator/test_parsl_security.py::test_only_worker_pools_with_the_sweeps_keys_can_register"
      "tests/end_to_end/test_slurm.py::test_packed_sweep_runs_in_one_slurm_job_on_disjoint_nodes"
      "tests/end_to_end/test_fake_schedulers.py::test_packed_sweep_through_scheduler_stand_in"
      "tests/reliability/test_node_lost.py::test_a_run_whose_node_goes_down_is_retried_on_a_new_allocation"
    ) ;;
  hydra) WORKERS=() TESTS=(
      tests/orchestrator/test_sweep_compose.py tests/orchestrator/test_sweeper.py tests/orchestrator/test_launcher_conformance.py tests/orchestrator/test_versions.py
      "tests/orchestrator/test_cli_sweep.py::test_a_run_folder_named_through_hydras_resolver"
      "tests/orchestrator/test_cli_sweep.py::test_local_runs_planned_whole_skip_hydras_run_job"
      "tests/orchestrator/test_cli_sweep.py::test_bad_input_is_one_line_and_submits_nothing"
    ) ;;
  *) echo "test-version-ranges: parsl or hydra, not $KIND" >&2; exit 2 ;;
esac
PY="$ENV/bin/python"
"$PY" -c "import parsl, hydra, omegaconf; print('test-version-ranges: $KIND suites on parsl', parsl.__version__, \
'hydra-core', hydra.__version__, 'omegaconf', omegaconf.__version__)"
start=$(date +%s)
rc=0
SCALESTUDY_TEST_LANE="floor_$KIND" "$PY" scripts/pytest_retry.py -ra "${WORKERS[@]}" "${TESTS[@]}" "$@" || rc=$?
echo "test-version-ranges: $KIND suites on $ENV: exit $rc in $(( $(date +%s) - start )) s"
exit "$rc"
