"""Which figures a study gets, and writing them out.

A figure is a name, a table builder (``data.py``) and a drawing (``draw.py``). The
catalog is not keyed by study name: every figure whose data the study holds is
drawn (throughput against each scaling axis that was swept, the timeline when runs
recorded one, rounds when partial collectives ran…), so a user's own study gets the
same figures as the shipped ones. Next to each image goes the table it was drawn
from (CSV), and ``manifest.json`` records what came from which runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
from sqlalchemy import Engine

from . import data, draw

FORMATS = ("png", "pdf", "svg")


@dataclass(frozen=True)
class FigureSpec:
    name: str
    title: str
    needs: str                                           # what the study must hold, shown when skipped
    build: Callable[["FigureContext"], pd.DataFrame]
    paint: Callable[[pd.DataFrame, object], None]
    size: tuple[float, float] = (6.4, 4.2)


@dataclass
class FigureContext:
    engine: Engine
    runs: data.StudyRuns
    run_id: int | None = None                            # the timeline's run (default: the largest)
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


def _scaling_figure(axis: str) -> FigureSpec:
    name = f"throughput_vs_param_{axis.split('.', 1)[1]}" if axis.startswith("params.") else f"throughput_vs_{axis}"
    return FigureSpec(
        name=name, title=f"Training throughput against {data.label_of(axis)}",
        needs=f"{axis} swept at two values or more, not only in step with another axis",
        build=lambda ctx: data.throughput_vs(ctx.runs, axis) if axis in ctx.runs.varying else pd.DataFrame(),
        paint=lambda frame, fig: draw.throughput_vs(frame, fig, axis))


def _timeline_frame(ctx: FigureContext) -> pd.DataFrame:
    run = ctx.timeline_run()
    return pd.DataFrame() if run is None else data.timeline_window(ctx.engine, run).assign(run_id=run)


CATALOG: tuple[FigureSpec, ...] = (
    *(_scaling_figure(axis) for axis in data.SCALING_AXES),
    FigureSpec("throughput_by_algorithm", "Throughput per algorithm (speedup over sync on the bars)",
               "runs of more than one algorithm",
               lambda ctx: data.throughput_by_algorithm(ctx.runs) if "algorithm" in ctx.runs.varying else pd.DataFrame(),
               draw.algorithm_bars, size=(7.5, 4.2)),
    FigureSpec("step_time_breakdown", "Where a training step's time goes (mean per step, step 0 left out)",
               "step records", lambda ctx: data.step_time_breakdown(ctx.engine, ctx.runs), draw.stacked_phases,
               size=(7.5, 4.2)),
    FigureSpec("timeline", "Fine-grain timeline of two steps: phases, gradients ready, fused allreduces",
               "a run with timeline=true", _timeline_frame, draw.timeline, size=(9.0, 4.8)),
    FigureSpec("straggler_skew", "Stragglers: spread of ranks' arrival at each step's collectives (worst per step)",
               "runs with timeline=true",
               lambda ctx: data.step_stat_distribution(ctx.engine, ctx.runs, "arrival_skew_max"),
               lambda frame, fig: draw.distribution(frame, fig, "arrival skew (ms)"), size=(7.5, 4.2)),
    FigureSpec("update_delay", "Delay between consecutive weight updates",
               "runs with timeline=true",
               lambda ctx: data.step_stat_distribution(ctx.engine, ctx.runs, "update_delay"),
               lambda frame, fig: draw.distribution(frame, fig, "ms between updates"), size=(7.5, 4.2)),
    FigureSpec("allreduce_hidden", "Share of allreduce time hidden behind backprop",
               "runs with timeline=true and an overlapping engine",
               lambda ctx: data.step_stat_distribution(ctx.engine, ctx.runs, "hidden_fraction", scale=100.0),
               lambda frame, fig: draw.distribution(frame, fig, "% of allreduce time hidden"), size=(7.5, 4.2)),
    FigureSpec("accuracy_vs_epoch", "Top-1 accuracy after each epoch (mean over seeds)", "evaluations",
               lambda ctx: data.accuracy_curves(ctx.engine, ctx.runs),
               lambda frame, fig: draw.accuracy(frame, fig, "epoch")),
    FigureSpec("accuracy_vs_time", "Top-1 accuracy against training time (mean over seeds)", "evaluations",
               lambda ctx: data.accuracy_curves(ctx.engine, ctx.runs),
               lambda frame, fig: draw.accuracy(frame, fig, "wall")),
    FigureSpec("partial_rounds", "Partial allreduce rounds: fresh, stale and null contributions",
               "eager_solo or eager_majority runs", lambda ctx: data.round_composition(ctx.engine, ctx.runs),
               draw.rounds, size=(7.5, 4.2)),
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
            paint=lambda frame, fig, name=name: draw.metric_bars(frame, fig, name), size=(7.5, 4.2)))
    return specs


def render_study(engine: Engine, study: str, out_dir: Path, formats: Sequence[str] = ("png",),
                 only: Sequence[str] | None = None, where=None, run_id: int | None = None,
                 on_result: Callable[[FigureResult], None] | None = None, source: str = "") -> list[FigureResult]:
    """Draw every figure the study's data allows into ``out_dir``; returns what was written or skipped."""
    check_choices(formats, only, allow_dynamic=True)
    ctx = FigureContext(engine, data.load_study(engine, study, where), run_id)
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
    fig = draw.new_figure(*spec.size)
    spec.paint(frame, fig)
    fig.suptitle(f"{ctx.runs.study}: {spec.title}", fontsize="medium")
    files = [_atomic(out_dir / f"{spec.name}.csv", lambda tmp: frame.to_csv(tmp, index=False))]
    for fmt in formats:
        files.append(_atomic(out_dir / f"{spec.name}.{fmt}", lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=150)))
    return FigureResult(spec.name, tuple(files), rows=len(frame))


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
        "figures": [{"name": r.name, "files": [p.name for p in r.files], "rows": r.rows, "skipped": r.skipped}
                    for r in results],
    }
    _atomic(out_dir / "manifest.json", lambda tmp: tmp.write_text(json.dumps(manifest, indent=2) + "\n"))
