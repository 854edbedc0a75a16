"""How a sweep ended, for the command that started it.

Hydra instantiates the sweep's observer from a class path and, in multirun mode, discards
what the task returns, so the outcome cannot travel back as a return value: the recorder
hands it over here when it closes, and ``scalestudy sweep`` takes it once the sweep is over
(exit status, the interrupted line).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SweepOutcome:
    study: str
    submitted: int = 0
    failed: int = 0
    done: int = 0
    stopped: int = 0          # still running when the sweep stopped (Ctrl-C, a lost driver)
    not_ingested: int = 0     # finished, but the database was unreachable


_handed_over: list[SweepOutcome] = []


def hand_over(outcome: SweepOutcome) -> None:
    _handed_over.append(outcome)


def take() -> SweepOutcome | None:
    """The outcome of the sweep that ended last in this process, once; None if none ended."""
    outcome = _handed_over[-1] if _handed_over else None
    _handed_over.clear()
    return outcome
