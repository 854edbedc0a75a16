"""Matplotlib drawings of the figure tables (``data.py``); no SQL here.

Each function draws one table onto a fresh ``Figure``; styling stays plain and
consistent so that figures of different studies read alike.
"""

from __future__ import annotations

from workloads.plural import counted

import textwrap

import matplotlib

matplotlib.use("Agg")  # files only: a login node has no display

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from workloads.run_folder import STEP_PHASES  # noqa: E402

from results_db.stats.confidence import interval_words  # noqa: E402
from .data import PHASE_LABELS, TIMELINE_LANES, label_of  # noqa: E402

PHASE_COLOURS = {"data": "#bbbbbb", "forward": "#4c72b0", "delay": "#c44e52", "backward": "#55a868",
                 "comm_wait": "#dd8452", "wait": "#dd8452", "update": "#8172b3", "allreduce": "#937860",
                 "negotiate": "#da8bc3", "grad_ready": "#000000"}


ALGORITHM_NAMES = {"sync": "sync (synchronous allreduce)", "ddp": "ddp (PyTorch DistributedDataParallel)",
                   "horovod": "horovod (horovod.torch)", "eager_solo": "eager_solo (partial allreduce, one initiator)",
                   "eager_majority": "eager_majority (partial allreduce, majority)",
                   "async_ps": "async_ps (asynchronous parameter server)"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
DASHES = (None, (6, 2), (2, 2), (6, 2, 2, 2), (10, 3), (1, 1))


def new_figure(width: float = 6.4, height: float = 4.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def title(fig: Figure, text: str) -> None:
    """The figure's title, wrapped to the figure's width (a timeline's names its run and steps)."""
    fig.suptitle(textwrap.fill(text, width=int(fig.get_figwidth() * 13)), fontsize="medium")


def add_notes(fig: Figure, notes) -> None:
    """Notes a reader must see on the figure itself (a partial grid, oversubscribed cores),
    in a band below the axes that the layout keeps free."""
    notes = [n for n in notes if n]
    if not notes:
        return
    text = "\n".join(textwrap.fill(f"Note: {n}", width=int(fig.get_figwidth() * 15)) for n in notes)
    lines = text.count("\n") + 1
    band = min(0.45, (lines * 9.5 + 8) / (fig.get_figheight() * 72))
    fig.get_layout_engine().set(rect=(0, band, 1, 1 - band))
    fig.text(0.01, band - 0.01, text, ha="left", va="top", fontsize=7.5, color="#8a1c1c", gid="scalestudy-note")


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
               for v in values)


def line_style(i: int, dashed: bool = True) -> dict:
    """Series i's colour, marker and dash: lines that coincide still show each other (the
    later one is dashed and its markers smaller, so the earlier shows around it). Without
    ``dashed`` every line is solid: where dashes already mean a reference line."""
    dashes = DASHES[i % len(DASHES)] if dashed else None
    return {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "markersize": max(3.0, 7.5 - 1.2 * i),
            "linestyle": "-" if dashes is None else (0, dashes)}


def coinciding(frame: pd.DataFrame, key: str, x: str, y: str, tol: float = 0.005) -> dict[str, str]:
    """Series whose every point lies on an earlier series' point (within ``tol`` relative):
    series -> the earlier series it hides behind."""
    parts = {name: part.set_index(x)[y] for name, part in frame.groupby(key, sort=False)}
    names, out = list(parts), {}
    for j, later in enumerate(names):
        for earlier in names[:j]:
            a, b = parts[earlier], parts[later]
            common = a.index.intersection(b.index)
            if len(common) == len(b) and len(common) and np.allclose(
                    a.loc[common].to_numpy(float), b.loc[common].to_numpy(float), rtol=tol, atol=1e-12, equal_nan=True):
                out[later] = earlier
                break
    return out


def series_label(name: str, hidden: dict[str, str]) -> str:
    """``name``, and where it hides under an earlier series, which one (by the settings that differ)."""
    if name not in hidden:
        return name
    mine, theirs = name.split(", "), hidden[name].split(", ")
    differ = [part for part in theirs if part not in mine] or theirs
    return f"{name} (same values as {', '.join(differ)})"


def legend_beside(ax, **kwargs) -> None:
    """The legend inside the axes when it is small; else beside them, labels wrapped, the
    figure widened to hold it (a long legend must never squeeze the plot away)."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    if len(labels) <= 4 and max(len(label) for label in labels) <= 48:
        ax.legend(handles, labels, fontsize="small", **kwargs)
        return
    wrapped = [textwrap.fill(label, 46) for label in labels]
    fig = ax.figure
    width, height = fig.get_size_inches()
    rows = sum(label.count("\n") + 1 for label in wrapped) + (2 if kwargs.get("title") else 0)
    fig.set_size_inches(width + 3.3, max(height, 1.6 + 0.16 * rows))
    ax.legend(handles, wrapped, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), **kwargs)


def x_axis(ax, frame: pd.DataFrame, axis: str):
    """Positions for ``axis``: numeric values as they are (log-2 from an 8x span), text at even positions."""
    distinct = list(dict.fromkeys(frame[axis]))
    numeric = _numeric(distinct)
    values = sorted(distinct) if numeric else sorted(distinct, key=str)
    where = (lambda col: col) if numeric else (lambda col: col.map({v: i for i, v in enumerate(values)}))
    if numeric and len(values) > 2 and values[0] > 0 and values[-1] / values[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values if numeric else range(len(values)),
                  [str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in values])
    ax.set_xlabel(label_of(axis))
    return where


def throughput_vs(frame: pd.DataFrame, fig: Figure, axis: str) -> None:
    """Lines over a numeric axis (log-2 when it spans 8x or more); over a categorical one
    (a text parameter: ``+params.act=relu,gelu``) the categories sit at even positions.
    Each series' linear-scaling reference is drawn in the series' own colour, thin and dashed."""
    ax = fig.subplots()
    where = x_axis(ax, frame, axis)
    hidden = coinciding(frame, "series", axis, "throughput_mean")
    for i, (series, part) in enumerate(frame.groupby("series", sort=False)):
        style = line_style(i, dashed=False)
        ax.errorbar(where(part[axis]), part["throughput_mean"], yerr=part["throughput_std"], capsize=3,
                    label=series_label(series, hidden), **style)
        if "ideal" in part:
            ax.plot(where(part[axis]), part["ideal"], linestyle=(0, (4, 3)), color=style["color"], linewidth=0.9,
                    alpha=0.8, gid=f"ideal-{i}")
    if "ideal" in frame:
        ax.plot([], [], linestyle=(0, (4, 3)), color="black", linewidth=0.9,
                label="thin dashed, same colour: linear scaling from the line's first point")
    ax.set_ylabel("training throughput (samples / s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)


def lines_with_spread(ax, frame: pd.DataFrame, axis: str, value: str, spread: str) -> None:
    """One line per series of ``value`` against ``axis``, with ``spread`` as error bars."""
    where = x_axis(ax, frame, axis)
    hidden = coinciding(frame, "series", axis, value)
    for i, (series, part) in enumerate(frame.groupby("series", sort=False)):
        ax.errorbar(where(part[axis]), part[value], yerr=part[spread], capsize=3,
                    label=series_label(series, hidden), **line_style(i, dashed=False))


def efficiency(frame: pd.DataFrame, fig: Figure, axis: str) -> None:
    """Scaling efficiency lines (1 = linear scaling), one per series."""
    ax = fig.subplots()
    if "efficiency_low" in frame and frame["efficiency_low"].notna().any():
        # the interval over repeats (results_db/stats/confidence.py) as a band around each line
        where = x_axis(ax, frame, axis)
        hidden = coinciding(frame, "series", axis, "efficiency")
        for i, (series, part) in enumerate(frame.groupby("series", sort=False)):
            style = line_style(i, dashed=False)
            line, = ax.plot(where(part[axis]), part["efficiency"], label=series_label(series, hidden), **style)
            ax.fill_between(where(part[axis]), part["efficiency_low"], part["efficiency_high"],
                            color=line.get_color(), alpha=0.18, linewidth=0)
        ax.plot([], [], " ", label=f"bands: {interval_words()}")
        top = float(np.nanmax(frame[["efficiency", "efficiency_high"]].to_numpy()))
    else:
        lines_with_spread(ax, frame, axis, "efficiency", "efficiency_std")
        top = float(np.nanmax(frame["efficiency"] + frame["efficiency_std"]))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=(0, (4, 3)), label="linear scaling (efficiency 1)")
    ax.set_ylabel("scaling efficiency (measured ÷ linear)")
    ax.set_ylim(0, max(1.15, top * 1.05))
    ax.grid(alpha=0.3)
    legend_beside(ax)


def stacked_phases(frame: pd.DataFrame, fig: Figure, phases=STEP_PHASES, unit: float = 1e3,
                   ylabel: str = "milliseconds per training step (mean)") -> None:
    ax = fig.subplots()
    x = np.arange(len(frame))
    bottom = np.zeros(len(frame))
    tallest = max(float(frame[[p for p in phases if p in frame]].sum(axis=1).max()), 1e-12)
    for phase in phases:
        if phase not in frame:
            continue
        # drawn whatever its size (the bar is the whole step), named only where one can see it:
        # a phase too thin to see would only crowd the legend (e.g. an injected delay of 0 ms)
        thin = float(frame[phase].max()) < 1e-2 * tallest
        values = frame[phase].to_numpy() * unit
        ax.bar(x, values, bottom=bottom, label="_nolegend_" if thin else PHASE_LABELS.get(phase, phase),
               color=PHASE_COLOURS.get(phase))
        bottom += values
    _config_ticks(ax, frame["config"])
    ax.set_ylabel(ylabel)
    legend_beside(ax)
    ax.grid(axis="y", alpha=0.3)


def distribution(frame: pd.DataFrame, fig: Figure, ylabel: str) -> None:
    ax = fig.subplots()
    configs = list(dict.fromkeys(frame["config"]))
    ax.boxplot([frame.loc[frame["config"] == c, "value"].to_numpy() for c in configs], showfliers=True)
    _config_ticks(ax, configs, start=1)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def timeline(frame: pd.DataFrame, fig: Figure) -> None:
    """One row per rank: the training thread's phases above, the engine's collectives below;
    phases named as in the step-time breakdown."""
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
    # a phase too thin to see anywhere (an injected delay of 0 ms) would only crowd the legend
    longest = (frame["end_ms"] - frame["start_ms"]).groupby(frame["phase"]).max()
    visible = 1e-3 * float(frame["end_ms"].max() - frame["start_ms"].min())
    handles = [Patch(color=PHASE_COLOURS[p], label=PHASE_LABELS[p])
               for p in (*TIMELINE_LANES, "allreduce", "negotiate") if longest.get(p, 0.0) > visible]
    if (frame["phase"] == "grad_ready").any():
        handles.append(Line2D([], [], color="black", linewidth=0.6, label=PHASE_LABELS["grad_ready"]))
    for step in sorted(frame["step"].unique())[1:]:   # where the second step begins
        start = frame.loc[frame["step"] == step, "start_ms"].min()
        ax.axvline(start, color="grey", linewidth=0.6, linestyle=":")
    ax.set_yticks(ranks, [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds from the first step's start (rank 0's clock); per rank, upper bar: communication "
                  "engine, lower bar: training thread", fontsize="small")
    ax.legend(handles=handles, fontsize="x-small", ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))


def algorithm_bars(frame: pd.DataFrame, fig: Figure) -> None:
    ax = fig.subplots()
    settings = list(dict.fromkeys(frame["setting"]))
    algorithms = list(dict.fromkeys(frame["algorithm"]))
    width = 0.8 / len(algorithms)
    for i, algorithm in enumerate(algorithms):
        part = frame[frame["algorithm"] == algorithm].set_index("setting").reindex(settings)
        x = np.arange(len(settings)) + (i - (len(algorithms) - 1) / 2) * width
        bars = ax.bar(x, part["throughput_mean"], width, yerr=part["throughput_std"], capsize=2,
                      label=ALGORITHM_NAMES.get(algorithm, algorithm))
        for bar, speedup in zip(bars, part["speedup_vs_sync"]):
            if not np.isnan(speedup) and algorithm != "sync":
                ax.annotate(f"{speedup:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize="x-small")
    _config_ticks(ax, settings)
    ax.set_ylabel("training throughput (samples / s)")
    legend_beside(ax, title="bar labels: speedup over sync", title_fontsize="x-small")
    ax.grid(axis="y", alpha=0.3)


def speedup_lines(frame: pd.DataFrame, fig: Figure) -> None:
    """Speedup over sync against the injected delay, one line per algorithm."""
    ax = fig.subplots()
    where = x_axis(ax, frame, "imbalance_delay_ms")
    hidden = coinciding(frame, "series", "imbalance_delay_ms", "speedup")
    for i, (series, part) in enumerate(frame.groupby("series", sort=False)):
        algorithm = str(part["algorithm"].iloc[0])
        name = series.replace(f"algorithm={algorithm}", ALGORITHM_NAMES.get(algorithm, algorithm))
        ax.errorbar(where(part["imbalance_delay_ms"]), part["speedup"], yerr=part["speedup_std"], capsize=3,
                    label=series_label(name, {name: hidden[series]} if series in hidden else {}),
                    **line_style(i, dashed=False))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=(0, (4, 3)), label="sync (speedup 1)")
    ax.set_ylabel("speedup over sync (rounds/s ratio)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)


def accuracy(frame: pd.DataFrame, fig: Figure, x: str) -> None:
    """Top-1 in percent against epochs completed (whole-number ticks from 0, so one epoch
    reads as one epoch) or seconds; a value label where a configuration has one point."""
    ax = fig.subplots()
    hidden = coinciding(frame, "config", x, "top1")
    for i, (config, part) in enumerate(frame.groupby("config", sort=False)):
        ax.plot(part[x], part["top1"] * 100, label=series_label(config, hidden), **line_style(i))
        if len(part) == 1:
            ax.annotate(f"{part['top1'].iloc[0] * 100:.1f} %", (part[x].iloc[0], part["top1"].iloc[0] * 100),
                        textcoords="offset points", xytext=(6, 4 + 8 * i), fontsize="x-small", color=f"C{i % 10}")
    if x == "epochs_done":
        last = int(frame[x].max())
        ax.set_xlim(0, last + 0.5)
        ax.set_xticks(range(0, last + 1, max(1, (last + 9) // 10)))
        ax.set_xlabel("epochs completed")
    else:
        ax.set_xlim(left=0)
        ax.set_xlabel("seconds since the run started (mean over repeats)")
    ax.set_ylabel("top-1 accuracy on the test set (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    legend_beside(ax)


def loss_curves(frame: pd.DataFrame, fig: Figure) -> None:
    """Validation loss (log scale) against seconds since the run started, one line per configuration."""
    ax = fig.subplots()
    hidden = coinciding(frame, "config", "wall", "loss")
    for i, (config, part) in enumerate(frame.groupby("config", sort=False)):
        ax.plot(part["wall"], part["loss"], label=series_label(config, hidden), **line_style(i))
    if (frame["loss"] > 0).all():
        ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since the run started (mean over repeats)")
    ax.set_ylabel("validation loss (regression: mean squared error)")
    ax.grid(alpha=0.3, which="both")
    legend_beside(ax)


def time_bars(frame: pd.DataFrame, fig: Figure) -> None:
    """Seconds to the target accuracy (or, with ``target_loss``, validation loss) per configuration;
    a configuration none of whose runs got there says so."""
    ax = fig.subplots()
    x = np.arange(len(frame))
    heights = frame["seconds_mean"].fillna(0.0)
    ax.bar(x, heights, yerr=frame["seconds_std"].fillna(0.0), capsize=3, color="#4c72b0")
    for xi, row in zip(x, frame.itertuples(index=False)):
        text = "not reached" if row.reached == 0 else f"{row.reached} of {counted(row.runs, 'run')}" \
            if row.reached < row.runs else f"{row.seconds_mean:.1f} s"
        ax.annotate(text, (xi, 0 if row.reached == 0 else row.seconds_mean), ha="center", va="bottom",
                    fontsize="x-small", textcoords="offset points", xytext=(0, 3))
    _config_ticks(ax, frame["config"])
    if "target_loss" in frame:
        ax.set_ylabel(f"seconds until validation loss ≤ {float(frame['target_loss'].iloc[0]):g}")
    else:
        rule = str(frame["target_rule"].iloc[0]) if "target_rule" in frame else ""
        ax.set_ylabel(f"seconds until top-1 ≥ {round(float(frame['target_top1'].iloc[0]) * 100, 4):g} %"
                      + ("\n(" + ("as given" if rule.startswith("as given") else "every run's best, rounded down")
                         + ")" if rule else ""))
    ax.grid(axis="y", alpha=0.3)


def rounds(frame: pd.DataFrame, fig: Figure) -> None:
    """Side by side, not stacked: a rank that missed a round brings its stale gradient
    along with its fresh one, so one rank can count as both."""
    ax = fig.subplots()
    x = np.arange(len(frame))
    parts = (("fresh", "#55a868", "fresh: this step's gradient"),
             ("stale", "#dd8452", "stale: a gradient that missed an earlier round"),
             ("null", "#bbbbbb", "null: nothing (a zero contribution)"))
    width = 0.8 / len(parts)
    for i, (part, colour, label) in enumerate(parts):
        ax.bar(x + (i - 1) * width, frame[part], width, label=label, color=colour)
    _config_ticks(ax, frame["config"])
    ax.set_ylabel("ranks contributing (mean per partial round)")
    legend_beside(ax, title="a rank can be fresh and stale in one round", title_fontsize="x-small")
    ax.grid(axis="y", alpha=0.3)


def _wrap(label: str, width: int = 34) -> str:
    """A configuration label broken after its commas into lines of at most ``width`` characters."""
    lines, line = [], ""
    for part in str(label).split(", "):
        if line and len(line) + 2 + len(part) > width:
            lines.append(line + ",")
            line = part
        else:
            line = f"{line}, {part}" if line else part
    return "\n".join([*lines, line])


_CHAR_INCHES = 0.07   # the width of one character of a "small" tick label, roughly


def _config_ticks(ax, labels, start: int = 0) -> None:
    """Configuration names under bars or boxes: as they are when they fit, else wrapped after
    their commas, else wrapped and turned upright with the figure growing to hold them (never
    collapsing its axes)."""
    labels = [str(s) for s in labels]
    ticks = np.arange(start, start + len(labels))
    fig = ax.figure
    width, height = fig.get_size_inches()
    fits = max(8, int(width * 0.85 / max(len(labels), 1) / _CHAR_INCHES))
    longest = max((len(s) for s in labels), default=0)
    if longest <= fits:
        ax.set_xticks(ticks, labels, fontsize="small")
        return
    wrapped = [_wrap(s, fits) for s in labels]
    if max(len(line) for s in wrapped for line in s.splitlines()) <= fits:
        lines = max(s.count("\n") + 1 for s in wrapped)
        fig.set_size_inches(width, height + 0.16 * (lines - 1))
        ax.set_xticks(ticks, wrapped, fontsize="small")
        return
    wrapped = [_wrap(s) for s in labels]
    tallest = max(len(line) for s in wrapped for line in s.splitlines())
    lines = max(s.count("\n") + 1 for s in wrapped)
    fig.set_size_inches(max(width, 0.9 + len(labels) * (0.16 * lines + 0.12)), height + tallest * 0.065)
    ax.set_xticks(ticks, wrapped, rotation=90, ha="center", fontsize="small")


def metric_bars(frame: pd.DataFrame, fig: Figure, name: str) -> None:
    ax = fig.subplots()
    x = np.arange(len(frame))
    ax.bar(x, frame["value_mean"], yerr=frame["value_std"], capsize=3, color="#4c72b0")
    _config_ticks(ax, frame["config"])
    better = frame.attrs.get("better")
    ax.set_ylabel(f"{name} ({better} is better)" if better else name)
    ax.grid(alpha=0.3, axis="y")
