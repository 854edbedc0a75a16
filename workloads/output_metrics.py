"""Metrics read from a program's output with regular expressions, as ReFrame and JUBE do.

A metric is a pattern with exactly one group, matched line by line against the
output of rank 0 (``ranks: 0``, the default) or of every rank (``ranks: all``). The
values a rank printed are reduced with ``reduce`` (default ``last``), and the
per-rank values with ``ranks_reduce`` (default ``mean``; ``sum`` for per-rank rates).
A ``required`` metric (the default) that never matched fails the run.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "first": lambda v: v[0], "last": lambda v: v[-1], "mean": statistics.fmean, "sum": lambda v: float(sum(v)),
    "min": min, "max": max,
}


# which way a metric is better; results_db.store.measure reads this one list
BETTER = ("higher", "lower")


@dataclass(frozen=True)
class MetricPattern:
    name: str
    pattern: str
    reduce: str = "last"
    ranks: str = "0"           # "0" or "all"
    ranks_reduce: str = "mean"
    required: bool = True
    better: str | None = None  # "higher" or "lower": which way is better, for comparisons (results_db.store.metric_facts)

    @classmethod
    def from_dict(cls, name: str, spec: dict[str, Any]) -> "MetricPattern":
        unknown = sorted(set(spec) - {"pattern", "reduce", "ranks", "ranks_reduce", "required", "better"})
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}; known: pattern, reduce, ranks, ranks_reduce, required, better")
        better = spec.get("better")
        if better is not None and better not in BETTER:
            raise ValueError(f"better={better!r}: expected higher or lower (which way this metric is better)")
        pattern = spec.get("pattern")
        if pattern is None and better is not None and set(spec) <= {"better", "required"}:
            # a declaration only: a metric the program reports through report.result(), no pattern to match
            return cls(name, "", required=False, better=better)
        if not isinstance(pattern, str) or not pattern:
            raise ValueError("needs a pattern: a regular expression with one group around the number")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        if compiled.groups != 1:
            raise ValueError(f"pattern {pattern!r} has {compiled.groups} groups; it needs exactly one, "
                             "around the number (use (?:...) for the others)")
        ranks = str(spec.get("ranks", "0"))
        if ranks not in ("0", "all"):
            raise ValueError(f"ranks={ranks!r}: expected 0 (rank 0's output) or all")
        for key in ("reduce", "ranks_reduce"):
            if spec.get(key, "last" if key == "reduce" else "mean") not in REDUCERS:
                raise ValueError(f"{key}={spec.get(key)!r}: expected one of {', '.join(REDUCERS)}")
        required = spec.get("required", True)
        if not isinstance(required, bool):
            raise ValueError(f"required={required!r}: expected true or false")
        return cls(name, pattern, spec.get("reduce", "last"), ranks, spec.get("ranks_reduce", "mean"), required, better)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("name")
        return out

    def values(self, text: str) -> list[float]:
        """Every finite number the pattern captured in ``text``, in order (captures that are
        not numbers, and nan or inf, are skipped: they would not survive JSON)."""
        out = []
        for match in re.finditer(self.pattern, text, flags=re.MULTILINE):
            try:
                value = float(match.group(1))
            except (TypeError, ValueError):
                continue
            if math.isfinite(value):
                out.append(value)
        return out


def extract(patterns: dict[str, dict[str, Any]], outputs: dict[int, Path]) -> tuple[dict[str, float], list[str]]:
    """(metric values, why required metrics are missing) from per-rank output files.

    With ``ranks: all`` every rank must match: a sum over the ranks that happened to print
    would under-report; a required metric then names the ranks that did not."""
    texts: dict[int, str] = {}

    def text(rank: int) -> str:
        if rank not in texts:
            path = outputs.get(rank)
            texts[rank] = path.read_text(errors="replace") if path is not None and path.is_file() else ""
        return texts[rank]

    found, missing = {}, []
    for name, spec in patterns.items():
        metric = MetricPattern.from_dict(name, spec)
        if not metric.pattern:   # a declaration of direction only (report.result's metrics)
            continue
        ranks = sorted(outputs) if metric.ranks == "all" else [0]
        per_rank, silent = [], []
        for rank in ranks:
            values = metric.values(text(rank))
            if values:
                per_rank.append(REDUCERS[metric.reduce](values))
            else:
                silent.append(rank)
        if per_rank and not silent:
            found[name] = REDUCERS[metric.ranks_reduce](per_rank)
        elif metric.required:
            where = "rank 0's output" if metric.ranks == "0" else \
                f"the output of rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent[:8]))}"
            missing.append(f"metric {name!r}: pattern '{metric.pattern}' never matched in {where}")
    return found, missing
