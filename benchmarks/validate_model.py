"""Validate the performance model (issue 15, item 4) on the runs ``validate_model_runs.py`` stored.

    python benchmarks/validate_model.py --db /tmp/validate.db [--warmup 10] [--pinned exclude|include]
        [--crowding-q host|per-algorithm|none] [--crowding-form exchanges|linear]
        [--crowding-exposure waiting|every-step]

1. Fit on ``validate-small`` (emulated, 2-8 ranks), predict 2-32 ranks per algorithm, and
   compare with the measured throughput of ``validate-small`` (in sample) and
   ``validate-large`` (16 and 32 ranks, out of sample).
2. Fit on ``validate-profile`` (real, 1 rank; no allreduce term can be fitted there, so the
   communication comes from the local site's measured ``network:``), predict 2 ranks,
   compare with ``validate-real2`` (real, 2 ranks).

Measured throughput: global batch / rank 0's mean step time after ``--warmup``
(``perf_model.measured``), per run; the error is predicted / measured - 1 against the median
over a size's runs. To say which term caused an error, the measured step is split like the
prediction: compute (forward + backward) and update as measured, and the rest less the data
phase (waiting, exposed communication and rank 0's own injected sleep: the model's wait +
comm; the model has no data term, and rank 0's data phase is printed beside it).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pandas as pd


def measured_parts(engine, run_ids, warmup: int) -> pd.DataFrame:
    from perf_model.measured import step_times
    from results_db.store import query

    steps = query.steps(engine, list(run_ids))
    steps = steps[(steps["rank"] == 0) & (steps["step"] >= warmup)]
    steps = steps.assign(t=step_times(steps), compute=steps["forward"] + steps["backward"])
    g = steps.groupby("run_id")
    return pd.DataFrame({"step": g["t"].mean(), "compute": g["compute"].mean(), "update": g["update"].mean(),
                         "data": g["data"].mean(),
                         "rest": g["t"].mean() - g["compute"].mean() - g["update"].mean() - g["data"].mean()})


def with_pinned_in_fit_set(db: str) -> str:
    """A scratch copy of ``db`` whose validate-pinned runs belong to validate-small: the fit
    set with the pinned runs in it (``--pinned include``), the stored runs left as they are."""
    import shutil
    import sqlite3
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="validate-pinned-")) / "fit.db"
    shutil.copy(db, copy)
    with sqlite3.connect(copy) as con:
        ids = dict(con.execute("select name, id from studies where name in ('validate-small', 'validate-pinned')"))
        if "validate-pinned" not in ids:
            raise SystemExit(f"{db}: no validate-pinned runs (run validate_model_runs.py with --pinned)")
        con.execute("update runs set study_id = ? where study_id = ?", (ids["validate-small"], ids["validate-pinned"]))
    print(f"--pinned include: fitting on a copy, {copy}")
    return str(copy)


def _host_cpus(engine, run_ids) -> pd.Series:
    """Each run's recorded CPUs (0 where it recorded none)."""
    from results_db.store import query

    runs = query.runs(engine, columns=["run_id", "host_cpus"], run_ids=list(run_ids)).set_index("run_id")
    return runs["host_cpus"].fillna(0).astype(int).rename("cpus")


