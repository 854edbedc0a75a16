"""``index.html``: the report's tables and figures as one page a person reads.

Jinja2 renders ``report.html.j2`` with autoescaping on, so every value that came from
a run (a parameter, an error message, a path) is text on the page, never markup. The
page has no script and loads nothing from the network: its only resources are the
images beside it. Numbers are formatted here and only here; each numeric cell also
carries its unrounded value (``data-value``) for tools that read the page.
"""

from __future__ import annotations

from workloads.plural import counted

import math
from pathlib import Path

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from results_db.report.figures.data import label_of, setting
from results_db.report.figures.derived import TOP1_RULE, top1_percent
from results_db.stats.confidence import CHECKED, interval_words
from .provenance import Provenance

_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent), autoescape=True, undefined=StrictUndefined,
                   trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value, digits: int, scale: float = 1.0, unit: str = "") -> str:
    """``value`` rounded for reading ("-" when there is none)."""
    if _missing(value):
        return "-"
    return f"{float(value) * scale:.{digits}f}{unit}"


def with_interval(row: dict, name: str, fallback: str) -> str:
    """``1.550 [1.324, 1.873]``: the value with its interval over repeats
    (``results_db/stats/confidence.py``); without one (too few repeats a side), ``fallback``."""
    low, high = row.get(f"{name}_low"), row.get(f"{name}_high")
    if _missing(low) or _missing(high):
        return fallback
    return f"{fmt(row.get(name), 3)} [{fmt(low, 3)}, {fmt(high, 3)}]"


def mean_std(mean, std, n, digits: int, scale: float = 1.0, unit: str = "") -> str:
    """"mean ± std" over repeats; a single run has no spread to show."""
    if _missing(mean):
        return "-"
    text = fmt(mean, digits, scale) + unit
    if n is not None and not _missing(n) and int(n) > 1 and not _missing(std):
        text += f" ± {fmt(std, digits, scale)}"
    return text


def _cell(col: str, text: str, value=None, numeric: bool = True) -> dict:
    raw = None if _missing(value) else (repr(float(value)) if isinstance(value, (int, float)) else str(value))
    return {"col": col, "text": text, "value": raw, "css": "num" if numeric else ""}


def baseline_words(baseline: str) -> str:
    """``workers_per_node=1`` as the page says it: "workers per node=1"."""
    axis, _, value = baseline.partition("=")
    return setting(axis.strip(), value.strip())


