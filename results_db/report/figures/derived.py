"""Tables that compare configurations with each other: scaling efficiency, speedup against
the injected delay, time to a target accuracy (or, for a regression, to a target validation loss).

Kept apart from ``data.py`` (one measurement per table) because each of these needs
a reference — the smallest resource setting, the synchronous algorithm, a target
accuracy — and says which one it used in its columns, so the CSV beside a figure
names its own baseline.
"""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Engine

from results_db.analysis import compare, paper_claims
from results_db.stats import confidence
from results_db.store import query
from .data import RESOURCE_AXES, StudyRuns, throughput_vs, used

RANK_AXES = ("nodes", "workers_per_node")


def efficiency_vs(sr: StudyRuns, axis: str) -> pd.DataFrame:
    """Scaling efficiency against one scaling axis (1 = linear scaling).

    For a resource axis (nodes, workers per node, threads per node): each series'
    throughput over linear scaling from its smallest measured value of that axis. For
    ``batch_size``, which is no resource: at each per-worker batch size, each rank count's
    throughput over linear scaling from the smallest rank count at that batch size —
    how well scaling out works as the batch per worker grows."""
    if axis in RESOURCE_AXES:
        table = throughput_vs(sr, axis)
        if table.empty:
            return table
        out = table.assign(efficiency=table["throughput_mean"] / table["ideal"],
                           efficiency_std=table["throughput_std"] / table["ideal"])
        out = _with_efficiency_interval(sr, axis, out)
        return used(out, table.attrs.get("run_ids", []))
    return _efficiency_vs_batch(sr)


def _with_efficiency_interval(sr: StudyRuns, axis: str, table: pd.DataFrame) -> pd.DataFrame:
    """``efficiency_low`` / ``_high``: each point's interval over its repeats and its series' first
    point's (``confidence.ratio_interval``), scaled as the efficiency is; NaN with fewer than
    ``confidence.MIN_REPEATS`` on a side, and for the first point itself. Drawn as a band
    (``draw.efficiency``)."""
    others = [a for a in sr.varying if a != axis]
    frame = sr.with_config(others).rename(columns={"config": "series"})
    values = {key: part["throughput"].dropna().tolist() for key, part in frame.groupby(["series", axis], dropna=False)}
    lows, highs = [], []
    for _, row in table.iterrows():
        measured = table[(table["series"] == row["series"]) & table["throughput_mean"].notna()].sort_values(axis)
        if measured.empty or row["throughput_mean"] != row["throughput_mean"]:
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        base = measured.iloc[0]
        if base[axis] == row[axis]:   # the first point itself: 1 by definition, no interval of its own
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        low, high = confidence.ratio_interval(values.get((row["series"], row[axis]), []),
                                              values.get((base["series"], base[axis]), []))
        scale = base["throughput_mean"] / row["ideal"] if row["ideal"] else math.nan
        lows.append(low * scale)
        highs.append(high * scale)
    return table.assign(efficiency_low=lows, efficiency_high=highs)


def _efficiency_vs_batch(sr: StudyRuns) -> pd.DataFrame:
    ranks = [a for a in RANK_AXES if a in sr.varying]
    if not ranks or "batch_size" not in sr.varying:
        return pd.DataFrame()
    others = [a for a in sr.varying if a not in (*RANK_AXES, "batch_size")]
    frame = sr.runs[sr.runs["throughput"].notna()]
    stats = (frame.groupby([*others, *ranks, "batch_size"], dropna=False)
             .agg(throughput_mean=("throughput", "mean"), throughput_std=("throughput", "std"),
                  repeats=("throughput", "count"), world_size=("world_size", "first")).reset_index())
    stats["throughput_std"] = stats["throughput_std"].fillna(0.0)
    rows = []
    for _, group in stats.groupby([*others, "batch_size"], dropna=False, sort=False):
        base = group.sort_values(["world_size", *ranks]).iloc[0]
        for _, row in group.iterrows():
            if row["world_size"] == base["world_size"]:
                continue
            ideal = base["throughput_mean"] * row["world_size"] / base["world_size"]
            rows.append({"series": sr.label(row, [a for a in sr.varying if a != "batch_size"]),
                         "batch_size": row["batch_size"],
                         "world_size": int(row["world_size"]), "baseline_world_size": int(base["world_size"]),
                         "throughput_mean": row["throughput_mean"], "throughput_std": row["throughput_std"],
                         "repeats": int(row["repeats"]), "ideal": ideal,
                         "efficiency": row["throughput_mean"] / ideal, "efficiency_std": row["throughput_std"] / ideal})
    if not rows:
        return pd.DataFrame()
    return used(pd.DataFrame(rows).sort_values(["series", "batch_size"]).reset_index(drop=True),
                frame["run_id"])