def compare(engine, fit, study_runs: dict[str, list[int]], warmup: int, network=None, label: str = "") -> list[dict]:
    from perf_model.measured import measured_throughput
    from perf_model.machine import Host
    from perf_model.predict import predict

    rows = []
    for study, ids in study_runs.items():
        measured = measured_throughput(engine, ids, warmup)
        parts = measured_parts(engine, ids, warmup)
        measured = measured.join(parts, on="run_id")
        measured = measured.join(_host_cpus(engine, ids), on="run_id")
        fit_host = Host.from_params(fit["terms"].get("oversubscription", {}).get("params", {}))
        for (algorithm, ranks, cpus), group in measured.groupby(["algorithm", "ranks", "cpus"]):
            if algorithm not in (fit.get("workloads") or {}):
                continue
            # a run pinned to fewer CPUs than the fit's host is predicted on those
            host = Host(int(cpus), fit_host.one_host) if fit_host and 0 < cpus < fit_host.cpus else None
            [pred] = predict(fit, algorithm, [ranks], 1, network, host=host).to_dict("records")
            m = float(group["throughput"].median())
            inside = group["throughput"].between(pred["throughput_low"], pred["throughput_high"])
            rows.append({"set": study + (f" ({int(cpus)} cpu)" if host else ""), "algorithm": algorithm,
                         "ranks": int(ranks), "runs": len(group),
                         "steps": int(group["steps"].median()), "measured": m,
                         "spread": f"{group['throughput'].min():.0f}-{group['throughput'].max():.0f}",
                         "predicted": pred["throughput"],
                         "band": f"{pred['throughput_low']:.0f}-{pred['throughput_high']:.0f}",
                         "inside": int(inside.sum()), "low": pred["throughput_low"], "high": pred["throughput_high"],
                         "throughputs": [float(t) for t in group["throughput"]],
                         "error": pred["throughput"] / m - 1,
                         "compute": (pred["compute_seconds"], float(group["compute"].median())),
                         "rest": (pred["wait_seconds"] + pred["comm_seconds"] + pred["crowding_seconds"],
                                  float(group["rest"].median())),
                         "crowding": pred["crowding_seconds"],
                         "update": (pred["update_seconds"], float(group["update"].median())),
                         "data": float(group["data"].median())})
    print(f"\n{label}")
    print(f"{'set':22s} {'algorithm':15s} {'ranks':>5} {'runs':>4} {'steps':>5} {'measured':>9} {'(min-max)':>12} "
          f"{'predicted':>9} {'(band)':>12} {'in':>3} {'error':>7}   ms pred/meas: compute | wait+comm+crowding | update; data")
    for r in rows:
        parts = " | ".join(f"{r[k][0] * 1e3:6.1f}/{r[k][1] * 1e3:6.1f}" for k in ("compute", "rest", "update"))
        print(f"{r['set']:22s} {r['algorithm']:15s} {r['ranks']:5d} {r['runs']:4d} {r['steps']:5d} {r['measured']:9.1f} "
              f"{r['spread']:>12} {r['predicted']:9.1f} {r['band']:>12} {r['inside']:>3} {r['error']:+7.1%}   {parts}; "
              f"{r['data'] * 1e3:.1f}; crowding predicted {r['crowding'] * 1e3:.1f}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--replicates", type=int, default=100)
    ap.add_argument("--crowding-form", choices=("exchanges", "linear"), default="exchanges",
                    help="the oversubscription term: q (r-1)+ ceil(log2 P), the model's (default), or the "
                         "counterfactual q (r-1)+ without the exchange count (RESULTS.md reports both)")
    ap.add_argument("--crowding-q", choices=("host", "per-algorithm", "none"), default="host",
                    help="one q for the host (the model's, default), or the counterfactuals: one per algorithm, "
                         "or no oversubscription term at all")
    ap.add_argument("--crowding-exposure", choices=("waiting", "every-step"), default="waiting",
                    help="eager-SGD's share of the crowding: its rounds count by the ranks that wait through "
                         "them (the model's, default), or the counterfactual, every step as a synchronous one's "
                         "(the model before the exposure)")
    ap.add_argument("--pinned", choices=("exclude", "include"), default="exclude",
                    help="fit on validate-small alone (the model's fit set, default), or with the validate-pinned "
                         "runs (4 and 8 ranks on 1 CPU) added to it, fitted in a scratch copy of --db")
    args = ap.parse_args()
    if args.crowding_q == "per-algorithm":
        import functools

        import perf_model.oversubscription

        perf_model.oversubscription.fit_oversubscription = functools.partial(
            perf_model.oversubscription.fit_oversubscription, per_algorithm=True)
    if args.crowding_q == "none":
        import perf_model.oversubscription
        from perf_model.fit import FitError

        def left_out(points):
            raise FitError("left out (--crowding-q none)")

        perf_model.oversubscription.fit_oversubscription = left_out
    if args.crowding_form == "linear":
        import numpy as np

        import perf_model.fit
        import perf_model.predict

        def linear(ranks, ranks_per_core, q):
            return q * np.maximum(np.asarray(ranks_per_core, dtype=float) - 1.0, 0.0)

        perf_model.fit.oversubscription_seconds = linear
        perf_model.predict.oversubscription_seconds = linear

    if args.crowding_exposure == "every-step":
        import numpy as np

        import perf_model.oversubscription
        import perf_model.predict

        def every_step(algorithm, ranks, segment):
            return np.ones_like(np.asarray(ranks, dtype=float))

        perf_model.oversubscription.crowding_exposure = every_step
        perf_model.predict.crowding_exposure = every_step

    from results_db import connect
    from results_db.store import query

    db = args.db
    if args.pinned == "include":
        db = with_pinned_in_fit_set(args.db)
    engine = connect(f"sqlite:///{db}")

    def ids(study: str) -> list[int]:
        runs = query.runs(engine, study=study, where="status=done")
        return [int(i) for i in runs["run_id"]]

    if not ids("validate-small"):   # a --real-only file: part 2 alone
        print("no validate-small runs: part 1 left out")
    else:
        fit_small(engine, ids, args)
    part_two(engine, ids, args)


