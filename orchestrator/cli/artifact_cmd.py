"""``scalestudy artifact``: a study packed for a reader (``pack``), checked (``check``), re-run and
compared with the original (``rerun``), or brought into another database (``import``).

Packing and reading are ``results_db.publish.artifact``'s; the re-run is a ``scalestudy sweep`` of the
artifact's run configurations (``--config-dir FOLDER/conf study=glob(run_*)``) into a new study,
compared with the original by ``results_db.analysis.reproduction``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading

USAGE = """scalestudy artifact pack --study S [--out DIR] [--archive] [--with-accounts]
                                    a study as one folder: its own database, configs, site, software, machine, report
scalestudy artifact check DIR       is it an artifact, and whole
scalestudy artifact rerun DIR [KEY=VALUE ...] [--tolerance 0.1]
                                    run its sweep again (site=OTHER to move it), into a new study, and say per
                                    configuration: reproduced, faster, slower, inconclusive, not comparable
scalestudy artifact import DIR [--db URL]
                                    its runs into this database, as they were (a study already here: refused)"""


def artifact(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    verb, rest = argv[0], list(argv[1:])
    verbs = {"pack": pack, "check": check, "rerun": rerun, "import": import_}
    if verb not in verbs:
        return fail(f"artifact {verb!r}: choose from {', '.join(verbs)}")
    return verbs[verb](rest)


def pack(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy artifact pack", description="Pack a study into one folder.")
    parser.add_argument("--study", required=True)
    parser.add_argument("--out", default=None, help="the folder to write (new or empty; default artifact-STUDY)")
    parser.add_argument("--archive", action="store_true", help="also write FOLDER.tar.gz")
    parser.add_argument("--with-accounts", action="store_true",
                        help="keep the runs' account names (left out by default: they name a project)")
    parser.add_argument("--no-report", action="store_true", help="leave the report out (faster)")
    parser.add_argument("--with-places", action="store_true",
                        help="keep the run folders' absolute paths and the hosts' names (left out by default: "
                             "they name a user, a project's file system and machines)")
    add_db_option(parser)
    args = parser.parse_args(argv)
    from results_db.store import query
    from results_db.publish.artifact import ArtifactError, refuse_used_folder
    from results_db.publish.artifact import pack as write

    out = Path(args.out or f"artifact-{args.study}")
    tarball = out.with_name(out.name + ".tar.gz")
    if args.archive and tarball.exists():
        return fail(f"--archive: {tarball} exists; nothing was written (move it, or name another --out)")
    try:
        engine = open_for_reading(args.db)
        query.check_study(engine, args.study)
        refuse_used_folder(out)
        print(f"packing study {args.study!r} into {out}/", file=sys.stderr)
        packed = write(engine, args.study, out, with_accounts=args.with_accounts, archive=args.archive,
                       report=not args.no_report, with_places=args.with_places)
    except (ArtifactError, query.QueryError, NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    print(f"{packed.runs} run(s), {packed.event_files} timeline file(s): {packed.folder}/"
          + (f"; archive {packed.archive}" if packed.archive else "")
          + f"; read it with --db sqlite:///{packed.folder.absolute()}/results.db, re-run it with "
            f"`scalestudy artifact rerun {packed.folder}`")
    return 0


def check(argv: Sequence[str]) -> int:
    if list(argv) in (["-h"], ["--help"]):
        print("scalestudy artifact check DIR|DIR.tar.gz: is it an artifact, and whole (every file's digest as "
              "packed, none added, the database intact)")
        return 0
    if len(argv) != 1:
        return fail("artifact check DIR: name one artifact folder")
    from results_db.publish.artifact import ArtifactError, open_artifact

    try:
        opened = open_artifact(Path(argv[0]))
    except ArtifactError as exc:
        return fail(str(exc))
    print(f"{opened.folder}: artifact of study {opened.study!r}, {opened.manifest['runs']} run(s), "
          f"{len(opened.manifest['files'])} files, every digest as written")
    return 0


def _rerun_parser() -> OneLineParser:
    parser = OneLineParser(prog="scalestudy artifact rerun",
                           description="Run an artifact's sweep again into a new study, and compare.")
    parser.add_argument("folder")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="sweep keys for every run: site=OTHER, account=PROJECT, ... (not the study's axes)")
    parser.add_argument("--study-name", default=None, help="the new study (default: STUDY_rerun_DATE)")
    parser.add_argument("--metric", default="throughput")
    parser.add_argument("--tolerance", type=float, default=0.10,
                        help="reproduced: the change's 90 %% interval within ± this (default 0.10)")
    parser.add_argument("--out", default=None, help="the report's folder (default reports/NEW)")
    parser.add_argument("--dry-run", action="store_true",
                        help="price the re-run (the sweep's dry run: its runs, batch jobs and node-hours at most); "
                             "nothing runs, nothing is recorded")
    add_db_option(parser)
    return parser


def rerun(argv: Sequence[str]) -> int:
    args = _rerun_parser().parse_args(argv)
    from results_db import connect
    from results_db.store import query
    from results_db.publish.artifact import ArtifactError, open_artifact
    from results_db.analysis.reproduction import compare_rerun, counts
    from results_db.store.connect import DB_URL_ENV, resolve_db_url

    if not 0 < args.tolerance < 1:
        return fail(f"--tolerance {args.tolerance}: a fraction between 0 and 1 (0.1: within 10 %)")
    for item in args.overrides:
        if "=" not in item or item.split("=", 1)[0].lstrip("+") in ("study", "study_name"):
            return fail(f"{item!r}: expected KEY=VALUE for every run (site=OTHER, account=...); the study is the "
                        "artifact's, its name --study-name")
    try:
        opened = open_artifact(Path(args.folder))
    except ArtifactError as exc:
        return fail(str(exc))
    if args.study_name == opened.study:
        return fail(f"--study-name {args.study_name}: the artifact's own study; a re-run goes into a new study, "
                    "compared with it")
    refused = _refused_metric(opened, args.metric)   # before anything runs: a re-run costs node-hours
    if refused:
        return fail(refused)
    overrides = list(args.overrides)
    if not any(o.split("=", 1)[0].lstrip("+~") == "site" for o in overrides):
        sites = opened.sites()
        if len(sites) > 1:
            return fail(f"the artifact's runs ran on sites {', '.join(sites)}: name the one to re-run them all on "
                        "with site=NAME")
        overrides += [f"site={s}" for s in sites]
    new = args.study_name or f"{opened.study}_rerun_{datetime.now(timezone.utc):%Y%m%d_%H%M%S}"
    url = resolve_db_url(args.db)
    env = dict(os.environ, **{DB_URL_ENV: url})
    cmd = [sys.executable, "-m", "orchestrator.cli", "sweep", "--config-dir", str((opened.folder / "conf").absolute()),
           "study=glob(run_*)", f"study_name={new}", *overrides, *(["--dry-run"] if args.dry_run else [])]
    if args.dry_run:   # what it would cost, before a node-hour is spent
        print(f"re-run of study {opened.study!r} from {opened.folder}, priced (--dry-run: nothing runs):", file=sys.stderr)
        return subprocess.run(cmd, env=env).returncode
    print(f"re-running study {opened.study!r} from {opened.folder} as study {new!r}", file=sys.stderr)
    code = subprocess.run(cmd, env=env).returncode
    if code not in (0, 1):   # 1: some runs failed, which the comparison says
        return code
    original = connect(opened.url, upgrade=False)
    engine = connect(url)
    try:
        a = query.runs(original, study=opened.study)
        b = query.runs(engine, study=new)
        table = compare_rerun(a, b, metric=args.metric, tolerance=args.tolerance)
    except ValueError as exc:
        return fail(str(exc))
    _print_reproduction(table, opened.study, new, args.metric)
    from results_db.report.html_report import ReportError, build_report

    out = Path(args.out or Path("reports") / new)
    try:
        build_report(engine, new, out, url, reproduction=table, reproduction_of=opened.study)
    except ReportError as exc:
        print(f"(no report: {exc})", file=sys.stderr)
    # beside the report (written after it: a report is written into a folder of its own files only),
    # not into the folder the command ran from
    out.mkdir(parents=True, exist_ok=True)
    csv = out / f"reproduction-{new}.csv"
    table.to_csv(csv, index=False)
    print(f"table: {csv}" + (f"; report: {out / 'index.html'}" if (out / "index.html").is_file() else ""),
          file=sys.stderr)
    print(counts(table))
    return 0


def _refused_metric(opened, metric: str) -> str | None:
    """Why ``--metric`` cannot compare the re-run with the original, read from the artifact's own
    runs before anything runs (a typo found after the sweep costs its node-hours); None if it can."""
    from results_db import connect
    from results_db.store import metric_facts, query

    engine = connect(opened.url, upgrade=False)
    try:
        runs = query.runs(engine, study=opened.study)
    finally:
        engine.dispose()
    try:
        metric_facts.measure_of(metric, runs["config"] if "config" in runs else ())
    except metric_facts.MetricDirectionError as exc:
        return f"--metric {metric}: {exc}"
    # query.runs gives metrics.NAME beside every run column, as the comparison after the re-run reads them
    return None if metric in runs.columns else f"--metric {metric}: the artifact's runs do not have it"


def _print_reproduction(table, original: str, new: str, metric: str = "throughput") -> None:
    """The verdicts, with every column the legend names (p, adjusted p, g, the detectable change)."""
    from results_db.analysis import regression

    from ..terminal.output import render
    from ..terminal.tables import detectable_cell, two_sets_shown

    keys = [c for c in table.columns if c not in (*regression.COLUMNS, "reproduction", "why")]
    shown = two_sets_shown(table, "original", "re-run", "re-run/original", keys)
    shown["p"] = table["p_value"]
    shown["p adj."] = table["p_adjusted"]
    shown["g"] = table["effect"]
    shown["detectable"] = [detectable_cell(*v) for v in zip(table["detectable"], table["detectable_low"],
                                                            table["detectable_high"])]
    shown["verdict"] = table["reproduction"]
    shown["why"] = table["why"]
    print(f"{new} against {original}, per configuration: {regression.legend(table, metric)}", file=sys.stderr)
    render(shown, "table", title=f"re-run {new} against {original}")


def import_(argv: Sequence[str]) -> int:
    parser = OneLineParser(prog="scalestudy artifact import",
                                     description="Bring an artifact's runs into this database, as they were.")
    parser.add_argument("folder")
    add_db_option(parser)
    args = parser.parse_args(argv)
    from results_db import connect
    from results_db.store import event_files
    from results_db.publish.artifact import ArtifactError, copy_event_files, open_artifact
    from results_db.store.study_copy import StudyCopyError, copy_study, study_id, study_run_ids

    try:
        opened = open_artifact(Path(args.folder))
    except ArtifactError as exc:
        return fail(str(exc))
    source = connect(opened.url, upgrade=False)
    target = connect(args.db)
    # everything that can refuse is checked before the first row is written
    if study_id(target, opened.study) is not None:
        return fail(f"study {opened.study!r} is already in {target.url.render_as_string(hide_password=True)}: its runs "
                    "would clash with the ones there (a run is its study and run_key); nothing was written")
    if event_files.run_files(source, study_run_ids(source, opened.study)) and event_files.events_dir(target) is None:
        return fail("the target database keeps no event files (PostgreSQL without $SCALESTUDY_EVENTS_DIR): set "
                    "SCALESTUDY_EVENTS_DIR to bring the artifact's timelines; nothing was written")
    try:
        copied = copy_study(source, opened.study, target)
        files = copy_event_files(source, target, copied.run_ids)
    except (StudyCopyError, ArtifactError) as exc:
        return fail(str(exc))
    rows = ", ".join(f"{n} {t}" for t, n in copied.rows.items() if n)
    print(f"imported study {opened.study!r}: {rows}, {copied.fits} model fit(s), {files} timeline file(s)")
    return 0

