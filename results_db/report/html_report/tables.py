"""The report's tables: what was swept, one row per configuration, and what failed.

Numbers come from the same functions as ``compare`` and the figures (speedup from
``compare.compare_runs``, time to accuracy from ``figures.derived``), so the page, the
CSVs and ``scalestudy compare`` never disagree. Each table is a DataFrame of raw
values; formatting for people happens in ``page.py``.
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine

from workloads.spec import BUILTIN_ONLY_FIELDS

from results_db.analysis import compare, configuration
from results_db.report.figures import derived
from results_db.report.figures.data import RESOURCE_AXES, StudyRuns, label_of, setting
from results_db.store.columns import FAILED_STATES  # noqa: F401 - re-exported

# fields shown among the fixed settings: what a reader needs to know trained, not bookkeeping
_FIXED_HIDDEN = ("study", "command", "params", "metric_patterns", "run_timeout", "schema", "dataset_path")


class ReportError(ValueError):
    """A choice the study's data cannot answer (an unknown baseline, a bad target)."""


def sweep_axes(sr: StudyRuns) -> pd.DataFrame:
    """Every configuration axis with its values over the runs the study planned: swept
    ones first (with how they relate to the others), then the settings held fixed."""
    planned = sr.planned if sr.planned is not None else sr.runs
    coupled = dict(sr.grid.coupled) if sr.grid else {}
    axes = [*sr.varying, *dependent_axes(sr)]
    rows = []
    for axis in axes:
        values = sorted(planned[axis].dropna().unique().tolist(), key=lambda v: (isinstance(v, str), v))
        if axis in sr.varying:
            how = "swept"
        elif axis in coupled:
            how = "moves with " + ", ".join(label_of(b) for b in coupled[axis])
        elif axis == "threads_per_node":
            how = "one thread per worker (the default): moves with workers per node"
        else:
            how = "determined by the swept axes"
        rows.append({"axis": axis, "name": label_of(axis), "values": values, "role": how})
    commands = "workload_kind" in planned and bool((planned["workload_kind"] == "command").all())
    for axis in configuration.config_axes(planned):
        if axis in axes or axis in _FIXED_HIDDEN or axis not in planned:
            continue
        if commands and axis in BUILTIN_ONLY_FIELDS:   # our loop's settings: the user's program ran instead
            continue
        values = planned[axis].dropna().unique().tolist()
        if len(values) == 1:
            rows.append({"axis": axis, "name": label_of(axis), "values": values, "role": "fixed"})
    if commands and "command" in planned:
        programs = sorted({" ".join(map(str, c)) if isinstance(c, (list, tuple)) else str(c)
                           for c in planned["command"].dropna()})
        rows.append({"axis": "command", "name": "command (your program, under the site's MPI launcher)",
                     "values": programs, "role": "fixed" if len(programs) == 1 else "per run"})
    return pd.DataFrame(rows, columns=["axis", "name", "values", "role"])


def dependent_axes(sr: StudyRuns) -> list[str]:
    """Axes that vary but are determined by the swept ones (``data.independent_axes`` dropped them)."""
    planned = sr.planned if sr.planned is not None else sr.runs
    return [a for a in configuration.config_axes(planned) if a not in sr.varying and a in planned
            and planned[a].nunique(dropna=False) > 1]


def default_baseline(sr: StudyRuns) -> str | None:
    """Nodes from the smallest count, else sync among algorithms, else the smallest value of
    another swept resource: the comparison a scaling study is usually read by."""
    if "nodes" in sr.varying:
        return f"nodes={sr.runs['nodes'].min()}"
    if "algorithm" in sr.varying and (sr.runs["algorithm"] == "sync").any():
        return "algorithm=sync"
    for axis in RESOURCE_AXES:
        if axis in sr.varying:
            return f"{axis}={sr.runs[axis].min()}"
    return None


def check_baseline(sr: StudyRuns, baseline: str) -> tuple[str, object]:
    """The baseline as (axis, value), or one line naming the field and the value."""
    try:
        axis, value = compare.parse_baseline(baseline)
    except compare.CompareError as exc:
        raise ReportError(str(exc)) from None
    if axis not in sr.runs.columns:
        raise ReportError(f"baseline axis {axis!r}: no run of study {sr.study!r} has it")
    present = sr.runs[axis].dropna().unique().tolist()
    if value in present:
        return axis, value
    same_text = [v for v in present if str(v) == str(value)]
    if same_text:
        return axis, same_text[0]   # as stored (``params.v=1`` given, "1" stored): what compare must match
    shown = ", ".join(str(v) for v in sorted(present, key=str))
    raise ReportError(f"baseline {axis}={value}: no finished run of study {sr.study!r} has {axis}={value} "
                      f"(finished runs have {axis} = {shown})")


# what the configuration table takes from compare: ratios, their intervals, the smallest change detectable
COMPARED = ("speedup", "speedup_std", "speedup_low", "speedup_high", "efficiency", "efficiency_low", "efficiency_high",
            "detectable", "detectable_low", "detectable_high")


