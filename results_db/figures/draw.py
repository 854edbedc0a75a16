"""Matplotlib drawings of the figure tables (``data.py``); no SQL here.

Each function draws one table onto a fresh ``Figure``; styling stays plain and
consistent so that figures of different studies read alike.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only: a login node has no display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .data import STEP_PHASES, TIMELINE_LANES, label_of  # noqa: E402

PHASE_COLOURS = {"data": "#bbbbbb", "forward": "#4c72b0", "delay": "#c44e52", "backward": "#55a868",
                 "comm_wait": "#dd8452", "wait": "#dd8452", "update": "#8172b3", "allreduce": "#937860",
                 "negotiate": "#da8bc3", "grad_ready": "#000000"}


def new_figure(width: float = 6.4, height: float = 4.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
               for v in values)


def throughput_vs(frame: pd.DataFrame, fig: Figure, axis: str) -> None:
    """Lines over a numeric axis (log-2 when it spans 8x or more); over a categorical one
    (a text parameter: ``+params.act=relu,gelu``) the categories sit at even positions."""
    ax = fig.subplots()
    distinct = list(dict.fromkeys(frame[axis]))
    numeric = _numeric(distinct)
    values = sorted(distinct) if numeric else sorted(distinct, key=str)
    where = (lambda col: col) if numeric else (lambda col: col.map({v: i for i, v in enumerate(values)}))
    for series, part in frame.groupby("series", sort=False):
        ax.errorbar(where(part[axis]), part["throughput_mean"], yerr=part["throughput_std"], marker="o", capsize=3,
                    label=series)
        if "ideal" in part:
            ax.plot(where(part[axis]), part["ideal"], linestyle="--", color="grey", linewidth=0.8)
    if "ideal" in frame:
        ax.plot([], [], linestyle="--", color="grey", linewidth=0.8, label="linear scaling")
    if numeric and len(values) > 2 and values[0] > 0 and values[-1] / values[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values if numeric else range(len(values)), [str(v) for v in values])
    ax.set_xlabel(label_of(axis))
    ax.set_ylabel("samples / s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def stacked_phases(frame: pd.DataFrame, fig: Figure, phases=STEP_PHASES, unit: float = 1e3,
                   ylabel: str = "ms per step") -> None:
    ax = fig.subplots()
    x = np.arange(len(frame))
    bottom = np.zeros(len(frame))
    tallest = max(float(frame[[p for p in phases if p in frame]].sum(axis=1).max()), 1e-12)
    for phase in phases:
        # a phase too thin to see would only crowd the legend (e.g. no injected delay)
        if phase not in frame or float(frame[phase].max()) < 2e-3 * tallest:
            continue
        values = frame[phase].to_numpy() * unit
        ax.bar(x, values, bottom=bottom, label=phase, color=PHASE_COLOURS.get(phase))
        bottom += values
    _config_ticks(ax, frame["config"])
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)


def distribution(frame: pd.DataFrame, fig: Figure, ylabel: str) -> None:
    ax = fig.subplots()
    configs = list(dict.fromkeys(frame["config"]))
    ax.boxplot([frame.loc[frame["config"] == c, "value"].to_numpy() for c in configs], showfliers=True)
    _config_ticks(ax, configs, start=1)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def timeline(frame: pd.DataFrame, fig: Figure) -> None:
    """One row per rank: the training thread's phases above, the engine's collectives below."""
    ax = fig.subplots()
    ranks = sorted(frame["rank"].unique())
    for rank in ranks:
        mine = frame[frame["rank"] == rank]
        for phase in (*TIMELINE_LANES, "allreduce", "negotiate"):
            part = mine[mine["phase"] == phase]
            if part.empty:
                continue
            y = (rank - 0.05, 0.4) if phase in TIMELINE_LANES else (rank - 0.45, 0.35)
            ax.broken_barh(list(zip(part["start_ms"], part["end_ms"] - part["start_ms"])), y,
                           facecolors=PHASE_COLOURS.get(phase), edgecolor="white", linewidth=0.3)
        ready = mine[mine["phase"] == "grad_ready"]
        ax.vlines(ready["start_ms"], rank - 0.05, rank + 0.35, colors="black", linewidth=0.4)
    handles = [Patch(color=PHASE_COLOURS[p], label=p)
               for p in (*TIMELINE_LANES, "allreduce", "negotiate") if (frame["phase"] == p).any()]
    if (frame["phase"] == "grad_ready").any():
        handles.append(Line2D([], [], color="black", linewidth=0.6, label="gradient ready"))
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms (rank 0's clock)")
    ax.legend(handles=handles, fontsize="x-small", ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.15))


def algorithm_bars(frame: pd.DataFrame, fig: Figure) -> None:
    ax = fig.subplots()
    settings = list(dict.fromkeys(frame["setting"]))
    algorithms = list(dict.fromkeys(frame["algorithm"]))
    width = 0.8 / len(algorithms)
    for i, algorithm in enumerate(algorithms):
        part = frame[frame["algorithm"] == algorithm].set_index("setting").reindex(settings)
        x = np.arange(len(settings)) + (i - (len(algorithms) - 1) / 2) * width
        bars = ax.bar(x, part["throughput_mean"], width, yerr=part["throughput_std"], capsize=2, label=algorithm)
        for bar, speedup in zip(bars, part["speedup_vs_sync"]):
            if not np.isnan(speedup) and algorithm != "sync":
                ax.annotate(f"{speedup:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize="x-small")
    _config_ticks(ax, settings)
    ax.set_ylabel("samples / s")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)


def accuracy(frame: pd.DataFrame, fig: Figure, x: str) -> None:
    ax = fig.subplots()
    for config, part in frame.groupby("config", sort=False):
        ax.plot(part[x], part["top1"], marker="o", markersize=3, label=config)
    ax.set_xlabel("epoch" if x == "epoch" else "seconds since start")
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def rounds(frame: pd.DataFrame, fig: Figure) -> None:
    """Side by side, not stacked: a rank that missed a round brings its stale gradient
    along with its fresh one, so one rank can count as both."""
    ax = fig.subplots()
    x = np.arange(len(frame))
    parts = (("fresh", "#55a868"), ("stale", "#dd8452"), ("null", "#bbbbbb"))
    width = 0.8 / len(parts)
    for i, (part, colour) in enumerate(parts):
        ax.bar(x + (i - 1) * width, frame[part], width, label=part, color=colour)
    _config_ticks(ax, frame["config"])
    ax.set_ylabel("ranks contributing (mean per round)")
    ax.legend(fontsize="small", title="a rank can be fresh and stale", title_fontsize="x-small")
    ax.grid(axis="y", alpha=0.3)


def _config_ticks(ax, labels, start: int = 0) -> None:
    labels = list(labels)
    rotate = max((len(s) for s in labels), default=0) * len(labels) > 60
    ax.set_xticks(np.arange(start, start + len(labels)), labels, rotation=30 if rotate else 0,
                  ha="right" if rotate else "center", fontsize="small")


def metric_bars(frame: pd.DataFrame, fig: Figure, name: str) -> None:
    ax = fig.subplots()
    x = np.arange(len(frame))
    ax.bar(x, frame["value_mean"], yerr=frame["value_std"], capsize=3, color="#4c72b0")
    _config_ticks(ax, frame["config"])
    ax.set_ylabel(name)
    ax.grid(alpha=0.3, axis="y")
