"""A measure's facts, as a run column declares them (``schema.py``): which way is better, its
unit, whether it is a speed. Read through ``metric_facts``; kept apart so that the schema can
declare its columns' measures without importing what reads them."""

from __future__ import annotations

from dataclasses import dataclass

from workloads.output_metrics import BETTER  # noqa: F401 - the one list, which user metrics declare too


@dataclass(frozen=True)
class Measure:
    better: str           # "higher" or "lower"
    unit: str = ""
    speed: bool = False   # a rate or a time: its verdicts read "faster"/"slower" (else "better"/"worse")
    # where the direction comes from, when it is not a declaration (a default, which the output names)
    default: str = ""

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"


def measure(better: str, unit: str = "", speed: bool = False) -> dict:
    """A column's ``info``: ``Column("train_seconds", Float, info=measure("lower", "s", speed=True))``."""
    assert better in BETTER, better
    return {"measure": Measure(better, unit, speed)}
