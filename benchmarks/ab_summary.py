"""Medians, ranges and per-pair B/A ratios of an A/B log (``ab_public_interfaces.sh``).

    python benchmarks/ab_summary.py benchmarks/logs/public-interfaces-ab.log

Reads the tagged lines ``[A] …`` / ``[B] …`` that ``bench_overhead.py`` and
``bench_sweep_scale.py`` print, in the order the rounds ran (A then B in each round).
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

MEASURES = {   # name -> (pattern on a tagged line, unit, goal)
    "one-run sweep overhead": (r"overhead per run: one-run sweep ([0-9.]+) s", "s", 6.0),
    "10-run sweep overhead per run": (r"-run sweep ([0-9.]+) s \(min [^)]*\) per run", "s", 1.0),
    "driver CPU per run": (r"driver CPU [0-9.]+ s = ([0-9.]+) ms per run", "ms", 60.0),
    "with interchange and scheduler commands": (r"it reaped: [0-9.]+ s = ([0-9.]+) ms per run", "ms", None),
    "wall of the scale sweep": (r"runs: wall ([0-9.]+) s", "s", None),
}


def parse(text: str) -> dict[str, dict[str, list[float]]]:
    values: dict[str, dict[str, list[float]]] = {m: {"A": [], "B": []} for m in MEASURES}
    for line in text.splitlines():
        tag = re.match(r"\[(A|B)\] ", line)
        if not tag:
            continue
        for name, (pattern, _, _) in MEASURES.items():
            found = re.search(pattern, line)
            if found:
                values[name][tag.group(1)].append(float(found.group(1)))
    return values


def main() -> None:
    values = parse(Path(sys.argv[1]).read_text())
    print(f"{'measure':42s} {'A median (range)':24s} {'B median (range)':24s} {'B/A per pair: median (range)':32s} goal")
    for name, (_, unit, goal) in MEASURES.items():
        a, b = values[name]["A"], values[name]["B"]
        if not a or not b:
            continue
        ratios = [y / x for x, y in zip(a, b) if x]
        cell = lambda xs: f"{statistics.median(xs):.2f} {unit} ({min(xs):.2f}-{max(xs):.2f})"   # noqa: E731
        verdict = "" if goal is None else (f"<= {goal:g} {unit}: " + ("met" if statistics.median(b) <= goal else "missed"))
        print(f"{name:42s} {cell(a):24s} {cell(b):24s} "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), n={len(ratios):<10d} {verdict}")


if __name__ == "__main__":
    main()
