"""``scalestudy status``, ``query``, ``compare``, ``figures`` and ``report``: reading the results."""

from __future__ import annotations

from workloads.plural import counted

import sys
from pathlib import Path
from typing import Sequence

from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading


RECENT_RUNS = 20


def status(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy status", description="Runs per study and state.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--runs", action="store_true",
                        help="list every run (with --study alone: the last %d registered)" % RECENT_RUNS)
    parser.add_argument("--failed", action="store_true",
                        help="list failed, timed-out and partial runs with their reason and log")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.store.runs import status_table

    try:
        engine = open_for_reading(args.db)
    except NoDatabase as exc:
        print(f"no runs recorded yet: {exc}")
        return 0
    except OlderSchema as exc:
        return fail(str(exc))
    from results_db.store.run_rows import QueryError, check_study

    try:   # a misspelt study is an error, as query and report say, not "no runs yet"
        check_study(engine, args.study)
    except QueryError as exc:
        return fail(str(exc))
    columns, rows = status_table(engine, args.study)   # counted in SQL: no pandas for the overview
    if not rows:
        print("no runs recorded yet" + (f" for study {args.study!r}" if args.study else ""))
        return 0
    _print_counts(columns, rows)
    _print_sweep_drivers(engine, args.study)
    _print_socket_runs(engine, args.study)
    _print_binding(engine, args.study)
    if not (args.failed or args.runs or args.study):
        return 0
    from results_db.store import run_rows

    from ..terminal.output import print_failed_runs, print_runs_table

    if args.failed:
        print_failed_runs(engine, study=args.study)
    elif args.runs:
        print_runs_table(engine, study=args.study)
    else:   # a study of thousands of runs: the last few, not a table of all of them
        ids = run_rows.recent_run_ids(engine, args.study, RECENT_RUNS)
        total = sum(row[columns.index("total")] for row in rows)
        print_runs_table(engine, run_ids=ids, study=args.study,
                         title="runs" if total <= len(ids) else f"the last {len(ids)} of {counted(total, 'run')}")
        if total > len(ids):
            print(f"(all {total}: scalestudy status --study {args.study} --runs, or scalestudy query --study "
                  f"{args.study} --format csv --out runs.csv)")
    return 0


def _print_counts(columns: list[str], rows: list[list]) -> None:
    from rich.console import Console

    from ..terminal.tables import rows_table

    table = rows_table(columns, [[str(v) for v in row] for row in rows], "runs per state",
                       [i > 0 for i in range(len(columns))])
    Console(width=None if sys.stdout.isatty() else 250).print(table)


def _print_sweep_drivers(engine, study: str | None) -> None:
    """Which sweeps (detached or not) hold unfinished runs, and whether each is still alive."""
    from results_db.store.runs import HEARTBEAT_STALE_SECONDS, sweep_drivers

    for d in sweep_drivers(engine, study):
        age = "no heartbeat" if d.heartbeat_age is None else f"heartbeat {d.heartbeat_age:.0f} s ago"
        held = f"{d.running} running, {d.pending} pending"
        if d.alive:
            print(f"sweep {d.driver} (study {d.study}): alive, {age}; {held}")
        else:
            why = "its process is gone" if d.heartbeat_age is not None and \
                d.heartbeat_age < HEARTBEAT_STALE_SECONDS else age
            print(f"sweep {d.driver} (study {d.study}): stopped ({why}); {held} left unfinished — "
                  "the same sweep command resumes them")


def _print_binding(engine, study: str | None, shown: int = 5) -> None:
    """Runs whose ranks ran where their configuration did not mean them to (results_db.analysis.binding)."""
    from results_db.analysis.binding import flagged_runs

    flagged = flagged_runs(engine, study)
    for name, run_id, found in flagged[:shown]:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        print(f"WARNING binding: run {run_id} (study {name}): {found[0]}{more}")
    if len(flagged) > shown:
        print(f"WARNING binding: {len(flagged) - shown} more run(s); every finding: scalestudy query "
              f"--columns run_id,study,binding --format csv")


def _print_socket_runs(engine, study: str | None) -> None:
    """GPU runs whose NCCL fell back to TCP sockets on a site with a network plugin (results_db.analysis.nccl)."""
    from results_db.analysis.nccl import socket_runs

    for found in socket_runs(engine, study):
        print(f"WARNING {found.describe()}")


