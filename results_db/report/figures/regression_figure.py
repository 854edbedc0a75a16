"""Two sets of runs against each other as a figure: per configuration, B/A with its interval,
coloured by the verdict (``results_db.analysis.regression``)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from results_db.analysis import regression
from results_db.stats.confidence import interval_words

COLOURS = {"faster": "tab:green", "better": "tab:green", "slower": "tab:red", "worse": "tab:red",
           "no evidence": "tab:grey", "too few repeats": "tab:grey", "no variation": "tab:grey"}


def draw_change(table: pd.DataFrame, fig: Figure, metric: str, a: str, b: str) -> None:
    """One row per configuration both sets ran; a dashed line at no change (1)."""
    both = table[table["verdict"].isin(COLOURS)].reset_index(drop=True)
    keys = [c for c in both.columns if c not in (*regression.COLUMNS, "reproduction", "why")]
    labels = [", ".join(f"{k}={row[k]}" for k in keys) for _, row in both.iterrows()]
    ax = fig.subplots()
    for i, row in both.iterrows():
        colour = COLOURS[row["verdict"]]
        if row["change_low"] == row["change_low"]:
            ax.plot([row["change_low"], row["change_high"]], [i, i], color=colour, linewidth=2.5, alpha=0.6)
        ax.plot([row["change"]], [i], "o", color=colour)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle=(0, (4, 3)))
    ax.set_yticks(range(len(both)), labels, fontsize="small")
    ax.invert_yaxis()
    better = table.attrs.get("better", "higher")
    ax.set_xlabel(f"{metric} ({better} is better): {b} ÷ {a} (mean over repeats; bar: {interval_words()})")
    handles = [ax.plot([], [], "o", color=c, label=v)[0] for v, c in COLOURS.items() if (both["verdict"] == v).any()]
    ax.legend(handles=handles, fontsize="small", loc="best")
    ax.grid(axis="x", alpha=0.3)
    correction = table.attrs.get("correction", "holm")
    fig.suptitle(f"{b} against {a}: verdicts held across the comparison ({correction})", fontsize="medium")