def config_rows(table: pd.DataFrame, axes: list[str], baseline: str | None) -> tuple[list[str], list[dict]]:
    """The configuration table's header and rows, each cell with its text and raw value."""
    has_tta = "tta_seconds_mean" in table
    missing_any = (table["status"] != "done").any() if not table.empty else False
    heads = [label_of(a) for a in axes] + ["ranks", "runs", "throughput (samples/s)"]
    if baseline:
        heads += [f"speedup vs {baseline_words(baseline)}", f"efficiency vs {baseline_words(baseline)}",
                  "detectable change (80 % power; in brackets, the 80 % range its estimated noise allows)"]
    has_loss = "loss_mean" in table   # a study whose runs score no top-1 (a regression): the loss is its score
    has_ttl = "ttl_seconds_mean" in table
    loss = str(table["loss_name"].dropna().iloc[0]) if "loss_name" in table and table["loss_name"].notna().any() \
        else "loss"
    heads += [f"final validation {loss}" if has_loss else "final top-1 accuracy"]
    if has_ttl:
        heads += [f"seconds to validation {loss} ≤ {float(table['target_loss'].dropna().iloc[0]):g}"
                  + _rule_words(table, "loss_target_rule")]
    if has_tta:
        heads += [f"seconds to top-1 ≥ {top1_percent(table['target_top1'].dropna().iloc[0])}"
                  + _rule_words(table, "target_rule") if table["target_top1"].notna().any() else "seconds to target"]
    emulated = "compute" in table and bool((table["compute"].fillna("") != "real").any())
    heads += ["compute"] if emulated else []
    gpu = [c for c in ("gpu_peak_memory_mb", "gpu_utilization") if c in table and table[c].notna().any()]
    heads += [{"gpu_peak_memory_mb": "GPU peak memory (MB)", "gpu_utilization": "GPU utilisation (%)"}[c] for c in gpu]
    energy = [c for c in ("energy_kj", "samples_per_joule") if c in table and table[c].notna().any()]
    heads += [{"energy_kj": "energy (kJ, measured)", "samples_per_joule": "samples per joule"}[c] for c in energy]
    if missing_any:
        heads += ["state"]
    rows = []
    for row in table.to_dict("records"):
        done = row["status"] == "done"
        cells = [_cell(a, "-" if _missing(row.get(a)) else str(row.get(a)), None, numeric=False) for a in axes]
        cells.append(_cell("ranks", fmt(row.get("world_size"), 0), row.get("world_size")))
        cells.append(_cell("runs", str(int(row["runs"])), row["runs"]))
        cells.append(_cell("throughput", mean_std(row.get("throughput_mean"), row.get("throughput_std"),
                                                  row.get("throughput_n"), 1), row.get("throughput_mean")))
        if baseline:
            cells.append(_cell("speedup", with_interval(row, "speedup", mean_std(
                row.get("speedup"), row.get("speedup_std"), row.get("throughput_n"), 3)) if done else "-",
                row.get("speedup")))
            cells.append(_cell("efficiency", with_interval(row, "efficiency", fmt(row.get("efficiency"), 3)),
                               row.get("efficiency")))
            detectable = row.get("detectable")
            cells.append(_cell("detectable", "-" if _missing(detectable) else f"±{100 * detectable:.1f} %"
                               + _range(row.get("detectable_low"), row.get("detectable_high")), detectable))
        if has_loss:
            cells.append(_cell("final_loss", mean_std(row.get("loss_mean"), row.get("loss_std"), row.get("runs"), 3),
                               row.get("loss_mean")))
        else:
            cells.append(_cell("final_top1", mean_std(row.get("top1_mean"), row.get("top1_std"), row.get("runs"), 1,
                                                      scale=100, unit=" %"), row.get("top1_mean")))
        if has_ttl:
            cells.append(_cell("time_to_loss", _reached_text(row, "ttl", done), row.get("ttl_seconds_mean")))
        if has_tta:
            cells.append(_cell("time_to_target", _reached_text(row, "tta", done), row.get("tta_seconds_mean")))
        if emulated:   # compute=emulated: forward and backward were sleeps; said on every row
            cells.append(_cell("compute", str(row.get("compute") or "-"), None, numeric=False))
        for column in gpu:   # measured where the runs had GPUs and NVML; "-" (missing), never 0, where not
            cells.append(_cell(column, fmt(row.get(column), 0), row.get(column)))
        for column in energy:   # measured by the hosts' counters; "-" (missing) where a run had none
            cells.append(_cell(column, fmt(row.get(column), 2 if column == "energy_kj" else 1), row.get(column)))
        if missing_any:
            cells.append(_cell("state", row["status"], None, numeric=False))
        rows.append({"config": row["config"], "cells": cells, "css": "" if done else "missing"})
    return heads, rows


def _first(table: pd.DataFrame, column: str) -> str:
    return str(table[column].dropna().iloc[0]) if column in table and table[column].notna().any() else ""


def _rule_words(table: pd.DataFrame, column: str) -> str:
    """The header's short form of how the target was chosen (the legend says it whole)."""
    rule = _first(table, column)
    if not rule:
        return ""
    return f" ({rule})" if rule.startswith("as given") else \
        (" (every run's best, rounded down)" if rule == TOP1_RULE else " (chosen: see below)")


def target_legend(table: pd.DataFrame) -> str:
    """The sentences of the legend that name each time-to-target's target with its rule."""
    out = []
    if "target_top1" in table and table["target_top1"].notna().any():
        rule = _first(table, "target_rule") or TOP1_RULE
        option = "" if rule.startswith("as given") else " (scalestudy report --target sets another)"
        out.append(f"Time to accuracy: seconds until a configuration's runs first reached top-1 ≥ "
                   f"{top1_percent(table['target_top1'].dropna().iloc[0])}, the target being {rule}{option}.")
    if "target_loss" in table and table["target_loss"].notna().any():
        rule = _first(table, "loss_target_rule")
        option = "" if rule.startswith("as given") else " (scalestudy report --loss-target sets another)"
        out.append(f"Time to loss: seconds until a configuration's runs first reached a validation loss ≤ "
                   f"{float(table['target_loss'].dropna().iloc[0]):g}, the target being {rule or 'chosen'}{option}.")
    return " ".join(out)


