"""``build_report``: one study → one self-contained folder (``index.html``, ``figures/``, CSVs).

The folder is what a person copies off a login node: the page links only to files
inside it (images, PDFs, the CSV behind each figure and table), loads no script, font
or style from anywhere else, and so opens from a laptop's disk with no network.
Every choice (baseline, target, filters) is checked before anything is written.
"""

from __future__ import annotations

from workloads.plural import counted

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
from sqlalchemy import Engine

from results_db.analysis import paper_claims, regression
from results_db.analysis.compare import CompareError
from results_db.report.figures import catalog, data
from results_db.report.figures.notes import emulation_note, grid_notes, oversubscription_note, padding_note
from results_db.store import query
from results_db.store.connect import safe_url
from . import page, provenance, tables
from .tables import ReportError

FIGURE_FORMATS = ("png", "pdf")
TIMELINE_DIR = "timelines"
_MARKER = '<meta name="generator" content="scalestudy report">'
_MARKER_FILE = ".scalestudy-report"   # written first: a build stopped half-way is still ours to replace


@dataclass(frozen=True)
class Report:
    index: Path
    figures: tuple[catalog.FigureResult, ...]
    configurations: pd.DataFrame
    failures: pd.DataFrame


def _summary(planned: pd.DataFrame) -> str:
    counts = planned["status"].value_counts()
    parts = [f"{n} {state}" for state, n in counts.items()]
    return f"{counted(len(planned), 'run')}: " + ", ".join(parts) + "."


