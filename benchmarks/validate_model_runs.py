"""The runs the performance model is validated on (issue 15, item 4), stored in one SQLite file.

    python benchmarks/validate_model_runs.py --db /tmp/validate.db [--model resnet20] [--batch-size 32]
        [--steps 40] [--warmup 10] [--repeats 2] [--small-repeats 1] [--pinned] [--real-only]
        [--algorithms sync,eager_solo,eager_majority,horovod] [--fit-sizes 2,4,8]
        [--held-sizes 16,32] [--held-batch 64 --held-batch-sizes 4,8] [--no-real2]
        [--append --profile FILE [--batch-profile FILE] --first-repeat N]

Studies written (``benchmarks/validate_model.py`` and ``bench_model_vs_extrap.py`` fit and
predict from them):

- ``validate-profile``: real 1-rank runs with ``timeline=true`` (``--repeats``), two at a time
  so the profile feels a node whose cores both compute; their pooled profile drives every
  emulated run, and they are the 1-rank fit set for the real 1 -> 2 prediction;
- ``validate-small``: emulated runs at ``--fit-sizes`` ranks, ``--small-repeats`` per
  algorithm and size (the fit set);
- ``validate-pinned`` (with ``--pinned``): emulated runs at 4 and 8 ranks pinned to one of the
  2 CPUs (``taskset -c 0``: up to 8 ranks per CPU, the crowding of 16 ranks on both), one per
  algorithm and size: ``validate_model.py --pinned include`` adds them to the fit set;
- ``validate-large``: emulated runs at ``--held-sizes`` ranks, ``--repeats`` each (what is predicted);
- with ``--held-batch B``: ``validate-profile-batch`` (real 1-rank pairs at batch B, as the
  profile's) and ``validate-batch``: emulated runs at batch B from that profile, at
  ``--held-batch-sizes`` ranks, ``--repeats`` each, injected D = that profile's C (a
  condition no fit at ``--batch-size`` has seen);
- ``validate-real2`` (unless ``--no-real2``): real 2-rank ``sync`` runs, ``--repeats`` (the real
  prediction's check), one after each round of held-out runs; ``--real-only`` takes only the
  profile and these, interleaved (pair, 2 ranks, pair, ...).

``--append`` adds runs to an existing ``--db`` from the profiles an earlier invocation wrote
(its ``profile.json`` / ``profile-batch.json``, named on its first lines), taking no profile
runs, with seeds from ``--first-repeat`` on: a repetition to replace one that was disturbed.

The emulated runs go in rounds: round r runs the fit set's repetition r (while r <
``--small-repeats``) and then the held-out repetition r (while r < ``--repeats``), so that the
machine's drift hits the fit and the held-out runs alike.

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
    ap.add_argument("--fit-sizes", default="2,4,8", help="rank counts of the fit set (validate-small)")
    ap.add_argument("--held-sizes", default="16,32", help="rank counts predicted (validate-large)")
    ap.add_argument("--held-batch", type=int, default=None,
                    help="also a held-out batch size: its own 1-rank profile and validate-batch runs")
    ap.add_argument("--held-batch-sizes", default="4,8", help="rank counts of the validate-batch runs")
    ap.add_argument("--no-real2", action="store_true", help="leave out the real 2-rank validate-real2 runs")
    ap.add_argument("--append", action="store_true", help="add to an existing --db from --profile (no profile runs)")
    ap.add_argument("--profile", help="with --append: the profile of the --batch-size runs")
    ap.add_argument("--batch-profile", help="with --append and --held-batch: the profile of the held-out batch")
    ap.add_argument("--first-repeat", type=int, default=0, help="the first repetition's index (its runs' seed)")
    args = ap.parse_args()

    from perf_model.profile import profile_of_runs
    from results_db import connect
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs

    algorithms = args.algorithms.split(",")
    sizes = {}
    for flag in ("fit_sizes", "held_sizes", "held_batch_sizes"):
        try:
            sizes[flag] = [int(x) for x in getattr(args, flag).split(",")]
        except ValueError:
            ap.exit(2, f"--{flag.replace('_', '-')} {getattr(args, flag)!r}: not a comma-separated list "
                       "of rank counts\n")
    if args.append and not (args.profile and (args.batch_profile or not args.held_batch)):
        ap.exit(2, "--append needs --profile (and --batch-profile with --held-batch): the earlier profiles\n")
    if Path(args.db).exists() and not args.append:
        raise SystemExit(f"--db {args.db} exists: its runs would mix with this replication's; give a new file")
    if "horovod" in algorithms and importlib.util.find_spec("horovod") is None:
        raise SystemExit("--algorithms includes horovod, which is not installed in this environment: "
                         "bash scripts/install-horovod.sh, or leave it out of --algorithms")
    engine = connect(f"sqlite:///{Path(args.db).resolve()}")
    scratch = Path(tempfile.mkdtemp(prefix="validate-model-"))
    profile_path = scratch / "profile.json"

    def spec(ranks: int, batch: int | None = None, **extra) -> dict:
        batch = batch or args.batch_size
        epochs, per_epoch = epochs_for(args.dataset, batch, ranks, args.steps + args.warmup)
        return {"model": args.model, "dataset": args.dataset, "batch_size": batch, "epochs": epochs,
                "steps_per_epoch": per_epoch, "workers_per_node": ranks, "threads_per_node": ranks,
                "timeline": True, "sync_every": 10, **extra}

    def store(study: str, result: dict) -> int:
        stored = json.loads((Path(result["run_dir"]) / "spec.json").read_text())
        [decision] = register_runs(engine, study, [PlannedRun(result["run_dir"], stored, result["run_dir"])],
                                   rerun=True)
        ingest_run(engine, decision.run_id, result["run_dir"])
        return decision.run_id

    def emulated(ranks: int, algorithm: str, delay_ms: float, seed: int, profile: Path | None = None,
                 batch: int | None = None) -> dict:
        profile = profile or profile_path   # read at call time: --append rebinds it
        injected = {"imbalance_kind": "injected", "imbalance_ranks": 1, "imbalance_delay_ms": delay_ms} \
            if algorithm != "sync" else {}
        return spec(ranks, batch, algorithm=algorithm, compute="emulated", compute_profile=str(profile), seed=seed,
                    **injected)

    def profile_pair(r: int, batch: int | None = None, study: str = "validate-profile") -> list[int]:
        started = [start_workload({**spec(1, batch, algorithm="sync"), "seed": r * 2 + i}, 1) for i in range(2)]
        return [store(study, finish_workload(*run)) for run in started]

    def take_profile(path: Path, batch: int | None, study: str) -> float:
        """Pool ``--repeats`` pairs of real 1-rank runs into the profile at ``path``; the injected D (ms)."""
        ids = []
        for r in range(args.repeats):
            ids += profile_pair(r, batch, study)
        profile = profile_of_runs(engine, ids, warmup=args.warmup)
        path.write_text(profile.to_json())
        c = statistics.median(profile.forward) + statistics.median(profile.backward)
        print(f"profile {path} (batch {batch or args.batch_size}, runs {ids}): C = {c * 1e3:.1f} ms; "
              f"injected D = {round(c * 1e3, 1)} ms", flush=True)
        return round(c * 1e3, 1)

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
    batch_profile = scratch / "profile-batch.json"
    if args.append:
        from workloads.emulation import ComputeProfile

        def delay_of(path: str) -> float:
            loaded = ComputeProfile.load(path)
            return round((statistics.median(loaded.forward) + statistics.median(loaded.backward)) * 1e3, 1)

        profile_path, delay_ms = Path(args.profile), delay_of(args.profile)
        if args.held_batch:
            batch_profile, batch_delay_ms = Path(args.batch_profile), delay_of(args.batch_profile)
        print(f"appending: D = {delay_ms} ms" + (f", batch {args.held_batch}: {batch_delay_ms} ms" if args.held_batch
                                                  else ""), flush=True)
    else:
        print(f"profile: {args.repeats} x two concurrent real 1-rank runs", flush=True)
        delay_ms = take_profile(profile_path, None, "validate-profile")
        if args.held_batch:
            batch_delay_ms = take_profile(batch_profile, args.held_batch, "validate-profile-batch")

    def emulated_runs(study: str, ranks_list: list[int], r: int, **how) -> None:
        for ranks in ranks_list:
            for algorithm in algorithms:
                run = store(study, finish_workload(*start_workload(emulated(ranks, algorithm, seed=r, **how), ranks),
                                                   timeout=1800))
                print(f"  {study}: {algorithm} {ranks} ranks, repeat {r + 1} -> run {run}", flush=True)

    for i in range(max(args.small_repeats, args.repeats)):
        r = args.first_repeat + i
        if i < args.small_repeats:
            emulated_runs("validate-small", sizes["fit_sizes"], r, delay_ms=delay_ms)
        if args.pinned and i == 0:
            for ranks in (4, 8):
                for algorithm in algorithms:
                    run = store("validate-pinned", finish_workload(*start_workload(
                        emulated(ranks, algorithm, delay_ms, 0), ranks, cpus="0")))
                    print(f"  pinned: {algorithm} {ranks} ranks on CPU 0 -> run {run}", flush=True)
        if i < args.repeats:
            emulated_runs("validate-large", sizes["held_sizes"], r, delay_ms=delay_ms)
            if args.held_batch:
                emulated_runs("validate-batch", sizes["held_batch_sizes"], r, delay_ms=batch_delay_ms,
                              profile=batch_profile, batch=args.held_batch)
            if not args.no_real2:
                real2(r)
    print(f"done: {args.db}")


if __name__ == "__main__":
    main()