def fit_small(engine, ids, args) -> None:
    from orchestrator.site.model_inputs import host_of_site_name
    from perf_model.model import fit_study
    from results_db.store.model_fits import latest_model_fit

    fit_study(engine, "validate-small", args.warmup, args.replicates, host_of_site_name)
    fit = latest_model_fit(engine, "validate-small")
    for name, term in fit["terms"].items():
        print(f"{name}: " + ", ".join(f"{k}={v:.4g}" for k, v in term["params"].items()))
    sets = {name: ids(name) for name in ("validate-small", "validate-pinned", "validate-large")}
    rows = compare(engine, fit, {k: v for k, v in sets.items() if v},
                   args.warmup, label="1. fit on emulated 2-8 ranks (validate-small"
                   + (" with validate-pinned" if args.pinned == "include" else "") + "), predict 2-32")
    out = [r for r in rows if r["set"].startswith("validate-large")]
    if out:
        worst = max(out, key=lambda r: abs(r["error"]))
        print(f"out of sample: median |error| {statistics.median(abs(r['error']) for r in out):.1%}, worst "
              f"{worst['error']:+.1%} ({worst['algorithm']}, {worst['ranks']} ranks)")
        print(coverage_line(out, "out of sample"))
    inside = [r for r in rows if r["set"] == "validate-small"]
    if inside:
        print(coverage_line(inside, "in sample"))
    if inside and out:
        with_noise(inside, out)


def with_noise(inside: list[dict], out: list[dict]) -> None:
    """Counterfactual: the band widened by how far the fit set's own runs lie from the fit
    (the 5th and 95th percentiles of measured / predicted throughput over its runs), i.e. a
    prediction interval for one new run rather than the fit's spread alone."""
    import numpy as np

    ratios = np.array([r["measured"] / r["predicted"] for r in inside])
    lo, hi = np.quantile(ratios, [0.05, 0.95])
    held = runs = 0
    for r in out:
        runs += r["runs"]
        held += sum(1 for t in r["throughputs"] if r["low"] * lo <= t <= r["high"] * hi)
    print(f"counterfactual: the band x the fit set's measured/predicted spread ({lo:.3f}-{hi:.3f}) holds "
          f"{held} of {runs} held-out runs ({held / runs:.0%})")


def coverage_line(rows: list[dict], label: str, band: float = 0.9) -> str:
    """How many measured runs the band holds: the band's empirical coverage (goal: a 90 %
    band holds at least 80 % of held-out runs)."""
    held, runs = sum(r["inside"] for r in rows), sum(r["runs"] for r in rows)
    sizes = sum(1 for r in rows if r["low"] <= r["measured"] <= r["high"])
    return (f"{label}: the {band:.0%} band holds {held} of {runs} runs ({held / runs:.0%}) and the median "
            f"of {sizes} of {len(rows)} sizes")


def part_two(engine, ids, args) -> None:
    from orchestrator.site.model_inputs import host_of_site_name
    from orchestrator.site.config import load_site
    from perf_model.model import fit_study
    from perf_model.machine import Network
    from results_db.store.model_fits import latest_model_fit

    fit_study(engine, "validate-profile", args.warmup, args.replicates, host_of_site_name)
    fit1 = latest_model_fit(engine, "validate-profile")
    net = load_site("local").network
    network = Network(net.latency_seconds, net.node_bandwidth_bytes, net.source)
    print("\n1-rank fit: " + "; ".join(f"{n}: " + ", ".join(f"{k}={v:.4g}" for k, v in t["params"].items())
                                      for n, t in fit1["terms"].items()))
    compare(engine, fit1, {"validate-real2": ids("validate-real2")}, args.warmup, network,
            label="2. fit on real 1-rank runs (validate-profile), network of site local, predict real 2 ranks")


if __name__ == "__main__":
    main()
