"""Where a test run's time went, from the lines scripts/pytest_timing.py wrote:

    SCALESTUDY_TEST_TIMING=/tmp/t.jsonl bash scripts/test.sh
    python scripts/test_timing_report.py /tmp/t.jsonl [--top 25]

Prints each lane's workers (busy seconds, when each finished: the tail is the time the last ran on
alone), then the modules by CPU (the test process's and its reaped children's), the work that moving
or trimming a test saves on a CPU-bound machine, and by wall."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd


def load(path: Path) -> pd.DataFrame:
    """The lines of ``path``; a file missing, empty or not the plugin's: one line, exit 2."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        frame = pd.DataFrame(rows)
        missing = {"test", "lane", "worker", "start", "wall", "cpu", "children_cpu"} - set(frame.columns)
        if missing:
            raise KeyError(f"no {', '.join(sorted(missing))}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"test_timing_report: {path}: not a timing file of scripts/pytest_timing.py "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        raise SystemExit(2) from exc
    if "retry" in frame:   # a test run once more after the lane: not the lane's time
        frame = frame[~frame["retry"].astype(bool)].copy()
    frame["module"] = frame["test"].str.split("::").str[0]
    frame["all_cpu"] = frame["cpu"] + frame["children_cpu"]
    frame["end"] = frame["start"] + frame["wall"]
    return frame


def list_schedule(walls: list[float], workers: int) -> float:
    """When the last of ``workers`` ends if each takes the next module as it frees (in the order given)."""
    import heapq

    ends = [0.0] * workers
    for wall in walls:
        heapq.heappush(ends, heapq.heappop(ends) + wall)
    return max(ends)


def simulate(frame: pd.DataFrame, workers: int) -> None:
    """The main lane's makespan, as measured walls would give it, in xdist's own order for
    ``loadfile`` (most tests first) and longest first (a rough guide: walls shift with what runs beside)."""
    main = frame[frame["lane"].isin(["main", ""])]
    modules = main.groupby("module").agg(tests=("test", "size"), wall=("wall", "sum"))
    by_count = modules.sort_values("tests", ascending=False, kind="stable")["wall"].tolist()
    by_wall = modules.sort_values("wall", ascending=False)["wall"].tolist()
    print(f"\nthe main lane on {workers} workers, from these walls: most tests first {list_schedule(by_count, workers):.0f} s, "
          f"longest first {list_schedule(by_wall, workers):.0f} s (all of it: {modules['wall'].sum() / workers:.0f} s a worker)")


def write_weights(frame: pd.DataFrame, out: Path, source: Path) -> None:
    """The main lane's modules by wall seconds (their time as the suite runs them, waits included)."""
    main = frame[frame["lane"].isin(["main", ""])]
    wall = main.groupby("module")["wall"].sum().round(1).sort_values(ascending=False)
    out.write_text(json.dumps({"from": f"scripts/test_timing_report.py {source.name} --write-weights",
                               "wall_seconds": wall.to_dict()}, indent=1) + "\n")
    print(f"wrote {len(wall)} modules' weights to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25, help="modules to list (default 25)")
    parser.add_argument("--write-weights", type=Path, metavar="JSON",
                        help="write the main lane's modules' wall seconds there (tests/module_weights.json: the "
                             "order scripts/pytest_module_order.py gives them)")
    parser.add_argument("--simulate", type=int, default=3, metavar="WORKERS",
                        help="the main lane's end in both orders on this many workers (default 3)")
    args = parser.parse_args()
    frame = load(args.file)
    simulate(frame, args.simulate)
    if args.write_weights:
        write_weights(frame, args.write_weights, args.file)
    t0 = frame["start"].min()
    workers = frame.groupby(["lane", "worker"]).agg(tests=("test", "size"), busy=("wall", "sum"),
                                                    cpu=("all_cpu", "sum"), first=("start", "min"),
                                                    last=("end", "max"))
    workers["first"] -= t0
    workers["last"] -= t0
    print("lanes and workers (seconds from the first test's start):")
    print(workers.round(0).to_string())
    modules = frame.groupby("module").agg(tests=("test", "size"), wall=("wall", "sum"), cpu=("all_cpu", "sum"),
                                          worker=("worker", "first"), lane=("lane", "first"))
    print(f"\nmodules by CPU (all: {modules['cpu'].sum():.0f} s CPU, {modules['wall'].sum():.0f} s of tests' wall):")
    print(modules.sort_values("cpu", ascending=False).head(args.top).round(1).to_string())
    print("\nmodules by wall:")
    print(modules.sort_values("wall", ascending=False).head(args.top).round(1).to_string())


if __name__ == "__main__":
    main()