def speedup_vs_delay(sr: StudyRuns) -> pd.DataFrame:
    """Speedup over ``sync`` against the injected delay, one series per other algorithm
    (and per setting of any other varying axis), from ``compare`` at each delay: of rounds per
    second (the paper's steps/s: an eager-SGD rank that skips the rounds it missed computes
    fewer samples than the rounds stand for) where every run has it, else of throughput."""
    if "imbalance_delay_ms" not in sr.varying or "algorithm" not in sr.varying:
        return pd.DataFrame()
    rounds = "rounds_per_second" in sr.runs and sr.runs["rounds_per_second"].notna().all()
    metric = "rounds_per_second" if rounds else "throughput"
    try:
        table = compare.compare_runs(sr.runs, "algorithm=sync", metric=metric)
    except compare.CompareError:
        return pd.DataFrame()
    others = [a for a in sr.varying if a not in ("algorithm", "imbalance_delay_ms")]
    table = table.assign(series=[sr.label(row, ["algorithm", *others]) for _, row in table.iterrows()])
    out = table[["series", "algorithm", "imbalance_delay_ms", "repeats", f"{metric}_mean",
                 f"baseline_{metric}_mean", "speedup", "speedup_std"]]
    out = out[out["algorithm"] != "sync"].sort_values(["series", "imbalance_delay_ms"]).reset_index(drop=True)
    ids = sr.runs.loc[sr.runs[metric].notna() & sr.runs["imbalance_delay_ms"].isin(
        out["imbalance_delay_ms"].tolist()), "run_id"]
    return used(out, ids) if not out.empty else out


# how a time-to-target's target was chosen, said wherever the target is (report header and legend,
# figure caption, the CSV's target_rule column)
TOP1_RULE = "the best top-1 every run reached, rounded down to a whole percent"
LOSS_RULE = "the highest of every run's lowest validation loss, rounded up to 2 significant digits"
GIVEN_RULE = "as given ({option})"


def top1_percent(target: float) -> str:
    """A top-1 target as the pages print it: ``24 %``, ``85.5 %``."""
    return f"{round(float(target) * 100, 4):g} %"


def target_rule(given: bool, option: str = "--target") -> str:
    """Why the time to accuracy's target is what it is."""
    return GIVEN_RULE.format(option=option) if given else TOP1_RULE


def default_target(engine: Engine, sr: StudyRuns) -> float | None:
    """The best top-1 every run reached (rounded down to 0.01): every configuration's time
    to it is defined, and what differs is how fast they got there. None where that is no
    better than chance (1 / classes, for the runs that recorded their classes): a time to
    guess-level accuracy compares nothing."""
    evals = query.evals(engine, sr.ids)
    if evals.empty or evals["top1"].notna().sum() == 0:
        return None
    best = evals.groupby("run_id")["top1"].max().min()
    target = math.floor(round(float(best) * 100, 6)) / 100   # 0.29 * 100 = 28.999999999999996
    chance = chance_top1(sr.runs)
    return None if chance is not None and target <= chance else target


def chance_top1(runs: pd.DataFrame) -> float | None:
    """The top-1 of guessing, 1 / classes, the highest among these runs (None: none recorded it)."""
    if "classes" not in runs or runs["classes"].notna().sum() == 0:
        return None
    return float(1.0 / runs["classes"].dropna().min())


def time_to_accuracy(engine: Engine, sr: StudyRuns, target: float | None = None) -> pd.DataFrame:
    """Per configuration: seconds (and epochs) until the first evaluation at or above
    ``target`` top-1, mean ± std over the repeats that reached it; ``reached`` of ``runs``;
    ``target_rule`` says how the target was chosen (``TOP1_RULE`` unless given)."""
    rule = target_rule(target is not None)
    target = default_target(engine, sr) if target is None else target
    if target is None:
        return pd.DataFrame()
    out = _time_to_target(engine, sr, target, "top1", rule)
    if not out.empty:
        out.attrs["caption_note"] = f"The target, top-1 ≥ {top1_percent(target)}, is {rule}."
    return out


