"""What an eager-SGD rank that missed rounds does (``eager_catch_up``): one declaration, read by
the workload (``algorithms/eager.py``), the performance model's prediction (``perf_model/predict.py``)
and the fit's shape of a study (``perf_model/shape.py``). ``algorithms/eager.py`` explains each mode.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatchUp:
    name: str
    skips_rounds: bool       # a late rank goes on at the round the others reached, computing none it missed
    applies_every: bool      # it applies each result it took, in order (else only the latest)
    paper_buffer: bool       # the authors' receive buffer (latest only) and fflib2's synchronous limiter
    predicted_by: str        # the model's wait: "lockstep" (each delay carried) or "simulated" (eager_rounds)
    counts_rounds: bool      # the prediction's rounds per gradient exceed 1 (skipped rounds applied)


MODES: tuple[CatchUp, ...] = (
    CatchUp("apply_all", skips_rounds=True, applies_every=True, paper_buffer=False, predicted_by="simulated", counts_rounds=True),
    CatchUp("latest", skips_rounds=True, applies_every=False, paper_buffer=False, predicted_by="simulated", counts_rounds=False),
    CatchUp("lockstep", skips_rounds=False, applies_every=True, paper_buffer=False, predicted_by="lockstep", counts_rounds=False),
    CatchUp("paper", skips_rounds=False, applies_every=False, paper_buffer=True, predicted_by="simulated", counts_rounds=False),
)
CATCH_UP = {mode.name: mode for mode in MODES}
# a study's runs from before the column existed ran the lock-step mechanism
BEFORE_THE_COLUMN = "lockstep"


def catch_up(name: str | None) -> CatchUp:
    """The mode of that name (a missing one: ``BEFORE_THE_COLUMN``); a name not declared is a ValueError."""
    try:
        return CATCH_UP[name or BEFORE_THE_COLUMN]
    except KeyError:
        raise ValueError(f"eager-SGD catch_up {name!r}; known: {', '.join(CATCH_UP)}") from None
