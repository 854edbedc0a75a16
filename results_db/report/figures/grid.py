"""Is the sweep's grid complete, and do two axes move together?

A figure against ``nodes`` compares runs that differ in nodes only, so long as every
other axis is held. Two things break that silently: configurations that never
finished (a failed run leaves a hole, and with enough holes an axis looks determined
by another and is dropped from the labels), and sweeps that moved two axes together
(a study built from two sweeps). This module finds both from the runs the study
*planned* (every status), so that figures and tables can say so in words.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import pandas as pd

# beyond this many cells the cartesian product is not a sweep anyone ran: only planned holes are listed
_MAX_CELLS = 10_000
_SHOWN = 3


@dataclass(frozen=True)
class Missing:
    config: tuple[tuple[str, object], ...]   # (axis, value) over the grid's axes
    why: str                                 # the planned runs' states ("failed", "timeout"), or "not in the sweep"


@dataclass(frozen=True)
class Grid:
    axes: tuple[str, ...]                    # the independent varying axes
    cells: int                               # configurations the grid spans
    finished: int                            # of which have a finished run
    missing: tuple[Missing, ...]
    coupled: tuple[tuple[str, tuple[str, ...]], ...]   # (axis, the axes that determine it in every run)

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    def missing_note(self, label: Callable[[str, object], str], axes: Sequence[str] | None = None) -> str | None:
        """One sentence naming the holes (restricted to ``axes`` when given: a figure about one
        algorithm's rounds needs no word about another's)."""
        holes = [m for m in self.missing if axes is None or all(a in axes for a, _ in m.config)]
        if not holes:
            return None
        shown = "; ".join(", ".join(label(a, v) for a, v in m.config) + f" ({m.why})" for m in holes[:_SHOWN])
        more = f"; and {len(holes) - _SHOWN} more" if len(holes) > _SHOWN else ""
        return (f"Partial grid: {len(holes)} of {self.cells} configurations have no finished run — {shown}{more}. "
                "Their points are missing, not interpolated.")

    def coupled_notes(self, name: Callable[[str], str]) -> list[str]:
        notes = []
        for axis, by in self.coupled:
            movers = " and ".join(name(a) for a in by)
            notes.append(f"{name(axis)} changes together with {movers} in these runs: a comparison along "
                         f"{movers} also changes {name(axis)}.")
        return notes


def build_grid(planned: pd.DataFrame, done: pd.DataFrame, axes: Sequence[str],
               coupled: Sequence[tuple[str, tuple[str, ...]]] = ()) -> Grid:
    """``planned``: every run of the selection (any state); ``done``: the finished ones;
    ``axes``: the independent varying axes."""
    axes = tuple(axes)
    if not axes:
        return Grid(axes, 1, int(not done.empty), (), tuple(coupled))
    values = {a: list(dict.fromkeys(_norm(v) for v in planned[a])) for a in axes}   # NaN != NaN: one None
    finished = {_key(row, axes) for _, row in done.iterrows()}
    states: dict[tuple, list[str]] = {}
    for _, row in planned.iterrows():
        states.setdefault(_key(row, axes), []).append(str(row["status"]))
    size = 1
    for a in axes:
        size *= len(values[a])
    cells = list(itertools.product(*(values[a] for a in axes))) if size <= _MAX_CELLS else list(states)
    missing = []
    for cell in cells:
        key = tuple(_norm(v) for v in cell)
        if key in finished:
            continue
        seen = [s for s in states.get(key, []) if s != "done"]
        why = ", ".join(f"{n} {s}" if n > 1 else s for s, n in pd.Series(seen).value_counts().items()) if seen \
            else "not in the sweep"
        missing.append(Missing(tuple(zip(axes, cell)), why))
    return Grid(axes, len(cells), len(cells) - len(missing), tuple(missing), tuple(coupled))


def _norm(value):
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return value


def _key(row, axes: Sequence[str]) -> tuple:
    return tuple(_norm(row[a]) for a in axes)
