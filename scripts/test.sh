#!/usr/bin/env bash
# The tests, in two lanes (extra arguments go to pytest):
#   bash scripts/test.sh          the whole suite (the README's command; CI runs it), as lanes side
#                                 by side: the tests that hold a shared service alone (-m serial: the
#                                 Slurm cluster's) one after another, and every other
#                                 test in SCALESTUDY_TEST_WORKERS worker processes (pytest-xdist,
#                                 default 3: past that the overlapping MPI jobs are limited by the 2
#                                 cores), a module to a worker so that a sweep its tests share is
#                                 built once; tests/conftest.py gives each worker a PostgreSQL
#                                 database of its own and the Slurm cluster to one test at a time
#   bash scripts/test.sh --fast   the fast lane, a few minutes: every module imported, the parsers,
#                                 config validation and bad-input refusals, the statistics'
#                                 simulations at reduced trials; no MPI job, sweep or Slurm
# Either way a test that fails is run once more at the end of its lane, alone
# (scripts/pytest_retry.py): one that then passes is reported as flaky and does not fail the run;
# one that fails twice does.
# The serial lane runs beside the main one and prints its log after it; then, with nothing beside
# them, the tests that disturb every other (-m alone: a restart of the PostgreSQL server).
set -euo pipefail
cd "$(dirname "$0")/.."
lane=full
if [ "${1:-}" = "--fast" ]; then lane=fast; shift; fi
bash scripts/setup-env.sh
start=$(date +%s)
if [ "$lane" = fast ]; then
  export SCALESTUDY_FAST_LANE=1   # the statistics' simulations at a quarter of their trials
  rc=0
  SCALESTUDY_TEST_LANE=fast .venv/bin/python scripts/pytest_retry.py -ra -q -n "${SCALESTUDY_TEST_WORKERS:-2}" --dist loadfile \
    -m "not (mpi or slurm or serial or alone or slow or sweep)" "$@" || rc=$?
  echo "test.sh: fast lane: exit $rc in $(( $(date +%s) - start )) s"
  exit "$rc"
fi
names=()
pids=()
logs=()
beside() {   # NAME COMMAND...: a lane run beside the main one, its output kept for later
  local log
  log=$(mktemp)
  names+=("$1")
  logs+=("$log")
  shift
  "$@" > "$log" 2>&1 &
  pids+=($!)
}
beside "the serial lane (the Slurm cluster's tests)" \
  env SCALESTUDY_TEST_LANE=serial .venv/bin/python scripts/pytest_retry.py -ra -m "serial and not alone" "$@"
workers=${SCALESTUDY_TEST_WORKERS:-3}
rc=0
# the modules longest first (scripts/pytest_module_order.py), so that the workers end together
SCALESTUDY_TEST_LANE=main .venv/bin/python scripts/pytest_retry.py -ra -n "$workers" --dist loadfile --durations=20 \
  -p pytest_module_order --no-loadscope-reorder \
  -m "not (serial or alone)" "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0   # none selected here (the arguments named only serial tests)
echo "test.sh: the whole suite but the serial lane: exit $rc in $(( $(date +%s) - start )) s ($workers workers)"
summary=()
for i in "${!pids[@]}"; do
  lrc=0
  wait "${pids[$i]}" || lrc=$?
  [ "$lrc" -eq 5 ] && lrc=0   # none selected in this lane
  echo; echo "test.sh: ${names[$i]}, run beside it:"
  cat "${logs[$i]}"
  rm -f "${logs[$i]}"
  summary+=("${names[$i]}: exit $lrc")
  [ "$lrc" -eq 0 ] || rc=1
done
arc=0
SCALESTUDY_TEST_LANE=alone .venv/bin/python scripts/pytest_retry.py -ra -m alone "$@" || arc=$?
[ "$arc" -eq 5 ] && arc=0   # none selected
summary+=("the tests run alone: exit $arc")
[ "$arc" -eq 0 ] || rc=1
echo "test.sh: $(printf '%s; ' "${summary[@]}")all lanes done in $(( $(date +%s) - start )) s: exit $rc"
exit "$rc"