def query(argv: Sequence[str]) -> int:
    from ..terminal.output import FORMATS

    parser = OneLineParser(prog="scalestudy query", description="One row per run, or per group.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--where", action="append", default=None,
                        help="filter on any column, e.g. 'nodes>=2, algorithm=sync' (repeatable)")
    parser.add_argument("--columns", default=None, help="comma-separated columns (default: a summary)")
    parser.add_argument("--group-by", default=None, help="comma-separated axes to group runs by")
    parser.add_argument("--agg", action="append", default=None,
                        help="COLUMN:AGG[,AGG] with --group-by, e.g. throughput:mean,std (default: throughput:count,mean,std); "
                             "mean_low and mean_high: the mean's 95 %% t-interval over the group's runs; median_low and "
                             "median_high: the median's distribution-free 95 %% interval (from 6 runs)")
    parser.add_argument("--attempts", choices=("latest", "all"), default="latest",
                        help="latest: each run's newest attempt (default); all: also the earlier ones a rerun "
                             "or a retry kept (column attempt)")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", default=None, help="write to this file (needed for parquet)")
    parser.add_argument("--list-columns", action="store_true", help="list the run columns (for --columns, --where)")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.store import run_rows
    from results_db.store.columns import RUN_COLUMNS, QueryError

    if args.list_columns:
        print("\n".join([*RUN_COLUMNS, "params.NAME", "metrics.NAME"]))
        return 0

    from ..terminal.output import SUMMARY_COLUMNS, render

    try:   # read as plain rows and printed without pandas (its import alone took 1 s on a login node)
        if args.agg and not args.group_by:
            raise ValueError("--agg needs --group-by (the axes to aggregate over), e.g. --group-by nodes --agg "
                             "throughput:mean,std")
        if args.group_by and args.columns:
            raise ValueError("--columns and --group-by together: a grouped table's columns are the group-by axes "
                             "and the --agg results")
        engine = open_for_reading(args.db)
        run_rows.check_study(engine, args.study)
        if args.group_by:
            metrics = {}
            for spec in args.agg or ["throughput:count,mean,std"]:
                column, _, aggs = spec.partition(":")
                metrics[column.strip()] = [a.strip() for a in (aggs or "mean").split(",")]
            table = run_rows.aggregate_rows(engine, [c.strip() for c in args.group_by.split(",")], metrics,
                                            study=args.study, where=args.where, attempts=args.attempts)
        else:
            columns = [c.strip() for c in args.columns.split(",")] if args.columns else list(SUMMARY_COLUMNS)
            if args.attempts == "all" and not args.columns:
                columns[1:1] = ["attempt", "latest"]
            table = run_rows.run_rows(engine, study=args.study, where=args.where, columns=columns,
                                      attempts=args.attempts)
            if not args.columns:   # the summary: as print_runs_table shows it
                table = run_rows.blank_not_applicable(engine, table)
                table = run_rows.with_json_keys(engine, table, args.study, args.where, attempts=args.attempts)
            if args.format == "table":   # each run's own seed, in run order (a file keeps the swept seed)
                table = run_rows.with_run_seed(engine, table)
        render(table, args.format, title=f"study {args.study}" if args.study else "runs", out=args.out,
               fold=not args.columns and not args.group_by)
    except (QueryError, ValueError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    return 0


def compare(argv: Sequence[str]) -> int:
    from ..terminal.output import FORMATS

    parser = OneLineParser(prog="scalestudy compare",
                                     description="Speedup and efficiency of each configuration against a baseline.")
    parser.add_argument("--study", default=None)
    parser.add_argument("--baseline", default=None,
                        help="AXIS=VALUE, e.g. algorithm=sync or nodes=1 (default: as the report chooses: the "
                             "fewest nodes, else sync, else the smallest other resource swept)")
    parser.add_argument("--metric", default="throughput",
                        help="a measured run column or metrics.NAME (default: throughput); speedup is above 1 when "
                             "better, whichever way the metric points")
    parser.add_argument("--better", choices=("higher", "lower"), default=None,
                        help="which way the metric is better, for a metrics.NAME its config does not declare "
                             "(workload.metrics.NAME.better)")
    parser.add_argument("--where", action="append", default=None)
    parser.add_argument("--knee", type=float, default=None, metavar="EFFICIENCY",
                        help="also name, per group, where efficiency falls below this and stays below, with a 5 %% "
                             "chance of naming a size that is not (e.g. 0.8)")
    parser.add_argument("--against", default=None, metavar="STUDY",
                        help="compare two sets of runs instead: this study's (B) against --study's (A), per "
                             "configuration both ran: change with its interval, Welch's test, effect size, verdict")
    parser.add_argument("--against-where", action="append", default=None, metavar="EXPR",
                        help="B's filter (with --against, or alone: B is --study's runs that match it, A those "
                             "matching --where)")
    parser.add_argument("--ignore", default="", metavar="AXES",
                        help="with --against: axes the two sets differ in on purpose, e.g. site")
    parser.add_argument("--correction", default="holm", choices=("holm", "bh", "none"),
                        help="with --against: how the verdicts' error is held across the configurations: holm "
                             "(default: the chance of any false verdict at 5 %%), bh (Benjamini-Hochberg: the "
                             "expected share of false verdicts at 5 %%), none (each configuration on its own)")
    parser.add_argument("--figure", default=None, metavar="FILE.png",
                        help="with --against: also draw each configuration's change with its interval")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", default=None)
    add_db_option(parser)
    args = parser.parse_args(argv)
    if args.against or args.against_where:
        return compare_two_sets(args)

    from results_db.analysis import compare
    from results_db.store import query

    from ..terminal.output import render

    try:
        engine = open_for_reading(args.db)
        query.check_study(engine, args.study)
        baseline = args.baseline
        if baseline is None and not args.study:
            raise ValueError("--baseline AXIS=VALUE, or --study NAME to have the report's default baseline")
        ignore: list[str] = []
        if args.study:
            from results_db.report.figures.data import load_study
            from results_db.report.html_report.tables import default_baseline, dependent_axes

            study_runs = load_study(engine, args.study, args.where)
            # axes that move with the swept ones (threads at one per worker): matched as the report does
            ignore = dependent_axes(study_runs)
        if baseline is None:
            baseline = default_baseline(study_runs)
            if baseline is None:
                raise ValueError(f"study {args.study!r} sweeps no axis to compare against: give --baseline AXIS=VALUE")
            print(f"baseline: {baseline} (the default; --baseline AXIS=VALUE chooses another)", file=sys.stderr)
        table = compare.compare(engine, baseline, study=args.study, metric=args.metric, where=args.where,
                                ignore=ignore, better=args.better)
        frame = table
        if args.format == "table" and not args.out:
            from ..terminal.tables import compare_display

            frame = compare_display(table, args.metric)
            print(compare_header(args.metric, baseline, table.attrs["better"], table.attrs.get("direction_default", "")),
                  file=sys.stderr)
        render(frame, args.format, title=f"{args.metric} vs {baseline}", out=args.out)
        if args.knee is not None:   # beside a table; never inside CSV or JSON on stdout
            print_knees(table, baseline, args.knee, ignore, out=sys.stdout if args.format == "table" else sys.stderr)
    except (query.QueryError, compare.CompareError, ValueError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    return 0


def compare_header(metric: str, baseline: str, better: str, default: str = "") -> str:
    """What compare's table rests on, in the words the docs' compare page explains; a direction
    that no declaration gave is named as the default it is."""
    from results_db.stats.confidence import LEVEL, MIN_REPEATS, cautious_words

    way = "this / baseline" if better == "higher" else "baseline / this"
    said = f"{better} is better: {default}, --better to say otherwise" if default else f"{better} is better"
    return (f"{metric} ({said}): mean ± std over repeats; speedup ({way}: above 1 is better) and "
            f"efficiency against {baseline}, with {LEVEL:.0%} t-intervals on the log ratio (Welch; none with fewer "
            f"than {MIN_REPEATS} repeats a side; {cautious_words()}), each on its own: {LEVEL:.0%} per configuration, not for all rows at "
            "once (compare --against gives verdicts held as one family); detectable: the smallest change these "
            "repeats would find with 80 % power, and in brackets the 80 % range it may lie in, their noise being "
            "estimated from them")


def print_knees(table, baseline: str, threshold: float, ignore=(), out=sys.stdout) -> None:
    """One line per group: where efficiency falls below ``threshold`` and stays below (``results_db.stats.knee``)."""
    from results_db.analysis.compare import OUTPUT_COLUMNS, parse_baseline
    from results_db.stats.confidence import LEVEL
    from results_db.stats.knee import knee

    from ..terminal.tables import cell

    axis, _ = parse_baseline(baseline)
    metric_columns = set(OUTPUT_COLUMNS(next(c for c in table.columns if c.startswith("baseline_"))
                                        .removeprefix("baseline_").removesuffix("_mean")))
    groups = [c for c in table.columns if c not in (axis, *ignore, "energy_kj_mean") and c not in metric_columns]
    knees = knee(table, axis, threshold, groups)
    family, each = knees.attrs["family"], knees.attrs["series_level"]
    for _, row in knees.iterrows():
        where = ", ".join(f"{g}={cell(row[g])}" for g in groups)
        prefix = f"knee ({where}): " if where else "knee: "
        if row["knee"] is None:
            print(f"{prefix}none: the largest {axis} does not have efficiency below {threshold:g} with "
                  f"{each:.3g} confidence", file=out)
        else:
            beyond = f" and at the {row['beyond'] - 1} larger" if row["beyond"] > 1 else ""
            print(f"{prefix}{axis}={cell(row['knee'])}: efficiency {cell(row['efficiency'])} (one-sided "
                  f"{each:.3g} bound {cell(row['efficiency_upper'])}) < {threshold:g} there{beyond}", file=out)
    said = (f"these {family} series are one family: each tested at {each:.3g} (Bonferroni), so " if family > 1
            else "")
    print(f"knees: {said}the chance of naming any size that is not below is at most {1 - LEVEL:.0%}", file=out)


def compare_two_sets(args) -> int:
    """``compare --against``: B against A per configuration, with a verdict."""
    from results_db.analysis import compare, regression
    from results_db.store import query

    from ..terminal.output import render
    from ..terminal.tables import detectable_cell, registry_order, two_sets_shown

    try:
        if not args.study:
            raise ValueError("--against needs --study (A, the reference)")
        engine = open_for_reading(args.db)
        query.check_study(engine, args.study)
        if args.against:
            query.check_study(engine, args.against)
        a = query.runs(engine, study=args.study, where=args.where)
        b = query.runs(engine, study=args.against or args.study, where=args.against_where)
        ignore = [x for x in args.ignore.split(",") if x]
        table = regression.compare_sets(a, b, metric=args.metric, ignore=ignore, correction=args.correction,
                                        better=args.better)
        if table.attrs.get("treatment"):
            print(f"matched ignoring {', '.join(table.attrs['treatment'])}: one value on each side, not the same "
                  "(what the two sets differ in)", file=sys.stderr)
        b_name = args.against or f"{args.study} where {' and '.join(args.against_where)}"
        if args.format == "table" and not args.out:
            keys = registry_order([c for c in table.columns if c not in (*regression.COLUMNS, "reproduction", "why")])
            shown = two_sets_shown(table, "A", "B", "B/A", keys)
            shown["p"] = table["p_value"]
            shown["p adj."] = table["p_adjusted"]
            shown["g"] = table["effect"]
            shown["detectable"] = [detectable_cell(*v) for v in zip(table["detectable"], table["detectable_low"],
                                                                    table["detectable_high"])]
            shown["verdict"] = table["verdict"]
            print(f"B ({b_name}) against A ({args.study}). " + regression.legend(table, args.metric), file=sys.stderr)
            render(shown, "table", title=f"{args.metric}: {b_name} against {args.study}")
            print(regression.verdict_counts(table))
        else:
            render(table, args.format, title=f"{args.metric}: {b_name} against {args.study}", out=args.out)
        if args.figure:
            from matplotlib.figure import Figure

            from results_db.report.figures.regression_figure import draw_change

            rows = int((table["verdict"].isin(("faster", "slower", "no evidence"))).sum())
            fig = Figure(figsize=(8.0, 1.5 + 0.35 * max(rows, 1)), layout="constrained")
            draw_change(table, fig, args.metric, args.study, b_name)
            fig.savefig(args.figure, dpi=150)
            print(f"figure: {args.figure}", file=sys.stderr)
    except (query.QueryError, compare.CompareError, ValueError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    return 0


def figures(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy figures",
                                     description="Redraw a study's figures from the results database.")
    parser.add_argument("--study", help="the study to draw (see `scalestudy status`)")
    parser.add_argument("--out", default=None, help="output folder (default: figures/<study>)")
    parser.add_argument("--format", default="png", help="comma-separated: png, pdf, svg (default: png)")
    parser.add_argument("--only", default=None, help="comma-separated figure names (see --list)")
    parser.add_argument("--where", action="append", default=None, help="draw only runs matching, e.g. 'nodes<=8'")
    parser.add_argument("--run-id", type=int, default=None, help="the run whose timeline to draw (default: the largest)")
    parser.add_argument("--target", type=float, default=None,
                        help="top-1 accuracy (0-1) for time to accuracy (default: the best top-1 every run reached, "
                             "rounded down to a whole percent; the caption says which)")
    parser.add_argument("--loss-target", type=float, default=None,
                        help="validation loss for time to loss, in a study whose runs score no top-1 (default: the "
                             "study's paper's target, else the highest of every run's lowest loss)")
    parser.add_argument("--list", action="store_true", help="list the figures and what each needs, then exit")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.report.figures import catalog_lines

    if args.list:
        print("\n".join(catalog_lines()))
        return 0
    if not args.study:
        return fail("figures: give --study NAME (`scalestudy status` lists the studies)")

    from results_db.store import query
    from results_db.report.figures import FigureDataError, check_choices, render_study
    from results_db.store.connect import resolve_db_url, safe_url

    out = Path(args.out or Path("figures") / args.study)
    split = lambda text: [part.strip() for part in text.split(",") if part.strip()]  # noqa: E731
    only = split(args.only) if args.only else None
    url = resolve_db_url(args.db)

    notes: dict[str, list[str]] = {}   # a note -> the figures it applies to: said once, after them

    def report(result) -> None:
        if result.skipped and only:   # asked for by name: why not, each
            print(f"  skipped {result.name}: {result.skipped}")
        elif not result.skipped:
            print(f"  drew    {result.name} ({result.rows} rows): {', '.join(p.name for p in result.files)}")
            for note in result.notes:
                notes.setdefault(note, []).append(result.name)

    try:
        formats = split(args.format)
        check_choices(formats, only)
        engine = open_for_reading(url)
        print(f"drawing study {args.study!r} from {safe_url(url)} into {out}/")
        results = render_study(engine, args.study, out, formats=formats, only=only, where=args.where,
                               run_id=args.run_id, on_result=report, source=safe_url(url), target=args.target,
                               loss_target=args.loss_target)
    except (FigureDataError, query.QueryError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write figures into {out}: {exc.strerror or exc}")
    for note, names in notes.items():
        print(f"note ({', '.join(names)}): {note}")
    drawn = sum(1 for r in results if not r.skipped)
    skipped = [r.name for r in results if r.skipped]
    print(f"{drawn} figure(s) drawn, {len(skipped)} skipped; manifest: {out / 'manifest.json'}")
    if skipped and not only:
        print(f"skipped, for want of what they draw: {', '.join(skipped)} (`scalestudy figures --list` says what "
              "each needs; the manifest says why each was skipped)")
    return 0 if drawn else 1


def report(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy report",
                                     description="Write a study's report: one self-contained folder whose index.html "
                                                 "holds the sweep, a table per configuration, every figure, the "
                                                 "failures and the provenance (opens with no network).")
    parser.add_argument("--study", required=True, help="the study (see `scalestudy status`)")
    parser.add_argument("--out", default=None, help="output folder (default: reports/<study>)")
    parser.add_argument("--baseline", default=None,
                        help="AXIS=VALUE that speedup and efficiency are against, e.g. nodes=1 or algorithm=sync "
                             "(default: the smallest node count, else sync)")
    parser.add_argument("--target", type=float, default=None,
                        help="top-1 accuracy (0-1) for time to accuracy (default: the best top-1 every run reached, "
                             "rounded down to a whole percent; the table's header and legend say which)")
    parser.add_argument("--loss-target", type=float, default=None,
                        help="validation loss for time to loss, in a study whose runs score no top-1 (a regression: "
                             "the MSE; default: the study's paper's target, e.g. 4.7 for eager_sgd_paper_hyperplane, "
                             "else the highest of every run's lowest loss)")
    parser.add_argument("--where", action="append", default=None, help="only runs matching, e.g. 'nodes<=8'")
    parser.add_argument("--against-metric", default="throughput", metavar="METRIC",
                        help="the metric the --against section compares (default throughput; any compare --metric)")
    parser.add_argument("--against", default=None, metavar="STUDY",
                        help="add a section: this study against STUDY per configuration both ran (change with its "
                             "interval, Welch's test, effect size, verdict), as in compare --against")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.store import query
    from results_db.report.figures import FigureDataError
    from results_db.report.html_report import ReportError, build_report
    from results_db.store.connect import resolve_db_url, safe_url

    out = Path(args.out or Path("reports") / args.study)
    url = resolve_db_url(args.db)
    try:
        engine = open_for_reading(url)
        print(f"writing the report of study {args.study!r} from {safe_url(url)} into {out}/")
        report = build_report(engine, args.study, out, url, baseline=args.baseline, target=args.target,
                              where=args.where, against=args.against, loss_target=args.loss_target,
                              against_metric=args.against_metric)
    except (ReportError, FigureDataError, query.QueryError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write the report into {out}: {exc.strerror or exc}")
    drawn = sum(1 for r in report.figures if not r.skipped)
    print(f"{drawn} figure(s), {len(report.configurations)} configuration row(s), {len(report.failures)} failed "
          f"run(s); open {report.index}")
    return 0