def _check_out(out: Path) -> None:
    """Write into an empty or missing folder, or over an earlier report; never over other files."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ReportError(f"--out {out}: exists and is not a folder")
    index = out / "index.html"
    ours = (out / _MARKER_FILE).is_file() or (index.is_file() and _MARKER in index.read_text(errors="replace")[:2000])
    if any(out.iterdir()) and not ours:
        raise ReportError(f"--out {out}: the folder holds files that are not a scalestudy report; "
                          "choose an empty or new folder")


def _where_text(where) -> str | None:
    if not where:
        return None
    return ", ".join([where] if isinstance(where, str) else list(where))


def build_report(engine: Engine, study: str, out: Path, db_url: str, baseline: str | None = None,
                 target: float | None = None, where: str | Sequence[str] | None = None,
                 against: str | None = None, loss_target: float | None = None,
                 reproduction: pd.DataFrame | None = None, reproduction_of: str = "",
                 against_metric: str = "throughput") -> Report:
    """Write the report of ``study`` into ``out``; ``db_url`` is shown (password masked), never used to connect.
    ``target``: the top-1 time to accuracy measures to; ``loss_target``: the validation loss time to
    loss measures to (a regression's: default, the study's paper's target, else the highest of every
    run's lowest loss)."""
    out = Path(out)
    _check_out(out)
    if target is not None and not 0 < target <= 1:
        raise ReportError(f"target {target!r}: a top-1 accuracy between 0 and 1 (e.g. 0.8)")
    if loss_target is not None and not (math.isfinite(loss_target) and loss_target > 0):
        raise ReportError(f"loss target {loss_target!r}: a validation loss above 0 (e.g. 4.7)")
    planned = query.runs(engine, study=study, where=where)
    try:
        sr = data.load_study(engine, study, where)
    except data.FigureDataError as exc:
        if planned.empty:
            raise ReportError(str(exc)) from None
        sr = None   # nothing finished: the page still says what was planned and why it failed
    chosen = baseline
    if sr is not None:
        chosen = baseline or tables.default_baseline(sr)
        if chosen:
            tables.check_baseline(sr, chosen)
    elif baseline:
        raise ReportError(f"baseline {baseline}: study {study!r} has no finished run to compare against")

    # everything that can refuse the input is computed before the first file is written
    configurations = pd.DataFrame()
    notes: list[str] = []
    if sr is not None:
        configurations = tables.configurations(engine, sr, chosen, target, loss_target)
        notes = grid_notes(sr)
        notes += [n for n in (oversubscription_note(sr, sr.ids), emulation_note(sr, sr.ids),
                              padding_note(sr, sr.ids), at_chance_note(sr.runs)) if n]
        finished = configurations[configurations["status"] == "done"]
        if chosen and finished["speedup"].isna().any():
            notes.append(f"Speedup and efficiency are blank where a configuration has no finished baseline run "
                         f"({page.baseline_words(chosen)}) with the same other settings.")
    failures = tables.failures(planned, sr)
    prov = provenance.collect(engine, study, db_url, where)
    finished_runs = planned[planned["status"] == "done"] if "status" in planned else planned
    paper = paper_claims.paper_vs_run(finished_runs, study, evals=query.evals(
        engine, [int(i) for i in finished_runs["run_id"]]) if len(finished_runs) else None)
    metric = str(reproduction.attrs.get("metric", against_metric)) if reproduction is not None else against_metric
    change, against = _change(engine, planned, against, where, reproduction, reproduction_of, metric)

    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    (out / _MARKER_FILE).touch()
    results: list[catalog.FigureResult] = []
    if sr is not None:
        results = catalog.render_study(engine, study, fig_dir, formats=FIGURE_FORMATS, target=target, runs=sr,
                                       source=safe_url(db_url), loss_target=loss_target)
        _atomic(out / "configurations.csv", lambda tmp: configurations.to_csv(tmp, index=False))
    else:   # nothing finished: an earlier report's tables and manifest must not linger
        for stale in (out / "configurations.csv", fig_dir / "manifest.json"):
            stale.unlink(missing_ok=True)
    _remove_stale(fig_dir, results)
    timelines = write_timelines(engine, out / TIMELINE_DIR, [int(i) for i in planned["run_id"]] if not planned.empty
                                else [], labels=_labels(planned))
    _atomic(out / "failures.csv", lambda tmp: failures.to_csv(tmp, index=False))
    if not paper.empty:
        _atomic(out / "paper-vs-this-run.csv", lambda tmp: paper.to_csv(tmp, index=False))
    against_section = _against_section(out, fig_dir, against, change, metric) if against else None
    axes = tables.sweep_axes(sr) if sr is not None else pd.DataFrame(columns=["axis", "name", "values", "role"])
    html = page.render(
        out, study=study, summary=_summary(planned), where=_where_text(where), axes=axes, table=configurations,
        varying=list(sr.varying) if sr is not None else [], baseline=chosen, table_notes=notes,
        figures=[_figure_entry(r, notes) for r in results if not r.skipped],
        skipped=[{"name": r.name, "why": r.skipped} for r in results if r.skipped],
        failures=failures, provenance=prov, timelines=timelines, paper=paper, against=against_section)
    index = _atomic(out / "index.html", lambda tmp: tmp.write_text(html, encoding="utf-8"))
    return Report(index, tuple(results), configurations, failures)


def _change(engine: Engine, planned: pd.DataFrame, against: str | None, where, reproduction: pd.DataFrame | None,
            reproduction_of: str, metric: str = "throughput") -> tuple[pd.DataFrame, str | None]:
    """The "Against A" table and its heading: an artifact's re-run against its original
    (results_db.analysis.reproduction), or this study (B) against another (A), per configuration
    both ran (results_db.analysis.regression), on the same selection of runs."""
    if reproduction is not None:
        return reproduction, f"{reproduction_of} (the artifact's)"
    if not against:
        return pd.DataFrame(), against
    reference = query.runs(engine, study=against, where=where)
    if reference.empty:
        raise ReportError(f"against {against!r}: no runs of that study here")
    try:
        return regression.compare_sets(reference, planned, metric=metric), against
    except CompareError as exc:
        raise ReportError(f"against {against!r}: {exc}") from None


def _against_section(out: Path, fig_dir: Path, against: str, change: pd.DataFrame, metric: str = "throughput") -> dict:
    """The page's "Against A" section: the table, its CSV and the change figure."""
    from matplotlib.figure import Figure

    from results_db.report.figures.regression_figure import draw_change
    from .page import fmt

    slug = against.split(" ")[0]
    csv = f"against-{slug}.csv"
    _atomic(out / csv, lambda tmp: change.to_csv(tmp, index=False))
    keys = [c for c in change.columns if c not in (*regression.COLUMNS, "reproduction", "why")]
    rows = []
    for r in change.to_dict("records"):
        interval = "" if r["change_low"] != r["change_low"] else f" [{fmt(r['change_low'], 3)}, {fmt(r['change_high'], 3)}]"
        detectable = "-" if r["detectable"] != r["detectable"] else f"±{fmt(r['detectable'], 1, 100)} %" + (
            "" if r.get("detectable_low") != r.get("detectable_low") or r.get("detectable_low") is None else
            f" ({fmt(r['detectable_low'], 0, 100)}–{fmt(r['detectable_high'], 0, 100)})")
        rows.append([*(str(r[k]) for k in keys), f"{fmt(r['a_mean'], 1)} ({r['a_repeats']})",
                     f"{fmt(r['b_mean'], 1)} ({r['b_repeats']})", f"{fmt(r['change'], 3)}{interval}",
                     fmt(r["p_value"], 4), fmt(r["p_adjusted"], 4), fmt(r["effect"], 2), detectable,
                     r.get("reproduction", r["verdict"]) + (f" ({r['why']})" if r.get("why") else "")])
    png = None
    if change["change"].notna().any():
        fig = Figure(figsize=(8.0, 1.5 + 0.35 * len(change)), layout="constrained")
        draw_change(change, fig, metric, against, "this study")
        png = f"figures/against-{slug}.png"
        _atomic(out / png, lambda tmp: fig.savefig(tmp, dpi=150, format="png"))
    legend = regression.legend(change, metric)
    if "reproduction" in change:
        from results_db.analysis.reproduction import counts

        legend += (f". Reproduced: no significant change and the change's 90 % interval within "
                   f"±{100 * change.attrs.get('tolerance', 0.1):g} % (two one-sided tests); inconclusive: neither; "
                   "not comparable: one side did not run it, or too few repeats. The reasons name what differs")
    return {"name": against, "legend": legend, "csv": csv, "png": png,
            "heads": [*keys, f"A: {metric} (repeats)", f"B: {metric} (repeats)", "B ÷ A", "p", "p adj.", "g",
                      "detectable", "verdict"],
            "rows": rows, "counts": counts(change) if "reproduction" in change else regression.verdict_counts(change)}


def _labels(planned: pd.DataFrame) -> dict[int, str]:
    """Run id -> its configuration in a few words, for the timelines' list."""
    shown = [c for c in ("nodes", "workers_per_node", "batch_size", "algorithm") if c in planned]
    return {int(r["run_id"]): " ".join(f"{c}={r[c]}" for c in shown) for _, r in planned.iterrows()}


def write_timelines(engine: Engine, folder: Path, run_ids: list[int], labels: dict[int, str]) -> list[dict]:
    """Each run with a timeline (``timeline=true``) as Chrome trace-event JSON in ``folder``
    (``results_db.report.chrome_trace``), for Perfetto; the entries the page lists. Files of runs
    no longer there are removed."""
    from results_db.report.chrome_trace import write_chrome_trace

    sizes = query.timeline_sizes(engine, run_ids) if run_ids else {}
    if not sizes and not folder.exists():
        return []
    folder.mkdir(parents=True, exist_ok=True)
    keep = {f"run-{r}.json" for r in sizes}
    for path in folder.glob("run-*.json"):
        if path.name not in keep:
            path.unlink()
    entries = []
    for run_id, events in sizes.items():
        path = folder / f"run-{run_id}.json"
        _atomic(path, lambda tmp, r=run_id: write_chrome_trace(engine, r, tmp))
        entries.append({"run_id": run_id, "label": labels.get(run_id, ""), "events": events,
                        "href": f"{TIMELINE_DIR}/{path.name}", "mb": path.stat().st_size / 1e6})
    return entries


def at_chance_note(runs: pd.DataFrame) -> str | None:
    """Runs whose final top-1 is no better than guessing (1 / classes): diverged, or did not learn."""
    if "classes" not in runs or "final_top1" not in runs:
        return None
    chance = 1.0 / runs["classes"]
    flat = runs[runs["final_top1"].notna() & runs["classes"].notna() & (runs["final_top1"] <= chance + 0.01)]
    if flat.empty:
        return None
    ids = ", ".join(str(int(i)) for i in flat["run_id"].head(10)) + (" …" if len(flat) > 10 else "")
    return (f"{len(flat)} of {counted(len(runs), 'run')} ended at chance-level top-1 (1 / classes; runs {ids}): they diverged "
            "or did not learn (check lr and momentum), and their times are not times to a trained model.")


def _figure_entry(result: catalog.FigureResult, page_notes: Sequence[str] = ()) -> dict:
    """A figure on the page; its notes less those the page says once above its table (the
    oversubscription note was in 17 places of one report; the image keeps its own, for use alone)."""
    names = {p.suffix.lstrip("."): f"figures/{p.name}" for p in result.files}
    return {"name": result.name, "title": result.title, "caption": result.caption,
            "notes": [n for n in result.notes if n not in page_notes],
            "png": names.get("png"), "pdf": names.get("pdf"), "csv": names.get("csv")}


def _remove_stale(fig_dir: Path, results: list[catalog.FigureResult]) -> None:
    """An earlier report's figures that this data no longer draws must not linger beside the new ones."""
    keep = {p.name for r in results for p in r.files} | {"manifest.json"}
    for path in fig_dir.iterdir():
        if path.is_file() and path.name not in keep and path.suffix in (".png", ".pdf", ".csv", ".svg"):
            path.unlink()


def _atomic(path: Path, write) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
    return path


__all__ = ["Report", "ReportError", "build_report"]
