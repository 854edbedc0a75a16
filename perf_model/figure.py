"""One figure: measured throughput of a study's runs and the predicted curve with its band."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def draw_prediction(predicted: pd.DataFrame, measured: pd.DataFrame, path: Path, title: str,
                    band: float, emulated: bool, others: pd.DataFrame | None = None,
                    others_label: str = "other runs") -> Path:
    """Throughput against ranks, both axes log 2: measured runs as points, the prediction as a
    line inside its shaded band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.fill_between(predicted["ranks"], predicted["throughput_low"], predicted["throughput_high"], alpha=0.25,
                    color="C0", label=f"{band:.0%} fit band (runs resampled; not a prediction interval)")
    ax.plot(predicted["ranks"], predicted["throughput"], "-", color="C0", marker=".", label="predicted")
    if len(measured):
        ax.plot(measured["ranks"], measured["throughput"], "o", color="C1", mfc="none", label="measured runs (fitted)")
    if others is not None and len(others):
        ax.plot(others["ranks"], others["throughput"], "s", color="C3", mfc="none", label=others_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("samples/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if emulated:
        fig.text(0.01, 0.01, "fitted on runs with emulated compute (compute=emulated)", fontsize=7, color="0.4")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