def _reached_text(row: dict, prefix: str, done: bool) -> str:
    """Seconds to a target (``tta``: top-1, ``ttl``: loss), mean ± std over the runs that reached
    it, saying how many of the runs did."""
    text = mean_std(row.get(f"{prefix}_seconds_mean"), row.get(f"{prefix}_seconds_std"), row.get(f"{prefix}_reached"),
                    1, unit=" s")
    reached, runs = row.get(f"{prefix}_reached"), row.get("runs")
    if done and not _missing(reached) and int(reached) < int(runs):
        text = "not reached" if int(reached) == 0 else f"{text} ({int(reached)} of {counted(int(runs), 'run')})"
    return text


def render(out: Path, *, study: str, summary: str, where: str | None, axes: pd.DataFrame, table: pd.DataFrame,
           varying: list[str], baseline: str | None, table_notes: list[str], figures: list[dict],
           skipped: list[dict], failures: pd.DataFrame, provenance: Provenance,
           timelines: list[dict] | None = None, paper: pd.DataFrame | None = None,
           against: dict | None = None) -> str:
    heads, rows = config_rows(table, varying, baseline) if not table.empty else ([], [])
    legend = ("Throughput and accuracy are the mean ± standard deviation over a configuration's "
              "repeats (runs that differ only in seed or repeat index). Speedup and efficiency are given with "
              f"their {interval_words()} over the repeats of the configuration and of the baseline "
              "(with fewer repeats on a side: mean ± std, or the value alone); the baseline's own row has none. "
              "Efficiency is speedup × baseline ranks ÷ ranks. Detectable change: the smallest difference from the "
              "baseline that these repeats would find with 80 % power (from 3 repeats a side; with 3 repeats the "
              "noise it rests on is itself uncertain by about half). " + CHECKED + " More: the documentation's "
              "\"compare with confidence\".") if baseline else ("Throughput and accuracy are the mean ± standard deviation over a "
                                            "configuration's repeats. No axis to compare against was swept.")
    targets = target_legend(table) if not table.empty else ""
    legend = f"{legend} {targets}" if targets else legend
    rows_ = [{**r, "values": ", ".join(str(v) for v in r["values"])} for r in axes.to_dict("records")]
    axes_rows = [r for r in rows_ if r["role"] != "fixed"]
    fixed = [r for r in rows_ if r["role"] == "fixed"]
    return _ENV.get_template("report.html.j2").render(
        study=study, summary=summary, where=where, axes=axes_rows, fixed=fixed, table_notes=table_notes,
        config_heads=heads,
        configurations=rows, config_legend=legend, figures=figures, skipped=skipped,
        failures=failures.to_dict("records"), provenance=provenance, timelines=timelines or [],
        paper=_paper_rows(paper), against=against)


def _range(low, high) -> str:
    """`` (12–72)``: the range a detectable change may lie in, its noise being estimated."""
    return "" if _missing(low) or _missing(high) else f" ({100 * low:.2g}–{100 * high:.2g})"


def _paper_rows(paper: pd.DataFrame | None) -> list[dict]:
    """The claims beside this study's numbers, formatted (a speedup as 1.29x, an accuracy in %, a
    rate in steps/s, a time to a target loss in seconds)."""
    if paper is None or paper.empty:
        return []
    def show(value, metric):
        if _missing(value):
            return "-"
        return {"speedup": f"{value:.2f}x", "rate": f"{value:.2f} steps/s",
                "seconds_to_loss": f"{value:.1f} s"}.get(metric, f"{100 * value:.1f} %")
    return [{**r, "paper_text": show(r["paper"], r["metric"]), "this_run_text": show(r["this_run"], r["metric"])}
            for r in paper.to_dict("records")]
