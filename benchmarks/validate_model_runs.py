"""The runs the performance model is validated on (issue 15, item 4), stored in one SQLite file.

    python benchmarks/validate_model_runs.py --db /tmp/validate.db [--model resnet20] [--batch-size 32]
        [--steps 40] [--warmup 10] [--repeats 2] [--small-repeats 1] [--pinned] [--real-only]
        [--algorithms sync,eager_solo,eager_majority,horovod]

Studies written (``benchmarks/validate_model.py`` fits and predicts from them):

- ``validate-profile``: real 1-rank runs with ``timeline=true`` (``--repeats``), two at a time
  so the profile feels a node whose cores both compute; their pooled profile drives every
  emulated run, and they are the 1-rank fit set for the real 1 -> 2 prediction;
- ``validate-small``: emulated runs at 2, 4 and 8 ranks, ``--small-repeats`` per algorithm and
  size (the fit set);
- ``validate-pinned`` (with ``--pinned``): emulated runs at 4 and 8 ranks pinned to one of the
  2 CPUs (``taskset -c 0``: up to 8 ranks per CPU, the crowding of 16 ranks on both), one per
  algorithm and size: ``validate_model.py --pinned include`` adds them to the fit set;
- ``validate-large``: emulated runs at 16 and 32 ranks, ``--repeats`` each (what is predicted);
- ``validate-real2``: real 2-rank ``sync`` runs, ``--repeats`` (the real prediction's check),
  taken between the 16-32-rank runs, 25 min or more after the profile; ``--real-only`` takes
  only the profile and these, interleaved (pair, 2 ranks, pair, ...).

Every algorithm but ``sync`` runs under the paper's injection: each step one of P ranks,
drawn with a shared seed, sleeps D = the profile's median forward + backward (D = 1 x C).
``sync`` runs without it. All runs: one thread per rank, ``sync_every`` 10.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
from pathlib import Path

from harness import epochs_for, finish_workload, start_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="SQLite file to write (created)")
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic_images")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40, help="measured steps per run, after --warmup")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--small-repeats", type=int, default=1, help="runs per algorithm and size of the fit set")
    ap.add_argument("--pinned", action="store_true", help="also the validate-pinned runs (4 and 8 ranks on 1 CPU)")
    ap.add_argument("--real-only", action="store_true",
                    help="only the real 1 -> 2 rank check: validate-profile pairs and validate-real2 runs, "
                         "interleaved (--repeats of each)")
    ap.add_argument("--algorithms", default="sync,eager_solo,eager_majority,horovod")
    args = ap.parse_args()

    from perf_model.profile import profile_of_runs
    from results_db import connect
    from results_db.ingest import ingest_run
    from results_db.runs import PlannedRun, register_runs

    algorithms = args.algorithms.split(",")
    if Path(args.db).exists():
        raise SystemExit(f"--db {args.db} exists: its runs would mix with this replication's; give a new file")
    if "horovod" in algorithms and importlib.util.find_spec("horovod") is None:
        raise SystemExit("--algorithms includes horovod, which is not installed in this environment: "
                         "bash scripts/install-horovod.sh, or leave it out of --algorithms")
    engine = connect(f"sqlite:///{Path(args.db).resolve()}")
    scratch = Path(tempfile.mkdtemp(prefix="validate-model-"))
    profile_path = scratch / "profile.json"

    def spec(ranks: int, **extra) -> dict:
        epochs, per_epoch = epochs_for(args.dataset, args.batch_size, ranks, args.steps + args.warmup)
        return {"model": args.model, "dataset": args.dataset, "batch_size": args.batch_size, "epochs": epochs,
                "steps_per_epoch": per_epoch, "workers_per_node": ranks, "threads_per_node": ranks,
                "timeline": True, "sync_every": 10, **extra}

    def store(study: str, result: dict) -> int:
        stored = json.loads((Path(result["run_dir"]) / "spec.json").read_text())
        [decision] = register_runs(engine, study, [PlannedRun(result["run_dir"], stored, result["run_dir"])],
                                   rerun=True)
        ingest_run(engine, decision.run_id, result["run_dir"])
        return decision.run_id

    def emulated(ranks: int, algorithm: str, delay_ms: float, seed: int) -> dict:
        injected = {"imbalance_kind": "injected", "imbalance_ranks": 1, "imbalance_delay_ms": delay_ms} \
            if algorithm != "sync" else {}
        return spec(ranks, algorithm=algorithm, compute="emulated", compute_profile=str(profile_path), seed=seed,
                    **injected)

    def profile_pair(r: int) -> list[int]:
        started = [start_workload({**spec(1, algorithm="sync"), "seed": r * 2 + i}, 1) for i in range(2)]
        return [store("validate-profile", finish_workload(*run)) for run in started]

    def real2(r: int) -> int:
        run = store("validate-real2", finish_workload(*start_workload({**spec(2, algorithm="sync"), "seed": r}, 2)))
        print(f"  real: sync 2 ranks, repeat {r + 1} -> run {run}", flush=True)
        return run

    if args.real_only:
        # the 1 -> 2 rank check alone, its two sides interleaved (pair, 2 ranks, pair, ...) so
        # that the VM's drift hits both alike
        for r in range(args.repeats):
            print(f"  profile pair {r + 1} -> runs {profile_pair(r)}", flush=True)
            real2(r)
        print(f"done: {args.db}")
        return
    print(f"profile: {args.repeats} x two concurrent real 1-rank runs", flush=True)
    ids = []
    for r in range(args.repeats):
        ids += profile_pair(r)
    profile = profile_of_runs(engine, ids, warmup=args.warmup)
    profile_path.write_text(profile.to_json())
    c = statistics.median(profile.forward) + statistics.median(profile.backward)
    delay_ms = round(c * 1e3, 1)
    print(f"profile {profile_path}: C = {c * 1e3:.1f} ms; injected D = {delay_ms} ms", flush=True)

    for r in range(args.small_repeats):
        for ranks in (2, 4, 8):
            for algorithm in algorithms:
                run = store("validate-small", finish_workload(*start_workload(emulated(ranks, algorithm, delay_ms, r),
                                                                              ranks)))
                print(f"  small: {algorithm} {ranks} ranks, repeat {r + 1} -> run {run}", flush=True)
        if args.pinned and r == 0:
            for ranks in (4, 8):
                for algorithm in algorithms:
                    run = store("validate-pinned", finish_workload(*start_workload(
                        emulated(ranks, algorithm, delay_ms, 0), ranks, cpus="0")))
                    print(f"  pinned: {algorithm} {ranks} ranks on CPU 0 -> run {run}", flush=True)
    for r in range(args.repeats):
        for ranks in (16, 32):
            for algorithm in algorithms:
                run = store("validate-large", finish_workload(*start_workload(
                    emulated(ranks, algorithm, delay_ms, r), ranks), timeout=1800))
                print(f"  large: {algorithm} {ranks} ranks, repeat {r + 1} -> run {run}", flush=True)
        real2(r)
    print(f"done: {args.db}")


if __name__ == "__main__":
    main()
