"""The energy figures: energy to solution and samples per joule against node count, from
the runs whose hosts read an energy counter (``runs.energy_joules``: measured, never a TDP
guess; runs without one are left out, and the caption counts the runs used)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .data import StudyRuns, used
from .draw import legend_beside, lines_with_spread

AXIS = "nodes"
MEASURES = {
    "energy": ("energy to solution (kJ, all hosts)", lambda f: f["energy_joules"] / 1e3),
    "samples_per_joule": ("samples trained per joule", lambda f: f["steps"] * f["global_batch_size"] / f["energy_joules"]),
}


def energy_vs_nodes(sr: StudyRuns, measure: str) -> pd.DataFrame:
    """Mean ± std over repeats of ``measure`` per node count, one series per setting of the
    other swept axes; empty unless runs with energy cover two node counts or more."""
    if AXIS not in sr.runs or "energy_joules" not in sr.runs:
        return pd.DataFrame()
    others = [a for a in sr.varying if a != AXIS]
    frame = sr.with_config(others).rename(columns={"config": "series"})
    frame = frame[frame["energy_joules"].notna() & (frame["energy_joules"] > 0)]
    if frame.empty or frame[AXIS].nunique() < 2:
        return pd.DataFrame()
    frame = frame.assign(value=MEASURES[measure][1](frame))
    stats = (frame.groupby(["series", AXIS], dropna=False)["value"]
             .agg(value_mean="mean", value_std="std", repeats="count").reset_index())
    stats["value_std"] = stats["value_std"].fillna(0.0)
    return used(stats.sort_values(["series", AXIS]).reset_index(drop=True), frame["run_id"])


def draw_energy(frame: pd.DataFrame, fig: Figure, measure: str) -> None:
    ax = fig.subplots()
    lines_with_spread(ax, frame, AXIS, "value_mean", "value_std")
    ax.set_ylabel(MEASURES[measure][0])
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)
