"""Which figures a study gets, and writing them out.

A figure is a name, a table builder (``data.py``) and a drawing (``draw.py``). The
catalog is not keyed by study name: every figure whose data the study holds is
drawn (throughput against each scaling axis that was swept, the timeline when runs
recorded one, rounds when partial collectives ran…), so a user's own study gets the
same figures as the shipped ones. Next to each image goes the table it was drawn
from (CSV), and ``manifest.json`` records what came from which runs.

Each figure also carries a one-sentence caption (what it shows, and from how many
runs: the table builders tag their tables with the runs they used), and notes
printed on its face where its data cannot support a plain reading — a partial grid,
axes that moved together, oversubscribed cores (``notes.py``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import matplotlib
import pandas as pd
from sqlalchemy import Engine

from . import data, derived, draw, energy, utilisation
from .notes import figure_notes

FORMATS = ("png", "pdf", "svg")


@dataclass(frozen=True)
class FigureSpec:
    name: str
    title: str
    needs: str                                           # what the study must hold, shown when skipped
    build: Callable[["FigureContext"], pd.DataFrame]
    paint: Callable[[pd.DataFrame, object], None]
    size: tuple[float, float] = (6.4, 4.2)
    caption: str = ""                                    # one sentence: what the figure shows
    compares: bool = True                                # compares configurations (a partial grid matters)
    describe: Callable[[pd.DataFrame, "FigureContext"], str] | None = None   # a title naming its data


@dataclass
class FigureContext:
    engine: Engine
    runs: data.StudyRuns
    run_id: int | None = None                            # the timeline's run (default: the largest)
    target: float | None = None                          # time to accuracy's target top-1 (default: derived)
    loss_target: float | None = None                     # a regression's time to loss target (default: derived)
    cache: dict = field(default_factory=dict)

    def timeline_run(self) -> int | None:
        if "timeline_run" not in self.cache:
            self.cache["timeline_run"] = data.pick_timeline_run(self.engine, self.runs, self.run_id)
        return self.cache["timeline_run"]


@dataclass(frozen=True)
class FigureResult:
    name: str
    files: tuple[Path, ...] = ()
    rows: int = 0
    skipped: str | None = None                           # why nothing was drawn
    title: str = ""
    caption: str = ""                                    # what it shows and how many runs it rests on
    run_ids: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()                          # printed on the figure too


def _axis_name(axis: str) -> str:
    return f"param_{axis.split('.', 1)[1]}" if axis.startswith("params.") else axis


def _can_plot_against(ctx: FigureContext, axis: str) -> bool:
    """Swept independently, and measured at two values or more (failures may leave one)."""
    return axis in ctx.runs.varying and ctx.runs.runs[axis].nunique(dropna=False) > 1


def _scaling_figure(axis: str) -> FigureSpec:
    what = data.label_of(axis)
    return FigureSpec(
        name=f"throughput_vs_{_axis_name(axis)}", title=f"Training throughput against {what}",
        needs=f"{axis} swept at two values or more, not only in step with another axis",
        build=lambda ctx: data.throughput_vs(ctx.runs, axis) if _can_plot_against(ctx, axis) else pd.DataFrame(),
        paint=lambda frame, fig: draw.throughput_vs(frame, fig, axis),
        caption=f"Samples per second (mean ± standard deviation over repeats) against {what}, one line per "
                "setting of the other swept axes" + (", each with its linear-scaling reference in its own colour."
                                                     if axis in data.RESOURCE_AXES else "."))


def _efficiency_figure(axis: str) -> FigureSpec:
    what = data.label_of(axis)
    if axis in data.RESOURCE_AXES:
        caption = (f"Scaling efficiency against {what}: measured throughput ÷ linear scaling from the line's "
                   f"smallest {what} (1 = perfect scaling).")
        needs = f"{axis} swept at two values or more"
    else:
        caption = ("Scaling efficiency of each rank count against the per-worker batch size: throughput ÷ (the "
                   "smallest rank count's throughput × the rank ratio) at the same batch size.")
        needs = "batch_size swept with nodes or workers_per_node"
    return FigureSpec(
        name=f"efficiency_vs_{axis}", title=f"Scaling efficiency against {what}", needs=needs,
        build=lambda ctx: derived.efficiency_vs(ctx.runs, axis) if _can_plot_against(ctx, axis) else pd.DataFrame(),
        paint=lambda frame, fig: draw.efficiency(frame, fig, axis), caption=caption)


def _timeline_frame(ctx: FigureContext) -> pd.DataFrame:
    run = ctx.timeline_run()
    return pd.DataFrame() if run is None else data.used(data.timeline_window(ctx.engine, run).assign(run_id=run), [run])


def _timeline_title(frame: pd.DataFrame, ctx: FigureContext) -> str:
    run = int(frame["run_id"].iloc[0])
    row = ctx.runs.runs[ctx.runs.runs["run_id"] == run].iloc[0]
    steps = sorted(int(s) for s in frame["step"].unique())
    shown = f"steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
    lo, hi = data.timeline_steps(ctx.engine, run)
    of = f" of {lo}–{hi}" if hi is not None else ""
    config = ctx.runs.label(row, [a for a in ("algorithm", *ctx.runs.varying) if a in row.index])
    # what the run's timeline recorded: a window of steps and a sample of ranks (timeline_steps / _ranks)
    sampled = []
    if isinstance(row.get("timeline_steps"), str) and row["timeline_steps"]:
        sampled.append(f"steps {row['timeline_steps']} recorded")
    recorded = sorted(int(r) for r in frame["rank"].unique())
    if pd.notna(row.get("timeline_ranks")) and row.get("timeline_ranks") and \
            int(row["timeline_ranks"]) < int(row["world_size"]):
        sampled.append(f"{int(row['timeline_ranks'])} of {int(row['world_size'])} ranks recorded "
                       f"({', '.join(map(str, recorded))})")
    note = f" [{'; '.join(sampled)}]" if sampled else ""
    return (f"Timeline of run {run} ({config}, {int(row['world_size'])} ranks): {shown}{of}{note}; "
            "phases as in the step-time breakdown")


def _skew_frame(ctx: FigureContext) -> pd.DataFrame:
    return data.collective_skew(ctx.engine, ctx.runs)


CATALOG: tuple[FigureSpec, ...] = (
    *(_scaling_figure(axis) for axis in data.SCALING_AXES),
    *(_efficiency_figure(axis) for axis in data.SCALING_AXES),
    FigureSpec("throughput_by_algorithm", "Throughput per algorithm (speedup over sync on the bars)",
               "runs of more than one algorithm",
               lambda ctx: data.throughput_by_algorithm(ctx.runs) if "algorithm" in ctx.runs.varying else pd.DataFrame(),
               draw.algorithm_bars, size=(7.5, 4.4),
               caption="Samples per second of each algorithm (mean ± standard deviation over repeats) in each setting "
                       "of the other swept axes (an imbalance setting, a node count); the label on each bar is its "
                       "speedup over sync in the same setting."),
    FigureSpec("speedup_vs_delay", "Speedup over sync against the injected delay",
               "runs of sync and another algorithm at two injected delays or more",
               lambda ctx: derived.speedup_vs_delay(ctx.runs), draw.speedup_lines,
               caption="Each algorithm's rounds per second (the paper's steps/s; throughput for runs recorded before "
                       "rounds were counted) divided by sync's at the same injected delay (imbalance.delay_ms), "
                       "mean over repeats with its standard deviation scaled by sync's mean."),
    FigureSpec("step_time_breakdown", "Where a training step's time goes (mean per step, step 0 left out)",
               "step records", lambda ctx: data.step_time_breakdown(ctx.engine, ctx.runs), draw.stacked_phases,
               size=(7.5, 4.2),
               caption="Mean milliseconds per training step in each phase, pooled over every rank's steps of the "
                       "configuration's runs; step 0 (one-time initialisation) is left out."),
    FigureSpec("timeline", "Fine-grain timeline of two steps: phases, gradients ready, fused allreduces",
               "a run with timeline=true", _timeline_frame, draw.timeline, size=(9.0, 5.0), compares=False,
               describe=_timeline_title,
               caption="Two consecutive steps from the middle of one run, per rank: the training thread's phases, "
                       "each gradient becoming ready (black ticks), and the communication engine's negotiations and "
                       "fused allreduces."),
    FigureSpec("straggler_skew", "Stragglers: arrival skew at each fused allreduce, per configuration by node count",
               "runs with timeline=true whose engine logs its collectives", _skew_frame,
               lambda frame, fig: draw.distribution(frame, fig, "arrival skew at a collective (ms)"), size=(7.5, 4.2),
               caption="Distribution over every fused allreduce of the spread between the first and the last rank "
                       "to have that buffer's gradients ready (box: quartiles; whiskers: 1.5 × the interquartile "
                       "range), configurations ordered by node count."),
    FigureSpec("update_delay", "Delay between consecutive weight updates",
               "runs with timeline=true",
               lambda ctx: data.step_stat_distribution(ctx.engine, ctx.runs, "update_delay"),
               lambda frame, fig: draw.distribution(frame, fig, "milliseconds between weight updates"),
               size=(7.5, 4.2),
               caption="Distribution per configuration of the time from the end of one weight update to the start of "
                       "the next (mean over ranks per step): the time a step spends on everything but the update."),
    FigureSpec("allreduce_hidden", "Share of allreduce time hidden behind backprop",
               "runs with timeline=true and an overlapping engine",
               lambda ctx: data.step_stat_distribution(ctx.engine, ctx.runs, "hidden_fraction", scale=100.0),
               lambda frame, fig: draw.distribution(frame, fig, "% of allreduce time hidden behind backprop"),
               size=(7.5, 4.2),
               caption="Distribution per configuration and step of the share of allreduce time that overlapped the "
                       "rank's own backward pass: what overlapping communication with backprop bought."),
    FigureSpec("accuracy_vs_epoch", "Top-1 accuracy after each epoch (mean over repeats)", "evaluations with a top-1",
               lambda ctx: data.accuracy_curves(ctx.engine, ctx.runs),
               lambda frame, fig: draw.accuracy(frame, fig, "epochs_done"),
               caption="Top-1 accuracy on the test set after each completed epoch, mean over repeats."),
    FigureSpec("accuracy_vs_time", "Top-1 accuracy against training time (mean over repeats)",
               "evaluations with a top-1",
               lambda ctx: data.accuracy_curves(ctx.engine, ctx.runs),
               lambda frame, fig: draw.accuracy(frame, fig, "wall"),
               caption="Top-1 accuracy on the test set against seconds since the run started, mean over repeats of "
                       "both."),
    FigureSpec("time_to_accuracy", "Time to a target accuracy", "evaluations with a top-1",
               lambda ctx: derived.time_to_accuracy(ctx.engine, ctx.runs, ctx.target), draw.time_bars,
               size=(7.5, 4.2),
               caption="Seconds until a configuration's runs first reached the target top-1 accuracy (mean ± standard "
                       "deviation over the repeats that reached it)."),
    FigureSpec("loss_vs_time", "Validation loss against training time (mean over repeats)",
               "evaluations of runs that score no top-1 (a regression)",
               lambda ctx: data.loss_curves(ctx.engine, ctx.runs), draw.loss_curves,
               caption="Validation loss (a regression's: the mean squared error) after each completed epoch "
                       "against seconds since the run started, mean over repeats of both; log scale."),
    FigureSpec("time_to_loss", "Time to a target validation loss", "evaluations of runs that score no top-1 "
               "(a regression)",
               lambda ctx: derived.time_to_loss(ctx.engine, ctx.runs, ctx.loss_target),
               draw.time_bars, size=(7.5, 4.2),
               caption="Seconds until a configuration's runs first reached the target validation loss (mean ± "
                       "standard deviation over the repeats that reached it)."),
    FigureSpec("energy_vs_nodes", "Energy to solution against node count", "runs with an energy counter "
               "(runs.energy_joules: Cray pm_counters, RAPL or NVML) at two node counts or more",
               lambda ctx: energy.energy_vs_nodes(ctx.runs, "energy"),
               lambda frame, fig: energy.draw_energy(frame, fig, "energy"),
               caption="Kilojoules the runs' hosts drew from start to end of a run (measured by the nodes' "
                       "counters; mean ± standard deviation over repeats), one line per setting of the other "
                       "swept axes; runs without a counter are left out."),
    FigureSpec("samples_per_joule_vs_nodes", "Samples trained per joule against node count",
               "runs with an energy counter at two node counts or more",
               lambda ctx: energy.energy_vs_nodes(ctx.runs, "samples_per_joule"),
               lambda frame, fig: energy.draw_energy(frame, fig, "samples_per_joule"),
               caption="Training samples (steps × global batch) per joule the runs' hosts drew, mean ± standard "
                       "deviation over repeats: how much work a joule buys as the run spreads over more nodes."),
    FigureSpec("mfu_vs_nodes", "Model FLOP utilisation against node count",
               "runs of the built-in training loop (runs.mfu) at two node counts or more",
               lambda ctx: utilisation.mfu_vs_nodes(ctx.runs), utilisation.draw_mfu,
               caption="Training FLOP/s achieved (throughput × the model's FLOPs per sample, counted once by "
                       "PyTorch's FLOP counter: matrix products and convolutions only, a lower bound) as a share "
                       "of the ranks' summed peak (a GPU's datasheet number, TF32 where PyTorch allows it; a CPU "
                       "rank's threads × clock × FP32 FLOPs per cycle, each thread counted as a core); mean ± "
                       "standard deviation over repeats. The CSV names each series' peak and its source."),
    FigureSpec("partial_rounds", "Partial allreduce rounds: fresh, stale and null contributions",
               "eager_solo or eager_majority runs", lambda ctx: data.round_composition(ctx.engine, ctx.runs),
               draw.rounds, size=(7.5, 4.2),
               caption="Mean number of ranks per partial-allreduce round that contributed this step's gradient "
                       "(fresh), a gradient held over from a round they missed (stale), or nothing (null); "
                       "synchronous rounds are left out."),
)
NAMES = tuple(spec.name for spec in CATALOG)


def select_specs(only: Sequence[str] | None) -> list[FigureSpec]:
    if not only:
        return list(CATALOG)
    unknown = [name for name in only if name not in NAMES]
    if unknown:
        raise data.FigureDataError(f"unknown figure {unknown[0]!r}; known: {', '.join(NAMES)}")
    return [spec for spec in CATALOG if spec.name in only]


def check_choices(formats: Sequence[str], only: Sequence[str] | None, allow_dynamic: bool = True) -> None:
    """Refuse an unknown format or figure name before anything is read or written."""
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise data.FigureDataError(f"format {(bad or [''])[0]!r}: choose from {', '.join(FORMATS)}")
    select_specs([n for n in (only or []) if not (allow_dynamic and n.startswith(DYNAMIC_PREFIXES))] or None)


DYNAMIC_PREFIXES = ("throughput_vs_param_", "metric_")
# the figures whose names the data decides, for ``scalestudy figures --list``
DYNAMIC_FAMILIES = (
    ("throughput_vs_param_NAME", "Training throughput against a free parameter",
     "+params.NAME swept at two values or more"),
    ("metric_NAME", "A metric your workload reported, per configuration (mean ± std over repeats)",
     "runs that reported metrics.NAME (command workloads, report.result)"),
)


def catalog_lines() -> list[str]:
    """Every figure, with what it needs: the fixed ones, then the families named by the data."""
    rows = [(spec.name, spec.title, spec.needs) for spec in CATALOG] + list(DYNAMIC_FAMILIES)
    width = max(len(name) for name, _, _ in rows) + 2
    return [f"{name:{width}s}{title}  [needs {needs}]" for name, title, needs in rows]


def dynamic_specs(ctx: FigureContext) -> list[FigureSpec]:
    """Figures the study's own data calls for: throughput against each swept free
    parameter, and each metric a command workload reported, per configuration."""
    specs = [_scaling_figure(axis) for axis in ctx.runs.varying if axis.startswith("params.")]
    for column in sorted(c for c in ctx.runs.runs.columns if c.startswith("metrics.")):
        name = column.split(".", 1)[1]
        specs.append(FigureSpec(
            name=f"metric_{name}", title=f"{name} per configuration (mean ± std over repeats)",
            needs=f"runs that reported the metric {name}",
            build=lambda ctx, column=column: data.metric_by_config(ctx.runs, column),
            paint=lambda frame, fig, name=name: draw.metric_bars(frame, fig, name), size=(7.5, 4.2),
            caption=f"The metric {name} your workload reported, per configuration (mean ± standard deviation "
                    "over repeats)."))
    return specs


def render_study(engine: Engine, study: str, out_dir: Path, formats: Sequence[str] = ("png",),
                 only: Sequence[str] | None = None, where=None, run_id: int | None = None,
                 on_result: Callable[[FigureResult], None] | None = None, source: str = "",
                 target: float | None = None, runs: data.StudyRuns | None = None,
                 loss_target: float | None = None) -> list[FigureResult]:
    """Draw every figure the study's data allows into ``out_dir``; returns what was written or skipped.

    ``target``: the top-1 accuracy time-to-accuracy measures to (default: the best every run
    reached); ``runs``: the study already loaded (the report reads it once for tables and figures)."""
    check_choices(formats, only, allow_dynamic=True)
    if target is not None and not 0 < target <= 1:
        raise data.FigureDataError(f"target {target!r}: a top-1 accuracy between 0 and 1 (e.g. 0.8)")
    if loss_target is not None and not (loss_target == loss_target and 0 < loss_target < float("inf")):
        raise data.FigureDataError(f"loss target {loss_target!r}: a validation loss above 0 (e.g. 4.7)")
    ctx = FigureContext(engine, runs or data.load_study(engine, study, where), run_id, target, loss_target)
    specs = [s for s in [*CATALOG, *dynamic_specs(ctx)] if not only or s.name in only]
    if run_id is not None and any(spec.name == "timeline" for spec in specs):
        ctx.timeline_run()  # a bad --run-id fails before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in specs:
        result = _render_one(spec, ctx, out_dir, formats)
        results.append(result)
        if on_result:
            on_result(result)
    _write_manifest(out_dir, study, ctx, results, source)
    return results


def _render_one(spec: FigureSpec, ctx: FigureContext, out_dir: Path, formats: Sequence[str]) -> FigureResult:
    frame = spec.build(ctx)
    if frame is None or frame.empty:
        return FigureResult(spec.name, skipped=f"needs {spec.needs}")
    run_ids = tuple(frame.attrs.get("run_ids") or ctx.runs.ids)
    title = spec.describe(frame, ctx) if spec.describe else spec.title
    notes = tuple(figure_notes(ctx.runs, run_ids, compares_configurations=spec.compares))
    fig = draw.new_figure(*spec.size)
    spec.paint(frame, fig)
    draw.title(fig, f"{ctx.runs.study}: {title}")
    draw.add_notes(fig, notes)
    runs = f"{len(run_ids)} run" + ("" if len(run_ids) == 1 else "s")
    # what the figure's own table adds (a time to accuracy's target and how it was chosen)
    own = f" {frame.attrs['caption_note']}" if frame.attrs.get("caption_note") else ""
    caption = f"{spec.caption}{own} Drawn from {runs}." if spec.caption else f"{own.strip()} Drawn from {runs}.".strip()
    files = [_atomic(out_dir / f"{spec.name}.csv", lambda tmp: frame.to_csv(tmp, index=False))]
    for fmt in formats:
        # SVG keeps its text as text (searchable, editable), not as outlines
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            files.append(_atomic(out_dir / f"{spec.name}.{fmt}",
                                 lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150)))
    return FigureResult(spec.name, tuple(files), rows=len(frame), title=title, caption=caption, run_ids=run_ids,
                        notes=notes)


def _atomic(path: Path, write: Callable[[Path], None]) -> Path:
    """Write beside and rename: a reader (or a crashed redraw) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
    return path


def _write_manifest(out_dir: Path, study: str, ctx: FigureContext, results: list[FigureResult], source: str) -> None:
    manifest = {
        "study": study, "source": source, "drawn_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": [int(i) for i in ctx.runs.runs["run_id"]], "varying_axes": list(ctx.runs.varying),
        "timeline_run": ctx.cache.get("timeline_run"),
        "figures": [{"name": r.name, "files": [p.name for p in r.files], "rows": r.rows, "skipped": r.skipped,
                     "title": r.title, "caption": r.caption, "runs": list(r.run_ids), "notes": list(r.notes)}
                    for r in results],
    }
    _atomic(out_dir / "manifest.json", lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n"))
