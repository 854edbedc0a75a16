"""The crowding exposure (``perf_model.terms.crowding_exposure``) tried on a validation log,
without its database: how a1cf517's change was chosen on run D, whose database is gone.

    python benchmarks/crowding_from_log.py benchmarks/logs/validate-model-run-d.log \
        --latency 4.371e-05 --bandwidth 3.142e8

It reads the per-phase means ``validate_model.py`` printed (compute | wait+comm+crowding |
update; data, predicted and measured) and refits only q, through zero on e (r - 1)^+
ceil(log2 P) (r = P / 2: the validation's 2-core host; pinned runs are not read) over the
fit set's runs, with the other terms as the log's fit predicted them and eager-SGD's
averaging A(P) of ``--bytes`` / ``--sync-every`` added; then predicts the held-out sizes, for e = 1 (every step as a synchronous one's: the model before) and for the
exposure. For a log written by a model before a1cf517 (whose predicted update holds no
averaging; on run E's log, written by a1cf517, it adds the averaging twice, 0.5 ms at 32
ranks, and still gives validate_model.py's errors within 0.5 points). An approximation of
the code path (the log's rounded means, one lat/bw, the measured update's median as
printed), for a log whose runs are gone; where the runs are
there, ``validate_model.py`` (and its ``--crowding-exposure every-step``) is the measure.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from perf_model.terms import crowding_exposure  # noqa: E402

ROW = re.compile(r"^(validate-\S+(?: \(1 cpu\))?)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+\S+\s+([\d.]+)\s+\S+\s+"
                 r"(?:\d+\s+)?([+-][\d.]+)%\s+([\d.]+)/\s*([\d.]+) \|\s*([\d.]+)/\s*([\d.]+) \|\s*([\d.]+)/\s*([\d.]+);"
                 r"\s*([\d.]+); crowding predicted ([\d.]+)")


def rows_of(path: str) -> list[dict]:
    rows, part = [], 0
    for line in open(path):
        part = 1 if line.startswith("1. fit") else 2 if line.startswith("2. fit") else part
        m = ROW.match(line) if part == 1 else None
        if m:
            g = m.groups()
            rows.append({"set": g[0], "alg": g[1], "P": int(g[2]), "meas": float(g[5]), "cp": float(g[8]),
                         "wp": float(g[10]), "up": float(g[12]), "crowd": float(g[15])})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--latency", type=float, required=True, help="the log's fitted allreduce latency (s)")
    ap.add_argument("--bandwidth", type=float, required=True, help="the log's fitted bandwidth (B/s)")
    ap.add_argument("--bytes", type=float, default=1089896, help="the model's bytes (resnet20)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sync-every", type=int, default=10)
    args = ap.parse_args()
    rows = rows_of(args.log)
    fit = [r for r in rows if r["set"] == "validate-small"]
    held = [r for r in rows if r["set"] == "validate-large"]

    def x(p: int) -> float:
        return max(p / 2 - 1, 0) * math.ceil(math.log2(p))

    def averaging(r: dict) -> float:
        p = r["P"]
        a = 2 * math.ceil(math.log2(p)) * args.latency + 2 * (p - 1) / p * args.bytes / args.bandwidth
        return a * 1e3 / args.sync_every if r["alg"].startswith("eager") else 0.0

    for name, expo, avg in (("every step (before)", lambda r: 1.0, False),
                            ("exposure + averaging",
                             lambda r: float(crowding_exposure(r["alg"], r["P"], args.sync_every)), True)):
        base = {id(r): r["cp"] + r["wp"] - r["crowd"] + r["up"] + (averaging(r) if avg else 0.0) for r in rows}
        xs = np.array([x(r["P"]) * expo(r) for r in fit])
        ys = np.array([r["P"] * args.batch / r["meas"] * 1e3 - base[id(r)] for r in fit])
        q = max(float(xs @ ys / (xs @ xs)), 0.0)
        errs = {(r["alg"], r["P"]): r["P"] * args.batch * 1e3 / (base[id(r)] + q * x(r["P"]) * expo(r)) / r["meas"] - 1
                for r in held}
        e = np.abs(list(errs.values())) * 100
        print(f"{name}: q = {q:.3f} ms; " + ", ".join(f"{a} {p}: {v:+.1%}" for (a, p), v in errs.items())
              + f"; median |error| {np.median(e):.1f} %, worst {e.max():.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
