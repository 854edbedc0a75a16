"""The band of a prediction: every term refitted on the study's runs drawn with replacement.

A replicate draws, within each algorithm, as many runs as the algorithm has, with
replacement (a run drawn twice counts twice), and refits everything ``model fit`` fits on
them (``perf_model.refit.fit_all``): compute, allreduce, straggler, overlap, participation,
oversubscription and each algorithm's measured shape (hidden share, update, collectives,
overhead). The unit drawn is the run, not the step: steps within a run share its host's
state (its speed that minute, its crowding), so resampling them says how well a run's mean
is known, about ±0.5 % here, and nothing of how far the next run lands; runs drawn whole
carry that run-to-run spread and the spread of the fitted parts between sizes.

A draw that cannot refit a term the full fit has (say, every drawn run of one rank count:
no allreduce latency) is drawn again, up to ``MAX_REDRAWS`` times per replicate; those
redraws are counted. What coverage the band then has on sizes it did not see is measured,
not assumed: ``benchmarks/validate_model.py`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .refit import HostOf, fit_all
from .study import StudyData

DEFAULT_REPLICATES = 100
MAX_REDRAWS = 20
_BY_RUN = ("compute", "per_step", "allreduce", "step_stats", "rounds", "step_bytes")


class BootstrapError(ValueError):
    """The study's runs are too few to resample: the message says which term is lost."""


@dataclass
class Bootstrap:
    replicates: list[dict[str, Any]] = field(default_factory=list)   # FittedTerms.as_params() each
    redrawn: int = 0                                                 # draws thrown away (a term unfittable)


class RunDraws:
    """The study's frames split by run once, so that a replicate is a concatenation."""

    def __init__(self, data: StudyData):
        self.data = data
        self.parts = {name: {int(k): g for k, g in getattr(data, name).groupby("run_id")}
                      for name in _BY_RUN if "run_id" in getattr(data, name)}
        self.by_algorithm = [np.asarray(g["run_id"], dtype=int) for _, g in data.runs.groupby("algorithm")]

    def draw(self, rng: np.random.Generator) -> StudyData:
        """The study made of runs drawn with replacement within each algorithm; the k-th drawn
        run gets id k, so that a run drawn twice is two runs to every fit."""
        drawn = np.concatenate([rng.choice(ids, size=len(ids), replace=True) for ids in self.by_algorithm])
        runs = self.data.runs.set_index("run_id").loc[drawn].reset_index()
        runs["run_id"] = np.arange(len(drawn))
        frames = {}
        for name in _BY_RUN:
            source = getattr(self.data, name)
            parts = self.parts.get(name, {})
            pieces = [parts[int(orig)].assign(run_id=k) for k, orig in enumerate(drawn) if int(orig) in parts]
            frames[name] = pd.concat(pieces, ignore_index=True) if pieces else source.iloc[:0]
        series = {name: _renumbered(getattr(self.data, name), drawn) for name in ("grad_bytes", "step_seconds")}
        return StudyData(runs=runs, **frames, **series)


def _renumbered(values: pd.Series, drawn: np.ndarray) -> pd.Series:
    kept = [(k, values[int(orig)]) for k, orig in enumerate(drawn) if int(orig) in values.index]
    return pd.Series(dict(kept), dtype=float)


def bootstrap_fits(data: StudyData, host_of: HostOf | None, replicates: int = DEFAULT_REPLICATES,
                   seed: int = 0) -> Bootstrap:
    """``replicates`` refits of every term on runs drawn whole; a draw that loses a term the
    full fit has is redrawn (counted in ``redrawn``)."""
    rng = np.random.default_rng(seed)
    draws = RunDraws(data)
    wanted = set(fit_all(data, host_of).terms)
    out = Bootstrap()
    while len(out.replicates) < replicates:
        for _ in range(MAX_REDRAWS + 1):
            fitted = fit_all(draws.draw(rng), host_of)
            if wanted <= set(fitted.terms):
                out.replicates.append(fitted.as_params())
                break
            out.redrawn += 1
        else:
            raise BootstrapError(f"bootstrap: {MAX_REDRAWS + 1} draws of runs in a row could not refit "
                                 f"{', '.join(sorted(wanted - set(fitted.terms)))}: too few runs to resample "
                                 "(more runs per size, or --replicates 0 for no band)")
    return out