def configurations(engine: Engine, sr: StudyRuns, baseline: str | None, target: float | None,
                   loss_target: float | None = None) -> pd.DataFrame:
    """One row per configuration (repeats pooled): throughput, speedup and efficiency against
    ``baseline``, final accuracy, time to ``target`` top-1; for a study whose runs score no top-1
    (a regression) the final validation loss and the time to ``loss_target`` (default:
    ``derived.default_loss_target``); configurations of the grid with no finished run are rows
    too, saying why."""
    runs = sr.with_config()
    frame = (runs.groupby("config", sort=False)
             .agg(runs=("run_id", "count"), world_size=("world_size", "first"),
                  throughput_mean=("throughput", "mean"), throughput_std=("throughput", "std"),
                  throughput_n=("throughput", "count"),
                  top1_mean=("final_top1", "mean"), top1_std=("final_top1", "std"))
             .reset_index())
    no_top1 = not derived.scores_top1(engine, sr)
    if no_top1 and "final_loss" in runs and runs["final_loss"].notna().any():   # no top-1: the loss is the score
        losses = runs.groupby("config", sort=False)["final_loss"]
        frame["loss_mean"] = losses.mean().reindex(frame["config"]).to_numpy()
        frame["loss_std"] = losses.std().reindex(frame["config"]).to_numpy()
        frame["loss_name"] = derived.loss_name(sr.runs)
    first = runs.drop_duplicates("config").set_index("config")
    for axis in sr.varying:
        frame[axis] = [first.loc[c, axis] for c in frame["config"]]
    if "compute" in runs and runs["compute"].isin(("emulated", "padded")).any():   # a label no table or CSV may lose
        frame["compute"] = runs.groupby("config", sort=False)["compute"].agg(
            lambda c: c.iloc[0] if c.nunique() == 1 else "mixed").reindex(frame["config"]).to_numpy()
    for column, how in (("gpu_peak_memory_mb", "max"), ("gpu_utilization", "mean")):
        if column in runs and runs[column].notna().any():   # GPU runs: what their GPUs held and did
            frame[column] = runs.groupby("config", sort=False)[column].agg(how).reindex(frame["config"]).to_numpy()
    if "energy_joules" in runs and runs["energy_joules"].notna().any():   # measured by the hosts' counters
        measured = runs[runs["energy_joules"] > 0]    # never divide by a stored 0 (older rows)
        per_joule = measured["steps"] * measured["global_batch_size"] / measured["energy_joules"]
        frame["energy_kj"] = (measured.groupby("config", sort=False)["energy_joules"].mean() / 1e3
                              ).reindex(frame["config"]).to_numpy()
        frame["samples_per_joule"] = per_joule.groupby(measured["config"], sort=False).mean() \
            .reindex(frame["config"]).to_numpy()
    frame["status"] = "done"
    for column in COMPARED:
        frame[column] = float("nan")
    if baseline:
        axis, value = check_baseline(sr, baseline)
        try:
            table = compare.compare_runs(sr.runs, baseline, ignore=dependent_axes(sr), value=value)
        except compare.CompareError as exc:
            raise ReportError(f"baseline {baseline}: {exc}") from None
        table = table.assign(config=[sr.label(row) for _, row in table.iterrows()]).set_index("config")
        for column in COMPARED:
            frame[column] = [table[column].get(c, float("nan")) for c in frame["config"]]
    tta = derived.time_to_accuracy(engine, sr, target)
    if not tta.empty:
        tta = tta.set_index("config")
        frame["target_top1"] = float(tta["target_top1"].iloc[0])
        frame["target_rule"] = str(tta["target_rule"].iloc[0])
        for column in ("seconds_mean", "seconds_std", "reached"):
            frame[f"tta_{column}"] = [tta[column].get(c, float("nan")) for c in frame["config"]]
    ttl = derived.time_to_loss(engine, sr, loss_target) if no_top1 or loss_target is not None else pd.DataFrame()
    if not ttl.empty:
        ttl = ttl.set_index("config")
        frame["target_loss"] = float(ttl["target_loss"].iloc[0])
        frame["loss_target_rule"] = str(ttl["target_rule"].iloc[0])
        frame["loss_name"] = derived.loss_name(sr.runs)
        for column in ("seconds_mean", "seconds_std", "reached"):
            frame[f"ttl_{column}"] = [ttl[column].get(c, float("nan")) for c in frame["config"]]
    frame = pd.concat([frame, _missing_rows(sr)], ignore_index=True)
    order = [*sr.varying, "config", "status", "runs", "world_size", "throughput_mean", "throughput_std",
             "throughput_n", "speedup", "speedup_std", "efficiency", "top1_mean", "top1_std"]
    order += [c for c in frame.columns if c not in order]
    return frame[order]


def _missing_rows(sr: StudyRuns) -> pd.DataFrame:
    if sr.grid is None or not sr.grid.missing:
        return pd.DataFrame()
    rows = []
    for hole in sr.grid.missing:
        row = dict(hole.config)
        row["config"] = ", ".join(setting(a, v) for a, v in hole.config)
        row["status"] = f"no finished run: {hole.why}"
        row["runs"] = 0
        rows.append(row)
    return pd.DataFrame(rows)


def failures(planned: pd.DataFrame, sr: StudyRuns | None) -> pd.DataFrame:
    """Failed, timed-out, partial and lost runs (each run's latest attempt) with their reasons."""
    bad = planned[planned["status"].isin(FAILED_STATES)].copy()
    if bad.empty:
        return pd.DataFrame(columns=["run_id", "config", "status", "attempt", "reason", "job_id", "run_dir"])
    axes = sr.varying if sr is not None else [a for a in ("algorithm", "nodes", "workers_per_node", "batch_size")
                                               if a in bad]
    bad["config"] = [", ".join(setting(a, row[a]) for a in axes) or "all runs" for _, row in bad.iterrows()]
    bad["reason"] = [(str(e).strip() if e is not None and str(e).strip() else "(no reason stored)")
                     for e in bad["error"]]
    return bad[["run_id", "config", "status", "attempt", "reason", "job_id", "run_dir"]].reset_index(drop=True)
