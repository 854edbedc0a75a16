"""eager-SGD's catch-up against lock-step and sync, under the paper's injection, in one MPI job.

    python benchmarks/bench_eager_catch_up.py [--ranks 8] [--delays 0.5,1,2] [--steps 60] [--repeats 5]
        [--kind injected]

Compute is emulated (sleeps of C = 50 ms a step: forward 12.5, backward 37.5), so what is
measured is the mechanism, not this 2-core machine's arithmetic; each step one rank of P
(``--kind injected``, the paper's scheme: 1 of 8 processes for hyperplane regression) or
one fixed rank (``--kind fixed``) sleeps D = delay x C. Every configuration runs inside one
``mpiexec`` (``train`` called again for each run: no start-up per run), interleaved
round by round (sync, lockstep, apply_all at each delay, then again), ``--repeats`` rounds;
medians and min–max over rounds. Printed beside each: the rate the mechanism allows from the
same delay draws (``perf_model.eager_rounds``; sync: 1 / (C + D) at every step).

    python benchmarks/bench_eager_catch_up.py --accuracy [--ranks 4] [--repeats 3]

Accuracy and drift of the three catch-ups and sync, computing for real (small_cnn on digits, 3 epochs, lr 0.03,
one fixed straggler sleeping 20 ms a step, the models re-synchronised only at the last step):
final top-1 and the largest weight difference from the average at that re-synchronisation
(``drift``), per seed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

from harness import REPO, interleave, median, mpiexec, summary
COMPUTE_S = 0.05
VARIANTS = (("sync", {"algorithm": "sync"}),
            ("lockstep", {"algorithm": "eager_solo", "eager_catch_up": "lockstep"}),
            ("apply_all", {"algorithm": "eager_solo", "eager_catch_up": "apply_all"}))


def worker(args) -> None:
    from mpi4py import MPI

    from workloads.emulation import ComputeProfile
    from workloads.spec import RunSpec
    from workloads.train import train

    comm = MPI.COMM_WORLD
    root = Path(args.out)
    profile = root / "profile.json"
    if comm.Get_rank() == 0:
        profile.write_text(ComputeProfile((COMPUTE_S * 0.25,), (COMPUTE_S * 0.75,), {},
                                          {"model": "small_cnn", "note": "bench: sleep-dominated"}).to_json())
    comm.Barrier()
    runs = itertools.count()

    def variant(name: str, fields: dict, delay: float):
        def once() -> dict[str, float]:
            imbalance = {"imbalance_kind": args.kind, "imbalance_ranks": 1,
                         "imbalance_delay_ms": delay * COMPUTE_S * 1000} if delay else {}
            spec = RunSpec(study="bench", workers_per_node=comm.Get_size(), threads_per_node=comm.Get_size(),
                           model="small_cnn", dataset="digits", batch_size=8, epochs=1,
                           steps_per_epoch=args.steps, compute="emulated", compute_profile=str(profile),
                           **fields, **imbalance)
            outcome = train(spec, root / f"run{next(runs)}-{name}-{delay}", comm)
            return {"rounds/s": outcome.summary["rounds_per_second"],
                    "gradients/s": outcome.summary["gradients_per_second"]}
        return once

    # the no-delay references: eager_solo and sync without imbalance (no lockstep)
    got = interleave({f"{name}@{delay}": variant(name, fields, delay) for delay in [0.0, *args.delays]
                      for name, fields in VARIANTS if delay or name != "lockstep"},
                     args.repeats, report=comm.Get_rank() == 0)
    rates = {key: [x["rounds/s"] for x in xs] for key, xs in got.items()}
    rates.update({f"{key}:gradients": [x["gradients/s"] for x in xs] for key, xs in got.items()})
    if comm.Get_rank() == 0:
        (root / "rates.json").write_text(json.dumps(rates))


def accuracy_worker(args) -> None:
    from mpi4py import MPI

    from workloads.spec import RunSpec
    from workloads.train import train

    comm = MPI.COMM_WORLD
    out: dict[str, list[list[float]]] = {}
    for seed in range(args.repeats):
        for catch_up in ("sync", "lockstep", "apply_all", "latest"):
            run_dir = Path(args.out) / f"s{seed}-{catch_up}"
            algorithm = {"algorithm": "sync"} if catch_up == "sync" else {"algorithm": "eager_solo",
                                                                          "eager_catch_up": catch_up}
            # lr 0.03 with momentum 0.9: where solo matched sync in the README's tuning note
            spec = RunSpec(study="bench", workers_per_node=comm.Get_size(), threads_per_node=comm.Get_size(),
                           model="small_cnn", dataset="digits", batch_size=8, epochs=3, seed=seed, lr=0.03,
                           resync_epochs=0, imbalance_kind="fixed", imbalance_delay_ms=20.0, **algorithm)
            outcome = train(spec, run_dir, comm)
            drift = max([0.0] + [(json.loads(line).get("drift") or 0.0)
                        for line in (run_dir / "metrics" / f"rank-{comm.Get_rank()}.jsonl").read_text().splitlines()
                        if "\"type\":\"contribution\"" in line])
            drift = comm.allreduce(drift, op=MPI.MAX)
            out.setdefault(catch_up, []).append([outcome.summary["final_top1"], drift,
                                                 outcome.summary["gradients"], outcome.summary["steps"]])
            if comm.Get_rank() == 0:
                print(f"seed {seed} {catch_up}: top-1 {out[catch_up][-1][0]:.4f}, drift {drift:.3g}, "
                      f"gradients {out[catch_up][-1][2]} of {out[catch_up][-1][3]} x {comm.Get_size()}", flush=True)
    if comm.Get_rank() == 0:
        (Path(args.out) / "rates.json").write_text(json.dumps(out))


def accuracy_report(args, out) -> None:
    print(f"\n{args.ranks} ranks, small_cnn on digits, 3 epochs, one straggler +20 ms a step, resync only at the "
          f"last step; median (min–max) over {args.repeats} seeds")
    print("| catch-up | final top-1 | drift at the resync | gradients computed / rounds x ranks |")
    print("|---|---|---|---|")
    for catch_up, rows in out.items():
        top1, drift = [r[0] for r in rows], [r[1] for r in rows]
        share = [r[2] / (r[3] * args.ranks) for r in rows]
        print(f"| {catch_up} | {summary(top1, 4)} | {median(drift):.3g} ({min(drift):.3g}–{max(drift):.3g}) | "
              f"{median(share):.2f} |")


def report(args, rates: dict[str, list[float]]) -> None:
    from perf_model.eager_rounds import solo_round_rate
    from workloads.imbalance import DelayInjector

    def med(xs):
        return summary(xs, 2)

    base = rates["apply_all@0.0"]
    none = DelayInjector("none", 1, 0, -1, 1.0, 0, args.ranks)
    print(f"\n{args.ranks} ranks, C = {COMPUTE_S * 1000:.0f} ms emulated, {args.steps} steps, imbalance {args.kind}; "
          f"rounds/s median (min–max) over {args.repeats} rounds; ratio: per round, over eager_solo without delay")
    print(f"eager_solo without delay: {med(base)} rounds/s; sync without delay: {med(rates['sync@0.0'])}")
    print("| D / C | variant | rounds/s | ratio to no delay | simulated ratio | gradients/s |")
    print("|---|---|---|---|---|---|")
    for delay in args.delays:
        delays = DelayInjector(args.kind, 1, delay * COMPUTE_S * 1000, -1, 1.0, 0, args.ranks)
        for name, _ in VARIANTS:
            got = rates[f"{name}@{delay}"]
            ratio = [g / b for g, b in zip(got, base)]
            if name == "sync":
                simulated = 1 / (1 + delay)
            else:
                simulated = (solo_round_rate(delays, COMPUTE_S, args.steps, name != "lockstep")
                             / solo_round_rate(none, COMPUTE_S, args.steps))
            print(f"| {delay:g} | {name} | {med(got)} | {med(ratio)} | {simulated:.2f} | "
                  f"{med(rates[f'{name}@{delay}:gradients'])} |")
        ratio = [a / s for a, s in zip(rates[f"apply_all@{delay}"], rates[f"sync@{delay}"])]
        print(f"| {delay:g} | apply_all / sync | | {med(ratio)} | | |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--delays", type=lambda s: [float(x) for x in s.split(",")], default=[0.5, 1.0, 2.0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kind", choices=("injected", "fixed"), default="injected")
    parser.add_argument("--accuracy", action="store_true", help="accuracy and drift of the catch-ups instead")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        (accuracy_worker if args.accuracy else worker)(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        argv = [__file__, "--worker", "--out", tmp, "--ranks", str(args.ranks), "--steps", str(args.steps),
                "--repeats", str(args.repeats), "--kind", args.kind,
                "--delays", ",".join(str(d) for d in args.delays), *(["--accuracy"] if args.accuracy else [])]
        print(f"mpiexec -n {args.ranks} " + " ".join(argv), flush=True)
        mpiexec(args.ranks, argv, cwd=REPO, capture=False)
        (accuracy_report if args.accuracy else report)(args, json.loads((Path(tmp) / "rates.json").read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
