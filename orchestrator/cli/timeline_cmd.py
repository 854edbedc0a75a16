"""``scalestudy timeline RUN_ID``: a run's timeline as Chrome trace-event JSON, for Perfetto
(ui.perfetto.dev) or ``chrome://tracing`` (the layout: ``results_db.report.chrome_trace``)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Sequence

from .common import NoDatabase, OlderSchema, OneLineParser, add_db_option, fail, open_for_reading


def timeline(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="scalestudy timeline",
        description="Write a run's timeline (timeline=true runs; every run has its steps) as Chrome trace-event "
                    "JSON: one process per rank, one track per phase and per tensor or fused buffer, each step a "
                    "slice. Open it at ui.perfetto.dev or chrome://tracing.")
    parser.add_argument("run_id", type=int, metavar="RUN_ID", help="the run (scalestudy query shows run ids)")
    parser.add_argument("--out", default=None, help="the file (default: timeline-RUN_ID.json)")
    parser.add_argument("--steps", default=None, metavar="FIRST-LAST",
                        help="only these steps (from 0, inclusive), e.g. 500-509: a long run's whole timeline is "
                             "more than a trace viewer opens, and a window is read alone from the run's event file")
    parser.add_argument("--ranks", default=None, metavar="R[,R...]", help="only these ranks, e.g. 0,1,255")
    add_db_option(parser)
    args = parser.parse_args(argv)
    steps = ranks = None
    if args.steps is not None:
        if not re.fullmatch(r"\d+-\d+", args.steps.strip()):
            return fail(f"--steps {args.steps}: expected FIRST-LAST, e.g. 500-509 (steps from 0)")
        steps = tuple(int(x) for x in args.steps.strip().split("-"))
        if steps[0] > steps[1]:
            return fail(f"--steps {args.steps}: the first step comes after the last")
    if args.ranks is not None:
        if not re.fullmatch(r"\d+(,\d+)*", args.ranks.strip()):
            return fail(f"--ranks {args.ranks}: expected rank numbers from 0 separated by commas, e.g. 0,1,255")
        ranks = sorted({int(x) for x in args.ranks.split(",")})

    from results_db.report.chrome_trace import TraceError, write_chrome_trace
    from results_db.store.columns import QueryError

    out = Path(args.out or f"timeline-{args.run_id}.json")
    if not out.parent.is_dir():
        return fail(f"--out {out}: folder {out.parent} does not exist")
    try:
        engine = open_for_reading(args.db)
    except (NoDatabase, OlderSchema) as exc:
        return fail(str(exc))
    began = time.perf_counter()
    try:
        events = write_chrome_trace(engine, args.run_id, out, steps, ranks)
    except (TraceError, QueryError) as exc:   # QueryError: e.g. the run's event file is gone
        return fail(str(exc))
    except OSError as exc:
        return fail(f"--out {out}: {exc.strerror or exc}")
    window = "".join([f", steps {steps[0]}-{steps[1]}" if steps else "",
                      f", rank(s) {','.join(map(str, ranks))}" if ranks else ""])
    print(f"{out}: run {args.run_id}{window}, {events} timeline event(s) and its steps, in "
          f"{time.perf_counter() - began:.1f} s; open it at https://ui.perfetto.dev or chrome://tracing")
    return 0
