"""Our performance model against Extra-P, fitted on the same runs, predicting conditions
neither fit has seen (issue 29, item 1; issue 38: the comparison a referee accepts).

    python benchmarks/bench_model_vs_extrap.py --db FILE [--fit validate-small]
        [--held-out validate-large,validate-batch] [--profiles validate-profile,validate-profile-batch]
        [--warmup 10] [--extrap-python .venv-extrap/bin/python] [--exclude RUN,... --why TEXT]

FILE: the runs of ``validate_model_runs.py`` (for issue 38: ``--fit-sizes 2,3,4,6,8
--small-repeats 5 --held-sizes 12,24 --held-batch 64 --repeats 5``). Both modellers are
fitted on exactly the fit set's runs after ``--warmup`` steps, every repetition of every size:
ours through ``model fit`` (no bootstrap: the band is not compared here), Extra-P through the
file ``model export --format extrap`` writes (a run is one repetition: rank 0's mean step, and
its compute / update / other parts), fitted with Extra-P's default modeller
(``benchmarks/extrap_fit.py``, in Extra-P's own environment, ``scripts/install-extrap.sh``).

What each gets, and where they differ (printed beside the result):
- the same fit-set runs; ours also reads each run's per-collective timeline (gradient bytes,
  collectives a step, the share hidden behind backprop), the configured injection (ranks
  delayed, D, ``sync_every``) and the host's cores (``host_of_site_name``); Extra-P gets
  the four callpaths' values per run and the rank count, which is all its input format holds;
- at a held-out rank count both are evaluated there as fitted;
- at a held-out batch size (another 1-rank profile drives the emulated compute), Extra-P's
  one-parameter model cannot see batch; both get the same one number, r = the ratio of the
  1-rank profiles' compute (median forward + backward, the runs' own D = C), taken from the
  ``--profiles`` studies: ours scales its compute term and the injected delay by r (and counts
  samples at the new batch); Extra-P scales its compute and its other part (which holds the
  waiting on the injected delay) by r and keeps its update (rule B), and, as a check on the
  rule, its compute alone (rule C).

The error of a run is predicted / measured throughput - 1 (measured: that run's rank 0 mean
step after the warm-up), per repetition; a repetition is the runs' ``seed``. Reported per
condition (median and min-max of the error over the repetitions) and per algorithm (median
|error| over its held-out runs, and the min-max over repetitions of each repetition's median
|error|).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import REPO, median


def extrap_models(python: str, path: Path, ranks: list[int]) -> tuple[dict, str]:
    proc = subprocess.run([python, str(REPO / "benchmarks" / "extrap_fit.py"), str(path),
                           "--at", ",".join(map(str, ranks))], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"Extra-P failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), proc.stderr


def profile_compute(engine, study: str, warmup: int) -> dict[int, float]:
    """Batch size -> C (s): median forward + median backward of the study's 1-rank runs at that batch,
    as ``validate_model_runs.py`` set the injected D from them."""
    from perf_model.profile import profile_of_runs
    from results_db.store import query

    runs = query.runs(engine, study=study, where="status=done")
    out = {}
    for batch, group in runs.groupby("batch_size"):
        profile = profile_of_runs(engine, [int(i) for i in group["run_id"]], warmup=warmup)
        out[int(batch)] = median(profile.forward) + median(profile.backward)
    return out


def at_batch(fit: dict, algorithm: str, batch: int, r: float) -> dict:
    """``fit`` asked about ``batch``: its compute term and the injected delay scaled by ``r``."""
    from perf_model.terms import compute_seconds

    moved = copy.deepcopy(fit)
    shape = moved["workloads"][algorithm]
    c = float(compute_seconds(shape["batch_size"], shape["threads_per_worker"], **fit["terms"]["compute"]["params"]))
    moved["terms"]["compute"]["params"] = {"c0": c * r, "c1": 0.0, "alpha": 0.0}
    shape["batch_size"], shape["injected_delay"] = batch, shape["injected_delay"] * r
    return moved


def spread(values: list[float]) -> str:
    return f"{median(values):+7.1%} ({min(values):+.1%}..{max(values):+.1%})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--fit", default="validate-small", help="the study both are fitted on")
    ap.add_argument("--held-out", default="validate-large",
                    help="the studies whose runs both predict, comma-separated")
    ap.add_argument("--profiles", default="validate-profile,validate-profile-batch",
                    help="studies of 1-rank profile runs: the compute ratio r of a held-out batch")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--extrap-python", default=str(REPO / ".venv-extrap" / "bin" / "python"))
    ap.add_argument("--exclude", default="", help="held-out run ids left out (say why with --why)")
    ap.add_argument("--why", default="", help="why --exclude leaves them out (printed)")
    args = ap.parse_args()
    try:
        excluded = {int(x) for x in args.exclude.split(",") if x}
    except ValueError:
        print(f"--exclude {args.exclude!r}: not a comma-separated list of run ids")
        return 2
    if not Path(args.extrap_python).exists():
        print(f"--extrap-python {args.extrap_python}: not found (bash scripts/install-extrap.sh makes it)")
        return 2
    sys.path.insert(0, str(REPO))
    import pandas as pd

    from orchestrator.site.model_inputs import host_of_site_name
    from perf_model.extrap_export import write_extrap
    from perf_model.measured import measured_throughput
    from perf_model.model import fit_study
    from perf_model.predict import predict
    from results_db import connect
    from results_db.store import query
    from results_db.store.model_fits import latest_model_fit

    engine = connect(f"sqlite:///{args.db}")
    fit_runs = query.runs(engine, study=args.fit, where="status=done")
    fit_batch = int(fit_runs["batch_size"].iloc[0])
    held_runs = pd.concat([query.runs(engine, study=s, where="status=done") for s in args.held_out.split(",")]
                          ).set_index("run_id")
    held_runs = held_runs[~held_runs.index.isin(excluded)]
    measured = measured_throughput(engine, [int(i) for i in held_runs.index], args.warmup)
    for column in ("study", "batch_size", "seed"):
        measured[column] = measured["run_id"].map(held_runs[column])
    compute = {}
    for study in args.profiles.split(","):
        compute.update(profile_compute(engine, study, args.warmup))
    unprofiled = sorted(set(int(b) for b in measured["batch_size"]) - set(compute) - {fit_batch})
    if unprofiled:
        print(f"--profiles {args.profiles}: no 1-rank profile runs at batch {unprofiled} of the held-out runs "
              "(their compute ratio r cannot be had)")
        return 2
    fit_study(engine, args.fit, args.warmup, 0, host_of_site_name)   # stored: only once the inputs are whole
    fit = latest_model_fit(engine, args.fit)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.fit}.jsonl"
        written = write_extrap(engine, args.fit, path, args.warmup)
        models, extrap_said = extrap_models(args.extrap_python, path, sorted(set(int(r) for r in measured["ranks"])))
    sizes = sorted(int(p) for p in fit_runs["world_size"].unique())
    per_size = fit_runs.groupby(["algorithm", "world_size"]).size()
    print(f"fit set {args.fit}: {written} runs, batch {fit_batch}, sizes {sizes}, repetitions per algorithm and "
          f"size {int(per_size.min())}-{int(per_size.max())}; held out {args.held_out}: {len(measured)} runs; "
          f"warm-up {args.warmup} steps")
    if excluded:
        print(f"left out of the held-out runs: {sorted(excluded)} ({args.why or 'no reason given'})")
    print("1-rank profiles' C (median forward + backward): "
          + ", ".join(f"batch {b}: {c * 1e3:.1f} ms" for b, c in sorted(compute.items())))
    print("inputs: both the fit set's runs; ours also each run's per-collective timeline, the configured "
          "injection and the host's cores; Extra-P the rank count and 4 callpath values per run")
    print("Extra-P's models (seconds, p = ranks):")
    for callpath, m in sorted(models.items()):
        print(f"  {callpath:26s} {m['function']}   (SMAPE {m['smape']:.1f} %)")
    if extrap_said.strip():
        print("Extra-P said: " + " | ".join(line.strip() for line in extrap_said.strip().splitlines()[-5:]))

    rows = []
    for run in measured.itertuples():
        algorithm, ranks, batch = run.algorithm, int(run.ranks), int(run.batch_size)
        if algorithm not in models or algorithm not in fit["workloads"]:
            continue
        r = compute[batch] / compute[fit_batch] if batch != fit_batch else 1.0
        asked = at_batch(fit, algorithm, batch, r) if batch != fit_batch else fit
        [ours] = predict(asked, algorithm, [ranks], 1).to_dict("records")
        ep = {part: models[f"{algorithm}->{part}"]["at"][str(ranks)] for part in ("compute", "update", "other")}
        ep_b = r * ep["compute"] + ep["update"] + r * ep["other"] if batch != fit_batch \
            else models[algorithm]["at"][str(ranks)]
        ep_c = r * ep["compute"] + ep["update"] + ep["other"]
        samples = ranks * batch
        rows.append({"condition": f"{run.study} b{batch}", "algorithm": algorithm, "ranks": ranks, "seed": run.seed,
                     "measured": run.throughput, "ours": ours["throughput"] / run.throughput - 1,
                     "extrap": samples / ep_b / run.throughput - 1,
                     "extrap_c": samples / ep_c / run.throughput - 1 if batch != fit_batch else None})
    if not rows:
        print("no held-out run of an algorithm both fitted")
        return 1

    print("\nper condition: error = predicted / measured throughput - 1, median (min..max) over repetitions")
    print(f"{'condition':24s} {'algorithm':15s} {'ranks':>5} {'reps':>4} {'measured samples/s':>22} "
          f"{'ours':>24} {'Extra-P':>24} {'behind':>7}")
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["condition"], row["algorithm"], row["ranks"]), []).append(row)
    worst = (None, -1.0)
    for (condition, algorithm, ranks), group in sorted(groups.items()):
        meas = [g["measured"] for g in group]
        ours = [g["ours"] for g in group]
        theirs = [g["extrap"] for g in group]
        behind = median(abs(x) for x in ours) - median(abs(x) for x in theirs)
        worst = max(worst, ((condition, algorithm, ranks), behind), key=lambda w: w[1])
        rule_c = [g["extrap_c"] for g in group if g["extrap_c"] is not None]
        print(f"{condition:24s} {algorithm:15s} {ranks:5d} {len(group):4d} "
              f"{median(meas):8.1f} ({min(meas):.1f}-{max(meas):.1f}) {spread(ours):>24} "
              f"{spread(theirs):>24} {behind * 100:+6.1f}p" + (f"   Extra-P rule C {spread(rule_c)}" if rule_c else ""))

    print("\nper algorithm: median |error| over its held-out runs [min-max over repetitions of each repetition's "
          "median |error|]")
    summary = {}
    for algorithm in sorted({r["algorithm"] for r in rows}):
        mine = [r for r in rows if r["algorithm"] == algorithm]
        line = []
        for who in ("ours", "extrap"):
            by_seed = {}
            for r in mine:
                by_seed.setdefault(r["seed"], []).append(abs(r[who]))
            reps = [median(v) for v in by_seed.values()]
            overall = median(abs(r[who]) for r in mine)
            summary[(algorithm, who)] = overall
            line.append(f"{'ours' if who == 'ours' else 'Extra-P'} {overall:5.1%} [{min(reps):.1%}-{max(reps):.1%}]")
        print(f"  {algorithm:15s} {len(mine):3d} runs: " + "; ".join(line))
    print("\nper held-out condition: median |error| over its runs, ours / Extra-P")
    for condition in sorted({r["condition"] for r in rows}):
        mine = [r for r in rows if r["condition"] == condition]
        print(f"  {condition:24s} {len(mine):3d} runs: ours {median(abs(r['ours']) for r in mine):5.1%}, "
              f"Extra-P {median(abs(r['extrap']) for r in mine):5.1%}")
    ours = median(abs(r["ours"]) for r in rows)
    theirs = median(abs(r["extrap"]) for r in rows)
    print(f"\nall held-out runs ({len(rows)}): median |error| ours {ours:.1%}, Extra-P {theirs:.1%}; ours most "
          f"behind Extra-P at {' '.join(map(str, worst[0]))}: {worst[1] * 100:+.1f} points")
    met = ours <= theirs and worst[1] <= 0.05
    print(f"goal (median at most Extra-P's, no condition more than 5 points worse): {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
