"""One "sweep" writing to a shared results database: plan runs, heartbeat, mark running, ingest.

    python sweep_writer.py DB_URL STUDY RUN_DIR N
"""

import sys

from results_db import connect
from results_db.ingest.folder import ingest_run
from results_db.store.runs import PlannedRun, heartbeat, mark_running, register_runs
from workloads.spec import RunSpec

url, study, run_dir, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
engine = connect(url)
spec = RunSpec.load(f"{run_dir}/spec.json").to_dict()
driver = f"writer-{study}"
for i in range(n):
    [d] = register_runs(engine, study, [PlannedRun(f"{study}-{i}", {**spec, "seed": i}, run_dir)], driver=driver)
    heartbeat(engine, [d.run_id], driver)
    mark_running(engine, [d.run_id])
    ingest_run(engine, d.run_id, run_dir)
print("OK", study)
