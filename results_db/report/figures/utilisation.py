"""Model FLOP utilisation against node count: throughput x counted FLOPs per sample over the
ranks' summed peak (``runs.mfu``; ``workloads/flops.py`` says what is counted and what assumed)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .data import StudyRuns, used
from .draw import legend_beside, lines_with_spread

AXIS = "nodes"


def mfu_vs_nodes(sr: StudyRuns) -> pd.DataFrame:
    """Mean ± std over repeats of MFU per node count, one series per setting of the other swept
    axes; empty unless runs with an MFU cover two node counts or more."""
    if AXIS not in sr.runs or "mfu" not in sr.runs:
        return pd.DataFrame()
    others = [a for a in sr.varying if a != AXIS]
    frame = sr.with_config(others).rename(columns={"config": "series"})
    frame = frame[pd.to_numeric(frame["mfu"], errors="coerce").notna()]
    if frame.empty or frame[AXIS].nunique() < 2:
        return pd.DataFrame()
    stats = (frame.groupby(["series", AXIS], dropna=False)
             .agg(mfu_mean=("mfu", "mean"), mfu_std=("mfu", "std"), repeats=("mfu", "count"),
                  flops_per_sample=("model_flops_per_sample", "first"), peak_source=("peak_source", "first"))
             .reset_index())
    stats["mfu_std"] = stats["mfu_std"].fillna(0.0)
    return used(stats.sort_values(["series", AXIS]).reset_index(drop=True), frame["run_id"])


def draw_mfu(frame: pd.DataFrame, fig: Figure) -> None:
    ax = fig.subplots()
    scaled = frame.assign(mfu_mean=frame["mfu_mean"] * 100, mfu_std=frame["mfu_std"] * 100)
    lines_with_spread(ax, scaled, AXIS, "mfu_mean", "mfu_std")
    ax.set_ylabel("model FLOP utilisation (% of peak)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)
