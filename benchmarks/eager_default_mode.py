"""Which eager-SGD mode should be the default: time to accuracy under imbalance, per mode, against
sync and against each other, from studies already run (``benchmarks/eager_paper_studies.sh``).

    python benchmarks/eager_default_mode.py DB_FILE [--study S:METRIC:TARGET ...]

Default studies: the hyperplane (``eager_sgd_paper_hyperplane_quarter``, time to validation MSE
<= 4.7) and a model computed for real (``eager_default_mode``: small_cnn on digits, time to top-1
>= 0.85). Per study, delay and mode: seconds to the target, mean over seeds with its 95 %
t-interval (``confidence.mean_interval``) and how many seeds reached it; the speedup over sync in
time to target, rounds/s and gradients/s, each with its log-ratio interval over seeds
(``confidence.ratio_estimate``); what an asynchronous round carried, on average (fresh, stale and
null contributions of the ranks, from rank 0's record of the rounds: what explains an eager mode's
accuracy); and the final loss or top-1.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from results_db import connect  # noqa: E402
from results_db.stats import confidence
from results_db.store import query

DEFAULT = ("eager_sgd_paper_hyperplane_quarter:loss:4.7", "eager_default_mode:top1:0.85")


def _fmt_interval(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "-"
    low, high = confidence.mean_interval(values)
    return f"{values.mean():.1f} [{low:.1f}, {high:.1f}]" if low == low else f"{values.mean():.1f}"


def _ratio(mine: pd.Series, base: pd.Series) -> str:
    est = confidence.ratio_estimate(mine.dropna(), base.dropna())
    if est.ratio != est.ratio:
        return "-"
    return f"{est.ratio:.2f} [{est.low:.2f}, {est.high:.2f}]" if not est.reason else f"{est.ratio:.2f} ({est.reason})"


def _carried_per_round(engine, run_ids: list[int]):
    """Per group of runs: the mean fresh / stale / null contributions of an asynchronous round."""
    rounds = query.rounds(engine, run_ids)   # read_sql keeps the columns when no row comes back
    rounds = rounds[~rounds["synchronous"].astype(bool)]

    def of(ids: pd.Series) -> str:
        here = rounds[rounds["run_id"].isin([int(i) for i in ids])]
        if here.empty:
            return "-"
        return "/".join(f"{here[c].mean():.2f}" for c in ("fresh", "stale", "null"))
    return of


def study_table(engine, study: str, metric: str, target: float) -> pd.DataFrame:
    runs = query.runs(engine, study=study, where="status=done")
    if runs.empty:
        return pd.DataFrame()
    evals = query.evals(engine, [int(i) for i in runs["run_id"]])
    reached = query.first_reaching(evals, [int(i) for i in runs["run_id"]], target, metric).set_index("run_id")
    runs = runs.assign(seconds=[reached["seconds"].get(int(i), math.nan) for i in runs["run_id"]],
                       mode=[m if a.startswith("eager") else "-" for a, m in zip(runs["algorithm"], runs["eager_catch_up"])])
    final = "final_loss" if metric == "loss" else "final_top1"
    carried = _carried_per_round(engine, [int(i) for i in runs["run_id"]])
    rows = []
    delays = sorted(runs["imbalance_delay_ms"].dropna().unique())
    for delay in delays:
        here = runs[runs["imbalance_delay_ms"] == delay]
        base = here[here["algorithm"] == "sync"]
        for (algorithm, mode), part in here.groupby(["algorithm", "mode"], sort=True):
            rows.append({
                "study": study, "delay_ms": delay, "algorithm": algorithm, "mode": mode, "seeds": len(part),
                "reached": int(part["seconds"].notna().sum()),
                f"seconds to {metric} {'<=' if metric == 'loss' else '>='} {target:g}": _fmt_interval(part["seconds"]),
                # seconds over seconds: sync's mean time over this mode's (the paper's 625.3 s / 312 s)
                "time speedup vs sync": _ratio(base["seconds"], part["seconds"]) if algorithm != "sync" else "1",
                "rounds/s vs sync": _ratio(part["rounds_per_second"], base["rounds_per_second"])
                if algorithm != "sync" else "1",
                "gradients/s vs sync": _ratio(part["gradients_per_second"], base["gradients_per_second"])
                if algorithm != "sync" else "1",
                "a round: fresh/stale/null": carried(part["run_id"]) if algorithm != "sync" else "-",
                final: f"{part[final].mean():.4g} ({part[final].min():.4g}-{part[final].max():.4g})"})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db")
    ap.add_argument("--study", action="append", default=None, metavar="STUDY:METRIC:TARGET")
    args = ap.parse_args()
    engine = connect(f"sqlite:///{Path(args.db).absolute()}", upgrade=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    for spec in args.study or DEFAULT:
        study, metric, target = spec.split(":")
        table = study_table(engine, study, metric, float(target))
        print(f"\n{study}:" + ("" if not table.empty else " no finished runs"))
        if not table.empty:
            print(table.drop(columns="study").to_string(index=False))


if __name__ == "__main__":
    main()
