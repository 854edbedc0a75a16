"""Our performance model against Extra-P, fitted on the same runs, predicting the same
held-out sizes (issue 29, item 1).

    python benchmarks/bench_model_vs_extrap.py --db FILE [--fit validate-small] [--held-out validate-large]
        [--warmup 10] [--extrap-python .venv-extrap/bin/python]

FILE: the runs of ``validate_model_runs.py``. Both modellers see exactly the fit set's runs
after ``--warmup`` steps: ours through ``model fit`` (no bootstrap: the band is not compared
here), Extra-P through the file ``model export --format extrap`` writes (one repetition
per run: rank 0's mean step, and its compute / update / other parts), fitted with Extra-P's
default modeller (``benchmarks/extrap_fit.py``, run in Extra-P's own environment,
``scripts/install-extrap.sh``). Each predicts the step at every held-out rank count; the
error is predicted / measured throughput - 1 against the median of the size's runs, as in
``validate_model.py``. Goal: our median |error| at most Extra-P's, and at no size more than 5
points worse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def extrap_models(python: str, path: Path, ranks: list[int]) -> dict:
    proc = subprocess.run([python, str(REPO / "benchmarks" / "extrap_fit.py"), str(path),
                           "--at", ",".join(map(str, ranks))], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"Extra-P failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--fit", default="validate-small", help="the study both are fitted on")
    ap.add_argument("--held-out", default="validate-large", help="the study whose sizes both predict")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--extrap-python", default=str(REPO / ".venv-extrap" / "bin" / "python"))
    args = ap.parse_args()
    if not Path(args.extrap_python).exists():
        print(f"--extrap-python {args.extrap_python}: not found (bash scripts/install-extrap.sh makes it)")
        return 2
    sys.path.insert(0, str(REPO))
    from orchestrator.site.model_inputs import host_of_site_name
    from perf_model.extrap_export import write_extrap
    from perf_model.measured import measured_throughput
    from perf_model.model import fit_study
    from perf_model.predict import predict
    from results_db import connect, query
    from results_db.model_fits import latest_model_fit

    engine = connect(f"sqlite:///{args.db}")
    fit_study(engine, args.fit, args.warmup, 0, host_of_site_name)
    fit = latest_model_fit(engine, args.fit)
    held = [int(i) for i in query.runs(engine, study=args.held_out, where="status=done")["run_id"]]
    measured = measured_throughput(engine, held, args.warmup)
    batch = query.runs(engine, run_ids=held).set_index("run_id")["batch_size"]
    measured["batch"] = measured["run_id"].map(batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.fit}.jsonl"
        runs = write_extrap(engine, args.fit, path, args.warmup)
        models = extrap_models(args.extrap_python, path, sorted(set(int(r) for r in measured["ranks"])))
    print(f"fit set {args.fit}: {runs} runs; held out {args.held_out}: {len(held)} runs; warm-up {args.warmup} steps")
    print("Extra-P's models of the step (seconds, p = ranks):")
    for callpath, m in sorted(models.items()):
        print(f"  {callpath:26s} {m['function']}   (SMAPE {m['smape']:.1f} %)")
    rows = []
    for (algorithm, ranks), group in measured.groupby(["algorithm", "ranks"]):
        if algorithm not in models or algorithm not in fit["workloads"]:
            continue
        meas = float(group["throughput"].median())
        [ours] = predict(fit, algorithm, [int(ranks)], 1).to_dict("records")
        theirs = models[algorithm]["at"][str(int(ranks))]
        samples = int(ranks) * int(group["batch"].iloc[0])
        rows.append({"algorithm": algorithm, "ranks": int(ranks), "runs": len(group), "measured": meas,
                     "ours": ours["throughput"], "extrap": samples / theirs if theirs > 0 else float("inf"),
                     "parts": {"compute": (ours["compute_seconds"], models[f"{algorithm}->compute"]["at"][str(ranks)]),
                               "update": (ours["update_seconds"], models[f"{algorithm}->update"]["at"][str(ranks)]),
                               "other": (ours["wait_seconds"] + ours["comm_seconds"] + ours["crowding_seconds"],
                                         models[f"{algorithm}->other"]["at"][str(ranks)])}})
    print(f"\n{'algorithm':15s} {'ranks':>5} {'runs':>4} {'measured':>9} {'ours':>9} {'error':>7} {'Extra-P':>9} "
          f"{'error':>7} {'ours-EP':>8}   ms ours/Extra-P: compute | update | other")
    for r in rows:
        r["e_ours"], r["e_extrap"] = r["ours"] / r["measured"] - 1, r["extrap"] / r["measured"] - 1
        r["worse"] = abs(r["e_ours"]) - abs(r["e_extrap"])
        parts = " | ".join(f"{a * 1e3:6.1f}/{b * 1e3:6.1f}" for a, b in r["parts"].values())
        print(f"{r['algorithm']:15s} {r['ranks']:5d} {r['runs']:4d} {r['measured']:9.1f} {r['ours']:9.1f} "
              f"{r['e_ours']:+7.1%} {r['extrap']:9.1f} {r['e_extrap']:+7.1%} {r['worse'] * 100:+7.1f}p   {parts}")
    if not rows:
        print("no held-out size of an algorithm both fitted")
        return 1
    ours = statistics.median(abs(r["e_ours"]) for r in rows)
    theirs = statistics.median(abs(r["e_extrap"]) for r in rows)
    worst = max(rows, key=lambda r: r["worse"])
    print(f"\nmedian |error|: ours {ours:.1%}, Extra-P {theirs:.1%}; ours most behind Extra-P at "
          f"{worst['algorithm']} {worst['ranks']} ranks: {worst['worse'] * 100:+.1f} points")
    met = ours <= theirs and worst["worse"] <= 0.05
    print(f"goal (median at most Extra-P's, never more than 5 points worse): {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