def _time_to_target(engine: Engine, sr: StudyRuns, target: float, metric: str, rule: str) -> pd.DataFrame:
    """Per configuration: seconds (and epochs) to the first evaluation reaching ``target``
    (``query.first_reaching``: top-1 at or above, loss at or below), mean ± std over the repeats
    that reached it; ``reached`` of ``runs``; ``target_top1``/``target_loss`` and ``target_rule``."""
    evals = query.evals(engine, sr.ids)
    if evals.empty:
        return pd.DataFrame()   # no run evaluated: nothing reached any target
    ids = sorted(set(int(i) for i in evals["run_id"]))
    per_run = query.first_reaching(evals, ids, target, metric)
    frame = sr.with_config()[["run_id", "config"]].merge(per_run, on="run_id")
    frame["epochs_done"] = pd.to_numeric(frame["epoch"], errors="coerce") + 1
    out = (frame.groupby("config", sort=False)
           .agg(seconds_mean=("seconds", "mean"), seconds_std=("seconds", "std"),
                epochs_mean=("epochs_done", "mean"), reached=("seconds", "count"), runs=("run_id", "nunique"))
           .reset_index())
    out["seconds_std"] = out["seconds_std"].fillna(0.0)
    out.insert(1, f"target_{metric}", target)
    out.insert(2, "target_rule", rule)
    return used(out, frame["run_id"])


def scores_top1(engine: Engine, sr: StudyRuns) -> bool:
    """Whether any of the study's evaluations has a top-1 (a regression's and an emulated run's have none)."""
    evals = query.evals(engine, sr.ids)
    return bool(len(evals)) and bool(evals["top1"].notna().any())


def default_loss_target(engine: Engine, sr: StudyRuns) -> float | None:
    """A time-to-loss target for a study whose runs score no top-1 (a regression): the target its
    paper measures to (``paper_claims.loss_target``: eager-SGD's hyperplane, validation MSE 4.7),
    else the highest of every run's lowest validation loss, rounded up to 2 significant digits
    (every configuration's time to it is defined). None for a study with a top-1 (time to
    accuracy is its measure), or without a loss."""
    if scores_top1(engine, sr):
        return None
    declared = paper_claims.loss_target(sr.study)
    if declared is not None:
        return declared
    evals = query.evals(engine, sr.ids)
    losses = pd.to_numeric(evals["loss"], errors="coerce") if len(evals) else pd.Series(dtype=float)
    if losses.notna().sum() == 0:
        return None
    worst = float(evals.assign(loss=losses).groupby("run_id")["loss"].min().max())
    if not math.isfinite(worst) or worst <= 0:
        return None
    digits = 1 - math.floor(math.log10(worst))
    return math.ceil(round(worst * 10 ** digits, 6)) / 10 ** digits


def time_to_loss(engine: Engine, sr: StudyRuns, target: float | None = None) -> pd.DataFrame:
    """Per configuration: seconds (and epochs) until the first evaluation at or below ``target``
    validation loss, mean ± std over the repeats that reached it; ``reached`` of ``runs``
    (default target: ``default_loss_target``; none for a study whose runs score a top-1);
    ``target_rule`` says how the target was chosen."""
    if target is not None:
        rule = target_rule(True, "--loss-target")
    else:
        declared = paper_claims.loss_target(sr.study) is not None
        rule = "the target the study's paper measures to" if declared else LOSS_RULE
    target = default_loss_target(engine, sr) if target is None else target
    if target is None:
        return pd.DataFrame()
    out = _time_to_target(engine, sr, target, "loss", rule)
    if not out.empty:
        out.attrs["caption_note"] = f"The target, validation loss ≤ {target:g}, is {rule}."
    return out


def loss_name(runs: pd.DataFrame) -> str:
    """What the runs' validation loss is: "MSE" where every run's data set is a built-in
    regression (``workloads.registry.dataset_task``), else "loss"."""
    from workloads.registry import dataset_task

    if "dataset" in runs and len(runs) and all(dataset_task(str(d)) == "regression" for d in runs["dataset"]):
        return "MSE"
    return "loss"
