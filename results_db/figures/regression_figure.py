"""Two sets of runs against each other as a figure: per configuration, B/A with its bootstrap
interval, coloured by the verdict (``results_db.regression``)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

COLOURS = {"faster": "tab:green", "slower": "tab:red", "no evidence": "tab:grey"}


def draw_change(table: pd.DataFrame, fig: Figure, metric: str, a: str, b: str) -> None:
    """One row per configuration both sets ran; a dashed line at no change (1)."""
    both = table[table["verdict"].isin(COLOURS)].reset_index(drop=True)
    keys = [c for c in both.columns if c not in {"a_repeats", "b_repeats", "a_mean", "b_mean", "change", "change_low",
                                                 "change_high", "p_value", "effect", "verdict"}]
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
    ax.set_xlabel(f"{metric}: {b} ÷ {a} (mean over repeats; bar: 95 % bootstrap interval)")
    handles = [ax.plot([], [], "o", color=c, label=v)[0] for v, c in COLOURS.items() if (both["verdict"] == v).any()]
    ax.legend(handles=handles, fontsize="small", loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{b} against {a}: a verdict needs the interval to exclude 1 and Welch's p < 0.05", fontsize="medium")
