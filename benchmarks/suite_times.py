"""Where the test suite's time goes: a JUnit XML report of a run (pytest's ``--junitxml``) summed
by room (the first folder under tests/), with the slowest modules and tests:

    bash scripts/test.sh --junitxml=/tmp/suite.xml     # each lane writes its own report:
    python benchmarks/suite_times.py /tmp/suite.xml [/tmp/other-lane.xml ...]

A test's time is its own (set-up, call and tear-down), not the wall time of the suite, which runs
lanes and workers side by side: the sum over a room is the time a serial run would spend there.
The records are in benchmarks/RESULTS.md (issue 59)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def test_times(paths: list[str]) -> dict[str, float]:
    times: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            module = case.get("classname", "").replace(".", "/")
            times[f"{module}.py::{case.get('name')}"] = float(case.get("time") or 0.0)
    return times


def main(paths: list[str]) -> None:
    times = test_times(paths)
    rooms: dict[str, list[float]] = defaultdict(list)
    modules: dict[str, float] = defaultdict(float)
    for name, seconds in times.items():
        parts = name.split("/")
        room = parts[1] if len(parts) > 2 else "(top)"
        rooms[room].append(seconds)
        modules[name.split("::")[0]] += seconds
    print(f"{len(times)} tests, {sum(times.values()):.0f} s of test time in all\n")
    print(f"{'room':<14} {'tests':>6} {'seconds':>8} {'> 10 s':>7}")
    for room, secs in sorted(rooms.items(), key=lambda kv: -sum(kv[1])):
        print(f"{room:<14} {len(secs):>6} {sum(secs):>8.0f} {sum(s > 10 for s in secs):>7}")
    print("\nslowest modules:")
    for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {seconds:6.0f} s  {module}")
    print("\nslowest tests:")
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {seconds:6.1f} s  {name}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python benchmarks/suite_times.py REPORT.xml [REPORT.xml ...]")
    main(sys.argv[1:])
