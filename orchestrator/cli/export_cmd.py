"""``scalestudy export mlflow``: a study's runs sent where the rest of a group's ML work is
(``results_db.publish.mlflow_export`` says what goes where)."""

from __future__ import annotations

import sys
from typing import Sequence

from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading


def export(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy export",
        description="mlflow: every finished run (each attempt) of a study as an MLflow run in experiment "
                    "scalestudy/STUDY: axes and params.* as params, headline numbers and metrics.* as metrics, "
                    "rank 0's loss and step time per step as metric history, site / batch job / commit as tags. "
                    "Exporting again adds nothing twice. Needs the mlflow extra: pip install -e '.[mlflow]' in the clone.")
    parser.add_argument("target", choices=("mlflow",))
    parser.add_argument("--study", required=True)
    parser.add_argument("--tracking-uri", required=True,
                        help="MLflow tracking store: sqlite:///mlflow.db, a folder, or http(s)://server")
    add_db_option(parser)
    args = parser.parse_args(argv)

    from results_db.publish.mlflow_export import ExportError, export_study

    try:
        engine = open_for_reading(args.db)
    except (NoDatabase, OlderSchema) as exc:
        return fail(str(exc))

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() or done == total or done % 50 == 0:
            print(f"\rexported {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

    try:
        out = export_study(engine, args.study, args.tracking_uri, progress)
    except ExportError as exc:
        return fail(str(exc))
    print(f"study {args.study} -> MLflow experiment {out.experiment} at {args.tracking_uri}: {out.added} run(s) "
          f"added, {out.skipped} already there" + (f", {out.unfinished} still pending or running (left for a later "
                                                    "export)" if out.unfinished else ""))
    if out.half_written:
        print(f"{out.half_written} half-written run(s) of other exports left as they are (no tag scalestudy.complete: "
              "an export still writing, or one cut off): delete them in MLflow "
              "once no export is running")
    return 0
